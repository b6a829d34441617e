package charges

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/experiments"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/metrics"
)

// Pipeline runs the gateway steps of charges. Each step persists that it is
// about to call the gateway (a guarded move), calls it holding no
// transaction or connection, and records the outcome together with the
// next step's job in one transaction.
type Pipeline struct {
	Pool *pgxpool.Pool
	// Store writes the charges' moves and publishes their events.
	Store    *Store
	Gateways *fleet.Gateways
	// Owners are told the outcomes of the charges they own.
	Owners Owners
	// Postings posts holds to the state payment registry before their
	// capture (charges with a RegistryUIN); nil: such charges are captured
	// without posting.
	Postings Postings
	// Outside tells, before a fine's hold, what was paid against it
	// outside rebill; nil: no check (a fine is then held at its price).
	Outside OutsidePayments

	Clock   clock.Clock
	Dunning Dunning
	// CallTimeout bounds every gateway call; past it the outcome is unknown.
	CallTimeout time.Duration
	// Retry spaces the waits of a step whose gateway answered that it did
	// nothing (503, refused connection): such a step waits and tries again
	// with the same key without spending a River attempt.
	Retry RetryPolicy
	// UnavailableFor bounds those waits (in real time, from the job's
	// creation); past it the charge goes to review.
	UnavailableFor time.Duration
	// CaptureInline captures a hold in the same job run that placed it,
	// instead of in a capture job of its own: the hold's outcome and the
	// capture's "about to call" are one transaction, so a charge costs one
	// job and one commit less. The capture keeps its own key and its own
	// recorded outcome; a rerun of the job finds the charge capturing and
	// sends the same capture again. Reconciled holds still get a capture
	// job.
	CaptureInline bool
	Logger        zerolog.Logger
	// Tracer spans each gateway call; nil traces nothing.
	Tracer trace.Tracer
	// Declines holds subscription charges for review once their customer
	// reached the declines-per-day limit (nil: no limit).
	Declines DeclineLimit
	// Experiments vary the call timeout and the backoff of a charge whose
	// record names a running gateway_timeout arm; nil runs none.
	Experiments *experiments.Set
	// SealedToken is an SQL expression over the charges row that yields
	// its pm_token as the vault seals it (vault.SealedSQL): the hold's
	// "about to call" returns it with the charge, and the hold's request
	// carries it, so that the vault's gateway edge opens the token without
	// a statement of its own, from the very row the attempt started with.
	// Empty: the edge reads the token.
	SealedToken string

	batchesOnce sync.Once
	batches     *pipelineBatches
}

// batched returns the statements the runs of p share (made on first use:
// a Pipeline is wired as a struct literal).
func (p *Pipeline) batched() *pipelineBatches {
	p.batchesOnce.Do(func() { p.batches = newPipelineBatches(p) })
	return p.batches
}

// stageRun is one run of a pipeline stage's job: the charge it works on
// and what River will do if it fails.
type stageRun struct {
	stage     string
	job       int64 // the River job's id
	chargeID  uuid.UUID
	attempt   int
	run       int       // how many times the job has run: River's attempt plus its snoozes
	final     bool      // River will not retry this job again
	lookingUp bool      // the step is a look-up job (charge_reconcile)
	created   time.Time // when River created the job (real time)
}

