package charges

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/platform/metrics"
)

// maxOutsideChecks bounds the checks for payments outside rebill one
// authorize run makes; past it the job fails and River runs it again.
const maxOutsideChecks = 3

// authorizeFrom are the statuses an authorize job's step begins from: a
// scheduled charge, or one a run before this one began.
var authorizeFrom = []Status{Scheduled, Authorizing}

// Authorize runs an authorize job.
func (p *Pipeline) Authorize(ctx context.Context, job *river.Job[AuthorizeArgs]) error {
	s := newStep("authorize", job, job.Args.ChargeID, job.Args.Attempt)
	defer metrics.TimeStage(s.stage)()
	c, g, err := p.beginAuthorize(ctx, s)
	// A fine's attempt is checked for payments outside rebill before it
	// starts; a bill source's report between the check and the start
	// undoes the check (Store.SourceReported), which is then made again.
	for tries := 1; errors.Is(err, ErrStale); tries++ {
		checked, cerr := p.checkOutside(ctx, s)
		if cerr != nil {
			return cerr
		}
		if !checked {
			break
		}
		if tries == maxOutsideChecks {
			return fmt.Errorf("authorize: charge %s: checked for payments outside rebill %d times, undone each time", s.chargeID, tries)
		}
		c, g, err = p.beginAuthorize(ctx, s)
	}
	if errors.Is(err, ErrStale) {
		return p.authorizeNotWanted(ctx, s)
	}
	if g == nil {
		return err
	}
	if send, err := p.takeSlot(ctx, s, c, job.Attempt > 1); !send || err != nil {
		return err
	}
	res, err := p.call(ctx, c, gateway.OpAuthorize, func(ctx context.Context) (gateway.Result, error) {
		return g.Authorize(ctx, p.request(c, gateway.OpAuthorize))
	})
	return p.afterAuthorize(ctx, s, c, []Status{Authorizing}, res, err)
}

// authorizeNotWanted handles an authorize step whose guard failed. Mostly
// the step is stale; but a rerun of an attempt that may already have been
// sent, whose subscription was cancelled since, is looked up instead of
// sent again: if the gateway placed the hold, it is voided. And a rerun
// that finds its own attempt capturing inline (the run died or waited
// after the capture's "about to call") sends the same capture again.
func (p *Pipeline) authorizeNotWanted(ctx context.Context, s stageRun) error {
	c, err := Get(ctx, p.Pool, s.chargeID)
	if err == nil {
		if held, err := p.heldBack(ctx, s, c); held || err != nil {
			return err
		}
	}
	if err == nil && p.CaptureInline && c.Status == Capturing && c.AttemptCount == s.attempt {
		s.stage = "capture"
		return p.captureStep(ctx, s)
	}
	if err == nil && c.Status == Scheduled && c.RegistryUIN != "" && p.Postings == nil && c.AttemptCount == s.attempt && !c.VoidRequested {
		return p.waitForRegistry(ctx, s, c)
	}
	if err == nil && c.Status == Scheduled && c.RegistryUIN != "" && c.AttemptCount == s.attempt && !c.VoidRequested && !c.ConfirmationRequired {
		if waiting, err := p.waitForPostings(ctx, s, c); waiting || err != nil {
			return err
		}
	}
	if err == nil && c.Status == Scheduled && c.AttemptCount == s.attempt && !c.VoidRequested && !c.ConfirmationRequired {
		// Still wanted, and nothing above holds it back any more: what
		// failed the guard changed since (an earlier attempt's posting
		// settled between the guard and the look). Finishing here would
		// leave the attempt with no job to start it.
		metrics.Retry(s.stage, metrics.RetryPostingOpen)
		return river.JobSnooze(p.Retry.Delay(max(s.run, 1)))
	}
	if err != nil || c.Status != Authorizing || !c.VoidRequested || c.AttemptCount != s.attempt {
		metrics.StageRuns.WithLabelValues(s.stage, "stale").Inc()
		return err
	}
	return p.toLookup(ctx, s, c, gateway.OpAuthorize, "cancelled while the authorize may have been sent")
}

