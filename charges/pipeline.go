package charges

import (
	"context"
	"errors"
	"fmt"
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

// Subscriptions is what the pipeline tells the subscription a charge
// bills, inside the transaction that records the charge's outcome.
type Subscriptions interface {
	// ChargePaid: a charge succeeded (a past-due subscription may recover).
	ChargePaid(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID) error
	// ChargeDeclined: a soft decline; dunning will retry (past due).
	ChargeDeclined(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID) error
	// ChargeFailed: a hard decline or dunning exhausted (unpaid).
	ChargeFailed(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID) error
}

// Pipeline runs the gateway steps of charges. Each step persists that it is
// about to call the gateway (a guarded move), calls it holding no
// transaction or connection, and records the outcome together with the
// next step's job in one transaction.
type Pipeline struct {
	Pool          *pgxpool.Pool
	Router        *Router
	Subscriptions Subscriptions
	Clock         clock.Clock
	Dunning       Dunning
	// CallTimeout bounds every gateway call; past it the outcome is unknown.
	CallTimeout time.Duration
	// SnoozeWhileOpen is how long a job waits when its gateway's circuit is
	// open before it looks again.
	SnoozeWhileOpen time.Duration
	Logger          zerolog.Logger
}

// step is one run of a job: the charge it works on and what River will do
// if it fails.
type step struct {
	stage     string
	chargeID  uuid.UUID
	attempt   int
	final     bool // River will not retry this job again
	reconcile bool // the step is a reconcile job
}

func newStep[T river.JobArgs](stage string, job *river.Job[T], chargeID uuid.UUID, attempt int) step {
	return step{stage: stage, chargeID: chargeID, attempt: attempt, final: job.Attempt >= job.MaxAttempts}
}

// record runs fn, which records a step's outcome and enqueues the next
// step, in one transaction. The job itself is completed by River after it
// returns (in River's batches, not in this transaction): if the process
// dies in between, the job runs again, finds the charge already moved on
// (every move is guarded by the status it expects) and does nothing.
func (p *Pipeline) record(ctx context.Context, s step, fn func(tx pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, p.Pool, fn)
	if errors.Is(err, ErrStale) {
		return nil // another run already recorded this step
	}
	if err != nil {
		return fmt.Errorf("%s: record outcome: %w", s.stage, err)
	}
	return nil
}

func (p *Pipeline) transitioned(c Charge) {
	metrics.ChargeTransitions.WithLabelValues(string(c.Status)).Inc()
}

// call runs one gateway call under the call timeout.
func (p *Pipeline) call(ctx context.Context, fn func(ctx context.Context) (gateway.Result, error)) (gateway.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, p.CallTimeout)
	defer cancel()
	return fn(ctx)
}

// Authorize runs an authorize job.
func (p *Pipeline) Authorize(ctx context.Context, job *river.Job[AuthorizeArgs]) error {
	s := newStep("authorize", job, job.Args.ChargeID, job.Args.Attempt)
	defer metrics.TimeStage(s.stage)()
	c, g, err := p.begin(ctx, s, []Status{Scheduled, Authorizing}, Authorizing)
	if c == nil {
		return err
	}
	res, err := p.call(ctx, func(ctx context.Context) (gateway.Result, error) {
		return g.Authorize(ctx, p.request(*c, PhaseAuthorize))
	})
	return p.afterAuthorize(ctx, s, *c, res, err)
}

