package charges

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/internal/clock"
	"github.com/rebill/rebill/internal/metrics"
)

// Subscription is what a charge's outcome needs of its subscription.
type Subscription struct {
	// Gateway and Token are the subscription's current payment method.
	Gateway string
	Token   string
	// UnpaidSince is set while the subscription is unpaid: its dunning
	// ended then. Charges of periods that began since are not owed; older
	// ones wait for a new card.
	UnpaidSince *time.Time
	// Cancelled: nothing more may be taken.
	Cancelled bool
}

// Subscriptions is what the pipeline tells the subscription a charge
// bills, inside the transaction that records the charge's outcome.
type Subscriptions interface {
	// Lock locks the subscription's row until tx ends and returns it.
	// Outcomes lock the subscription before the charge, the order every
	// subscription event uses too, so the two serialise without deadlock
	// and an outcome sees any event that committed before it.
	Lock(ctx context.Context, tx pgx.Tx, id uuid.UUID) (Subscription, error)
	// ChargePaid: a charge succeeded (a past-due subscription may recover).
	ChargePaid(ctx context.Context, tx pgx.Tx, c Charge) error
	// ChargeDeclined: a soft decline; dunning will retry (past due).
	ChargeDeclined(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID) error
	// ChargeFailed: a hard decline or dunning exhausted (unpaid); the
	// subscription's dunning ended when c's last attempt was due.
	ChargeFailed(ctx context.Context, tx pgx.Tx, c Charge) error
}

// Pipeline runs the gateway steps of charges. Each step persists that it is
// about to call the gateway (a guarded move), calls it holding no
// transaction or connection, and records the outcome together with the
// next step's job in one transaction.
type Pipeline struct {
	Pool          *pgxpool.Pool
	Gateways      *Gateways
	Subscriptions Subscriptions
	Clock         clock.Clock
	Dunning       Dunning
	// CallTimeout bounds every gateway call; past it the outcome is unknown.
	CallTimeout time.Duration
	// Retry spaces the waits of a step whose gateway answered that it did
	// nothing (503, refused connection): such a step waits and tries again
	// with the same key without spending a River attempt.
	Retry RetryPolicy
	// UnavailableFor bounds those waits (in real time, from the job's
	// creation); past it the charge goes to review.
	UnavailableFor time.Duration
	Logger         zerolog.Logger
}

// stageRun is one run of a pipeline stage's job: the charge it works on
// and what River will do if it fails.
type stageRun struct {
	stage     string
	chargeID  uuid.UUID
	attempt   int
	run       int       // how many times the job has run: River's attempt plus its snoozes
	final     bool      // River will not retry this job again
	reconcile bool      // the step is a reconcile job
	created   time.Time // when River created the job (real time)
}

func newStep[T river.JobArgs](stage string, job *river.Job[T], chargeID uuid.UUID, attempt int) stageRun {
	return stageRun{stage: stage, chargeID: chargeID, attempt: attempt, run: job.Attempt + snoozes(job.Metadata),
		final: job.Attempt >= job.MaxAttempts, created: job.CreatedAt}
}

// snoozes is how many times River snoozed a job. A snooze gives the job's
// attempt back (job.Attempt does not count it) and counts itself in the
// job's metadata under "snoozes".
func snoozes(metadata []byte) int {
	var m struct {
		Snoozes int `json:"snoozes"`
	}
	if json.Unmarshal(metadata, &m) != nil {
		return 0
	}
	return m.Snoozes
}

// record runs fn, which records a step's outcome and enqueues the next
// step, in one transaction. The job itself is completed by River after it
// returns (in River's batches, not in this transaction): if the process
// dies in between, the job runs again, finds the charge already moved on
// (every move is guarded by the status it expects) and does nothing.
func (p *Pipeline) record(ctx context.Context, s stageRun, fn func(tx pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, p.Pool, fn)
	if errors.Is(err, ErrStale) {
		return nil // another run already recorded this step
	}
	if err != nil {
		return fmt.Errorf("%s: record outcome: %w", s.stage, err)
	}
	return nil
}

// transitioned counts a move and logs the ones people look for.
func (p *Pipeline) transitioned(c Charge, reason string) {
	metrics.ChargeTransitions.WithLabelValues(string(c.Status)).Inc()
	switch c.Status {
	case Unknown, RequiresReview, Failed:
		p.Logger.Warn().Str("charge_id", c.ID.String()).Str("subscription_id", c.SubscriptionID.String()).
			Str("gateway", c.Gateway).Int("attempt", c.AttemptCount).Str("status", string(c.Status)).
			Str("unknown_phase", string(c.UnknownOp)).Str("failure_code", c.FailureCode).Str("reason", reason).
			Msg("charge status")
	}
}

