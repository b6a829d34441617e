package charges

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/platform/metrics"
)

// People pay fines at a bank, at a kiosk, in another app. A fine paid
// there must not be paid again here, so before the first hold of every
// attempt of a fine the pipeline asks how much of it was paid outside
// rebill (OutsidePayments) and records the answer on the charge:
//   - paid in full at the price that applies now, or settled in the
//     registry's own judgement (which applies the fine's discount rules
//     to the payments' dates): the charge is voided
//     (FailurePaidElsewhere) and its owner told (BillOwner.PaidOutside);
//   - paid in part: the attempt is for the rest, Amount and FullAmount
//     net of PaidOutside, and the cap applies to that rest;
//   - no answer: the attempt waits (FailureOutsideUnknown) and asks again;
//     nothing is held blind. Waiting past the discount deadline prices
//     the next try in full, and past PayUntil the bill expires.
// A fine's bill source may report it paid too (SourceReported), but its
// figure names no payment and may be rebill's own, so the registry stays
// the judge: a figure above the registry's last answer has the next check
// ask the registry afresh (no cached answer) before anything is held, and
// when the two still disagree from the last discounted start on, when the
// next attempt would cost the full price, the charge goes to review
// rather than risk paying a fine twice (ReviewPaidOutsideDisputed).
// The guarded "about to call" of a fine's first hold requires that the
// attempt was checked (outsideCheckedSQL), whatever path leads to it.

// OutsidePayments tells how much of a fine's price was paid outside
// rebill: by payments other than rebill's own, as the state payment
// registry holds them.
type OutsidePayments interface {
	PaidOutside(ctx context.Context, c Charge) (OutsidePaid, error)
}

// OutsidePaid is what was paid against a fine outside rebill.
type OutsidePaid struct {
	Amount int64
	// Settled: the registry itself judges the fine paid in full (a fine
	// paid at its discount before the deadline is, whatever it costs now).
	Settled bool
}

const (
	// FailurePaidElsewhere is the failure code of a bill's charge voided
	// because the bill was paid in full outside rebill.
	FailurePaidElsewhere = "paid_elsewhere"
	// FailurePaidOutsideChanged is the waiting reason of a charge whose
	// hold was released, before it was posted, because more of the bill
	// was paid outside rebill meanwhile; its next attempt is due at once
	// and asks again.
	FailurePaidOutsideChanged = "paid_outside_changed"
	// FailureOutsideUnknown is the waiting reason of a fine's attempt that
	// cannot start because the registry could not say how much of the fine
	// was paid outside rebill.
	FailureOutsideUnknown = "registry_unavailable"
)

// sourceDisagreesNote is appended to the review sentence of a fine whose
// bill source reports more paid outside rebill than the registry holds:
// the two figures a person compares.
const sourceDisagreesNote = "the bill source reports %d, the registry holds %d"

// outsideCheckedSQL holds, in the guarded move that starts a first
// authorize call ($2 the scheduled status), for a charge that needs no
// check of payments outside rebill, or whose current attempt had one.
const outsideCheckedSQL = `(status <> $2 OR registry_uin IS NULL OR outside_checked_attempt = attempt_count)`

// outsideGuard is the condition an authorize's "about to call" adds when
// fines are checked for payments outside rebill.
func (p *Pipeline) outsideGuard() string {
	if p.Outside == nil {
		return "true"
	}
	return outsideCheckedSQL
}

// priceAt is what c's fine costs if paid at now, net of what was paid
// outside rebill: the discounted price until the discount ends (a payment
// made outside before then settles it at that price, although a hold of
// rebill's started in the last hour is at the full price).
func (c Charge) priceAt(now time.Time) int64 {
	if c.DiscountUntil != nil && !now.Before(*c.DiscountUntil) {
		return c.FullAmount
	}
	return c.Amount
}

