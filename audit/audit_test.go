package audit_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/audit"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/opstest"
)

const gw = "sima"

// The audited range is November 2026; the clock stands on December 2.
var (
	from = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	to   = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now  = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
)

type testBundle struct {
	pool    *pgxpool.Pool
	auditor *audit.Auditor
	sub     uuid.UUID
}

func setup(t *testing.T) testBundle {
	t.Helper()
	pool := dbtest.Pool(t)
	g := opstest.Gateway(t, pool, gw)
	sub := opstest.Subscription(t, pool, gw, from.AddDate(0, -1, 0))
	// The subscription's next period is not due yet.
	_, err := pool.Exec(context.Background(), `UPDATE subscriptions SET next_charge_at = $2 WHERE id = $1`, sub, now.AddDate(0, 1, 0))
	require.NoError(t, err)
	return testBundle{pool: pool, sub: sub, auditor: &audit.Auditor{DB: pool, Gateways: []gateway.Gateway{g}, SettleDays: 8,
		Sources: []audit.Source{audit.Periods{DB: pool, Now: now, Grace: time.Hour}}}}
}

// periods inserts one charge per day of November from the 1st, in each
// status given, paid ones with their authorize and capture in the ledger.
func (b testBundle) periods(t *testing.T, statuses ...string) []string {
	t.Helper()
	var keys []string
	for i, st := range statuses {
		c := opstest.Charge{Subscription: b.sub, PeriodStart: from.AddDate(0, 0, i), Gateway: gw, Status: st}
		var key string
		if st == "succeeded" {
			_, key = opstest.Paid(t, b.pool, c)
		} else {
			_, key = opstest.InsertCharge(t, b.pool, c)
		}
		keys = append(keys, key)
	}
	return keys
}

func kinds(r audit.Report) []string {
	var out []string
	for _, d := range r.Discrepancies {
		out = append(out, d.Kind)
	}
	return out
}

func TestCleanBooksPass(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.periods(t, "succeeded", "succeeded", "failed", "requires_review", "voided", "declined", "succeeded")
	// A period of October, captured in November, is not this range's.
	opstest.Paid(t, b.pool, opstest.Charge{Subscription: b.sub, PeriodStart: from.AddDate(0, 0, -3), Gateway: gw,
		UpdatedAt: from.Add(time.Hour)})
	r, err := b.auditor.Run(context.Background(), from, to)
	require.NoError(t, err)
	require.Empty(t, r.Discrepancies)
	require.Equal(t, audit.Report{From: "2026-11-01", To: "2026-11-30", Periods: 7, Captured: 3, Failed: 1, InReview: 1,
		NotOwed: 1, Open: 1, GatewayCaptures: 4, Discrepancies: []audit.Discrepancy{}}, r)
}

func TestEveryBrokenRuleIsListed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	keys := b.periods(t, "succeeded", "succeeded", "failed", "succeeded")
	at := from.Add(12 * time.Hour)
	// Period 0 captured a second time under a later attempt's key.
	opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: keys[0], Attempt: 2, Op: "capture", At: at})
	// Period 1's capture vanished from the gateway's books.
	_, err := b.pool.Exec(context.Background(), `DELETE FROM gatewaysim.operations WHERE idempotency_key = $1`, keys[1]+":a1:capture")
	require.NoError(t, err)
	// Period 2 failed, yet the gateway captured it.
	opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: keys[2], Op: "capture", At: at})
	// A capture that belongs to no charge at all.
	opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: uuid.NewString() + ":2026-11-05", Op: "capture", At: at})
	// Another subscription's period began on November 20 and was never charged.
	late := opstest.Subscription(t, b.pool, gw, from)
	_, err = b.pool.Exec(context.Background(), `UPDATE subscriptions SET next_charge_at = $2 WHERE id = $1`, late,
		from.AddDate(0, 0, 19))
	require.NoError(t, err)

	r, err := b.auditor.Run(context.Background(), from, to)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{audit.DuplicateCapture, audit.MissingAtGateway, audit.StatusMismatch,
		audit.UnknownAtRebill, audit.NotCharged}, kinds(r), "%v", r.Discrepancies)
	require.Equal(t, 5, r.Periods)
	for _, d := range r.Discrepancies {
		switch d.Kind {
		case audit.DuplicateCapture:
			require.Equal(t, keys[0], d.ChargeKey)
		case audit.MissingAtGateway:
			require.Equal(t, keys[1], d.ChargeKey)
		case audit.StatusMismatch:
			require.Equal(t, keys[2], d.ChargeKey)
		case audit.NotCharged:
			require.Equal(t, late.String(), d.ChargeKey)
		}
	}
}