// call runs one gateway call under the call timeout and logs its outcome:
// ids, gateway, op, attempt, outcome, latency; never the token.
func (p *Pipeline) call(ctx context.Context, c Charge, op gateway.Op, fn func(ctx context.Context) (gateway.Result, error)) (gateway.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, p.CallTimeout)
	defer cancel()
	start := time.Now()
	res, err := fn(ctx)
	outcome := string(res.Status)
	switch {
	case errors.Is(err, ErrCircuitOpen):
		outcome = "circuit_open"
	case errors.Is(err, gateway.ErrUnavailable):
		outcome = "unavailable"
	case errors.Is(err, gateway.ErrUnknownOutcome):
		outcome = "unknown"
	case errors.Is(err, gateway.ErrNotFound):
		outcome = "not_found"
	case err != nil:
		outcome = "error"
	}
	p.Logger.Info().Str("charge_id", c.ID.String()).Str("subscription_id", c.SubscriptionID.String()).
		Str("gateway", c.Gateway).Str("op", string(op)).Int("attempt", c.AttemptCount).
		Str("outcome", outcome).Int64("latency_ms", time.Since(start).Milliseconds()).
		Str("decline_code", res.DeclineCode).Msg("gateway call")
	return res, err
}

// Authorize runs an authorize job.
func (p *Pipeline) Authorize(ctx context.Context, job *river.Job[AuthorizeArgs]) error {
	s := newStep("authorize", job, job.Args.ChargeID, job.Args.Attempt)
	defer metrics.TimeStage(s.stage)()
	c, g, err := p.begin(ctx, s, []Status{Scheduled, Authorizing}, Authorizing)
	if errors.Is(err, ErrStale) {
		return p.authorizeNotWanted(ctx, s)
	}
	if g == nil {
		return err
	}
	res, err := p.call(ctx, c, gateway.OpAuthorize, func(ctx context.Context) (gateway.Result, error) {
		return g.Authorize(ctx, p.request(c, gateway.OpAuthorize))
	})
	return p.afterAuthorize(ctx, s, c, []Status{Authorizing}, res, err)
}

// begin persists that the step is about to call the gateway, moving the
// charge from one of from to to only while it is still wanted (no void
// requested: the one guarded statement that subscription events race),
// and finds its gateway. Returns ErrStale when the guard failed; a nil
// gateway with a nil error means the charge went to review (its gateway is
// not configured).
func (p *Pipeline) begin(ctx context.Context, s stageRun, from []Status, to Status) (Charge, gateway.Gateway, error) {
	c, err := moveWhere(ctx, p.Pool, s.chargeID, s.attempt, from, to, p.Clock.Now(), "NOT void_requested")
	if err != nil {
		return Charge{}, nil, err
	}
	p.transitioned(c, "")
	g, err := p.Gateways.Gateway(c.Gateway)
	if err != nil {
		return c, nil, p.review(ctx, s, c, err.Error())
	}
	return c, g, nil
}

// authorizeNotWanted handles an authorize step whose guard failed. Mostly
// the step is stale; but a rerun of an attempt that may already have been
// sent, whose subscription was cancelled since, is looked up instead of
// sent again: if the gateway placed the hold, it is voided.
func (p *Pipeline) authorizeNotWanted(ctx context.Context, s stageRun) error {
	c, err := Get(ctx, p.Pool, s.chargeID)
	if err != nil || c.Status != Authorizing || !c.VoidRequested || c.AttemptCount != s.attempt {
		metrics.StageRuns.WithLabelValues(s.stage, "stale").Inc()
		return err
	}
	return p.toReconcile(ctx, s, c, gateway.OpAuthorize, "cancelled while the authorize may have been sent")
}

