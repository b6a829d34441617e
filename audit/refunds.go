package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
)

// judgeRefunds checks a charge's refunds against the gateways: the
// refunds listed for the days searched and, for each refund rebill holds
// that they do not show, a look-up by its key (a refund filed under a day
// outside the search). Per charge, the money the gateways returned never
// exceeds what they captured (captured: the charge's captures found);
// each refund key is at the gateway once; every refund rebill holds
// succeeded is there with its amount; and every refund there is one of
// rebill's.
func (a *Auditor) judgeRefunds(ctx context.Context, c charges.Charge, captured, listed []capture, r *Report) error {
	if c.AmountRefunded == 0 && len(listed) == 0 {
		return nil // no refund succeeded in rebill, none at the gateway
	}
	rs, err := charges.RefundsOf(ctx, a.DB, c.ID)
	if err != nil {
		return fmt.Errorf("audit: refunds of %s: %w", c.ID, err)
	}
	ours := map[string]charges.Refund{}
	for _, rf := range rs {
		ours[rf.GatewayKey] = rf
		if rf.Status == charges.RefundSucceeded {
			r.Refunds++
		}
	}
	atGateway := map[string][]capture{}
	refs := map[string]bool{}
	for _, cp := range listed {
		if !refs[cp.op.Reference] {
			refs[cp.op.Reference] = true
			atGateway[cp.op.IdempotencyKey] = append(atGateway[cp.op.IdempotencyKey], cp)
		}
	}
	if g := a.gateway(c.Gateway); g != nil {
		for _, rf := range rs {
			if len(atGateway[rf.GatewayKey]) > 0 || rf.Status == charges.RefundPending {
				continue // a pending refund was never answered: it may not have been sent yet
			}
			res, err := g.Lookup(ctx, gateway.ByKey(gateway.OpRefund, rf.GatewayKey))
			if errors.Is(err, gateway.ErrNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("audit: look up %s: %w", rf.GatewayKey, err)
			}
			if res.Status == gateway.StatusSucceeded && !refs[res.Reference] {
				refs[res.Reference] = true
				atGateway[rf.GatewayKey] = append(atGateway[rf.GatewayKey], capture{gateway: g.Name(), op: res})
			}
		}
	}
	id := c.ID
	add := func(kind string, cp *capture, format string, args ...any) {
		d := Discrepancy{Kind: kind, ChargeID: &id, ChargeKey: c.Key(), Gateway: c.Gateway, Detail: fmt.Sprintf(format, args...)}
		if cp != nil {
			d.Gateway, d.GatewayReference = cp.gateway, cp.op.Reference
		}
		r.Discrepancies = append(r.Discrepancies, d)
	}
	keys := make([]string, 0, len(atGateway))
	for key := range atGateway {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	var returned int64
	for _, key := range keys {
		ops := atGateway[key]
		rf, known := ours[key]
		for i := range ops {
			cp := &ops[i]
			returned += cp.op.Amount
			if i > 0 {
				add(DuplicateRefund, cp, "refund %d under key %q: %d %s returned again", i+1, key, cp.op.Amount, cp.op.Currency)
			}
			switch {
			case !known:
				add(RefundUnknownAtRebill, cp, "a refund of %d %s under key %q names no refund of the charge's", cp.op.Amount, cp.op.Currency, key)
			case cp.op.Amount != rf.Amount || cp.op.Currency != rf.Currency:
				add(RefundAmountMismatch, cp, "the gateway refunded %d %s under %q, rebill's refund is %d %s",
					cp.op.Amount, cp.op.Currency, key, rf.Amount, rf.Currency)
			}
		}
	}
	for _, rf := range rs {
		if rf.Status == charges.RefundSucceeded && len(atGateway[rf.GatewayKey]) == 0 {
			add(RefundMissingAtGateway, nil, "refund %d (%d %s) succeeded but no gateway has it under %q", rf.N, rf.Amount, rf.Currency, rf.GatewayKey)
		}
	}
	var took int64
	for _, cp := range captured {
		took += cp.op.Amount
	}
	if returned > took {
		add(RefundOverCapture, nil, "the gateways returned %d %s of the charge but captured %d", returned, c.Currency, took)
	}
	return nil
}