// afterAuthorize continues from an authorize answer (or a lookup of one)
// for a charge in one of from.
func (p *Pipeline) afterAuthorize(ctx context.Context, s stageRun, c Charge, from []Status, res gateway.Result, callErr error) error {
	if callErr != nil {
		return p.technicalFailure(ctx, s, c, gateway.OpAuthorize, callErr)
	}
	now := p.Clock.Now()
	switch {
	case res.Status == gateway.StatusSucceeded:
		metrics.StageRuns.WithLabelValues(s.stage, "authorized").Inc()
		if capturing, err := p.holdThenCapture(ctx, s, c, from, res); !errors.Is(err, ErrStale) {
			if err != nil {
				return fmt.Errorf("%s: record outcome: %w", s.stage, err)
			}
			p.releaseSlot(ctx, c, true)
			return p.captureInline(ctx, s, capturing)
		}
		var capturing Charge // set when this run goes on to capture
		err := p.record(ctx, s, func(tx pgx.Tx) error {
			next, err := oneMoved(p.Store.move(ctx, tx, transition{from: from, to: Authorized,
				set: `authorization_ref = $1, authorized_at = $2, unknown_phase = NULL, failure_code = NULL`}, now,
				byID(c.ID, c.AttemptCount, ""), res.Reference, now))
			if err != nil {
				return err
			}
			p.transitioned(next, "")
			if err := p.releaseSlotTx(ctx, tx, c, true); err != nil {
				return err
			}
			client := river.ClientFromContext[pgx.Tx](ctx)
			switch {
			case next.VoidRequested:
				_, err = client.InsertTx(ctx, tx, VoidArgs{ChargeID: c.ID, Attempt: c.AttemptCount}, nil)
			case next.RegistryUIN != "" && p.Postings != nil:
				// A fine is posted to the registry between hold and
				// capture: its capture job comes after the posting.
				err = p.Postings.Held(ctx, tx, next)
			case next.RegistryUIN != "":
				// A fine held with no registry to post it to (authorized
				// before the registry was removed): never captured.
				next, err = p.Store.HoldRefused(ctx, tx, c.ID, c.AttemptCount, ReviewRegistryNotConfigured, now)
				if err == nil {
					p.transitioned(next, "a fine was held but no payment registry is configured to post it to")
				}
			case p.CaptureInline && !s.lookingUp:
				// The capture's "about to call", in the transaction that
				// read the charge's void flag under its row lock.
				next, err = oneMoved(p.Store.move(ctx, tx, transition{from: []Status{Authorized}, to: Capturing, where: postedSQL}, now,
					byID(c.ID, c.AttemptCount, "")))
				if err == nil {
					p.transitioned(next, "")
					capturing = next
				}
			default:
				_, err = client.InsertTx(ctx, tx, CaptureArgs{ChargeID: c.ID, Attempt: c.AttemptCount}, nil)
			}
			return err
		})
		if err != nil || capturing.ID == uuid.Nil {
			return err
		}
		return p.captureInline(ctx, s, capturing)
	case res.Status == gateway.StatusDeclined:
		metrics.StageRuns.WithLabelValues(s.stage, "declined").Inc()
		return p.record(ctx, s, func(tx pgx.Tx) error { return p.declined(ctx, tx, c, from, res.DeclineCode, res.Hard, now) })
	default: // a request the gateway refused: retrying it cannot help
		metrics.StageRuns.WithLabelValues(s.stage, "failed").Inc()
		code := res.DeclineCode
		if code == "" {
			code = "gateway_refused"
		}
		return p.record(ctx, s, func(tx pgx.Tx) error { return p.declined(ctx, tx, c, from, code, true, now) })
	}
}

// holdThenCapture records the hold and the capture's "about to call" in one
// guarded statement (shared with other runs'), when nothing stands between them: no void requested
// (read under the row's lock by the same statement), no registry posting,
// the capture inline. ErrStale sends the caller to the general path, which
// sorts out why (a void, a fine, another run that got there first).
func (p *Pipeline) holdThenCapture(ctx context.Context, s stageRun, c Charge, from []Status, res gateway.Result) (Charge, error) {
	if !p.CaptureInline || s.lookingUp || (c.RegistryUIN != "" && p.Postings != nil) || !slices.Equal(from, []Status{Authorizing}) {
		return Charge{}, ErrStale
	}
	next, err := p.batched().holdThenCapture.do(ctx, &guardedMove{id: c.ID, attempt: c.AttemptCount, reference: res.Reference})
	if err != nil {
		return Charge{}, err
	}
	held := next
	held.Status = Authorized
	p.transitioned(held, "")
	p.transitioned(next, "")
	return next, nil
}