// begin persists that the step is about to call the gateway (moving the
// charge from one of from to to) and finds its gateway. A nil charge means
// the step is over: stale (another run did it, or a newer attempt exists),
// sent to review, or failed with the returned error.
func (p *Pipeline) begin(ctx context.Context, s step, from []Status, to Status) (*Charge, gateway.Gateway, error) {
	guard := ""
	if to == Capturing {
		guard = "void_requested = false" // never capture a cancelled subscription's hold
	}
	c, err := moveWhere(ctx, p.Pool, s.chargeID, s.attempt, from, to, p.Clock.Now(), guard)
	if errors.Is(err, ErrStale) {
		metrics.StageRuns.WithLabelValues(s.stage, "stale").Inc()
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	p.transitioned(c)
	g, err := p.Router.Gateway(c.Gateway)
	if err != nil {
		return nil, nil, p.review(ctx, s, c, err.Error())
	}
	return &c, g, nil
}

func (Pipeline) request(c Charge, phase Phase) gateway.Request {
	return gateway.Request{IdempotencyKey: c.GatewayKey(phase), Token: c.token, Amount: c.Amount, Currency: c.Currency,
		ChargeKey: c.Key(), AuthorizationID: c.AuthorizationRef}
}

// afterAuthorize continues from an authorize answer (or a lookup of one).
func (p *Pipeline) afterAuthorize(ctx context.Context, s step, c Charge, res gateway.Result, callErr error) error {
	if callErr != nil {
		return p.technicalFailure(ctx, s, c, PhaseAuthorize, callErr)
	}
	from := []Status{Authorizing, Unknown}
	now := p.Clock.Now()
	switch {
	case res.Status == gateway.StatusSucceeded:
		metrics.StageRuns.WithLabelValues(s.stage, "authorized").Inc()
		return p.record(ctx, s, func(tx pgx.Tx) error {
			next, err := move(ctx, tx, c.ID, c.AttemptCount, from, Authorized, now,
				`authorization_ref = $1, unknown_phase = NULL`, res.Reference)
			if err != nil {
				return err
			}
			p.transitioned(next)
			client := river.ClientFromContext[pgx.Tx](ctx)
			if next.VoidRequested {
				_, err = client.InsertTx(ctx, tx, VoidArgs{ChargeID: c.ID, Attempt: c.AttemptCount}, nil)
			} else {
				_, err = client.InsertTx(ctx, tx, CaptureArgs{ChargeID: c.ID, Attempt: c.AttemptCount}, nil)
			}
			return err
		})
	case res.Status == gateway.StatusDeclined && !res.Hard:
		metrics.StageRuns.WithLabelValues(s.stage, "declined").Inc()
		return p.record(ctx, s, func(tx pgx.Tx) error { return p.decline(ctx, tx, c, from, res.DeclineCode, now) })
	default: // a hard decline, or a request the gateway refused
		metrics.StageRuns.WithLabelValues(s.stage, "failed").Inc()
		code := res.DeclineCode
		if code == "" {
			code = "gateway_refused"
		}
		return p.record(ctx, s, func(tx pgx.Tx) error { return p.fail(ctx, tx, c, from, code, now) })
	}
}

// decline records a soft decline: dunning schedules a new attempt by the
// service clock, or, when the schedule is exhausted, the charge fails.
func (p *Pipeline) decline(ctx context.Context, tx pgx.Tx, c Charge, from []Status, code string, now time.Time) error {
	first := now
	if c.FirstDeclinedAt != nil {
		first = *c.FirstDeclinedAt
	}
	at, ok := p.Dunning.NextAttempt(first, c.AttemptCount)
	if !ok {
		return p.fail(ctx, tx, c, from, code, now)
	}
	next, err := move(ctx, tx, c.ID, c.AttemptCount, from, Declined, now,
		`failure_code = $1, first_declined_at = $2, next_attempt_at = $3, unknown_phase = NULL`, code, first, at)
	if err != nil {
		return err
	}
	p.transitioned(next)
	return p.Subscriptions.ChargeDeclined(ctx, tx, c.SubscriptionID)
}

func (p *Pipeline) fail(ctx context.Context, tx pgx.Tx, c Charge, from []Status, code string, now time.Time) error {
	next, err := move(ctx, tx, c.ID, c.AttemptCount, from, Failed, now, `failure_code = $1, unknown_phase = NULL`, code)
	if err != nil {
		return err
	}
	p.transitioned(next)
	return p.Subscriptions.ChargeFailed(ctx, tx, c.SubscriptionID)
}

// technicalFailure handles a call that got no verdict. An unknown outcome
// hands the charge to reconciliation; an unavailable gateway is retried
// with the same key (or waited out while its circuit is open); and when
// River would give up, the charge goes to review.
func (p *Pipeline) technicalFailure(ctx context.Context, s step, c Charge, phase Phase, callErr error) error {
	switch {
	case errors.Is(callErr, ErrCircuitOpen),
		errors.Is(callErr, gateway.ErrUnavailable) && p.Router.CircuitOpen(c.Gateway):
		// The gateway is down, not this charge: wait without spending an
		// attempt, so charges resume when it comes back.
		metrics.Retries.WithLabelValues(s.stage, "circuit_open").Inc()
		return river.JobSnooze(p.SnoozeWhileOpen)
	case errors.Is(callErr, gateway.ErrUnknownOutcome) && !s.reconcile && phase != PhaseVoid:
		metrics.Retries.WithLabelValues(s.stage, "unknown_outcome").Inc()
		now := p.Clock.Now()
		return p.record(ctx, s, func(tx pgx.Tx) error {
			next, err := move(ctx, tx, c.ID, c.AttemptCount, []Status{Authorizing, Capturing}, Unknown, now,
				`unknown_phase = $1`, string(phase))
			if err != nil {
				return err
			}
			p.transitioned(next)
			_, err = river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx,
				ReconcileArgs{ChargeID: c.ID, Attempt: c.AttemptCount, Phase: phase}, nil)
			return err
		})
	case s.final:
		metrics.StageRuns.WithLabelValues(s.stage, "review").Inc()
		return p.review(ctx, s, c, fmt.Sprintf("%s gave no verdict after its last attempt: %v", phase, callErr))
	case errors.Is(callErr, gateway.ErrUnavailable):
		metrics.Retries.WithLabelValues(s.stage, "unavailable").Inc()
	case errors.Is(callErr, gateway.ErrUnknownOutcome):
		metrics.Retries.WithLabelValues(s.stage, "unknown_outcome").Inc()
	default:
		metrics.Retries.WithLabelValues(s.stage, "error").Inc()
	}
	return fmt.Errorf("%s charge %s attempt %d: %w", phase, c.ID, c.AttemptCount, callErr)
}