func (Pipeline) request(c Charge, op gateway.Op) gateway.Request {
	return gateway.Request{IdempotencyKey: c.GatewayKey(op), Token: c.token, Amount: c.Amount, Currency: c.Currency,
		ChargeKey: c.Key(), AuthorizationID: c.AuthorizationRef}
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
		return p.record(ctx, s, func(tx pgx.Tx) error {
			next, err := move(ctx, tx, c.ID, c.AttemptCount, from, Authorized, now,
				`authorization_ref = $1, unknown_phase = NULL, failure_code = NULL`, res.Reference)
			if err != nil {
				return err
			}
			p.transitioned(next, "")
			client := river.ClientFromContext[pgx.Tx](ctx)
			if next.VoidRequested {
				_, err = client.InsertTx(ctx, tx, VoidArgs{ChargeID: c.ID, Attempt: c.AttemptCount}, nil)
			} else {
				_, err = client.InsertTx(ctx, tx, CaptureArgs{ChargeID: c.ID, Attempt: c.AttemptCount}, nil)
			}
			return err
		})
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
	sub, err := p.Subscriptions.Lock(ctx, tx, c.SubscriptionID)
	if err != nil {
		return err
	}
	current, err := Get(ctx, tx, c.ID)
	if err != nil {
		return err
	}
	if sub.Cancelled || current.VoidRequested {
		next, err := move(ctx, tx, c.ID, c.AttemptCount, from, Voided, now, `failure_code = $1, unknown_phase = NULL`,
			"subscription_cancelled")
		if err == nil {
			p.transitioned(next, "")
		}
		return err
	}
	first := now
	if c.FirstDeclinedAt != nil {
		first = *c.FirstDeclinedAt
	}
	unpaid := sub.UnpaidSince != nil
	if unpaid && !c.PeriodStart.Before(*sub.UnpaidSince) {
		next, err := move(ctx, tx, c.ID, c.AttemptCount, from, Voided, now, `failure_code = $1, unknown_phase = NULL`,
			"subscription_unpaid")
		if err == nil {
			p.transitioned(next, "")
		}
		return err
	}
	if (sub.Token != c.token || sub.Gateway != c.Gateway) && !unpaid {
		declined, err := move(ctx, tx, c.ID, c.AttemptCount, from, Declined, now,
			`failure_code = $1, first_declined_at = $2, next_attempt_at = $3, unknown_phase = NULL`, code, first, now)
		if err != nil {
			return err
		}
		p.transitioned(declined, "")
		if err := p.Subscriptions.ChargeDeclined(ctx, tx, c.SubscriptionID); err != nil {
			return err
		}
		retry, err := move(ctx, tx, c.ID, c.AttemptCount, []Status{Declined}, Scheduled, now,
			newAttempt+`, gateway = $3, pm_token = $4, first_declined_at = NULL`, now, now, sub.Gateway, sub.Token)
		if err != nil {
			return err
		}
		p.transitioned(retry, "")
		_, err = river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx,
			AuthorizeArgs{ChargeID: retry.ID, Attempt: retry.AttemptCount}, nil)
		return err
	}
	at, dun := p.Dunning.NextAttempt(first, c.AttemptCount)
	if hard || !dun || unpaid {
		failed, err := move(ctx, tx, c.ID, c.AttemptCount, from, Failed, now, `failure_code = $1, unknown_phase = NULL`, code)
		if err != nil {
			return err
		}
		p.transitioned(failed, fmt.Sprintf("declined %s (hard: %t, dunning exhausted: %t)", code, hard, !dun))
		if unpaid {
			return nil
		}
		return p.Subscriptions.ChargeFailed(ctx, tx, failed)
	}
	next, err := move(ctx, tx, c.ID, c.AttemptCount, from, Declined, now,
		`failure_code = $1, first_declined_at = $2, next_attempt_at = $3, unknown_phase = NULL`, code, first, at)
	if err != nil {
		return err
	}
	p.transitioned(next, "")
	return p.Subscriptions.ChargeDeclined(ctx, tx, c.SubscriptionID)
}

// technicalFailure handles a call that got no verdict. A definite "not
// done" (an open circuit, a 503, a refused connection) waits and tries the
// same call again without spending an attempt, showing when on the charge;
// an unknown outcome hands the charge to reconciliation; and when River
// would give up, the charge goes to review.
func (p *Pipeline) technicalFailure(ctx context.Context, s stageRun, c Charge, op gateway.Op, callErr error) error {
	switch {
	case errors.Is(callErr, ErrCircuitOpen), errors.Is(callErr, gateway.ErrUnavailable):
		return p.waitForGateway(ctx, s, c, op, callErr)
	case errors.Is(callErr, gateway.ErrUnknownOutcome) && !s.reconcile && op != gateway.OpVoid:
		metrics.Retries.WithLabelValues(s.stage, "unknown_outcome").Inc()
		return p.toReconcile(ctx, s, c, op, callErr.Error())
	case s.final:
		metrics.StageRuns.WithLabelValues(s.stage, "review").Inc()
		return p.review(ctx, s, c, fmt.Sprintf("%s gave no verdict after its last attempt: %v", op, callErr))
	case errors.Is(callErr, gateway.ErrUnknownOutcome):
		metrics.Retries.WithLabelValues(s.stage, "unknown_outcome").Inc()
	default:
		metrics.Retries.WithLabelValues(s.stage, "error").Inc()
	}
	return fmt.Errorf("%s charge %s attempt %d: %w", op, c.ID, c.AttemptCount, callErr)
}

