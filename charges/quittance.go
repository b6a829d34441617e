package charges

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/platform/metrics"
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
// own (any payment id rebill ever posted, or derives for one of c's
// attempts so far: see recoverForgotten). While one of rebill's postings
// of the UIN stands accepted the registry is not asked (it would count
// money rebill may still capture) and what the charge last recorded
// stands. The registry's verdict that the accrual is settled is passed
// on unless one of rebill's own payments stands in it. A fine whose bill
// source reports more paid than the registry last answered is asked about
// afresh: the source may have seen a payment the cached answer predates.
// It implements OutsidePayments.
func (p *Poster) PaidOutside(ctx context.Context, c Charge) (OutsidePaid, error) {
	paid, _, err := p.paidOutside(ctx, c, c.SourcePaid > c.PaidOutside)
	return paid, err
}

// paidOutside is PaidOutside, asking the registry afresh when fresh; it
// also reports whether it recorded again a posting of an earlier attempt
// that the database forgot (recoverForgotten).
func (p *Poster) paidOutside(ctx context.Context, c Charge, fresh bool) (OutsidePaid, bool, error) {
	standing, err := ownStanding(ctx, p.Pool, c.RegistryUIN)
	if err != nil {
		return OutsidePaid{}, false, err
	}
	if standing {
		return OutsidePaid{Amount: c.PaidOutside}, false, nil
	}
	now := p.Clock.Now()
	q, ok := p.quittances.get(c.RegistryUIN, now)
	if !ok || fresh {
		if q, err = p.Gateways.Quittance(ctx, c.RegistryUIN); err != nil {
			return OutsidePaid{}, false, fmt.Errorf("quittance status of %s: %w", c.RegistryUIN, err)
		}
		p.quittances.put(c.RegistryUIN, q, now)
	}
	own, err := ownPaymentIDs(ctx, p.Pool, c.RegistryUIN)
	if err != nil {
		return OutsidePaid{}, false, err
	}
	// The identifiers this attempt posts under (Held) are rebill's own
	// even when no posting names them: a restore, or a failover's lost
	// commits, may forget a posting the registry kept. Counted as paid
	// elsewhere, that payment would stand accepted with no capture behind
	// it; the attempt posted again replays it instead.
	for try := range maxPaymentIDTries {
		own[p.PaymentIDs.ID(c.Key(), c.AttemptCount, c.Amount, c.PeriodStart, try)] = true
	}
	recovered, err := p.recoverForgotten(ctx, c, q, own)
	if err != nil {
		return OutsidePaid{}, false, err
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
	return OutsidePaid{Amount: q.PaidExcept(func(id string) bool { return own[id] }), Settled: settled}, recovered, nil
}

// forgottenNote is the last error of a posting recorded again from the
// registry's word.
const forgottenNote = "recorded again: the registry holds this payment accepted and no posting named it (a restore, or a failover's lost commits, forgot it)"

// recoverForgotten records again, accepted, the posting of every payment
// standing in q that no posting names (not in own) but whose identifier
// rebill derives for one of c's earlier attempts: its amount as the
// registry holds it, the charge's day, any try. A restore, or a failover's
// lost commits, may forget such a posting, and the charge may then be
// retried at a later attempt; that payment is rebill's, not paid
// elsewhere, and its money was never captured by the charge, which does
// not move past an attempt it captured (a capture the database forgot is
// replayed under the attempt's own gateway key). Recorded again, the
// posting is settled as every superseded one is: the sweep annuls it, and
// the charge's new hold waits for that (priorPostingsSettledSQL), so the
// registry never holds two of the fine's payments from rebill, and
// nothing is captured on it. The current attempt's own identifiers are
// left to its hold, which replays them. Reports whether it recorded one;
// the payments are added to own.
func (p *Poster) recoverForgotten(ctx context.Context, c Charge, q registry.Quittance, own map[string]bool) (bool, error) {
	recovered := false
	for _, pay := range q.Payments {
		if own[pay.PaymentID] || pay.Annulled {
			continue
		}
		attempt := p.earlierAttemptOf(c, pay)
		if attempt == 0 {
			continue
		}
		own[pay.PaymentID] = true
		made, err := p.recordForgotten(ctx, c, attempt, pay)
		if err != nil {
			return false, err
		}
		recovered = recovered || made
	}
	return recovered, nil
}

// earlierAttemptOf is the attempt of c before its current one under
// which rebill posts pay (its identifier derived from c's key, that
// attempt, pay's amount, c's day and a try), or 0: a payment made
// elsewhere. The search is bounded by c's attempts and maxPaymentIDTries.
func (p *Poster) earlierAttemptOf(c Charge, pay registry.QuittancePayment) int {
	for attempt := 1; attempt < c.AttemptCount; attempt++ {
		for try := range maxPaymentIDTries {
			if p.PaymentIDs.ID(c.Key(), attempt, pay.Amount, c.PeriodStart, try) == pay.PaymentID {
				return attempt
			}
		}
	}
	return 0
}

// recordForgotten stores the posting of pay, c's attempt, as the
// registry shows it: made, then taken (the posting's own move to
// accepted). An attempt that has a posting under another identifier
// keeps it. Reports whether it stored one.
func (p *Poster) recordForgotten(ctx context.Context, c Charge, attempt int, pay registry.QuittancePayment) (bool, error) {
	now := p.Clock.Now()
	recorded := false
	err := pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO registry_postings (payment_id, charge_id, attempt, uin, amount, status, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $7) ON CONFLICT DO NOTHING`,
			pay.PaymentID, c.ID, attempt, c.RegistryUIN, pay.Amount, PostingPosting, now)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		recorded, err = movePosting(ctx, tx, pay.PaymentID, []PostingStatus{PostingPosting}, PostingAccepted, "", forgottenNote, now)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("record again the forgotten posting %s of charge %s: %w", pay.PaymentID, c.ID, err)
	}
	if recorded {
		metrics.StageRuns.WithLabelValues("posting", "recorded_again").Inc()
		p.Logger.Warn().Str("charge_id", c.ID.String()).Int("attempt", attempt).Str("payment_id", pay.PaymentID).
			Int64("amount", pay.Amount).Msg("the registry holds an earlier attempt's payment no posting named: recorded again, to be annulled")
	}
	return recorded, nil
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