func TestDuplicateFiledOutsideTheSearchedDaysIsFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, key := opstest.InsertCharge(t, b.pool, opstest.Charge{Subscription: b.sub, PeriodStart: from, Gateway: gw,
		Status: "succeeded", Attempt: 2})
	// Both captures were stamped a year later (a gateway on another clock):
	// only look-ups by key find them.
	later := from.AddDate(1, 0, 0)
	opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: key, Attempt: 1, Op: "capture", At: later})
	opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: key, Attempt: 2, Op: "capture", At: later})
	r, err := b.auditor.Run(context.Background(), from, to)
	require.NoError(t, err)
	require.Equal(t, []string{audit.DuplicateCapture}, kinds(r))
	require.Zero(t, r.GatewayCaptures)
}

// Captures of bill charges judged in another range (a bill's charge due
// in October, captured in November) are the bills' own, not strays;
// a bill key that names no charge still is one.
func TestBillCapturesAreNotStrays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	enr := opstest.Enrollment(t, b.pool, gw, from.AddDate(0, -2, 0))
	at := from.Add(36 * time.Hour)
	for _, billID := range []string{"2026-10", "inv:77:2026-10"} {
		opstest.Paid(t, b.pool, opstest.Charge{Enrollment: enr, BillID: billID, PeriodStart: from.AddDate(0, 0, -5), Gateway: gw,
			UpdatedAt: at})
	}
	opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: enr.String() + ":inv:77", Op: "capture", At: at})
	r, err := b.auditor.Run(context.Background(), from, to)
	require.NoError(t, err)
	require.Equal(t, []string{audit.UnknownAtRebill}, kinds(r), "%v", r.Discrepancies)
	require.Equal(t, enr.String()+":inv:77", r.Discrepancies[0].ChargeKey)
	require.Equal(t, 3, r.GatewayCaptures)
}

// insertBill files bill billID of enrollment enr, received at at, with
// its charge (captured when paid) and returns the charge's key.
func (b testBundle) insertBill(t *testing.T, enr uuid.UUID, billID string, amount int64, at time.Time, paid bool) (uuid.UUID, string) {
	t.Helper()
	st := "failed"
	if paid {
		st = "succeeded"
	}
	c := opstest.Charge{Enrollment: enr, BillID: billID, PeriodStart: at, Gateway: gw, Amount: amount, Status: st}
	var id uuid.UUID
	var key string
	if paid {
		id, key = opstest.Paid(t, b.pool, c)
	} else {
		id, key = opstest.InsertCharge(t, b.pool, c)
	}
	_, err := b.pool.Exec(context.Background(), `INSERT INTO bills (id, enrollment_id, customer_id, bill_id, amount, issued_at,
			due_date, status, pay_at, expires_at, charge_id, received_at, updated_at, identity)
		VALUES ($1, $2, 'cust-ops', $3, $4, $5, $6, 'paid', $5, $7, $8, $5, $5,
			(SELECT CASE kind WHEN 'fines' THEN 'uin:' || $3 ELSE 'els:' || els || ':' || $3 END FROM enrollments WHERE id = $2))`,
		uuid.New(), enr, billID, amount, at, at.AddDate(0, 0, 20), at.AddDate(0, 0, 21), id)
	require.NoError(t, err)
	return id, key
}

// The audit judges bills by the rules the soak judges them with: here one
// housing bill, its account enrolled twice, captured through both.
func TestBillPaidTwiceAcrossEnrollmentsIsReported(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.auditor.Bills = &audit.Bills{Now: now}
	first := opstest.Enrollment(t, b.pool, gw, from.AddDate(0, -1, 0))
	second := opstest.Enrollment(t, b.pool, gw, from.AddDate(0, -1, 0))
	_, key1 := b.insertBill(t, first, "2026-11:77", 5000, from.Add(time.Hour), true)
	_, key2 := b.insertBill(t, second, "2026-11:77", 5000, from.Add(2*time.Hour), true)
	// Another bill of the same account, paid once, is fine.
	b.insertBill(t, first, "2026-12:77", 5000, from.Add(3*time.Hour), true)
	b.insertBill(t, second, "2026-12:77", 5000, from.Add(3*time.Hour), false)

	r, err := b.auditor.Run(context.Background(), from, to)
	require.NoError(t, err)
	require.Equal(t, 4, r.Bills)
	require.Equal(t, []string{"bill-one-capture-per-identity"}, kinds(r), "%v", r.Discrepancies)
	require.Contains(t, []string{key1, key2}, r.Discrepancies[0].ChargeKey)
	require.Contains(t, r.Discrepancies[0].Detail, key1)
	require.Contains(t, r.Discrepancies[0].Detail, key2)
}