// waitForGateway snoozes a step whose gateway did nothing: the charge shows
// next_attempt_at and why, and the job runs again later with the same key.
// Snoozes spend no River attempt; UnavailableFor bounds them.
func (p *Pipeline) waitForGateway(ctx context.Context, s stageRun, c Charge, op gateway.Op, callErr error) error {
	reason := "gateway_unavailable"
	delay := p.Retry.Delay(max(s.run, 1))
	if errors.Is(callErr, ErrCircuitOpen) {
		reason = "gateway_circuit_open"
		open := p.Gateways.OpenFor()
		delay = open + time.Duration(rand.Int64N(int64(open)+1)) // spread the wake-ups
	}
	if p.Retry.Now().Sub(s.created) > p.UnavailableFor {
		metrics.StageRuns.WithLabelValues(s.stage, "review").Inc()
		return p.review(ctx, s, c, fmt.Sprintf("%s: the gateway did nothing for longer than %s: %v", op, p.UnavailableFor, callErr))
	}
	metrics.Retries.WithLabelValues(s.stage, reason).Inc()
	now := p.Clock.Now()
	if err := markWaiting(ctx, p.Pool, c.ID, c.AttemptCount, c.Status, now.Add(delay), reason, now); err != nil {
		return err
	}
	return river.JobSnooze(delay)
}

// toReconcile records that a call's outcome is unknown and enqueues the
// lookup that settles it.
func (p *Pipeline) toReconcile(ctx context.Context, s stageRun, c Charge, op gateway.Op, reason string) error {
	now := p.Clock.Now()
	return p.record(ctx, s, func(tx pgx.Tx) error {
		next, err := move(ctx, tx, c.ID, c.AttemptCount, []Status{Authorizing, Capturing}, Unknown, now,
			`unknown_phase = $1, failure_code = NULL`, string(op))
		if err != nil {
			return err
		}
		p.transitioned(next, reason)
		_, err = river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx,
			ReconcileArgs{ChargeID: c.ID, Attempt: c.AttemptCount, Op: op}, nil)
		return err
	})
}

// review sends the charge to the people: automation cannot tell or do more.
// A charge that may hold an authorization has its hold checked and, unless
// a capture exists, released, so that review never leaves money held.
func (p *Pipeline) review(ctx context.Context, s stageRun, c Charge, reason string) error {
	now := p.Clock.Now()
	return p.record(ctx, s, func(tx pgx.Tx) error {
		next, err := move(ctx, tx, c.ID, c.AttemptCount, []Status{Scheduled, Authorizing, Authorized, Capturing, Unknown}, RequiresReview, now,
			`review_reason = $1`, reason)
		if err != nil {
			return err
		}
		p.transitioned(next, reason)
		if !in(c.Status, mayHoldMoney) {
			return nil
		}
		_, err = river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx,
			ReleaseHoldArgs{ChargeID: c.ID, Attempt: next.AttemptCount}, nil)
		return err
	})
}

// Capture runs a capture job.
func (p *Pipeline) Capture(ctx context.Context, job *river.Job[CaptureArgs]) error {
	s := newStep("capture", job, job.Args.ChargeID, job.Args.Attempt)
	defer metrics.TimeStage(s.stage)()
	c, g, err := p.begin(ctx, s, []Status{Authorized, Capturing}, Capturing)
	if errors.Is(err, ErrStale) {
		metrics.StageRuns.WithLabelValues(s.stage, "stale").Inc()
		return p.voidInstead(ctx, s)
	}
	if g == nil {
		return err
	}
	res, err := p.call(ctx, c, gateway.OpCapture, func(ctx context.Context) (gateway.Result, error) {
		return g.Capture(ctx, p.request(c, gateway.OpCapture))
	})
	return p.afterCapture(ctx, s, c, []Status{Capturing}, res, err)
}

