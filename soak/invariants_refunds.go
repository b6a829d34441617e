package soak

import (
	"fmt"
	"strconv"
	"strings"
)

// Refund is one of rebill's refunds as GET /v1/charges/{id}/refunds shows
// it, with its charge's key.
type Refund struct {
	ID         string
	ChargeID   string
	ChargeKey  string
	N          int
	GatewayKey string // <charge key>:r<n>:refund
	Amount     int64
	Currency   string
	Status     string // pending, unknown, succeeded, failed
}

// Names of the refund checks.
const (
	RefundsWithinCapture = "refunds-within-capture"
	RefundOnceAtGateway  = "refund-once-at-gateway"
	RefundAtGateway      = "refund-at-gateway"
	NoRefundOfFine       = "no-refund-of-fine"
)

// refundOf splits a refund's idempotency key, <charge key>:r<n>:refund;
// ok is false for any other key.
func (o LedgerOp) refundOf() (chargeKey string, n int, ok bool) {
	rest, found := strings.CutSuffix(o.IdempotencyKey, ":refund")
	if !found {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 0 || i+2 > len(rest) || rest[i+1] != 'r' {
		return "", 0, false
	}
	n, err := strconv.Atoi(rest[i+2:])
	if err != nil || n < 1 {
		return "", 0, false
	}
	return rest[:i], n, true
}

// refundsAtGateway are the ledger's succeeded refunds by charge key and by
// refund key, all gateways.
func refundsAtGateway(d *Data) (byCharge, byKey map[string][]LedgerOp) {
	byCharge, byKey = map[string][]LedgerOp{}, map[string][]LedgerOp{}
	for _, o := range allOps(d) {
		if o.Op != "refund" || o.Status != "succeeded" {
			continue
		}
		k, _, _ := o.refundOf()
		byCharge[k] = append(byCharge[k], o)
		byKey[o.IdempotencyKey] = append(byKey[o.IdempotencyKey], o)
	}
	return byCharge, byKey
}

// RefundsWithinCaptureOnLedger: per charge, the money the gateways
// returned never exceeds what they captured of it, whatever rebill's
// books say (two nodes racing, a lost answer resent). A refund under a key
// rebill would not write is counted under "" and always breaks it.
func RefundsWithinCaptureOnLedger(d *Data) []Violation {
	var out []Violation
	l := indexLedger(allOps(d))
	byCharge, _ := refundsAtGateway(d)
	for key, refunds := range byCharge {
		var returned, captured int64
		for _, o := range refunds {
			returned += o.Amount
		}
		for _, o := range l.captures(key) {
			captured += o.Amount
		}
		if returned > captured {
			out = append(out, viol(RefundsWithinCapture, subOfKey(key), key,
				fmt.Sprintf("the gateways returned %d of a charge they captured %d of (%s)", returned, captured, describeOps(refunds))))
		}
	}
	sortViolations(out)
	return out
}

// RefundKeyOnceOnLedger: each refund key returned money at most once, over
// every gateway: a look-up that resent blind, or a refund sent to two
// accounts, would return it twice.
func RefundKeyOnceOnLedger(d *Data) []Violation {
	var out []Violation
	_, byKey := refundsAtGateway(d)
	for key, ops := range byKey {
		if len(ops) > 1 {
			ck, _, _ := ops[0].refundOf()
			out = append(out, viol(RefundOnceAtGateway, subOfKey(ck), ck,
				fmt.Sprintf("refund key %s returned money %d times (%s)", key, len(ops), describeOps(ops))))
		}
	}
	sortViolations(out)
	return out
}

// EverySucceededRefundAtGateway: every refund rebill holds succeeded is a
// succeeded refund at the gateway under its key, of its amount and
// currency: the customer was told the money came back.
func EverySucceededRefundAtGateway(d *Data) []Violation {
	var out []Violation
	_, byKey := refundsAtGateway(d)
	for _, r := range d.Refunds {
		if r.Status != "succeeded" {
			continue
		}
		ops := byKey[r.GatewayKey]
		switch {
		case len(ops) == 0:
			out = append(out, viol(RefundAtGateway, subOfKey(r.ChargeKey), r.ChargeKey,
				fmt.Sprintf("refund %d (%s, %d %s) succeeded in rebill but no gateway returned money under %s",
					r.N, r.ID, r.Amount, r.Currency, r.GatewayKey)))
		case ops[0].Amount != r.Amount || ops[0].Currency != r.Currency:
			out = append(out, viol(RefundAtGateway, subOfKey(r.ChargeKey), r.ChargeKey,
				fmt.Sprintf("refund %d (%s) is %d %s in rebill, %d %s at %s", r.N, r.ID, r.Amount, r.Currency,
					ops[0].Amount, ops[0].Currency, ops[0].Gateway)))
		}
	}
	sortViolations(out)
	return out
}

// NoRefundOfAFine: no fine's payment is refunded, in rebill's books or at
// a gateway: money paid to the state is returned through the state's own
// procedure.
func NoRefundOfAFine(d *Data) []Violation {
	fines := map[string]bool{}
	for _, f := range d.Fines {
		for _, b := range f.Bills {
			if b.ChargeKey != "" {
				fines[b.ChargeKey] = true
			}
		}
	}
	var out []Violation
	for _, r := range d.Refunds {
		if fines[r.ChargeKey] {
			out = append(out, viol(NoRefundOfFine, subOfKey(r.ChargeKey), r.ChargeKey,
				fmt.Sprintf("rebill holds refund %d (%s, %d %s, %s) of a fine's charge", r.N, r.ID, r.Amount, r.Currency, r.Status)))
		}
	}
	byCharge, _ := refundsAtGateway(d)
	for key, ops := range byCharge {
		if fines[key] {
			out = append(out, viol(NoRefundOfFine, subOfKey(key), key,
				fmt.Sprintf("the gateway returned a fine's payment (%s)", describeOps(ops))))
		}
	}
	sortViolations(out)
	return out
}

// allOps are every gateway operation, the bill charges' included: a
// refund names its charge's key, whichever owner the charge bills.
func allOps(d *Data) []LedgerOp {
	return append(append([]LedgerOp(nil), d.Ledger...), d.BillLedger...)
}