// checkOutside asks, for an authorize step held back because its fine's
// attempt was not checked for payments outside rebill, what was paid, and
// records it (see above). It reports whether the attempt may now be
// started; false with a nil error: the step is not this check's to handle.
func (p *Pipeline) checkOutside(ctx context.Context, s stageRun) (bool, error) {
	if p.Outside == nil {
		return false, nil
	}
	c, err := Get(ctx, p.Pool, s.chargeID)
	if err != nil {
		return false, err
	}
	now := p.Clock.Now()
	if c.Status != Scheduled || c.RegistryUIN == "" || c.outsideChecked == c.AttemptCount || c.AttemptCount != s.attempt ||
		c.VoidRequested || c.ConfirmationRequired || (c.PayUntil != nil && !now.Before(*c.PayUntil)) {
		return false, nil
	}
	paid, err := p.Outside.PaidOutside(ctx, c)
	if err != nil {
		metrics.Retry(s.stage, metrics.RetryRegistryUnavailable)
		delay := p.Retry.Delay(max(s.run, 1))
		if c.PayUntil != nil && c.PayUntil.After(now) {
			delay = max(min(delay, c.PayUntil.Sub(now)), time.Second) // wake up in time to expire the bill
		}
		if err := markWaiting(ctx, p.Pool, c.ID, c.AttemptCount, c.Status, now.Add(delay), FailureOutsideUnknown, now); err != nil {
			return false, err
		}
		p.Logger.Warn().Str("charge_id", c.ID.String()).Err(err).Msg("a fine's attempt waits: the registry cannot say what was paid outside rebill")
		return false, river.JobSnooze(delay)
	}
	start := false
	err = p.record(ctx, s, func(tx pgx.Tx) (err error) {
		start, err = p.recordOutside(ctx, tx, c, paid, now)
		return err
	})
	if errors.Is(err, ErrStale) {
		return false, nil
	}
	return start && err == nil, err
}

// recordOutside records what was paid outside rebill against c's bill,
// as checked at now for c's current attempt: the charge is voided when
// that covers its price now or the registry judges the fine settled,
// sent to review when its bill source still reports more paid from the
// last discounted start on, repriced to the rest otherwise. The owner,
// locked first, is told when the amount changed or the fine is paid.
// Reports whether the attempt may start.
func (p *Pipeline) recordOutside(ctx context.Context, tx pgx.Tx, c Charge, outside OutsidePaid, now time.Time) (bool, error) {
	owner := p.Owners.Of(c)
	if _, err := owner.Lock(ctx, tx, c.OwnerID()); err != nil {
		return false, err
	}
	paid := outside.Amount
	delta := paid - c.PaidOutside
	inFull := outside.Settled || c.priceAt(now)-delta <= 0
	disagrees := !inFull && c.SourcePaid > paid && c.DiscountUntil != nil && !now.Before(c.lastDiscountedStart())
	var next Charge
	var err error
	switch {
	case inFull:
		next, err = oneMoved(p.Store.move(ctx, tx, transition{from: []Status{Scheduled}, to: Voided,
			where: "NOT void_requested",
			set:   `failure_code = $1, paid_outside = $2, outside_checked_attempt = attempt_count`}, now, byID(c.ID, c.AttemptCount, ""), FailurePaidElsewhere, paid))
		if err == nil {
			p.transitioned(next, "paid in full outside rebill")
		}
	case disagrees:
		// The person who resolves it is the judge now: a retry they start
		// is not sent back here unless the source reports the figure again.
		reason := ReviewPaidOutsideDisputed.Sentence() + " (" + fmt.Sprintf(sourceDisagreesNote, c.SourcePaid, paid) + ")"
		next, err = oneMoved(p.Store.move(ctx, tx, transition{from: []Status{Scheduled}, to: RequiresReview,
			where: "NOT void_requested",
			set: `paid_outside = $3, outside_checked_attempt = attempt_count, full_amount = full_amount - $2,
				amount = CASE WHEN discount_until <= $1 THEN full_amount - $2 ELSE amount - $2 END, source_paid = 0, ` +
				reviewSetAt(4, 5)}, now, byID(c.ID, c.AttemptCount, ""), now, delta, paid, reason, ReviewPaidOutsideDisputed))
		if err == nil {
			p.transitioned(next, reason)
		}
	default:
		next, err = oneMoved(p.Store.move(ctx, tx, transition{from: []Status{Scheduled}, to: Scheduled,
			where: "NOT void_requested",
			set: `paid_outside = $3, outside_checked_attempt = attempt_count, full_amount = full_amount - $2,
				amount = CASE WHEN discount_until <= $1 THEN full_amount - $2 ELSE amount - $2 END`}, now, byID(c.ID, c.AttemptCount, ""), now, delta, paid))
	}
	if err != nil {
		return false, err
	}
	bills, ok := owner.(BillOwner)
	if ok && (inFull || delta != 0) {
		if err := bills.PaidOutside(ctx, tx, next, inFull); err != nil {
			return false, err
		}
	}
	return !inFull && !disagrees, nil
}

