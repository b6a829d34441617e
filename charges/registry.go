package charges

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/platform/metrics"
)

// A fine (a charge with a RegistryUIN) is paid only once the state payment
// registry (GIS GMP) holds its payment: a capture the registry never hears
// of takes the customer's money while the fine stays unpaid, doubles, and
// goes to the bailiffs. So the pipeline's guarded statements themselves
// refuse, whatever path leads there:
//   - a fine's authorize when no registry is configured (Pipeline.Postings
//     nil): nothing is held that could not be posted;
//   - a fine's capture unless the registry accepted the posting of that
//     very attempt and amount (postedSQL);
//   - a fine's new hold while a posting of an earlier attempt may still
//     hold a payment at the registry (priorPostingsSettledSQL).
// And the registry is told only of money that is held and can still be
// captured at the price posted: PostBy.

// postedSQL holds for a charge whose capture may start: one without a UIN,
// or one whose current attempt's hold the registry accepted at its amount.
var postedSQL = `(registry_uin IS NULL OR EXISTS (SELECT 1 FROM registry_postings rp
	WHERE rp.charge_id = charges.id AND rp.attempt = charges.attempt_count AND rp.amount = charges.amount
		AND rp.status = ` + fsm.Quoted(PostingAccepted) + `))`

// postingsSettled are the statuses of registry postings that hold no
// payment and never will (the final ones, accepted not being final):
// failed, cancelled, annulled. Any other status may hold a payment now
// or later: accepted, one still being posted, or one whose fate is not
// yet known.
var postingsSettled = []PostingStatus{PostingFailed, PostingCancelled, PostingAnnulled}

// priorPostingsSettledSQL holds, in the guarded move that starts a first
// authorize call ($2 the scheduled status), for a charge whose new hold
// may be placed as far as the registry goes: one without a UIN, or one
// every posting of whose earlier attempts is settled (postingsSettled).
// Otherwise a registry slow to answer could come to hold the old
// attempt's payment and the new one's for one fine.
var priorPostingsSettledSQL = `(status <> $2 OR registry_uin IS NULL OR NOT EXISTS (SELECT 1 FROM registry_postings rp
	WHERE rp.charge_id = charges.id AND rp.attempt < charges.attempt_count
		AND rp.status NOT IN (` + fsm.Quoted(postingsSettled...) + `)))`

// PostingDiscountMargin is the registry's DiscountMargin, under the name
// charges' rules use: the last discounted attempt starts that long before
// the discount ends.
const PostingDiscountMargin = registry.DiscountMargin

// FailureRegistryNotConfigured is the waiting reason of a fine's attempt
// that cannot start because no payment registry is configured.
const FailureRegistryNotConfigured = string(metrics.RetryRegistryNotConfigured)

// registryGuard is the condition an authorize's "about to call" adds: with
// no registry, no fine is authorized.
func (p *Pipeline) registryGuard() string {
	if p.Postings == nil {
		return "registry_uin IS NULL"
	}
	return "true"
}

// PostBy is the last moment the registry may be told of c's current hold:
// one margin before the hold lapses at its gateway (as a capture, see
// holdExpired) and, for a hold at a discounted price, PostingDiscountMargin
// before the discount ends. ok is false when neither bounds it. Nil
// gateways know no hold lifetimes.
func PostBy(gateways *fleet.Gateways, c Charge) (by time.Time, ok bool) {
	if s, found := holdSettings(gateways, c.Gateway); found && s.HoldLifetime > 0 && c.AuthorizedAt != nil {
		by, ok = c.AuthorizedAt.Add(s.HoldLifetime-min(HoldExpiryMargin, s.HoldLifetime/2)), true
	}
	if c.DiscountUntil != nil && c.Amount < c.FullAmount {
		if d := c.DiscountUntil.Add(-PostingDiscountMargin); !ok || d.Before(by) {
			by, ok = d, true
		}
	}
	return by, ok
}

func holdSettings(gateways *fleet.Gateways, name string) (fleet.Settings, bool) {
	if gateways == nil {
		return fleet.Settings{}, false
	}
	return gateways.Settings(name)
}

// posted reports whether the registry accepted the posting of c's current
// attempt at its amount.
func posted(ctx context.Context, db DBTX, c Charge) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM registry_postings WHERE charge_id = $1 AND attempt = $2 AND amount = $3
		AND status = $4)`, c.ID, c.AttemptCount, c.Amount, PostingAccepted).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("posting of charge %s: %w", c.ID, err)
	}
	return ok, nil
}

// unpostable reports whether c, an authorized fine, holds money that can
// no longer be captured: the registry did not accept its posting, and the
// last moment to post it has passed (the poster no longer posts it).
func (p *Pipeline) unpostable(ctx context.Context, c Charge, now time.Time) (bool, error) {
	if c.RegistryUIN == "" {
		return false, nil
	}
	if by, ok := PostBy(p.Gateways, c); !ok || now.Before(by) {
		return false, nil
	}
	accepted, err := posted(ctx, p.Pool, c)
	return !accepted, err
}

// priorPostingsOpen reports whether an earlier attempt of c, a fine, has a
// registry posting that is not settled (see priorPostingsSettledSQL).
func priorPostingsOpen(ctx context.Context, db DBTX, c Charge) (bool, error) {
	var open bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM registry_postings WHERE charge_id = $1 AND attempt < $2
		AND status <> ALL($3))`, c.ID, c.AttemptCount, fsm.Texts(postingsSettled)).Scan(&open)
	if err != nil {
		return false, fmt.Errorf("earlier postings of charge %s: %w", c.ID, err)
	}
	return open, nil
}

// waitForPostings holds back the authorize of c, a fine's new attempt,
// while a posting of an earlier attempt is not settled, and reports
// whether it did: the job waits and asks again (the charge shows when),
// keeping the attempt's failure code, and wakes in time for the bill's
// last moment to start an attempt.
func (p *Pipeline) waitForPostings(ctx context.Context, s stageRun, c Charge) (bool, error) {
	open, err := priorPostingsOpen(ctx, p.Pool, c)
	if err != nil || !open {
		return false, err
	}
	metrics.Retry(s.stage, metrics.RetryPostingOpen)
	delay := p.Retry.Delay(max(s.run, 1))
	now := p.Clock.Now()
	if c.PayUntil != nil && c.PayUntil.After(now) {
		delay = max(min(delay, c.PayUntil.Sub(now)), time.Second)
	}
	if err := markWaiting(ctx, p.Pool, c.ID, c.AttemptCount, c.Status, now.Add(delay), c.FailureCode, now); err != nil {
		return false, err
	}
	p.Logger.Warn().Str("charge_id", c.ID.String()).Int("attempt", c.AttemptCount).
		Msg("a fine's new hold waits: the registry has not settled an earlier attempt's posting")
	return true, river.JobSnooze(delay)
}

// waitForRegistry holds back the authorize of c, a fine, while no registry
// is configured: the job waits (the charge shows why) and runs again, so
// that the attempt starts once a node with a registry picks it up.
func (p *Pipeline) waitForRegistry(ctx context.Context, s stageRun, c Charge) error {
	metrics.Retry(s.stage, metrics.RetryRegistryNotConfigured)
	delay := p.Retry.Delay(max(s.run, 1))
	now := p.Clock.Now()
	if err := markWaiting(ctx, p.Pool, c.ID, c.AttemptCount, c.Status, now.Add(delay), FailureRegistryNotConfigured, now); err != nil {
		return err
	}
	p.Logger.Warn().Str("charge_id", c.ID.String()).Msg("a fine's attempt waits: no payment registry is configured")
	return river.JobSnooze(delay)
}