// A bill identity captured twice before one payment per identity was
// enforced (the migration leaves such pairs outside the unique index) is
// reported by every audit, whatever range it covers; within the range it
// is reported once.
func TestBillIdentityPaidTwiceBeforeTheRangeIsReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.auditor.Bills = &audit.Bills{Now: now}
	first := opstest.Enrollment(t, b.pool, gw, from.AddDate(0, -3, 0))
	second := opstest.Enrollment(t, b.pool, gw, from.AddDate(0, -3, 0))
	before := from.AddDate(0, -2, 0)
	id1, _ := b.insertBill(t, first, "2026-09:77", 5000, before, true)
	id2, _ := b.insertBill(t, second, "2026-09:77", 5000, before.Add(time.Hour), true)
	_, err := b.pool.Exec(ctx, `UPDATE charges c SET bill_identity = b.identity FROM bills b WHERE b.charge_id = c.id`)
	require.NoError(t, err)

	r, err := b.auditor.Run(ctx, from, to)
	require.NoError(t, err)
	require.Zero(t, r.Bills, "no bill was received in the range")
	require.Equal(t, []string{"bill-one-capture-per-identity"}, kinds(r), "%v", r.Discrepancies)
	require.Equal(t, id2, *r.Discrepancies[0].ChargeID, "the later capture is the one to refund")
	require.Contains(t, r.Discrepancies[0].Detail, id1.String())

	r, err = b.auditor.Run(ctx, before.Add(-time.Hour), to)
	require.NoError(t, err)
	require.Equal(t, []string{"bill-one-capture-per-identity"}, kinds(r), "reported once: %v", r.Discrepancies)
}

// One customer's enrollments of one car under two spellings of its STS,
// made equal by the migration to one spelling, and two of one licence,
// are listed by every audit for support, whatever its range; a cancelled
// one, and another customer's enrollment of the same car, are not.
func TestRepeatedEnrollmentsAreListed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.auditor.Bills = &audit.Bills{Now: now}
	enrol := func(customer, sts, licence, status string, at time.Time) uuid.UUID {
		id := uuid.New()
		_, err := b.pool.Exec(ctx, `INSERT INTO enrollments (id, customer_id, kind, sts, driver_license, status, currency,
				max_amount, pm_gateway, pm_token, pm_exp_month, pm_exp_year, created_at, updated_at, cancelled_at)
			VALUES ($1, $2, 'fines', nullif($3, ''), nullif($4, ''), $5, 'RUB', 100000, $6, 'tok_ok', 12, 2030, $7, $7,
				CASE WHEN $5 = 'cancelled' THEN $7::timestamptz END)`,
			id, customer, sts, licence, status, gw, at)
		require.NoError(t, err)
		return id
	}
	first := enrol("cust-ann", "77УА123456", "", "active", from.AddDate(0, -6, 0))
	second := enrol("cust-ann", "77УА123456", "", "paused", from.AddDate(0, -5, 0))
	enrol("cust-ann", "77УА123456", "", "cancelled", from.AddDate(0, -4, 0))
	enrol("cust-bob", "77УА123456", "", "active", from.AddDate(0, -4, 0))
	licence1 := enrol("cust-cat", "", "7712345678", "active", from.AddDate(0, -3, 0))
	licence2 := enrol("cust-cat", "77ХУ000001", "7712345678", "active", from.AddDate(0, -2, 0))

	r, err := b.auditor.Run(ctx, from, to)
	require.NoError(t, err)
	require.Equal(t, []string{audit.RepeatedEnrollment, audit.RepeatedEnrollment}, kinds(r), "%v", r.Discrepancies)
	require.Equal(t, `customer "cust-ann" has 2 enrollments of one sts, not cancelled (`+first.String()+", "+second.String()+
		"): cancel all but one", r.Discrepancies[0].Detail)
	require.Equal(t, `customer "cust-cat" has 2 enrollments of one driver_license, not cancelled (`+licence1.String()+", "+
		licence2.String()+"): cancel all but one", r.Discrepancies[1].Detail)
	require.NotContains(t, r.Discrepancies[0].String(), "77УА123456", "the document's number is not printed")
}

