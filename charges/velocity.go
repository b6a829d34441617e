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
	"github.com/riverqueue/river/rivertype"

	"github.com/rebill/rebill/platform/metrics"
)

// DeclineLimit is the declines-per-day velocity limit (card testing). A
// charge it guards reserves a slot of its customer's day before its
// authorize is sent: declines recorded plus authorizes in flight never
// exceed the limit, however many charges run at once on however many
// nodes, except that a card an earlier first attempt of the customer
// approved (lately) takes its slots from a larger pool of its own until
// it declines. A slot is tied to the charge's attempt (see slotHolder).
type DeclineLimit interface {
	// Reserve asks for a slot for holder before its authorize is sent
	// with card. mayHaveSent grants it whatever the count: the attempt may
	// already have been sent, which holding it back would not undo.
	Reserve(ctx context.Context, customerID string, card Card, holder string, mayHaveSent bool) (SlotAnswer, error)
	// Wait asks again, in tx, for a slot Reserve found in flight, and when
	// there is still none makes job (the attempt's River job, which tx
	// snoozes) wait for one: a slot given back wakes it.
	Wait(ctx context.Context, tx pgx.Tx, customerID string, card Card, holder string, job int64) (SlotAnswer, error)
	// Release gives the slot of an attempt that did not decline back, in
	// a statement shared with other runs'; one that holds none changes
	// nothing. approved: the gateway approved it, so card is known good.
	Release(ctx context.Context, customerID string, card Card, holder string, approved bool) error
	// ReleaseTx is Release in the transaction that records the outcome.
	ReleaseTx(ctx context.Context, tx pgx.Tx, customerID string, card Card, holder string, approved bool) error
	// Count records one decline of card, in the transaction that records
	// it, so that a stale rerun of the step counts nothing; the attempt's
	// slot, if it holds one, becomes the decline, and card is no longer
	// known good.
	Count(ctx context.Context, tx pgx.Tx, customerID string, card Card, holder string) error
}

// Card is the card an attempt is sent with, as the declines limit tells
// cards apart: its gateway and its token as the charge stores it (a vault
// reference, or a token in clear written before the vault). The limit
// keeps a keyed digest of it, never the token.
type Card struct {
	Gateway string
	Token   string
}

// cardOf is the card of c's current attempt.
func cardOf(c Charge) Card { return Card{Gateway: c.Gateway, Token: c.token} }

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
	if err := p.Declines.Count(ctx, tx, c.CustomerID, cardOf(c), slotHolder(c)); err != nil {
		return fmt.Errorf("count decline of charge %s: %w", c.ID, err)
	}
	return nil
}

// releaseSlot gives back the slot of c's attempt, on its own (its
// outcome is already recorded); approved: the gateway approved it. A
// failure only logs: the slot is then held until the sweep gives it back,
// which delays the customer's other charges but never charges anyone.
func (p *Pipeline) releaseSlot(ctx context.Context, c Charge, approved bool) {
	if !p.guarded(c) {
		return
	}
	if err := p.Declines.Release(ctx, c.CustomerID, cardOf(c), slotHolder(c), approved); err != nil {
		p.Logger.Warn().Err(err).Str("charge_id", c.ID.String()).Msg("declines slot not given back: held until the day ends")
	}
}

// releaseSlotTx gives back the slot of c's attempt in tx, which records
// its outcome; approved: the gateway approved it.
func (p *Pipeline) releaseSlotTx(ctx context.Context, tx pgx.Tx, c Charge, approved bool) error {
	if !p.guarded(c) {
		return nil
	}
	if err := p.Declines.ReleaseTx(ctx, tx, c.CustomerID, cardOf(c), slotHolder(c), approved); err != nil {
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
	return p.releaseSlotTx(ctx, tx, c, false)
}

// reasonSlotsInFlight is the failure_code of a charge waiting for a slot.
const reasonSlotsInFlight = string(metrics.RetrySlotsInFlight)

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
	answer, err := p.Declines.Reserve(ctx, c.CustomerID, cardOf(c), slotHolder(c), mayHaveSent)
	if err != nil {
		return false, fmt.Errorf("%s: reserve a declines slot for charge %s: %w", s.stage, c.ID, err)
	}
	if answer.Verdict == SlotsInFlight {
		return p.waitForSlot(ctx, s, c)
	}
	if answer.Verdict == SlotGranted {
		return true, nil
	}
	return false, p.heldForDeclines(ctx, s, c)
}