// review sends the charge to the people: automation cannot tell or do more.
func (p *Pipeline) review(ctx context.Context, s step, c Charge, reason string) error {
	now := p.Clock.Now()
	return p.record(ctx, s, func(tx pgx.Tx) error {
		next, err := move(ctx, tx, c.ID, 0, []Status{Scheduled, Authorizing, Authorized, Capturing, Unknown}, RequiresReview, now,
			`review_reason = $1`, reason)
		if err != nil {
			return err
		}
		p.transitioned(next)
		p.Logger.Warn().Str("charge_id", c.ID.String()).Str("stage", s.stage).Str("reason", reason).Msg("charge sent to review")
		return nil
	})
}

// Capture runs a capture job.
func (p *Pipeline) Capture(ctx context.Context, job *river.Job[CaptureArgs]) error {
	s := newStep("capture", job, job.Args.ChargeID, job.Args.Attempt)
	defer metrics.TimeStage(s.stage)()
	started, g, err := p.begin(ctx, s, []Status{Authorized, Capturing}, Capturing)
	if started == nil {
		if err != nil {
			return err
		}
		return p.voidInstead(ctx, s)
	}
	res, err := p.call(ctx, func(ctx context.Context) (gateway.Result, error) {
		return g.Capture(ctx, p.request(*started, PhaseCapture))
	})
	return p.afterCapture(ctx, s, *started, res, err)
}

// voidInstead enqueues the release of a hold whose subscription was
// cancelled before its capture started (begin refuses to capture such a
// charge).
func (p *Pipeline) voidInstead(ctx context.Context, s step) error {
	c, err := Get(ctx, p.Pool, s.chargeID)
	if err != nil || c.Status != Authorized || !c.VoidRequested || c.AttemptCount != s.attempt {
		return err
	}
	return p.record(ctx, s, func(tx pgx.Tx) error {
		_, err := river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx, VoidArgs{ChargeID: c.ID, Attempt: c.AttemptCount}, nil)
		return err
	})
}