// HoldOutpaid enqueues, in tx, the void of a fine's hold (attempt) that
// is not to be posted because more of the fine was paid outside rebill
// since the attempt was priced: once the hold is released the next
// attempt is due at once, and asks again. Returns ErrStale when the
// charge left that attempt's hold.
func (s *Store) HoldOutpaid(ctx context.Context, tx pgx.Tx, chargeID uuid.UUID, attempt int) error {
	tag, err := tx.Exec(ctx, `UPDATE charges SET outside_recheck = true WHERE id = $1 AND attempt_count = $2 AND status = $3`,
		chargeID, attempt, string(Authorized))
	if err != nil {
		return fmt.Errorf("mark hold outpaid: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrStale
	}
	return s.HoldUnpostable(ctx, tx, chargeID, attempt)
}

// SourceReported records, in tx, what a fine's bill source reports paid
// against it (paid) on the charge id that pays it, unless the charge is
// settled (succeeded, voided); the caller checked that no payment of
// rebill's for the fine may stand at the registry (it may be that very
// payment, and is ignored). A figure above
// both the registry's last answer (PaidOutside) and the source's last
// report has a scheduled attempt's check made again, so that nothing is
// held before the registry is asked afresh (a later attempt asks anyway).
// Returns ErrStale when nothing was recorded.
func (s *Store) SourceReported(ctx context.Context, tx pgx.Tx, id uuid.UUID, paid int64, now time.Time) error {
	tag, err := tx.Exec(ctx, `UPDATE charges SET source_paid = $2, updated_at = $3,
			outside_checked_attempt = CASE WHEN status = $4 AND $2 > paid_outside AND $2 > source_paid THEN NULL
				ELSE outside_checked_attempt END
		WHERE id = $1 AND registry_uin IS NOT NULL AND source_paid <> $2 AND NOT (status = ANY($5))`,
		id, paid, now, string(Scheduled), texts([]Status{Succeeded, Voided}))
	if err != nil {
		return fmt.Errorf("record what the source of charge %s reports paid: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrStale
	}
	return nil
}

// RepriceOutside records that paid was paid outside rebill against the
// bill of the charge id (more than it last recorded), for a charge whose
// money is not in flight (scheduled, declined or failed; the caller
// checked): its next attempt is for the rest. Returns ErrStale when the
// charge is in flight or nothing is left to charge (the caller voids it).
func (s *Store) RepriceOutside(ctx context.Context, tx pgx.Tx, id uuid.UUID, paid int64, now time.Time) error {
	tag, err := tx.Exec(ctx, `UPDATE charges SET amount = amount - ($2 - paid_outside),
			full_amount = full_amount - ($2 - paid_outside), paid_outside = $2, updated_at = $3
		WHERE id = $1 AND status = ANY($4) AND $2 > paid_outside AND amount - ($2 - paid_outside) > 0`,
		id, paid, now, texts([]Status{Scheduled, Declined, Failed}))
	if err != nil {
		return fmt.Errorf("reprice charge %s for payments outside rebill: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrStale
	}
	return nil
}

// OwnPayments tells what rebill itself paid through the charges ids (the
// charges of every copy of one bill, across enrollments): captured is what
// the succeeded ones captured, and inFlight whether one may hold money
// whose fate is not settled (a hold, a capture under way, an unknown
// outcome, a review). A housing source's paid_amount reports what the
// supplier received, rebill's own payments included: what was paid
// outside rebill is the rest.
func OwnPayments(ctx context.Context, db DBTX, ids []uuid.UUID) (captured int64, inFlight bool, err error) {
	err = db.QueryRow(ctx, `SELECT coalesce(sum(amount) FILTER (WHERE status = $2), 0)::bigint,
			coalesce(bool_or(NOT (status = ANY($3))), false)
		FROM charges WHERE id = ANY($1)`,
		ids, string(Succeeded), texts([]Status{Scheduled, Declined, Failed, Voided, Succeeded})).Scan(&captured, &inFlight)
	if err != nil {
		return 0, false, fmt.Errorf("rebill's own payments of a bill: %w", err)
	}
	return captured, inFlight, nil
}