// slotWaitMax bounds one wait for a slot.
const slotWaitMax = 30 * time.Second

// waitForSlot makes c's attempt wait for a slot: in one transaction it
// asks again (a slot may have freed since), joins the customer's waiters,
// marks the charge waiting and snoozes the step's job, so that a slot
// given back after it wakes the job at once (a wake-up that met the job
// still running would be lost). The job's own wake-up time is a fallback
// for a waker that died: it grows from about a second to slotWaitMax,
// jittered, and never outlasts the day, whose end drops the slots.
// Reports whether the step may send the attempt after all.
func (p *Pipeline) waitForSlot(ctx context.Context, s stageRun, c Charge) (bool, error) {
	ceiling := min(slotWaitMax, time.Second<<min(max(s.run-1, 0), 5))
	delay := ceiling/2 + time.Duration(rand.Int64N(int64(ceiling/2)+1))
	var answer SlotAnswer
	err := pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
		var err error
		if answer, err = p.Declines.Wait(ctx, tx, c.CustomerID, cardOf(c), slotHolder(c), s.job); err != nil || answer.Verdict != SlotsInFlight {
			return err
		}
		delay = max(min(delay, answer.DayLeft), time.Millisecond)
		now := p.Clock.Now()
		if err := markWaiting(ctx, tx, c.ID, c.AttemptCount, c.Status, now.Add(delay), reasonSlotsInFlight, now); err != nil {
			return err
		}
		return snoozeJob(ctx, tx, s.job, delay)
	})
	if err != nil {
		return false, fmt.Errorf("%s: wait for a declines slot for charge %s: %w", s.stage, c.ID, err)
	}
	switch answer.Verdict {
	case SlotGranted:
		return true, nil
	case SlotsInFlight:
		metrics.Retry(s.stage, metrics.RetrySlotsInFlight)
		return false, river.JobSnooze(delay)
	default:
		return false, p.heldForDeclines(ctx, s, c)
	}
}

// snoozeJob snoozes the running job id for delay in tx, as River snoozes
// a job whose Work returns river.JobSnooze (the attempt given back, one
// snooze more in its metadata), but in the transaction that makes it a
// waiter; its metadata also counts the waits for a slot (slot_waits)
// apart from the waits for a gateway that did nothing. It is made available at once with its time ahead, which River
// fetches once the time comes, so that no scheduler run stands between.
// The step then returns river.JobSnooze(delay) all the same: River's own
// snooze finds the job no longer running and only writes the same count
// of snoozes again. A job that is not running (a test worker's) is left
// to River's snooze.
func snoozeJob(ctx context.Context, tx pgx.Tx, id int64, delay time.Duration) error {
	if id == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `UPDATE river_job SET state = $3::text::river_job_state, scheduled_at = now() + $2::interval, attempt = attempt - 1,
			metadata = metadata || jsonb_build_object('snoozes', coalesce((metadata ->> 'snoozes')::int, 0) + 1,
				'slot_waits', coalesce((metadata ->> 'slot_waits')::int, 0) + 1)
		WHERE id = $1 AND state::text = $4`, id, delay, string(rivertype.JobStateAvailable), string(rivertype.JobStateRunning))
	if err != nil {
		return fmt.Errorf("snooze job %d: %w", id, err)
	}
	return nil
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