// Refunds are counted and judged on the gateways' books: per charge, what
// the gateways returned stays within what they captured, each refund key
// is there once, every refund rebill holds succeeded is there with its
// amount, and every refund there is rebill's.
func TestRefundRulesAreJudged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := opstest.Gateway(t, b.pool, "simb")
	b.auditor.Gateways = append(b.auditor.Gateways, other)
	at := from.Add(36 * time.Hour)
	keys := map[string]string{}
	charge := func(day int) (uuid.UUID, string) {
		return opstest.Paid(t, b.pool, opstest.Charge{Subscription: b.sub, PeriodStart: from.AddDate(0, 0, day), Gateway: gw})
	}
	refund := func(id uuid.UUID, key string, n int, amount int64, status string) string {
		return opstest.InsertRefund(t, b.pool, opstest.Refund{ChargeID: id, ChargeKey: key, N: n, Amount: amount,
			Gateway: gw, Status: status, At: at})
	}
	atGateway := func(gateway, key, rk string, amount int64) {
		opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gateway, ChargeKey: key, Op: "refund", Key: rk, Amount: amount, At: at})
	}
	// Two partial refunds that agree.
	id, key := charge(0)
	atGateway(gw, key, refund(id, key, 1, 300, "succeeded"), 300)
	atGateway(gw, key, refund(id, key, 2, 700, "succeeded"), 700)
	// Succeeded in rebill, never at the gateway.
	id, keys[audit.RefundMissingAtGateway] = charge(1)
	refund(id, keys[audit.RefundMissingAtGateway], 1, 500, "succeeded")
	// At the gateway under a key rebill never made.
	_, keys[audit.RefundUnknownAtRebill] = charge(2)
	atGateway(gw, keys[audit.RefundUnknownAtRebill], keys[audit.RefundUnknownAtRebill]+":r2:refund", 100)
	// Another amount at the gateway.
	id, keys[audit.RefundAmountMismatch] = charge(3)
	atGateway(gw, keys[audit.RefundAmountMismatch], refund(id, keys[audit.RefundAmountMismatch], 1, 400, "succeeded"), 450)
	// A refund rebill holds failed was made anyway: 1200 returned of 1000.
	id, keys[audit.RefundOverCapture] = charge(4)
	atGateway(gw, keys[audit.RefundOverCapture], refund(id, keys[audit.RefundOverCapture], 1, 600, "succeeded"), 600)
	atGateway(gw, keys[audit.RefundOverCapture], refund(id, keys[audit.RefundOverCapture], 2, 600, "failed"), 600)
	// One refund key at two gateway accounts.
	id, keys[audit.DuplicateRefund] = charge(5)
	rk := refund(id, keys[audit.DuplicateRefund], 1, 500, "succeeded")
	atGateway(gw, keys[audit.DuplicateRefund], rk, 500)
	atGateway("simb", keys[audit.DuplicateRefund], rk, 500)
	// A refund whose key is not rebill's at all.
	opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, Op: "refund", Key: "manual-refund-7", Amount: 100, At: at})

	r, err := b.auditor.Run(context.Background(), from, to)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{audit.RefundMissingAtGateway, audit.RefundUnknownAtRebill, audit.RefundAmountMismatch,
		audit.RefundOverCapture, audit.DuplicateRefund, audit.RefundUnknownAtRebill}, kinds(r), "%v", r.Discrepancies)
	for _, d := range r.Discrepancies {
		if d.Kind == audit.RefundUnknownAtRebill && d.ChargeKey == "" {
			require.Contains(t, d.Detail, "manual-refund-7")
			continue
		}
		require.Equal(t, keys[d.Kind], d.ChargeKey, "%v", d)
	}
	require.Equal(t, 6, r.Refunds)
	require.Equal(t, 9, r.GatewayRefunds)
	require.Equal(t, 6, r.GatewayCaptures)
}