// heldAndCapturing is the move of holdThenCapture, whose arguments are
// the time ($1) and, for each charge, its hold's reference.
var heldAndCapturing = transition{from: []Status{Authorizing}, to: Capturing, where: "NOT void_requested AND registry_uin IS NULL",
	set: "authorization_ref = b.bnote, authorized_at = $1, unknown_phase = NULL, failure_code = NULL"}

// declined records an attempt the issuer or gateway refused. What follows
// depends on the subscription as it is now (locked first):
//   - cancelled meanwhile: the charge is voided, nothing was held;
//   - its card changed while this attempt was in flight: the next attempt
//     starts at once with the new card;
//   - unpaid (its dunning already ended): the charge fails and waits for a
//     new card;
//   - otherwise a hard decline fails the charge and a soft one is dunned on
//     the service clock until the schedule is exhausted.
func (p *Pipeline) declined(ctx context.Context, tx pgx.Tx, c Charge, from []Status, code string, hard bool, now time.Time) error {
	owner := p.Owners.Of(c)
	sub, err := owner.Lock(ctx, tx, c.OwnerID())
	if err != nil {
		return err
	}
	if err := p.countDecline(ctx, tx, c); err != nil {
		return err
	}
	current, err := Get(ctx, tx, c.ID)
	if err != nil {
		return err
	}
	if sub.Cancelled || current.VoidRequested {
		return p.voidedNotWanted(ctx, tx, c, from, now)
	}
	first := now
	if c.FirstDeclinedAt != nil {
		first = *c.FirstDeclinedAt
	}
	unpaid := sub.UnpaidSince != nil
	if unpaid && !c.PeriodStart.Before(*sub.UnpaidSince) {
		next, err := oneMoved(p.Store.move(ctx, tx, transition{from: from, to: Voided,
			set: `failure_code = $1, unknown_phase = NULL`}, now,
			byID(c.ID, c.AttemptCount, ""), "subscription_unpaid"))
		if err == nil {
			p.transitioned(next, "")
		}
		return err
	}
	if (sub.Token != c.token || sub.Gateway != c.Gateway) && !unpaid {
		declined, err := oneMoved(p.Store.move(ctx, tx, transition{from: from, to: Declined,
			set: `failure_code = $1, first_declined_at = $2, next_attempt_at = $3, unknown_phase = NULL`}, now,
			byID(c.ID, c.AttemptCount, ""), code, first, now))
		if err != nil {
			return err
		}
		p.transitioned(declined, "")
		if err := owner.ChargeDeclined(ctx, tx, c.OwnerID()); err != nil {
			return err
		}
		retry, err := oneMoved(p.Store.move(ctx, tx, transition{from: []Status{Declined}, to: Scheduled,
			set: newAttempt + `, gateway = $3, pm_token = $4, first_declined_at = NULL`}, now,
			byID(c.ID, c.AttemptCount, ""), now, now, sub.Gateway, sub.Token))
		if err != nil {
			return err
		}
		p.transitioned(retry, "")
		_, err = river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx,
			AuthorizeArgs{ChargeID: retry.ID, Attempt: retry.AttemptCount}, nil)
		return err
	}
	at, dun := p.Dunning.NextAttempt(first, c.AttemptCount)
	if sub.NextAttempt != nil {
		at, dun = sub.NextAttempt(c, first)
	}
	if hard || !dun || unpaid {
		failed, err := oneMoved(p.Store.move(ctx, tx, transition{from: from, to: Failed,
			set: `failure_code = $1, unknown_phase = NULL`}, now,
			byID(c.ID, c.AttemptCount, ""), code))
		if err != nil {
			return err
		}
		p.transitioned(failed, fmt.Sprintf("declined %s (hard: %t, dunning exhausted: %t)", code, hard, !dun))
		if unpaid {
			return nil
		}
		return p.Store.Failed(ctx, tx, owner, failed, now)
	}
	next, err := oneMoved(p.Store.move(ctx, tx, transition{from: from, to: Declined,
		set: `failure_code = $1, first_declined_at = $2, next_attempt_at = $3, unknown_phase = NULL`}, now,
		byID(c.ID, c.AttemptCount, ""), code, first, at))
	if err != nil {
		return err
	}
	p.transitioned(next, "")
	return owner.ChargeDeclined(ctx, tx, c.OwnerID())
}