// voidInstead enqueues the release of a hold whose subscription was
// cancelled before its capture started (the capture guard refuses such a
// charge).
func (p *Pipeline) voidInstead(ctx context.Context, s stageRun) error {
	c, err := Get(ctx, p.Pool, s.chargeID)
	if err != nil || c.Status != Authorized || !c.VoidRequested || c.AttemptCount != s.attempt {
		return err
	}
	return p.record(ctx, s, func(tx pgx.Tx) error {
		_, err := river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx, VoidArgs{ChargeID: c.ID, Attempt: c.AttemptCount}, nil)
		return err
	})
}

func (p *Pipeline) afterCapture(ctx context.Context, s stageRun, c Charge, from []Status, res gateway.Result, callErr error) error {
	if callErr != nil {
		return p.technicalFailure(ctx, s, c, gateway.OpCapture, callErr)
	}
	if res.Status != gateway.StatusSucceeded {
		metrics.StageRuns.WithLabelValues(s.stage, "refused").Inc()
		return p.review(ctx, s, c, fmt.Sprintf("the gateway refused the capture of an authorized hold: %s %s", res.Status, res.DeclineCode))
	}
	metrics.StageRuns.WithLabelValues(s.stage, "succeeded").Inc()
	now := p.Clock.Now()
	return p.record(ctx, s, func(tx pgx.Tx) error {
		if _, err := p.Subscriptions.Lock(ctx, tx, c.SubscriptionID); err != nil {
			return err
		}
		next, err := move(ctx, tx, c.ID, c.AttemptCount, from, Succeeded, now, `unknown_phase = NULL, failure_code = NULL`)
		if err != nil {
			return err
		}
		p.transitioned(next, "")
		return p.Subscriptions.ChargePaid(ctx, tx, next)
	})
}

// Void runs a void job: the subscription was cancelled while the charge
// held money that was not captured.
func (p *Pipeline) Void(ctx context.Context, job *river.Job[VoidArgs]) error {
	s := newStep("void", job, job.Args.ChargeID, job.Args.Attempt)
	defer metrics.TimeStage(s.stage)()
	c, err := Get(ctx, p.Pool, s.chargeID)
	if err != nil {
		return err
	}
	if c.Status != Authorized || !c.VoidRequested || c.AttemptCount != s.attempt {
		metrics.StageRuns.WithLabelValues(s.stage, "stale").Inc()
		return nil
	}
	g, err := p.Gateways.Gateway(c.Gateway)
	if err != nil {
		return p.review(ctx, s, c, err.Error())
	}
	res, err := p.call(ctx, c, gateway.OpVoid, func(ctx context.Context) (gateway.Result, error) {
		return g.Void(ctx, p.request(c, gateway.OpVoid))
	})
	if err != nil {
		return p.technicalFailure(ctx, s, c, gateway.OpVoid, err)
	}
	if res.Status != gateway.StatusSucceeded {
		return p.review(ctx, s, c, fmt.Sprintf("the gateway refused to void the hold: %s %s", res.Status, res.DeclineCode))
	}
	metrics.StageRuns.WithLabelValues(s.stage, "voided").Inc()
	now := p.Clock.Now()
	return p.record(ctx, s, func(tx pgx.Tx) error {
		next, err := move(ctx, tx, c.ID, c.AttemptCount, []Status{Authorized}, Voided, now, `failure_code = 'subscription_cancelled'`)
		if err == nil {
			p.transitioned(next, "")
		}
		return err
	})
}