func newStep[T river.JobArgs](stage string, job *river.Job[T], chargeID uuid.UUID, attempt int) stageRun {
	return stageRun{stage: stage, job: job.ID, chargeID: chargeID, attempt: attempt, run: job.Attempt + snoozes(job.Metadata),
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
	if p.Experiments != nil {
		for key, arm := range c.Experiments() {
			if p.Experiments.Known(key, arm) {
				metrics.ExperimentCharges.WithLabelValues(key, arm, string(c.Status)).Inc()
			}
		}
	}
	switch c.Status {
	case Unknown, RequiresReview, Failed:
		p.Logger.Warn().Str("charge_id", c.ID.String()).Str("owner_id", c.OwnerID().String()).
			Str("gateway", c.Gateway).Int("attempt", c.AttemptCount).Str("status", string(c.Status)).
			Str("unknown_phase", string(c.UnknownOp)).Str("failure_code", c.FailureCode).Str("review_code", string(c.ReviewCode)).Str("reason", reason).
			Msg("charge status")
	}
}

// timeoutArm is the gateway_timeout arm that governs c now.
func (p *Pipeline) timeoutArm(c Charge) (experiments.Params, bool) {
	if p.Experiments == nil {
		return experiments.Params{}, false
	}
	_, arm, ok := p.Experiments.Governing(experiments.PolicyGatewayTimeout, c.Experiments(), p.Clock.Now())
	return arm.Params, ok
}

// callTimeout bounds c's gateway calls: its arm's timeout, or its
// gateway's own, or CallTimeout. The charge jobs' timeout allows for the
// longest arm (experiments.Set.MaxTimeout).
func (p *Pipeline) callTimeout(c Charge) time.Duration {
	if arm, ok := p.timeoutArm(c); ok && arm.Timeout > 0 {
		return arm.Timeout
	}
	return p.Gateways.Timeout(c.Gateway, p.CallTimeout)
}

// retry spaces the waits of c's steps on a gateway that did nothing: its
// arm's backoff where the arm sets one.
func (p *Pipeline) retry(c Charge) RetryPolicy {
	r := p.Retry
	if arm, ok := p.timeoutArm(c); ok {
		r.Base, r.Max = cmp.Or(arm.RetryBase, r.Base), cmp.Or(arm.RetryMax, r.Max)
		r.Max = max(r.Max, r.Base)
	}
	return r
}

// call runs one gateway call under its gateway's timeout (CallTimeout
// unless the gateway has its own) and logs its outcome: ids, gateway, op,
// attempt, outcome, latency; never the token.
func (p *Pipeline) call(ctx context.Context, c Charge, op gateway.Op, fn func(ctx context.Context) (gateway.Result, error)) (gateway.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, p.callTimeout(c))
	defer cancel()
	observed := fleet.Call{Gateway: c.Gateway, Op: op, ChargeID: c.ID, SubscriptionID: c.SubscriptionID, Attempt: c.AttemptCount}
	ctx, span := observed.Start(ctx, p.Tracer)
	start := time.Now() // the call's latency: elapsed real time, not the service clock
	res, err := fn(ctx)
	outcome := string(res.Status)
	switch {
	case errors.Is(err, fleet.ErrCircuitOpen):
		outcome = "circuit_open"
	case errors.Is(err, gateway.ErrUnavailable):
		outcome = "unavailable"
	case errors.Is(err, gateway.ErrUnknownOutcome):
		outcome = "unknown"
	case errors.Is(err, gateway.ErrNotFound):
		outcome = "not_found"
	case errors.Is(err, gateway.ErrUnprovable):
		outcome = "unprovable"
	case err != nil:
		outcome = "error"
	}
	observed.End(span, outcome, res.DeclineCode, time.Since(start))
	p.Logger.Info().Str("charge_id", c.ID.String()).Str("owner_id", c.OwnerID().String()).
		Str("gateway", c.Gateway).Str("op", string(op)).Int("attempt", c.AttemptCount).
		Str("outcome", outcome).Int64("latency_ms", time.Since(start).Milliseconds()).
		Str("decline_code", res.DeclineCode).Msg("gateway call")
	return res, err
}

// begin persists that the step is about to call the gateway, moving the
// charge from one of from to to only while it is still wanted (no void
// requested: the one guarded statement that subscription events race),
// and finds its gateway. Returns ErrStale when the guard failed; a nil
// gateway with a nil error means the charge went to review (its gateway is
// not configured).
func (p *Pipeline) begin(ctx context.Context, s stageRun, from []Status, to Status) (Charge, gateway.Gateway, error) {
	now := p.Clock.Now()
	c, err := oneMoved(p.Store.move(ctx, p.Pool, p.beginning(from, to), now, byID(s.chargeID, s.attempt, ""), now, string(Scheduled)))
	return p.begun(ctx, s, c, err)
}

// beginning is the guarded move of a step's "about to call", alone or in
// a batch; its arguments are the time ($1) and the scheduled status ($2).
// A hold's returns the charge's sealed token with it (SealedToken): read
// under the row's lock, it is the token of the very pm_token sent.
func (p *Pipeline) beginning(from []Status, to Status) transition {
	where := "NOT void_requested AND " + startableSQL
	t := transition{from: from, to: to, set: repriceSQL}
	switch to {
	case Capturing:
		where += " AND NOT " + discountMissedSQL + " AND " + postedSQL
	case Authorizing:
		where += " AND " + p.registryGuard() + " AND " + p.outsideGuard() + " AND " + priorPostingsSettledSQL
		t.sealed = p.SealedToken
	}
	t.where = where
	return t
}