func (p *Pipeline) afterCapture(ctx context.Context, s step, c Charge, res gateway.Result, callErr error) error {
	if callErr != nil {
		return p.technicalFailure(ctx, s, c, PhaseCapture, callErr)
	}
	if res.Status != gateway.StatusSucceeded {
		metrics.StageRuns.WithLabelValues(s.stage, "refused").Inc()
		return p.review(ctx, s, c, fmt.Sprintf("the gateway refused the capture of an authorized hold: %s %s", res.Status, res.DeclineCode))
	}
	metrics.StageRuns.WithLabelValues(s.stage, "succeeded").Inc()
	now := p.Clock.Now()
	return p.record(ctx, s, func(tx pgx.Tx) error {
		next, err := move(ctx, tx, c.ID, c.AttemptCount, []Status{Capturing, Unknown}, Succeeded, now,
			`unknown_phase = NULL, failure_code = NULL`)
		if err != nil {
			return err
		}
		p.transitioned(next)
		return p.Subscriptions.ChargePaid(ctx, tx, c.SubscriptionID)
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
	g, err := p.Router.Gateway(c.Gateway)
	if err != nil {
		return p.review(ctx, s, c, err.Error())
	}
	res, err := p.call(ctx, func(ctx context.Context) (gateway.Result, error) {
		return g.Void(ctx, p.request(c, PhaseVoid))
	})
	if err != nil {
		return p.technicalFailure(ctx, s, c, PhaseVoid, err)
	}
	if res.Status != gateway.StatusSucceeded {
		return p.review(ctx, s, c, fmt.Sprintf("the gateway refused to void the hold: %s %s", res.Status, res.DeclineCode))
	}
	metrics.StageRuns.WithLabelValues(s.stage, "voided").Inc()
	now := p.Clock.Now()
	return p.record(ctx, s, func(tx pgx.Tx) error {
		next, err := move(ctx, tx, c.ID, c.AttemptCount, []Status{Authorized}, Voided, now, `failure_code = 'subscription_cancelled'`)
		if err == nil {
			p.transitioned(next)
		}
		return err
	})
}

// Reconcile runs a reconcile job: it looks the lost call up by its
// idempotency key and continues from what really happened. When the
// gateway never received the call, it sends the very same call again (same
// key), which is safe; it never creates a replacement operation.
func (p *Pipeline) Reconcile(ctx context.Context, job *river.Job[ReconcileArgs]) error {
	s := newStep("reconcile", job, job.Args.ChargeID, job.Args.Attempt)
	s.reconcile = true
	defer metrics.TimeStage(s.stage)()
	c, err := Get(ctx, p.Pool, s.chargeID)
	if err != nil {
		return err
	}
	if c.Status != Unknown || c.AttemptCount != s.attempt || c.UnknownPhase != job.Args.Phase {
		metrics.StageRuns.WithLabelValues(s.stage, "stale").Inc()
		return nil
	}
	g, err := p.Router.Gateway(c.Gateway)
	if err != nil {
		return p.review(ctx, s, c, err.Error())
	}
	phase := job.Args.Phase
	res, err := p.call(ctx, func(ctx context.Context) (gateway.Result, error) {
		return g.Lookup(ctx, c.GatewayKey(phase))
	})
	if errors.Is(err, gateway.ErrNotFound) {
		metrics.StageRuns.WithLabelValues(s.stage, "not_found_resent").Inc()
		res, err = p.call(ctx, func(ctx context.Context) (gateway.Result, error) {
			if phase == PhaseCapture {
				return g.Capture(ctx, p.request(c, PhaseCapture))
			}
			return g.Authorize(ctx, p.request(c, PhaseAuthorize))
		})
	}
	if phase == PhaseCapture {
		return p.afterCapture(ctx, s, c, res, err)
	}
	return p.afterAuthorize(ctx, s, c, res, err)
}