// Reconcile runs a reconcile job: it looks the lost call up by its
// idempotency key and continues from what really happened. When the
// gateway never received the call and the charge is still wanted, it sends
// the very same call again (same key) through the same guarded "about to
// call" move as a first call; when it is no longer wanted (the
// subscription was cancelled), nothing is sent: an authorize is voided,
// and a capture's hold is released. It never creates a replacement.
func (p *Pipeline) Reconcile(ctx context.Context, job *river.Job[ReconcileArgs]) error {
	s := newStep("reconcile", job, job.Args.ChargeID, job.Args.Attempt)
	s.reconcile = true
	defer metrics.TimeStage(s.stage)()
	c, err := Get(ctx, p.Pool, s.chargeID)
	if err != nil {
		return err
	}
	op := job.Args.Op
	inFlight := Authorizing
	if op == gateway.OpCapture {
		inFlight = Capturing
	}
	// The charge is this job's while its outcome is unknown, and also once
	// this job began to resend the call (in flight, its unknown phase still
	// set) without recording an answer: the resend got no verdict, or the
	// process died. A rerun then looks the call up again and resends it
	// with the same key; treating it as stale would leave the charge in
	// flight with no job to settle it.
	if (c.Status != Unknown && c.Status != inFlight) || c.AttemptCount != s.attempt || c.UnknownOp != op {
		metrics.StageRuns.WithLabelValues(s.stage, "stale").Inc()
		return nil
	}
	g, err := p.Gateways.Gateway(c.Gateway)
	if err != nil {
		return p.review(ctx, s, c, err.Error())
	}
	res, err := p.call(ctx, c, op, func(ctx context.Context) (gateway.Result, error) {
		return g.Lookup(ctx, c.GatewayKey(op))
	})
	if !errors.Is(err, gateway.ErrNotFound) {
		if op == gateway.OpCapture {
			return p.afterCapture(ctx, s, c, []Status{c.Status}, res, err)
		}
		return p.afterAuthorize(ctx, s, c, []Status{c.Status}, res, err)
	}
	metrics.StageRuns.WithLabelValues(s.stage, "not_found").Inc()
	resend, g, err := p.begin(ctx, s, []Status{Unknown, inFlight}, inFlight)
	if errors.Is(err, ErrStale) {
		return p.notSentNotWanted(ctx, s, op)
	}
	if g == nil {
		return err
	}
	metrics.StageRuns.WithLabelValues(s.stage, "resent").Inc()
	if op == gateway.OpCapture {
		res, err = p.call(ctx, resend, op, func(ctx context.Context) (gateway.Result, error) {
			return g.Capture(ctx, p.request(resend, gateway.OpCapture))
		})
		return p.afterCapture(ctx, s, resend, []Status{Capturing}, res, err)
	}
	res, err = p.call(ctx, resend, op, func(ctx context.Context) (gateway.Result, error) {
		return g.Authorize(ctx, p.request(resend, gateway.OpAuthorize))
	})
	return p.afterAuthorize(ctx, s, resend, []Status{Authorizing}, res, err)
}

// notSentNotWanted settles a charge whose lost call never reached the
// gateway and whose subscription was cancelled meanwhile: an authorize
// that never happened leaves nothing to release; a capture that never
// happened leaves the hold, which is voided.
func (p *Pipeline) notSentNotWanted(ctx context.Context, s stageRun, op gateway.Op) error {
	now := p.Clock.Now()
	return p.record(ctx, s, func(tx pgx.Tx) error {
		if op == gateway.OpAuthorize {
			// Authorizing: a resend of this job's that never reached the
			// gateway, cancelled since.
			next, err := move(ctx, tx, s.chargeID, s.attempt, []Status{Unknown, Authorizing}, Voided, now,
				`unknown_phase = NULL, failure_code = 'subscription_cancelled'`)
			if err == nil {
				p.transitioned(next, "")
			}
			return err
		}
		next, err := move(ctx, tx, s.chargeID, s.attempt, []Status{Unknown}, Authorized, now, `unknown_phase = NULL`)
		if err != nil {
			return err
		}
		p.transitioned(next, "")
		_, err = river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx, VoidArgs{ChargeID: next.ID, Attempt: next.AttemptCount}, nil)
		return err
	})
}