// beginAuthorize is begin for an authorize job's step, from scheduled (or
// a rerun's authorizing): the runs of many charges send their "about to
// call" in one statement, each row under its own guard.
func (p *Pipeline) beginAuthorize(ctx context.Context, s stageRun) (Charge, gateway.Gateway, error) {
	c, err := p.batched().authorizing.do(ctx, &guardedMove{id: s.chargeID, attempt: s.attempt})
	return p.begun(ctx, s, c, err)
}

// begun finds the gateway of c, just moved by a step's guard (err: the
// guard's error).
func (p *Pipeline) begun(ctx context.Context, s stageRun, c Charge, err error) (Charge, gateway.Gateway, error) {
	if err != nil {
		return Charge{}, nil, err
	}
	p.transitioned(c, "")
	g, err := p.Gateways.Gateway(c.Gateway)
	if err != nil {
		return c, nil, p.review(ctx, s, c, ReviewGatewayNotConfigured, err.Error())
	}
	return c, g, nil
}

// request is c's op as sent to its gateway, with the charge's fiscal
// receipt on the hold and the capture (a receipt that cannot be read was
// refused when the subscription was created, so none is sent instead).
// Only the hold carries the payment token: a capture or void names the
// hold, so the token is opened from the vault for the one call that needs
// it, and never travels with the others. The hold carries the sealed
// token too when its "about to call" read it (SealedToken).
func (p *Pipeline) request(c Charge, op gateway.Op) gateway.Request {
	req := gateway.Request{IdempotencyKey: c.GatewayKey(op), Amount: c.Amount, Currency: c.Currency,
		ChargeKey: c.Key(), AuthorizationID: c.AuthorizationRef}
	if op == gateway.OpAuthorize {
		req.Token, req.Sealed = c.token, c.sealed
	}
	if c.receipt != nil && (op == gateway.OpAuthorize || op == gateway.OpCapture) {
		r, err := c.FiscalReceipt()
		if err != nil {
			p.Logger.Error().Err(err).Str("charge_id", c.ID.String()).Msg("unreadable fiscal receipt: sent without it")
		} else {
			req.Receipt = r
		}
	}
	return req
}

// FiscalReceipt is the receipt c's hold and capture carry; nil when none.
// A bill's receipt has one item, the bill, priced at what its attempt
// takes: a fine's price rises when its discount ends, and what was paid
// outside rebill comes off it, after the charge (and its receipt) was
// created.
func (c Charge) FiscalReceipt() (*gateway.Receipt, error) {
	if c.receipt == nil {
		return nil, nil
	}
	var r gateway.Receipt
	if err := json.Unmarshal(c.receipt, &r); err != nil {
		return nil, fmt.Errorf("fiscal receipt of charge %s: %w", c.ID, err)
	}
	if c.EnrollmentID != uuid.Nil && len(r.Items) == 1 {
		r.Items[0].Quantity, r.Items[0].Amount = "1", c.Amount
	}
	return &r, nil
}

// lookup asks g what became of c's current attempt's op; mayReplay: see
// gateway.LookupRequest. The attempt's start stands for when the call was
// first sent: no later than it, so a provider that bounds replays by time
// errs on the safe side.
func (p *Pipeline) lookup(ctx context.Context, g gateway.Gateway, c Charge, op gateway.Op, mayReplay bool) (gateway.Result, error) {
	req := gateway.LookupRequest{Op: op, Request: p.request(c, op), MayReplay: mayReplay}
	if n := len(c.AttemptTimes); n > 0 {
		req.SentAt = c.AttemptTimes[n-1]
	}
	return g.Lookup(ctx, req)
}

// technicalFailure handles a call that got no verdict. A definite "not
// done" (an open circuit, a 503, a refused connection) waits and tries the
// same call again without spending an attempt, showing when on the charge;
// an unknown outcome hands the charge to reconciliation; and when River
// would give up, the charge goes to review.
func (p *Pipeline) technicalFailure(ctx context.Context, s stageRun, c Charge, op gateway.Op, callErr error) error {
	switch {
	case errors.Is(callErr, fleet.ErrCircuitOpen), errors.Is(callErr, gateway.ErrUnavailable):
		return p.waitForGateway(ctx, s, c, op, callErr)
	case errors.Is(callErr, gateway.ErrUnknownOutcome) && !s.lookingUp && op != gateway.OpVoid:
		metrics.Retry(s.stage, metrics.RetryUnknownOutcome)
		return p.toLookup(ctx, s, c, op, callErr.Error())
	case s.final:
		metrics.StageRuns.WithLabelValues(s.stage, "review").Inc()
		code := ReviewGatewayError
		if errors.Is(callErr, gateway.ErrUnknownOutcome) || errors.Is(callErr, context.DeadlineExceeded) {
			code = ReviewGatewayTimeout
		}
		return p.review(ctx, s, c, code, fmt.Sprintf("%s gave no verdict after its last attempt: %v", op, callErr))
	case errors.Is(callErr, gateway.ErrUnknownOutcome):
		metrics.Retry(s.stage, metrics.RetryUnknownOutcome)
	default:
		metrics.Retry(s.stage, metrics.RetryError)
	}
	return fmt.Errorf("%s charge %s attempt %d: %w", op, c.ID, c.AttemptCount, callErr)
}

