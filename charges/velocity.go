package charges

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/platform/metrics"
)

// DeclineLimit is the declines-per-day velocity limit (card testing). A
// charge it guards reserves a slot of its customer's day before its
// authorize is sent: declines recorded plus authorizes in flight never
// exceed the limit, however many charges run at once on however many
// nodes. A slot is tied to the charge's attempt (see slotHolder).
type DeclineLimit interface {
	// Reserve asks for a slot for holder before its authorize is sent.
	// mayHaveSent grants it whatever the count: the attempt may already
	// have been sent, which holding it back would not undo.
	Reserve(ctx context.Context, customerID, holder string, mayHaveSent bool) (SlotAnswer, error)
	// Release gives the slot of an approved attempt back, in a statement
	// shared with other runs'; one that holds none changes nothing.
	Release(ctx context.Context, customerID, holder string) error
	// ReleaseTx is Release in the transaction that records the approval.
	ReleaseTx(ctx context.Context, tx pgx.Tx, customerID, holder string) error
	// Count records one decline, in the transaction that records it, so
	// that a stale rerun of the step counts nothing; the attempt's slot,
	// if it holds one, becomes the decline.
	Count(ctx context.Context, tx pgx.Tx, customerID, holder string) error
}

// SlotVerdict answers a charge's request for a slot.
type SlotVerdict int

const (
	// SlotGranted: the authorize may be sent.
	SlotGranted SlotVerdict = iota + 1
	// SlotsInFlight: the slots left are held by authorizes in flight; the
	// charge waits for an approval to give one back.
	SlotsInFlight
	// DeclinesReached: the customer's recorded declines of the day reached
	// the limit; the charge goes to review.
	DeclinesReached
)

// SlotAnswer is a verdict and how long the day it was given in lasts
// (its slots are dropped then: a wait never lasts longer).
type SlotAnswer struct {
	Verdict SlotVerdict
	DayLeft time.Duration
}

// slotHolder names c's current attempt as the holder of a slot: a rerun
// of the same attempt (after a crash, a snooze) reuses its slot, and
// another attempt is another call.
func slotHolder(c Charge) string {
	return fmt.Sprintf("%s/%d", c.ID, c.AttemptCount)
}

// guarded tells whether the declines limit guards c's current attempt: a
// subscription charge's first attempt. Dunning attempts, card-change
// retries and people's retries are not held (their declines count), and
// bills never are: a fine must not miss its discount deadline for it.
func (p *Pipeline) guarded(c Charge) bool {
	return p.Declines != nil && c.AttemptCount == 1 && c.EnrollmentID == uuid.Nil
}

// countDecline records a decline against the limit (see DeclineLimit).
func (p *Pipeline) countDecline(ctx context.Context, tx pgx.Tx, c Charge) error {
	if p.Declines == nil {
		return nil
	}
	if err := p.Declines.Count(ctx, tx, c.CustomerID, slotHolder(c)); err != nil {
		return fmt.Errorf("count decline of charge %s: %w", c.ID, err)
	}
	return nil
}

// releaseSlot gives back the slot of c's approved attempt, on its own
// (the approval is already recorded). A failure only logs: the slot is
// then held until the day ends, which delays the customer's other charges
// but never charges anyone.
func (p *Pipeline) releaseSlot(ctx context.Context, c Charge) {
	if !p.guarded(c) {
		return
	}
	if err := p.Declines.Release(ctx, c.CustomerID, slotHolder(c)); err != nil {
		p.Logger.Warn().Err(err).Str("charge_id", c.ID.String()).Msg("declines slot not given back: held until the day ends")
	}
}

// releaseSlotTx gives back the slot of c's approved attempt in tx, which
// records the approval.
func (p *Pipeline) releaseSlotTx(ctx context.Context, tx pgx.Tx, c Charge) error {
	if !p.guarded(c) {
		return nil
	}
	if err := p.Declines.ReleaseTx(ctx, tx, c.CustomerID, slotHolder(c)); err != nil {
		return fmt.Errorf("give back the declines slot of charge %s: %w", c.ID, err)
	}
	return nil
}

// slotInFlight are the statuses in which an attempt's authorize may
// still be in flight: its outcome, still to be recorded, settles its slot.
var slotInFlight = []Status{Authorizing, Unknown}

