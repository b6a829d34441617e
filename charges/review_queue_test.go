package charges_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/testkit/dbtest"
)

// The review queue lists charges by when they entered review, and pages
// by that time: a later change that keeps a charge in review (a hold
// check's note) does not send it to the back.
func TestReviewQueueOrderIsEntryIntoReview(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	sub := uuid.New()
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	_, err := pool.Exec(ctx, `INSERT INTO subscriptions (id, customer_id, status, amount, currency, interval,
			interval_count, timezone, billing_anchor, next_charge_at, pm_gateway, pm_token, pm_exp_month, pm_exp_year,
			created_at, updated_at)
		VALUES ($1, 'cus_1', 'active', 1999, 'EUR', 'month', 1, 'UTC', $2, $2, 'sim1', 't', 12, 2030, $2, $2)`, sub, t0)
	require.NoError(t, err)
	var ids []uuid.UUID
	for i, s := range []charges.Status{charges.RequiresReview, charges.Unknown, charges.RequiresReview, charges.Succeeded} {
		id := uuid.Must(uuid.NewV7())
		at := t0.Add(time.Duration(i) * time.Minute)
		_, err := pool.Exec(ctx, `INSERT INTO charges (id, subscription_id, customer_id, period_key, period_start, amount, currency,
				gateway, pm_token, status, created_at, updated_at, attempt_due_at)
			VALUES ($1, $2, 'cus_1', $3, $4, 1999, 'EUR', 'sim1', 't', $5, $4, $4, $4)`,
			id, sub, at.Format(time.TimeOnly), at, string(s))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	_, err = pool.Exec(ctx, `UPDATE charges SET review_reason = 'looked up', updated_at = $2 WHERE id = $1`, ids[0], t0.Add(time.Hour))
	require.NoError(t, err)

	page, err := charges.ReviewQueue(ctx, pool, nil, 2)
	require.NoError(t, err)
	require.Len(t, page, 2)
	require.Equal(t, []uuid.UUID{ids[0], ids[1]}, []uuid.UUID{page[0].ID, page[1].ID}, "oldest in review first")
	cursor, err := charges.ParseReviewCursor(charges.ReviewCursorOf(page[1]).String())
	require.NoError(t, err)
	page, err = charges.ReviewQueue(ctx, pool, &cursor, 2)
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, ids[2], page[0].ID)
	n, err := charges.CountInReview(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
}