// ReleaseHold runs a release job for a charge that went to review while it
// may have held an authorization: it looks the attempt's capture and
// authorization up at the gateway and voids a hold that nothing captured,
// noting what it found on the charge for the people who resolve it.
func (p *Pipeline) ReleaseHold(ctx context.Context, job *river.Job[ReleaseHoldArgs]) error {
	s := newStep("release_hold", job, job.Args.ChargeID, job.Args.Attempt)
	s.reconcile = true
	defer metrics.TimeStage(s.stage)()
	c, err := Get(ctx, p.Pool, s.chargeID)
	if err != nil {
		return err
	}
	if c.Status != RequiresReview || c.AttemptCount != s.attempt || c.HoldReleasedAt != nil {
		metrics.StageRuns.WithLabelValues(s.stage, "stale").Inc()
		return nil
	}
	g, err := p.Gateways.Gateway(c.Gateway)
	if err != nil {
		return nil // nothing to ask; the review reason already says why
	}
	found, hold, err := p.attemptAtGateway(ctx, g, c)
	if err != nil {
		return p.holdCheckFailed(ctx, s, c, err)
	}
	now := p.Clock.Now()
	if found != "" || hold == "" {
		note := "the gateway shows no hold and no capture"
		if found != "" {
			note = "the gateway shows " + found
		}
		return recordHoldCheck(ctx, p.Pool, c.ID, c.AttemptCount, note, found == "", now)
	}
	req := p.request(c, gateway.OpVoid)
	req.AuthorizationID = hold
	res, err := p.call(ctx, c, gateway.OpVoid, func(ctx context.Context) (gateway.Result, error) { return g.Void(ctx, req) })
	if err != nil {
		return p.holdCheckFailed(ctx, s, c, err)
	}
	if res.Status != gateway.StatusSucceeded {
		return recordHoldCheck(ctx, p.Pool, c.ID, c.AttemptCount,
			fmt.Sprintf("the gateway refused to void hold %s: %s %s", hold, res.Status, res.DeclineCode), false, now)
	}
	metrics.StageRuns.WithLabelValues(s.stage, "voided").Inc()
	return recordHoldCheck(ctx, p.Pool, c.ID, c.AttemptCount, "no capture at the gateway; hold "+hold+" was voided", true, now)
}

// holdCheckFailed waits out a gateway that did nothing, however long: the
// charge is already in review, and a held authorization must still be
// released when the gateway is back. Other failures are River retries.
func (p *Pipeline) holdCheckFailed(_ context.Context, s stageRun, c Charge, err error) error {
	if errors.Is(err, ErrCircuitOpen) || errors.Is(err, gateway.ErrUnavailable) {
		metrics.Retries.WithLabelValues(s.stage, "gateway_unavailable").Inc()
		return river.JobSnooze(p.Retry.Delay(max(s.run, 1)))
	}
	return fmt.Errorf("check hold of charge %s: %w", c.ID, err)
}

// attemptAtGateway looks up c's current attempt at g. found describes money
// the gateway took or holds that must not be released (a capture, or a
// void that failed); hold is the reference of a live authorization that
// nothing captured or voided.
func (p *Pipeline) attemptAtGateway(ctx context.Context, g gateway.Gateway, c Charge) (found, hold string, err error) {
	lookup := func(op gateway.Op) (gateway.Result, bool, error) {
		res, err := p.call(ctx, c, op, func(ctx context.Context) (gateway.Result, error) {
			return g.Lookup(ctx, c.GatewayKey(op))
		})
		if errors.Is(err, gateway.ErrNotFound) {
			return gateway.Result{}, false, nil
		}
		return res, err == nil && res.Status == gateway.StatusSucceeded, err
	}
	capture, captured, err := lookup(gateway.OpCapture)
	if err != nil {
		return "", "", err
	}
	if captured {
		return "a succeeded capture " + capture.Reference + " of attempt " + fmt.Sprint(c.AttemptCount), "", nil
	}
	auth, authorized, err := lookup(gateway.OpAuthorize)
	if err != nil || !authorized {
		return "", "", err
	}
	_, voided, err := lookup(gateway.OpVoid)
	if err != nil || voided {
		return "", "", err
	}
	return "", auth.Reference, nil
}

// ErrGatewayUnreachable: the gateway could not be asked what an attempt
// did, so nothing that depends on the answer was done. Try again later.
var ErrGatewayUnreachable = errors.New("gateway could not be asked")

// LiveMoney looks up c's current attempt at its gateway and describes a
// capture or a live hold that a new attempt would duplicate; empty when
// there is none. A support retry asks it first: a retry must never be a
// second payment. Returns an error wrapping ErrGatewayUnreachable when the
// gateway cannot tell.
func (p *Pipeline) LiveMoney(ctx context.Context, c Charge) (string, error) {
	if c.HoldReleasedAt != nil {
		return "", nil
	}
	g, err := p.Gateways.Gateway(c.Gateway)
	if err != nil {
		return "", err
	}
	found, hold, err := p.attemptAtGateway(ctx, g, c)
	if err != nil {
		return "", fmt.Errorf("%w: look up charge %s at %s: %w", ErrGatewayUnreachable, c.ID, c.Gateway, err)
	}
	if hold != "" {
		return "a live hold " + hold + " of attempt " + fmt.Sprint(c.AttemptCount), nil
	}
	return found, nil
}