// waitForGateway snoozes a step whose gateway did nothing: the charge shows
// next_attempt_at and why, and the job runs again later with the same key.
// Snoozes spend no River attempt; UnavailableFor bounds them. An
// authorize that waits is not in flight: it gives its declines slot back
// and asks for one again when it is tried next (a look-up that waits
// does not: the outcome it looks for is still unknown).
func (p *Pipeline) waitForGateway(ctx context.Context, s stageRun, c Charge, op gateway.Op, callErr error) error {
	if op == gateway.OpAuthorize && !s.lookingUp {
		p.releaseSlot(ctx, c, false)
	}
	reason := metrics.RetryGatewayUnavailable
	delay := p.retry(c).Delay(max(s.run, 1))
	if errors.Is(callErr, fleet.ErrCircuitOpen) {
		reason = metrics.RetryGatewayCircuitOpen
		open := p.Gateways.OpenFor()
		delay = open + time.Duration(rand.Int64N(int64(open)+1)) // spread the wake-ups
	}
	if p.Retry.Now().Sub(s.created) > p.UnavailableFor {
		metrics.StageRuns.WithLabelValues(s.stage, "review").Inc()
		return p.review(ctx, s, c, ReviewGatewayUnavailable, fmt.Sprintf("%s: the gateway did nothing for longer than %s: %v", op, p.UnavailableFor, callErr))
	}
	metrics.Retry(s.stage, reason)
	now := p.Clock.Now()
	if err := markWaiting(ctx, p.Pool, c.ID, c.AttemptCount, c.Status, now.Add(delay), string(reason), now); err != nil {
		return err
	}
	return river.JobSnooze(delay)
}

// toLookup records that a call's outcome is unknown and enqueues the
// lookup that settles it.
func (p *Pipeline) toLookup(ctx context.Context, s stageRun, c Charge, op gateway.Op, reason string) error {
	now := p.Clock.Now()
	return p.record(ctx, s, func(tx pgx.Tx) error {
		next, err := oneMoved(p.Store.move(ctx, tx, transition{from: []Status{Authorizing, Capturing}, to: Unknown,
			set: `unknown_phase = $1, failure_code = NULL`}, now,
			byID(c.ID, c.AttemptCount, ""), string(op)))
		if err != nil {
			return err
		}
		p.transitioned(next, reason)
		_, err = river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx,
			LookupArgs{ChargeID: c.ID, Attempt: c.AttemptCount, Op: op}, nil)
		return err
	})
}

// review sends the charge to the people: automation cannot tell or do more.
// The charge shows code and its sentence; detail, what automation knew
// (a gateway's error names hosts and URLs), goes to the log only.
// A charge that may hold an authorization has its hold checked and, unless
// a capture exists, released, so that review never leaves money held.
func (p *Pipeline) review(ctx context.Context, s stageRun, c Charge, code ReviewCode, detail string) error {
	now := p.Clock.Now()
	return p.record(ctx, s, func(tx pgx.Tx) error {
		next, err := oneMoved(p.Store.move(ctx, tx, transition{from: []Status{Scheduled, Authorizing, Authorized, Capturing, Unknown}, to: RequiresReview,
			set: reviewSet}, now,
			byID(c.ID, c.AttemptCount, ""), code.Sentence(), string(code)))
		if err != nil {
			return err
		}
		p.transitioned(next, detail)
		// The attempt is no longer in flight: a person settles it now.
		// Its slot goes back, or the customer's other charges would wait
		// on it until the day ends.
		if err := p.releaseSlotTx(ctx, tx, c, false); err != nil {
			return err
		}
		if !in(c.Status, mayHoldMoney) {
			return nil
		}
		_, err = river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx,
			ReleaseHoldArgs{ChargeID: c.ID, Attempt: next.AttemptCount}, nil)
		return err
	})
}
