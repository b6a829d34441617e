package charges

import (
	"context"
	"fmt"

	"github.com/google/uuid"
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

// heldForDeclines sends a new charge to review instead of the gateway,
// right before its authorize would be sent, when its customer reached the
// declines limit, and reports whether it did. Only the first run of a
// charge's first attempt is held: nothing of it was ever sent (a rerun
// may have sent it, and goes on), so review need not look for a hold; and
// later attempts (dunning, a new card, a person's retry from review) go
// on, so that a retry approves the charge. Bills are never held: a fine
// must not miss its discount deadline for it.
func (p *Pipeline) heldForDeclines(ctx context.Context, s stageRun, c Charge) (bool, error) {
	if p.Declines == nil || s.run != 1 || c.AttemptCount != 1 || c.Status != Authorizing || c.EnrollmentID != uuid.Nil {
		return false, nil
	}
	reached, err := p.Declines.Reached(ctx, c.CustomerID)
	if err != nil || !reached {
		return false, err
	}
	metrics.VelocityLimited.WithLabelValues("declines").Inc()
	metrics.StageRuns.WithLabelValues(s.stage, "review").Inc()
	now := p.Clock.Now()
	return true, p.record(ctx, s, func(tx pgx.Tx) error {
		next, err := move(ctx, tx, c.ID, c.AttemptCount, []Status{Authorizing}, RequiresReview, now,
			`review_reason = $1`, reasonDeclineLimit)
		if err == nil {
			p.transitioned(next, reasonDeclineLimit)
		}
		return err
	})
}