// EndedAttempts returns, of the slot holders given (see slotHolder), those
// whose attempt is no longer in flight: its charge moved on to another
// status or attempt, or the holder names no charge. The sweep of the
// declines limit gives their slots back.
func EndedAttempts(ctx context.Context, db DBTX, holders []string) ([]string, error) {
	ids := make([]uuid.UUID, 0, len(holders))
	attempts := make([]int32, 0, len(holders))
	named := make([]string, 0, len(holders))
	var ended []string
	for _, h := range holders {
		id, n, ok := strings.Cut(h, "/")
		chargeID, err := uuid.Parse(id)
		attempt, aerr := strconv.ParseInt(n, 10, 32)
		if !ok || err != nil || aerr != nil {
			ended = append(ended, h)
			continue
		}
		ids, attempts, named = append(ids, chargeID), append(attempts, int32(attempt)), append(named, h)
	}
	if len(named) == 0 {
		return ended, nil
	}
	rows, err := db.Query(ctx, `SELECT h.holder FROM unnest($1::uuid[], $2::int[], $3::text[]) AS h(id, attempt, holder)
		WHERE NOT EXISTS (SELECT 1 FROM charges c WHERE c.id = h.id AND c.attempt_count = h.attempt AND c.status = ANY($4))`,
		ids, attempts, named, texts(slotInFlight))
	if err != nil {
		return nil, fmt.Errorf("attempts no longer in flight: %w", err)
	}
	gone, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("attempts no longer in flight: %w", err)
	}
	return append(ended, gone...), nil
}

// AttemptEnded settles the declines slot of c's current attempt, in tx,
// when a person ends the attempt: a resolution as failed counts as the
// day's decline (the person's verdict stands for the gateway's), unless
// the limit held the attempt back before it was sent; a resolution as
// succeeded, or a person's retry, gives the slot back. One that holds no
// slot changes nothing.
func (p *Pipeline) AttemptEnded(ctx context.Context, tx pgx.Tx, c Charge, outcome Status) error {
	if !p.guarded(c) {
		return nil
	}
	if outcome == Failed && c.ReviewCode != ReviewDeclinesLimit {
		return p.countDecline(ctx, tx, c)
	}
	return p.releaseSlotTx(ctx, tx, c)
}

// reasonSlotsInFlight is the failure_code of a charge waiting for a slot.
const reasonSlotsInFlight = string(metrics.RetrySlotsInFlight)

// slotWaitMax bounds one wait for a slot.
const slotWaitMax = 30 * time.Second

// takeSlot reserves a slot of the declines limit for c's attempt, right
// before its authorize is sent, and reports whether the step may send it.
// Held back, the charge either waits (its job snoozes) while authorizes
// in flight hold the slots left, or goes to review once the day's
// recorded declines reached the limit. A run that may already have sent
// the attempt (River retries it: a run failed or died after its "about to
// call") is never held back. One that went to review sent nothing, so
// review need not look for a hold.
func (p *Pipeline) takeSlot(ctx context.Context, s stageRun, c Charge, mayHaveSent bool) (bool, error) {
	if !p.guarded(c) || c.Status != Authorizing {
		return true, nil
	}
	answer, err := p.Declines.Reserve(ctx, c.CustomerID, slotHolder(c), mayHaveSent)
	if err != nil {
		return false, fmt.Errorf("%s: reserve a declines slot for charge %s: %w", s.stage, c.ID, err)
	}
	switch answer.Verdict {
	case SlotGranted:
		return true, nil
	case SlotsInFlight:
		return false, p.waitForSlot(ctx, s, c, answer.DayLeft)
	default:
		return false, p.heldForDeclines(ctx, s, c)
	}
}

// waitForSlot snoozes a step whose customer's slots are all held by
// authorizes in flight; the charge shows next_attempt_at and why. The
// waits grow from about a second (an authorize takes about that long) to
// slotWaitMax, jittered so that waiting charges do not come back
// together, and never outlast the day, whose end drops the slots.
func (p *Pipeline) waitForSlot(ctx context.Context, s stageRun, c Charge, dayLeft time.Duration) error {
	ceiling := min(slotWaitMax, time.Second<<min(max(s.run-1, 0), 5))
	delay := ceiling/2 + time.Duration(rand.Int64N(int64(ceiling/2)+1))
	delay = max(min(delay, dayLeft), time.Millisecond)
	metrics.Retry(s.stage, metrics.RetrySlotsInFlight)
	now := p.Clock.Now()
	if err := markWaiting(ctx, p.Pool, c.ID, c.AttemptCount, c.Status, now.Add(delay), reasonSlotsInFlight, now); err != nil {
		return err
	}
	return river.JobSnooze(delay)
}

// heldForDeclines sends a charge to review instead of the gateway: its
// customer reached the declines limit. A person's retry starts a new
// attempt, which the limit does not hold, so that a retry approves the
// charge.
func (p *Pipeline) heldForDeclines(ctx context.Context, s stageRun, c Charge) error {
	metrics.VelocityLimited.WithLabelValues("declines").Inc()
	metrics.StageRuns.WithLabelValues(s.stage, "review").Inc()
	now := p.Clock.Now()
	return p.record(ctx, s, func(tx pgx.Tx) error {
		next, err := oneMoved(p.Store.move(ctx, tx, transition{from: []Status{Authorizing}, to: RequiresReview,
			set: reviewSet}, now,
			byID(c.ID, c.AttemptCount, ""), ReviewDeclinesLimit.Sentence(), string(ReviewDeclinesLimit)))
		if err == nil {
			p.transitioned(next, "the customer's declines reached the limit of the day")
		}
		return err
	})
}
