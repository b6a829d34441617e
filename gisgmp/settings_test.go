package gisgmp_test

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/gisgmp"
)

// A uip is 32 digits: "1", the BIK, the branch padded to 6, the Moscow day
// of the hold (DDMMYYYY) and an 8-digit number; the same posting gets the
// same one, another attempt or amount another.
func TestUIPIsWellFormedAndPerAttemptAndAmount(t *testing.T) {
	t.Parallel()
	ids := gisgmp.PaymentIDs{Format: gisgmp.PaymentIDUIP, BIK: "044525225", Branch: "17"}
	// 22:30 UTC on the 31st is already the 1st of April in Moscow.
	at := time.Date(2027, 3, 31, 22, 30, 0, 0, time.UTC)
	id := ids.ID("enr:18810142200817004923", 1, 50000, at, 0)
	require.Regexp(t, regexp.MustCompile(`^1`+`044525225`+`000017`+`01042027`+`\d{8}$`), id)
	require.Equal(t, id, ids.ID("enr:18810142200817004923", 1, 50000, at, 0), "a retry is a replay")
	require.NotEqual(t, id, ids.ID("enr:18810142200817004923", 2, 50000, at, 0), "a new attempt is a new payment")
	require.NotEqual(t, id, ids.ID("enr:18810142200817004923", 1, 100000, at, 0), "a new amount is a new payment")
	require.NotEqual(t, id, ids.ID("enr:18810142200817004923", 1, 50000, at, 1), "another try is another identifier")
	noBranch := gisgmp.PaymentIDs{Format: gisgmp.PaymentIDUIP, BIK: "044525225"}.ID("k", 1, 1, at, 0)
	require.Equal(t, "1044525225000000", noBranch[:16])
}

// The zero PaymentIDs is the hex form the simulated registry has always
// been given.
func TestZeroPaymentIDsIsHex(t *testing.T) {
	t.Parallel()
	at := time.Date(2027, 3, 20, 9, 0, 0, 0, time.UTC)
	require.Equal(t, gisgmp.PaymentID("enr:1", 1, 500), gisgmp.PaymentIDs{}.ID("enr:1", 1, 500, at, 0))
	other := gisgmp.PaymentIDs{}.ID("enr:1", 1, 500, at, 1)
	require.Len(t, other, 32)
	require.NotEqual(t, gisgmp.PaymentID("enr:1", 1, 500), other)
}

// Gateways with priorities are tried lower first, taking turns among
// equals; a degraded one goes after every healthy one whatever its
// priority.
func TestBalancerTriesByPriorityInTurnAmongEquals(t *testing.T) {
	t.Parallel()
	a, b, c := newFakeGateway(t, "a"), newFakeGateway(t, "b"), newFakeGateway(t, "c")
	for _, g := range []*fakeGateway{a, b, c} {
		g.PostFunc = posts(nil)
	}
	bal := gisgmp.NewBalancer([]gisgmp.Gateway{
		gisgmp.WithSettings(c, gisgmp.Settings{Priority: 2}),
		gisgmp.WithSettings(a, gisgmp.Settings{Priority: 1}),
		gisgmp.WithSettings(b, gisgmp.Settings{Priority: 1}),
	}, time.Second)
	for i := 0; i < 6; i++ {
		used, err := bal.Post(context.Background(), gisgmp.Payment{PaymentID: "p"})
		require.NoError(t, err)
		require.Contains(t, []string{"a", "b"}, used)
	}
	require.Len(t, a.callsOf("post"), 3, "equals take turns")
	require.Len(t, b.callsOf("post"), 3)
	require.Empty(t, c.callsOf("post"), "a lower priority is not tried while a higher answers")

	a.PostFunc, b.PostFunc = posts(gisgmp.ErrUnavailable), posts(gisgmp.ErrUnavailable)
	used, err := bal.Post(context.Background(), gisgmp.Payment{PaymentID: "p"})
	require.NoError(t, err)
	require.Equal(t, "c", used, "the next priority takes over")
	used, err = bal.Post(context.Background(), gisgmp.Payment{PaymentID: "p"})
	require.NoError(t, err)
	require.Equal(t, "c", used, "degraded gateways go last")
}

// A gateway's own timeout bounds its calls instead of the balancer's; past
// it the outcome is unknown.
func TestGatewayTimeoutOverridesTheBalancers(t *testing.T) {
	t.Parallel()
	g := newFakeGateway(t, "slow")
	g.PostFunc = func(ctx context.Context, _ gisgmp.Payment) error {
		<-ctx.Done()
		return ctx.Err()
	}
	bal := gisgmp.NewBalancer([]gisgmp.Gateway{gisgmp.WithSettings(g, gisgmp.Settings{Timeout: 20 * time.Millisecond})}, time.Hour)
	_, err := bal.Post(context.Background(), gisgmp.Payment{PaymentID: "p"})
	require.ErrorIs(t, err, gisgmp.ErrUnknownOutcome)
}

// A pending answer is an unknown outcome whose gateway stays healthy.
func TestPendingIsAnUnknownOutcomeOfAHealthyGateway(t *testing.T) {
	t.Parallel()
	err := error(&gisgmp.PendingError{Gateway: "a", RetryAfter: time.Minute})
	require.True(t, errors.Is(err, gisgmp.ErrUnknownOutcome))
	pe, ok := gisgmp.Pending(fmtWrap(err))
	require.True(t, ok)
	require.Equal(t, time.Minute, pe.RetryAfter)

	a, b := newFakeGateway(t, "a"), newFakeGateway(t, "b")
	a.PostFunc, b.PostFunc = posts(err), posts(nil)
	bal := gisgmp.NewBalancer([]gisgmp.Gateway{gisgmp.WithSettings(a, gisgmp.Settings{Priority: 1}),
		gisgmp.WithSettings(b, gisgmp.Settings{Priority: 2})}, time.Second)
	for i := 0; i < 2; i++ {
		used, perr := bal.Post(context.Background(), gisgmp.Payment{PaymentID: "p"})
		require.Equal(t, "a", used, "not moved off")
		_, ok := gisgmp.Pending(perr)
		require.True(t, ok)
	}
}

