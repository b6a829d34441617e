package charges

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/internal/metrics"
)

// A fine (a charge with a RegistryUIN) is paid only once the state payment
// registry (GIS GMP) holds its payment: a capture the registry never hears
// of takes the customer's money while the fine stays unpaid, doubles, and
// goes to the bailiffs. So the pipeline's guarded statements themselves
// refuse, whatever path leads there:
//   - a fine's authorize when no registry is configured (Pipeline.Postings
//     nil): nothing is held that could not be posted;
//   - a fine's capture unless the registry accepted the posting of that
//     very attempt and amount (postedSQL).
// And the registry is told only of money that is held and can still be
// captured at the price posted: PostBy.

// postingAccepted is the status of a registry posting the registry holds
// (gisgmp.StatusAccepted; that package builds on this one).
const postingAccepted = "accepted"

// postedSQL holds for a charge whose capture may start: one without a UIN,
// or one whose current attempt's hold the registry accepted at its amount.
const postedSQL = `(registry_uin IS NULL OR EXISTS (SELECT 1 FROM registry_postings rp
	WHERE rp.charge_id = charges.id AND rp.attempt = charges.attempt_count AND rp.amount = charges.amount
		AND rp.status = '` + postingAccepted + `'))`

// PostingDiscountMargin is how long before a discount ends a hold at the
// discounted price is no longer posted: the capture that follows the
// posting must reach the gateway while the discount holds (the margin the
// last discounted attempt keeps, decision 31).
const PostingDiscountMargin = time.Hour

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
		AND status = $4)`, c.ID, c.AttemptCount, c.Amount, postingAccepted).Scan(&ok)
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
