package charges

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// requestVoid flags the subscription's charges that have not been captured
// so that no capture starts, and returns those that may hold money.
// Charges not yet authorized become voided at once: no hold exists to
// release.
func (s *Store) requestVoid(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID, now time.Time) ([]Charge, error) {
	if _, err := s.voidWaiting(ctx, tx, subscriptionID, now, "subscription_cancelled", time.Time{}); err != nil {
		return nil, err
	}
	return collect(tx.Query(ctx, `UPDATE charges SET void_requested = true, updated_at = $2
		WHERE subscription_id = $1 AND status = ANY($3) AND NOT void_requested
		RETURNING `+columns, subscriptionID, now, texts([]Status{Authorizing, Authorized, Unknown})))
}

// voidWaiting voids the subscription's charges that no attempt is working
// on (scheduled or declined) whose period started at or after since.
func (s *Store) voidWaiting(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID, now time.Time, code string, since time.Time) (int64, error) {
	voided, err := s.move(ctx, tx, transition{from: []Status{Scheduled, Declined}, to: Voided,
		set: "failure_code = $2"}, now,
		matching("subscription_id = $1 AND period_start >= $3"), subscriptionID, code, since)
	if err != nil {
		return 0, fmt.Errorf("void waiting charges: %w", err)
	}
	return int64(len(voided)), nil
}

// dunningEnded applies the end of a subscription's dunning (it became
// unpaid at dunningEnd) to its other charges: those of periods that began
// at or after that moment are not owed (NotOwedSince: an attempt in flight
// is not interrupted at the gateway, but a hold it gets is released and it
// is never tried again); declined ones of earlier periods stop retrying
// (failed: a payment-method change retries them).
func (s *Store) dunningEnded(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID, dunningEnd, now time.Time) error {
	if err := s.NotOwedSince(ctx, tx, subscriptionID, dunningEnd, now); err != nil {
		return err
	}
	if _, err := s.move(ctx, tx, transition{from: []Status{Declined}, to: Failed}, now,
		matching("subscription_id = $1"), subscriptionID); err != nil {
		return fmt.Errorf("stop dunning: %w", err)
	}
	return nil
}

// hasUnpaid reports whether the subscription has a charge other than
// except that is owed and not collected: declined, or failed and not
// settled by a person.
func hasUnpaid(ctx context.Context, db DBTX, subscriptionID, except uuid.UUID) (bool, error) {
	var found bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM charges WHERE subscription_id = $1 AND id <> $2
		AND (status = $3 OR (status = $4 AND resolution IS NULL)))`,
		subscriptionID, except, string(Declined), string(Failed)).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("look for unpaid charges: %w", err)
	}
	return found, nil
}

// HasOpen reports whether the subscription has a charge that automation is
// still working on or waiting to retry.
func HasOpen(ctx context.Context, db DBTX, subscriptionID uuid.UUID) (bool, error) {
	var found bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM charges WHERE subscription_id = $1 AND status = ANY($2))`,
		subscriptionID, texts(open)).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("look for open charges: %w", err)
	}
	return found, nil
}

// NotOwedSince makes sure that no charge of a period that began at or
// after since (the end of the subscription's dunning: such periods are not
// owed) moves money, when the dunning ends and again when the subscription
// leaves unpaid: waiting ones are voided, and ones in flight or in review
// are flagged so that a hold they get is voided, a decline voids them, and
// no new attempt starts (a new card, a retry, a support retry). A capture
// already sent is not flagged: it stands.
func (s *Store) NotOwedSince(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID, since, now time.Time) error {
	if _, err := s.voidWaiting(ctx, tx, subscriptionID, now, "subscription_unpaid", since); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE charges SET void_requested = true, updated_at = $2
		WHERE subscription_id = $1 AND status = ANY($3) AND period_start >= $4 AND NOT void_requested`,
		subscriptionID, now, texts([]Status{Authorizing, Authorized, Unknown, RequiresReview}), since); err != nil {
		return fmt.Errorf("flag charges of periods not owed: %w", err)
	}
	return nil
}
