package charges_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/charges/registry/testkit/registrytest"
	"github.com/rebill/rebill/testkit/testsupport"
)

// A fine's hold that the poster found past its last moment to be posted
// is released by the void job it enqueued, whatever that job finds when
// it runs: its node's reading of the clock may lag the poster's (a dev
// clock that could not be read answers with the last time it saw), and
// the registry may turn out to hold an earlier run's payment, which the
// poster then records accepted. Judging the bound again, the job found
// nothing to do and the hold stayed authorized with no job to move it,
// neither posted nor captured. Released, the charge goes on to its next
// attempt, and an accepted posting is among those the sweep annuls.
func TestHoldTooLateToPostIsVoidedAsThePosterDecided(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		lag     time.Duration // how far the void job's reading of the clock is behind the poster's
		known   bool          // the registry holds the payment: an earlier run's post got there, its answer lost
		posting charges.PostingStatus
	}{
		"the void job's clock lags the poster's":            {lag: 2 * time.Minute, posting: charges.PostingCancelled},
		"an earlier run's payment is found at the registry": {known: true, posting: charges.PostingAccepted},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			b.withHoldLifetime()
			b.pipeline.UnavailableFor = 2 * holdLifetime
			b.pipeline.Owners.Enrollments = &fakeEnrollments{}
			b.pipeline.Postings = &fakePostings{}
			c := newFineCharge(ctx, t, b, start.Add(holdLifetime+17*24*time.Hour)) // the hold's lifetime bounds it
			b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
			authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
			_, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
			require.NoError(t, err)
			held := b.get(ctx, t, c.ID)
			require.Equal(t, charges.Authorized, held.Status)
			by, ok := charges.PostBy(b.pipeline.Gateways, held)
			require.True(t, ok)
			paymentID := registry.PaymentID(c.Key(), 1, 500)
			_, err = b.pool.Exec(ctx, `INSERT INTO registry_postings (payment_id, charge_id, attempt, uin, amount, status, created_at, updated_at)
				VALUES ($1, $2, 1, $3, 500, 'posting', $4, $4)`, paymentID, c.ID, fineUIN, b.clock.Now())
			require.NoError(t, err)

			// The poster runs at the hold's last moment to be posted.
			posterClock := testsupport.NewClock(by)
			gw := registrytest.NewFake(t, "gmp1")
			gw.LookupFunc = registrytest.LooksUp(tc.known, false, nil)
			poster := &charges.Poster{Pool: b.pool, Gateways: registry.NewBalancer([]registry.Gateway{gw}, time.Second),
				Clock: posterClock, Holds: b.pipeline.Gateways, Charges: b.pipeline.Store, GiveUpAfter: 24 * time.Hour,
				Retry: charges.RetryPolicy{Base: time.Second, Max: time.Minute, Now: posterClock.Now}, Logger: zerolog.Nop()}
			workers := river.NewWorkers()
			charges.RegisterPoster(workers, poster)
			post := rivertest.NewWorker(t, b.driver, &river.Config{Logger: slog.New(slog.DiscardHandler),
				Test: river.TestConfig{Time: posterClock}, TestOnly: true, Workers: workers}, &charges.PostWorker{Poster: poster})
			_, err = post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: paymentID}, nil)
			require.NoError(t, err)
			require.Empty(t, gw.CallsOf("post"), "nothing is sent to the registry")
			var status charges.PostingStatus
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT status FROM registry_postings WHERE payment_id = $1`, paymentID).Scan(&status))
			require.Equal(t, tc.posting, status)

			// The void job the poster enqueued runs as enqueued.
			b.clock.Advance(by.Sub(b.clock.Now()) - tc.lag)
			b.gateway.VoidFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded, Reference: "void_1"}, nil)
			job := rivertest.RequireInserted[*riverpgxv5.Driver](ctx, t, b.driver, charges.VoidArgs{}, nil)
			void := newWorker(t, b, &charges.VoidWorker{Pipeline: b.pipeline})
			_, err = void.WorkJob(ctx, t, b.tx, job.JobRow)
			require.NoError(t, err)

			require.Equal(t, []string{c.Key() + ":a1:void"}, b.ops(gateway.OpVoid), "the hold is released at the gateway")
			got := b.get(ctx, t, c.ID)
			require.Equal(t, charges.Declined, got.Status)
			require.Equal(t, charges.FailureHoldExpired, got.FailureCode)
			require.NotNil(t, got.NextAttemptAt)
			require.True(t, got.NextAttemptAt.Equal(b.clock.Now()), "the next attempt is due at once: %s", got.NextAttemptAt)
			var annul []string
			require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
				annul, err = charges.PostingsToAnnul(ctx, tx, 10)
				return err
			}))
			if tc.known {
				require.Equal(t, []string{paymentID}, annul, "the payment the registry holds is annulled: its money was released")
			} else {
				require.Empty(t, annul)
			}
		})
	}
}
