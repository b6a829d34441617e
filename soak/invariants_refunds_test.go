package soak

import "testing"

// refund adds rebill's n-th refund of c and, when atGateway > 0, the
// gateway's succeeded refund of that amount under its key.
func (r *record) refund(c *Charge, n int, amount int64, status string, atGateway int64, ms int) Refund {
	key := c.Key + ":r" + itoa(n) + ":refund"
	rf := Refund{ID: "refund-" + itoa(n) + "-" + c.Key, ChargeID: c.ID, ChargeKey: c.Key, N: n, GatewayKey: key,
		Amount: amount, Currency: "USD", Status: status}
	r.d.Refunds = append(r.d.Refunds, rf)
	if atGateway > 0 {
		r.refundOp(key, atGateway, ms)
	}
	return rf
}

func (r *record) refundOp(key string, amount int64, ms int) {
	r.d.Ledger = append(r.d.Ledger, LedgerOp{Gateway: "sim1", Op: "refund", IdempotencyKey: key,
		Reference: "ref-" + key + "-" + itoa(ms), Amount: amount, Currency: "USD", Status: "succeeded", At: rt(ms)})
}

func TestInvariantRefundsAgreeingPass(t *testing.T) {
	r := newRecord(day(20))
	c := r.paid(t0, 100, "0001")
	r.refund(c, 1, 200, "succeeded", 200, 200)
	r.refund(c, 2, 300, "succeeded", 300, 300)
	// Failed at the gateway's answer, or still unknown: nothing there yet.
	r.refund(c, 3, 100, "failed", 0, 0)
	expect(t, CheckAll(r.d))
	cov := Measure(r.d)
	if cov.Refunds != 3 || cov.LedgerRefunds != 2 {
		t.Errorf("coverage counts %d refunds and %d at the ledger, want 3 and 2", cov.Refunds, cov.LedgerRefunds)
	}
}

func TestInvariantRefundsAboveTheCaptureAreCaught(t *testing.T) {
	r := newRecord(day(20))
	c := r.paid(t0, 100, "0001")
	r.refund(c, 1, 400, "succeeded", 400, 200)
	// Rebill held the second failed, yet the gateway returned it too.
	r.refund(c, 2, 400, "failed", 400, 300)
	expect(t, RefundsWithinCaptureOnLedger(r.d), "returned 800 of a charge they captured 500")
	// A refund of a charge never captured.
	u := newRecord(day(20))
	d := u.charge(t0, "failed", 1)
	u.refundOp(d.Key+":r1:refund", 100, 100)
	expect(t, RefundsWithinCaptureOnLedger(u.d), "captured 0")
}

func TestInvariantRefundKeyReturnedTwiceIsCaught(t *testing.T) {
	r := newRecord(day(20))
	c := r.paid(t0, 100, "0001")
	rf := r.refund(c, 1, 100, "succeeded", 100, 200)
	r.refundOp(rf.GatewayKey, 100, 900) // resent blind after a lost answer
	expect(t, RefundKeyOnceOnLedger(r.d), "returned money 2 times")
	expect(t, RefundsWithinCaptureOnLedger(r.d))
}

func TestInvariantSucceededRefundMissingAtGatewayIsCaught(t *testing.T) {
	r := newRecord(day(20))
	c := r.paid(t0, 100, "0001")
	r.refund(c, 1, 100, "succeeded", 0, 0)
	r.refund(c, 2, 100, "succeeded", 150, 300)
	expect(t, EverySucceededRefundAtGateway(r.d), "no gateway returned money under", "is 100 USD in rebill, 150 USD")
}

func TestInvariantRefundOfAFineIsCaught(t *testing.T) {
	r := newRecord(day(20))
	c := r.paid(t0, 100, "0001")
	r.d.Fines = []Fine{{UIN: "18810000000000000001", Amount: 500, Bills: []FineBill{{ChargeKey: c.Key}}}}
	expect(t, NoRefundOfAFine(r.d))
	r.refund(c, 1, 500, "succeeded", 500, 200)
	expect(t, NoRefundOfAFine(r.d), "rebill holds refund 1", "the gateway returned a fine's payment")
}

// A refund names no attempt: it is not a capture without an
// authorization.
func TestInvariantRefundIsNotACaptureWithoutAuthorization(t *testing.T) {
	r := newRecord(day(20))
	c := r.paid(t0, 100, "0001")
	r.refund(c, 1, 500, "succeeded", 500, 200)
	expect(t, NoCaptureWithoutAuthorization(r.d))
}

// A housing bill's refund is judged against its capture, which the
// autopay checks take out of Ledger into BillLedger: a bill's capture
// counts as any other.
func TestInvariantBillRefundIsJudgedAgainstTheBillsCapture(t *testing.T) {
	r := newRecord(day(20))
	key := "01a2429e-1805-7c30-a873-b7b9ba8d3b96:2026-05:9"
	r.d.BillLedger = append(r.d.BillLedger, LedgerOp{Gateway: "sim1", Op: "capture", IdempotencyKey: key + ":a1:capture",
		Amount: 42391, Currency: "RUB", Status: "succeeded", At: rt(100)})
	r.refundOp(key+":r1:refund", 42391, 200)
	expect(t, RefundsWithinCaptureOnLedger(r.d))
	r.refundOp(key+":r2:refund", 1, 300)
	expect(t, RefundsWithinCaptureOnLedger(r.d), "returned 42392 of a charge they captured 42391")
}
