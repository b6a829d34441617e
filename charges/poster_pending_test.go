package charges_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/charges/registry/testkit/registrytest"
)

// A posting the registry took but has not accepted yet waits for the
// gateway's Retry-After (the job snoozes, nothing is looked up, the
// posting stays open), then its replay's acceptance is recorded.
func TestPendingPostingSnoozesForRetryAfterThenIsAccepted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPosting(ctx, t)
	b.gw.PostFunc = registrytest.Posts(&registry.PendingError{Gateway: "gmp1", RetryAfter: 90 * time.Second})
	res, err := b.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind)
	require.WithinDuration(t, b.clock.Now().Add(90*time.Second), res.Job.ScheduledAt, 2*time.Second)
	require.Empty(t, b.gw.CallsOf("lookup"), "a pending answer is no lost one")
	status, _, _ := b.posting(ctx, t, b.id)
	require.Equal(t, charges.PostingPosting, status)
	rivertest.RequireNotInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.CaptureArgs{}, nil)

	b.gw.PostFunc = registrytest.Posts(nil)
	_, err = b.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	status, _, _ = b.posting(ctx, t, b.id)
	require.Equal(t, charges.PostingAccepted, status)
	rivertest.RequireInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.CaptureArgs{}, nil)
}

// A lost answer whose look-up finds the payment still processing waits
// as a pending one does.
func TestLostAnswerFoundProcessingWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPosting(ctx, t)
	b.gw.PostFunc = registrytest.Posts(registry.ErrUnknownOutcome)
	b.gw.LookupFunc = registrytest.LooksUp(false, false, &registry.PendingError{Gateway: "gmp1", RetryAfter: time.Minute})
	res, err := b.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind)
	status, _, _ := b.posting(ctx, t, b.id)
	require.Equal(t, charges.PostingPosting, status)
}

// A posting still processing past GiveUpAfter is abandoned at once: its
// hold is released whether or not its withdrawal (an annulment of it) goes
// through, and the registry is asked until it shows the payment annulled.
func TestPendingPostingPastTheBoundIsAbandonedAndWithdrawn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPosting(ctx, t)
	b.gw.PostFunc = registrytest.Posts(&registry.PendingError{Gateway: "gmp1", RetryAfter: time.Minute})
	b.clock.Advance(giveUpAfter + time.Minute)

	b.gw.AnnulFunc = registrytest.Annuls(registry.ErrUnavailable)
	res, err := b.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind)
	status, _, lastError := b.posting(ctx, t, b.id)
	require.Equal(t, charges.PostingAbandoned, status, "the hold does not wait for the withdrawal")
	require.Contains(t, lastError, "still processing")
	require.Equal(t, charges.RequiresReview, b.chargeNow(ctx, t).Status)
	require.Len(t, b.gw.CallsOf("annul"), 1, "withdrawal asked for")

	b.gw.LookupFunc = registrytest.LooksUp(true, true, nil)
	_, err = b.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	status, _, _ = b.posting(ctx, t, b.id)
	require.Equal(t, charges.PostingAnnulled, status)
	require.Len(t, b.gw.CallsOf("post"), 1, "an abandoned posting is never posted again")
}

// Held stores a posting under the first identifier derived that no other
// posting holds, and keeps a stored posting's identifier when the hold is
// recorded again.
func TestHeldPassesOverAnIdentifierAnotherPostingHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPosting(ctx, t)
	ids := registry.PaymentIDs{Format: registry.PaymentIDUIP, BIK: "044525225"}
	c, _ := b.heldFine(ctx, t, "18810162210739014395")
	_, err := b.pool.Exec(ctx, `DELETE FROM registry_postings WHERE charge_id = $1`, c.ID)
	require.NoError(t, err)
	first := ids.ID(c.Key(), 1, 500, c.PeriodStart, 0)
	_, err = b.pool.Exec(ctx, `UPDATE registry_postings SET payment_id = $2 WHERE charge_id = $1`, b.charge.ID, first)
	require.NoError(t, err)

	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Logger: slog.New(slog.DiscardHandler), TestOnly: true})
	require.NoError(t, err)
	poster := &charges.Poster{Pool: b.pool, Clock: b.clock, PaymentIDs: ids}
	ctx = rivertest.WorkContext(ctx, client)
	require.NoError(t, poster.Held(ctx, b.tx, c))
	second := ids.ID(c.Key(), 1, 500, c.PeriodStart, 1)
	var stored string
	require.NoError(t, b.tx.QueryRow(ctx, `SELECT payment_id FROM registry_postings WHERE charge_id = $1`, c.ID).Scan(&stored))
	require.Equal(t, second, stored)
	job := rivertest.RequireInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.PostArgs{}, nil)
	require.Equal(t, second, job.Args.PaymentID)

	b.clock.Advance(48 * time.Hour)
	require.NoError(t, poster.Held(ctx, b.tx, c))
	var n int
	require.NoError(t, b.tx.QueryRow(ctx, `SELECT count(*) FROM registry_postings WHERE charge_id = $1`, c.ID).Scan(&n))
	require.Equal(t, 1, n, "the stored posting is kept with its identifier")
}

// An attempt whose posting a database restore forgot, held again days
// later, is given the identifier the registry already has: the registry
// answers the post as a replay instead of taking a second payment.
func TestHeldGivesARestoredAttemptItsFirstIdentifierOnAnotherDay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPosting(ctx, t)
	ids := registry.PaymentIDs{Format: registry.PaymentIDUIP, BIK: "044525225"}
	c, _ := b.heldFine(ctx, t, "18810162210739014396")
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Logger: slog.New(slog.DiscardHandler), TestOnly: true})
	require.NoError(t, err)
	poster := &charges.Poster{Pool: b.pool, Clock: b.clock, PaymentIDs: ids}
	ctx = rivertest.WorkContext(ctx, client)
	stored := func() string {
		var id string
		require.NoError(t, b.tx.QueryRow(ctx, `SELECT payment_id FROM registry_postings WHERE charge_id = $1`, c.ID).Scan(&id))
		return id
	}
	_, err = b.tx.Exec(ctx, `DELETE FROM registry_postings WHERE charge_id = $1`, c.ID)
	require.NoError(t, err)
	require.NoError(t, poster.Held(ctx, b.tx, c))
	first := stored()

	// The restore: the posting is gone, the hold is recorded again on
	// another day (in Moscow too).
	_, err = b.tx.Exec(ctx, `DELETE FROM registry_postings WHERE charge_id = $1`, c.ID)
	require.NoError(t, err)
	b.clock.Advance(3 * 24 * time.Hour)
	require.NoError(t, poster.Held(ctx, b.tx, c))
	require.Equal(t, first, stored(), "the same attempt is the same payment whatever the day")
}
