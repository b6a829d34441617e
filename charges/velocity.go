package charges

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/internal/metrics"
)

// DeclineLimit counts each customer's declined charges per day, for the
// declines-per-day velocity limit.
type DeclineLimit interface {
	// Count records one decline, in the transaction that records it, so
	// that a stale rerun of the step counts nothing.
	Count(ctx context.Context, tx pgx.Tx, customerID string) error
	// Reached tells whether the customer has had as many declines today
	// as the limit allows.
	Reached(ctx context.Context, customerID string) (bool, error)
}

// countDecline records a decline against the limit (see DeclineLimit).
func (p *Pipeline) countDecline(ctx context.Context, tx pgx.Tx, c Charge) error {
	if p.Declines == nil {
		return nil
	}
	if err := p.Declines.Count(ctx, tx, c.CustomerID); err != nil {
		return fmt.Errorf("count decline of charge %s: %w", c.ID, err)
	}
	return nil
}

// reasonDeclineLimit is the review reason of a charge held back by the
// declines limit.
const reasonDeclineLimit = "velocity limit: the customer reached the declined charges allowed per day; POST /v1/charges/{id}/retry sends it to the gateway"

// heldForDeclines sends an authorize step to review instead of the gateway
// when its customer reached the declines limit, and reports whether it
// did. Only a new charge's first attempt, still scheduled, is held: no
// authorize of it was ever sent, so review need not look for a hold; and
// later attempts (dunning, a new card, a person's retry from review) go
// on, so that a retry approves the charge. Anything else is left for
// begin to judge.
func (p *Pipeline) heldForDeclines(ctx context.Context, s stageRun) (bool, error) {
	if p.Declines == nil {
		return false, nil
	}
	c, err := Get(ctx, p.Pool, s.chargeID)
	if errors.Is(err, ErrNotFound) || (err == nil && (c.Status != Scheduled || c.AttemptCount != s.attempt || c.AttemptCount != 1 || c.VoidRequested)) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	reached, err := p.Declines.Reached(ctx, c.CustomerID)
	if err != nil || !reached {
		return false, err
	}
	metrics.VelocityReviewed.Inc()
	metrics.StageRuns.WithLabelValues(s.stage, "review").Inc()
	return true, p.review(ctx, s, c, reasonDeclineLimit)
}
