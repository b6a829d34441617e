package charges

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/platform/metrics"
)

// ReleaseHold runs a release job for a charge that went to review while it
// may have held an authorization: it looks the attempt's capture and
// authorization up at the gateway and voids a hold that nothing captured,
// noting what it found on the charge for the people who resolve it. A
// person may resolve the charge as failed before the job runs: its hold is
// released all the same.
func (p *Pipeline) ReleaseHold(ctx context.Context, job *river.Job[ReleaseHoldArgs]) error {
	s := newStep("release_hold", job, job.Args.ChargeID, job.Args.Attempt)
	s.lookingUp = true
	defer metrics.TimeStage(s.stage)()
	c, err := Get(ctx, p.Pool, s.chargeID)
	if err != nil {
		return err
	}
	if !in(c.Status, holdChecked) || (c.Status == Failed && !c.Resolved) || c.AttemptCount != s.attempt || c.HoldReleasedAt != nil {
		metrics.StageRuns.WithLabelValues(s.stage, "stale").Inc()
		return nil
	}
	g, err := p.Gateways.Gateway(c.Gateway)
	if err != nil {
		return nil // nothing to ask; the review reason already says why
	}
	found, hold, err := p.attemptAtGateway(ctx, g, c, true)
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

// holdCheckFailed waits out a gateway that did nothing or gave no answer,
// however long: the charge is already in review, and a held authorization
// must still be released when the gateway is back. Its lookups, and a void
// under the attempt's own key, are safe to repeat, so a timeout spends no
// River attempt either (spending them would end in a discarded job and a
// hold nobody releases). Other failures are River retries.
func (p *Pipeline) holdCheckFailed(_ context.Context, s stageRun, c Charge, err error) error {
	if errors.Is(err, fleet.ErrCircuitOpen) || errors.Is(err, gateway.ErrUnavailable) {
		metrics.Retry(s.stage, metrics.RetryGatewayUnavailable)
		return river.JobSnooze(p.holdCheckWait(s, err))
	}
	if errors.Is(err, gateway.ErrUnknownOutcome) {
		metrics.Retry(s.stage, metrics.RetryUnknownOutcome)
		return river.JobSnooze(p.holdCheckWait(s, err))
	}
	if errors.Is(err, gateway.ErrUnprovable) {
		// Asking again cannot help; the charge is in review, where a
		// person settles it from the gateway's own records, and a hold
		// nobody captures expires at the provider.
		p.Logger.Warn().Str("charge_id", c.ID.String()).Str("gateway", c.Gateway).Int("attempt", c.AttemptCount).
			Msg("the gateway cannot tell whether the attempt left a hold; left to review")
		return nil
	}
	return fmt.Errorf("check hold of charge %s: %w", c.ID, err)
}

// holdCheckMaxWait bounds the waits of a hold check on a gateway that is
// down, above Retry.Max (seconds in dev mode), which paces charges a
// customer waits for: nobody waits on this check (a person's retry or
// resolution asks the gateway itself), and a gateway that fails every
// call must not be asked every few seconds for as long as it is down.
// No single wait is longer than UnavailableFor, the whole time a charge
// step waits on such a gateway, so a hold is released within that much
// of the gateway's return however long it was down.
const holdCheckMaxWait = 30 * time.Minute

// holdCheckWait is how long a hold check waits before its run number
// s.run asks again: from Retry.Base, doubling each run up to
// holdCheckMaxWait (or UnavailableFor, if shorter; Retry.Max, if longer),
// jittered within its upper half so that, below the cap, every wait is
// longer than the one two runs before. An open circuit is waited out
// first, as waitForGateway does.
func (p *Pipeline) holdCheckWait(s stageRun, err error) time.Duration {
	limit := holdCheckMaxWait
	if p.UnavailableFor > 0 {
		limit = min(limit, p.UnavailableFor)
	}
	limit = max(p.Retry.Max, limit)
	ceiling := max(p.Retry.Base, time.Millisecond)
	for i := 1; i < s.run && ceiling < limit; i++ {
		ceiling *= 2
	}
	ceiling = min(ceiling, limit)
	wait := ceiling/2 + time.Duration(rand.Int64N(int64(ceiling/2)+1))
	if errors.Is(err, fleet.ErrCircuitOpen) {
		open := p.Gateways.OpenFor()
		wait = max(wait, open+time.Duration(rand.Int64N(int64(open)+1)))
	}
	return wait
}

// attemptAtGateway looks up c's current attempt at g. found describes money
// the gateway took or holds that must not be released (a capture, or a
// void that failed); hold is the reference of a live authorization that
// nothing captured or voided. mayReplay: the caller releases any hold it
// finds, so a look by replay, which may place one, is allowed.
func (p *Pipeline) attemptAtGateway(ctx context.Context, g gateway.Gateway, c Charge, mayReplay bool) (found, hold string, err error) {
	lookup := func(op gateway.Op) (gateway.Result, bool, error) {
		res, err := p.call(ctx, c, op, func(ctx context.Context) (gateway.Result, error) {
			return p.lookup(ctx, g, c, op, mayReplay)
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
var ErrGatewayUnreachable = fault.New(fault.Unavailable, "gateway could not be asked")

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
	found, hold, err := p.attemptAtGateway(ctx, g, c, false) // a look only: it must not place a hold
	if err != nil {
		return "", fmt.Errorf("%w: look up charge %s at %s: %w", ErrGatewayUnreachable, c.ID, c.Gateway, err)
	}
	if hold != "" {
		return "a live hold " + hold + " of attempt " + fmt.Sprint(c.AttemptCount), nil
	}
	return found, nil
}