func fmtWrap(err error) error { return errors.Join(errors.New("context"), err) }

// A posting the registry took but has not accepted yet waits for the
// gateway's Retry-After (the job snoozes, nothing is looked up, the
// posting stays open), then its replay's acceptance is recorded.
func TestPendingPostingSnoozesForRetryAfterThenIsAccepted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPosting(ctx, t)
	b.gw.PostFunc = posts(&gisgmp.PendingError{Gateway: "gmp1", RetryAfter: 90 * time.Second})
	res, err := b.post.Work(ctx, t, b.tx, gisgmp.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind)
	require.WithinDuration(t, b.clock.Now().Add(90*time.Second), res.Job.ScheduledAt, 2*time.Second)
	require.Empty(t, b.gw.callsOf("lookup"), "a pending answer is no lost one")
	status, _, _ := b.posting(ctx, t, b.id)
	require.Equal(t, gisgmp.StatusPosting, status)
	rivertest.RequireNotInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.CaptureArgs{}, nil)

	b.gw.PostFunc = posts(nil)
	_, err = b.post.Work(ctx, t, b.tx, gisgmp.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	status, _, _ = b.posting(ctx, t, b.id)
	require.Equal(t, gisgmp.StatusAccepted, status)
	rivertest.RequireInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.CaptureArgs{}, nil)
}

// A lost answer whose look-up finds the payment still processing waits
// as a pending one does.
func TestLostAnswerFoundProcessingWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPosting(ctx, t)
	b.gw.PostFunc = posts(gisgmp.ErrUnknownOutcome)
	b.gw.LookupFunc = looksUp(false, false, &gisgmp.PendingError{Gateway: "gmp1", RetryAfter: time.Minute})
	res, err := b.post.Work(ctx, t, b.tx, gisgmp.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind)
	status, _, _ := b.posting(ctx, t, b.id)
	require.Equal(t, gisgmp.StatusPosting, status)
}

// A posting still processing past GiveUpAfter is abandoned at once: its
// hold is released whether or not its withdrawal (an annulment of it) goes
// through, and the registry is asked until it shows the payment annulled.
func TestPendingPostingPastTheBoundIsAbandonedAndWithdrawn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPosting(ctx, t)
	b.gw.PostFunc = posts(&gisgmp.PendingError{Gateway: "gmp1", RetryAfter: time.Minute})
	b.clock.Advance(giveUpAfter + time.Minute)

	b.gw.AnnulFunc = annuls(gisgmp.ErrUnavailable)
	res, err := b.post.Work(ctx, t, b.tx, gisgmp.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind)
	status, _, lastError := b.posting(ctx, t, b.id)
	require.Equal(t, gisgmp.StatusAbandoned, status, "the hold does not wait for the withdrawal")
	require.Contains(t, lastError, "still processing")
	require.Equal(t, charges.RequiresReview, b.chargeNow(ctx, t).Status)
	require.Len(t, b.gw.callsOf("annul"), 1, "withdrawal asked for")

	b.gw.LookupFunc = looksUp(true, true, nil)
	_, err = b.post.Work(ctx, t, b.tx, gisgmp.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	status, _, _ = b.posting(ctx, t, b.id)
	require.Equal(t, gisgmp.StatusAnnulled, status)
	require.Len(t, b.gw.callsOf("post"), 1, "an abandoned posting is never posted again")
}

// Held stores a posting under the first identifier derived that no other
// posting holds, and keeps a stored posting's identifier when the hold is
// recorded again.
func TestHeldPassesOverAnIdentifierAnotherPostingHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPosting(ctx, t)
	ids := gisgmp.PaymentIDs{Format: gisgmp.PaymentIDUIP, BIK: "044525225"}
	c, _ := b.heldFine(ctx, t, "18810162210739014395")
	_, err := b.pool.Exec(ctx, `DELETE FROM registry_postings WHERE charge_id = $1`, c.ID)
	require.NoError(t, err)
	first := ids.ID(c.Key(), 1, 500, b.clock.Now(), 0)
	_, err = b.pool.Exec(ctx, `UPDATE registry_postings SET payment_id = $2 WHERE charge_id = $1`, b.charge.ID, first)
	require.NoError(t, err)

	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Logger: slog.New(slog.DiscardHandler), TestOnly: true})
	require.NoError(t, err)
	poster := &gisgmp.Poster{Pool: b.pool, Clock: b.clock, PaymentIDs: ids}
	ctx = rivertest.WorkContext(ctx, client)
	require.NoError(t, poster.Held(ctx, b.tx, c))
	second := ids.ID(c.Key(), 1, 500, b.clock.Now(), 1)
	var stored string
	require.NoError(t, b.tx.QueryRow(ctx, `SELECT payment_id FROM registry_postings WHERE charge_id = $1`, c.ID).Scan(&stored))
	require.Equal(t, second, stored)
	job := rivertest.RequireInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, gisgmp.PostArgs{}, nil)
	require.Equal(t, second, job.Args.PaymentID)

	b.clock.Advance(48 * time.Hour) // another day: another first choice
	require.NoError(t, poster.Held(ctx, b.tx, c))
	var n int
	require.NoError(t, b.tx.QueryRow(ctx, `SELECT count(*) FROM registry_postings WHERE charge_id = $1`, c.ID).Scan(&n))
	require.Equal(t, 1, n, "the stored posting is kept with its identifier")
}
