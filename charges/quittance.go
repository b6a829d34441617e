package charges

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/platform/pg"
)

// QuittanceMaxAge bounds how long the registry's answer about an accrual
// is reused: a fine paid at a bank is seen within it.
const QuittanceMaxAge = 5 * time.Minute

// quittanceCache keeps the registry's recent answers per UIN, for
// QuittanceMaxAge on the service clock (a dev clock moved back also asks
// again; dev mode forgets an answer when it records a payment outside
// rebill, see Forget).
type quittanceCache struct {
	mu      sync.Mutex
	answers map[string]cachedQuittance
}

type cachedQuittance struct {
	q  registry.Quittance
	at time.Time
}

func (c *quittanceCache) get(uin string, now time.Time) (registry.Quittance, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.answers[uin]
	if !ok || now.Sub(a.at) >= QuittanceMaxAge || now.Before(a.at) {
		return registry.Quittance{}, false
	}
	return a.q, true
}

func (c *quittanceCache) put(uin string, q registry.Quittance, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.answers == nil {
		c.answers = map[string]cachedQuittance{}
	}
	for k, a := range c.answers { // bounded by the fines checked within the last minutes
		if now.Sub(a.at) >= QuittanceMaxAge || now.Before(a.at) {
			delete(c.answers, k)
		}
	}
	c.answers[uin] = cachedQuittance{q: q, at: now}
}

// Forget drops the cached answer about uin: the next check asks the
// registry (dev mode, after a payment outside rebill is recorded).
func (p *Poster) Forget(uin string) {
	p.quittances.mu.Lock()
	defer p.quittances.mu.Unlock()
	delete(p.quittances.answers, uin)
}

// PaidOutside tells how much of c's fine was paid outside rebill: the
// payments the registry holds against its UIN that stand, less rebill's
// own (any payment id rebill ever posted). While one of rebill's postings
// of the UIN stands accepted the registry is not asked (it would count
// money rebill may still capture) and what the charge last recorded
// stands. The registry's verdict that the accrual is settled is passed
// on unless one of rebill's own payments stands in it. A fine whose bill
// source reports more paid than the registry last answered is asked about
// afresh: the source may have seen a payment the cached answer predates.
// It implements OutsidePayments.
func (p *Poster) PaidOutside(ctx context.Context, c Charge) (OutsidePaid, error) {
	return p.paidOutside(ctx, c, c.SourcePaid > c.PaidOutside)
}

// paidOutside is PaidOutside, asking the registry afresh when fresh.
func (p *Poster) paidOutside(ctx context.Context, c Charge, fresh bool) (OutsidePaid, error) {
	standing, err := ownStanding(ctx, p.Pool, c.RegistryUIN)
	if err != nil {
		return OutsidePaid{}, err
	}
	if standing {
		return OutsidePaid{Amount: c.PaidOutside}, nil
	}
	now := p.Clock.Now()
	q, ok := p.quittances.get(c.RegistryUIN, now)
	if !ok || fresh {
		if q, err = p.Gateways.Quittance(ctx, c.RegistryUIN); err != nil {
			return OutsidePaid{}, fmt.Errorf("quittance status of %s: %w", c.RegistryUIN, err)
		}
		p.quittances.put(c.RegistryUIN, q, now)
	}
	own, err := ownPaymentIDs(ctx, p.Pool, c.RegistryUIN)
	if err != nil {
		return OutsidePaid{}, err
	}
	// The identifiers this attempt posts under (Held) are rebill's own
	// even when no posting names them: a restore, or a failover's lost
	// commits, may forget a posting the registry kept. Counted as paid
	// elsewhere, that payment would stand accepted with no capture behind
	// it; the attempt posted again replays it instead.
	for try := range maxPaymentIDTries {
		own[p.PaymentIDs.ID(c.Key(), c.AttemptCount, c.Amount, c.PeriodStart, try)] = true
	}
	// The registry's settled verdict counts every payment it holds: while
	// one of rebill's own stands there (an attempt whose answer was lost,
	// not yet annulled), the verdict may be rebill's own doing and says
	// nothing of payments made elsewhere.
	settled := q.Settled
	for _, pay := range q.Payments {
		if own[pay.PaymentID] && !pay.Annulled {
			settled = false
		}
	}
	return OutsidePaid{Amount: q.PaidExcept(func(id string) bool { return own[id] }), Settled: settled}, nil
}

// ownStanding reports whether one of rebill's postings of uin stands
// accepted at the registry.
func ownStanding(ctx context.Context, db pg.DBTX, uin string) (bool, error) {
	var standing bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM registry_postings WHERE uin = $1 AND status = $2)`,
		uin, PostingAccepted).Scan(&standing)
	if err != nil {
		return false, fmt.Errorf("own postings of %s: %w", uin, err)
	}
	return standing, nil
}

// OwnPaymentMayStand reports whether one of rebill's postings of the fine
// uin is open or accepted: it may stand at the registry, or still come
// to. A bill source's report of the fine paid may be that very payment.
func (p *Poster) OwnPaymentMayStand(ctx context.Context, db pg.DBTX, uin string) (bool, error) {
	var open bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM registry_postings WHERE uin = $1 AND NOT (status = ANY($2)))`,
		uin, fsm.Texts(postingsSettled)).Scan(&open)
	if err != nil {
		return false, fmt.Errorf("own open postings of %s: %w", uin, err)
	}
	return open, nil
}

// ownPaymentIDs are the payment ids rebill ever used for uin.
func ownPaymentIDs(ctx context.Context, db pg.DBTX, uin string) (map[string]bool, error) {
	rows, err := db.Query(ctx, `SELECT payment_id FROM registry_postings WHERE uin = $1`, uin)
	if err != nil {
		return nil, fmt.Errorf("own payment ids of %s: %w", uin, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("own payment ids of %s: %w", uin, err)
	}
	own := make(map[string]bool, len(ids))
	for _, id := range ids {
		own[id] = true
	}
	return own, nil
}
