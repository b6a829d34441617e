package notify_test

import (
	"context"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

// keep is the least retention REBILL_EVENTS_RETENTION accepts.
const keep = 396 * 24 * time.Hour

type retentionBundle struct {
	pool     *pgxpool.Pool
	now      time.Time
	cutoff   time.Time
	endpoint uuid.UUID
}

func setupRetention(t *testing.T) retentionBundle {
	t.Helper()
	pool := dbtest.Pool(t)
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	b := retentionBundle{pool: pool, now: now, cutoff: now.Add(-keep), endpoint: uuid.New()}
	_, err := pool.Exec(context.Background(), `INSERT INTO webhook_endpoints (id, url, events, status, secret, created_at, updated_at)
		VALUES ($1, 'https://example.com/hook', '{*}', 'enabled', 'k:sealed', $2, $2)`, b.endpoint, now.Add(-2*keep))
	require.NoError(t, err)
	return b
}

// idAt is a UUIDv7 made at t, as uuid.NewV7 makes them.
func idAt(t *testing.T, at time.Time) uuid.UUID {
	t.Helper()
	id, err := uuid.NewV7()
	require.NoError(t, err)
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(at.UnixMilli()))
	copy(id[:6], ms[2:])
	return id
}

// event writes an event whose id was made at madeAt and whose created_at
// is at.
func (b retentionBundle) event(t *testing.T, madeAt, at time.Time) uuid.UUID {
	t.Helper()
	id := idAt(t, madeAt)
	_, err := b.pool.Exec(context.Background(), `INSERT INTO events (id, type, object_id, customer_id, created_at, data)
		VALUES ($1, 'subscription.created', $2, 'cust-1', $3, '{}')`, id, uuid.New(), at)
	require.NoError(t, err)
	return id
}

// attempt records a delivery attempt of event to the bundle's endpoint.
func (b retentionBundle) attempt(t *testing.T, event uuid.UUID, outcome string) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), `INSERT INTO webhook_attempts (endpoint_id, event_id, attempt, outcome, duration_ms, at)
		VALUES ($1, $2, 1, $3, 5, $4)`, b.endpoint, event, outcome, b.now)
	require.NoError(t, err)
}

// delivery queues a webhook_deliver job of event in state.
func (b retentionBundle) delivery(t *testing.T, event uuid.UUID, state string) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), `INSERT INTO river_job (args, kind, max_attempts, queue, state, attempt,
			attempted_at, finalized_at, scheduled_at)
		VALUES (jsonb_build_object('event_id', $1::text, 'endpoint_id', $2::text), 'webhook_deliver', 1000, 'webhooks', $3::river_job_state,
			1, now(), CASE WHEN $3::text IN ('completed', 'cancelled', 'discarded') THEN now() END, now())`,
		event, b.endpoint, state)
	require.NoError(t, err)
}

func (b retentionBundle) exists(t *testing.T, event uuid.UUID) bool {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE id = $1`, event).Scan(&n))
	return n == 1
}

func (b retentionBundle) attempts(t *testing.T, event uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_attempts WHERE event_id = $1`, event).Scan(&n))
	return n
}

func (b retentionBundle) worker(keep time.Duration, batch int) *notify.RetentionWorker {
	return &notify.RetentionWorker{Pool: b.pool, Clock: testsupport.NewClock(b.now), Keep: keep, Batch: batch}
}

func work(t *testing.T, w *notify.RetentionWorker) error {
	t.Helper()
	return w.Work(context.Background(), &river.Job[notify.RetentionArgs]{})
}

// Events created before now minus the retention go with their attempts;
// one created exactly at that instant, and later ones, stay with theirs.
// created_at decides, not the id's time; an event whose id was made after
// the cutoff waits for a later run.
func TestRetentionDeletesEventsOlderThanTheRetention(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)
	old := b.event(t, b.cutoff.Add(-30*24*time.Hour), b.cutoff.Add(-30*24*time.Hour))
	b.attempt(t, old, notify.OutcomeRetrying)
	b.attempt(t, old, notify.OutcomeDelivered)
	justBefore := b.event(t, b.cutoff.Add(-time.Microsecond), b.cutoff.Add(-time.Microsecond))
	b.attempt(t, justBefore, notify.OutcomeFailed)
	atCutoff := b.event(t, b.cutoff, b.cutoff)
	b.attempt(t, atCutoff, notify.OutcomeDelivered)
	madeBeforeAtCutoff := b.event(t, b.cutoff.Add(-time.Second), b.cutoff)
	madeAfterOld := b.event(t, b.cutoff.Add(time.Second), b.cutoff.Add(-time.Hour))
	recent := b.event(t, b.now.Add(-time.Hour), b.now.Add(-time.Hour))
	b.attempt(t, recent, notify.OutcomeDelivered)

	events := testutil.ToFloat64(metrics.RetentionDeleted.WithLabelValues(notify.TableEvents))
	attempts := testutil.ToFloat64(metrics.RetentionDeleted.WithLabelValues(notify.TableAttempts))
	require.NoError(t, work(t, b.worker(keep, 0)))

	require.False(t, b.exists(t, old))
	require.Zero(t, b.attempts(t, old))
	require.False(t, b.exists(t, justBefore))
	require.Zero(t, b.attempts(t, justBefore))
	require.True(t, b.exists(t, atCutoff), "an event exactly as old as the retention is kept")
	require.Equal(t, 1, b.attempts(t, atCutoff))
	require.True(t, b.exists(t, madeBeforeAtCutoff), "created_at decides")
	require.True(t, b.exists(t, madeAfterOld), "an id made after the cutoff is not read")
	require.True(t, b.exists(t, recent))
	require.Equal(t, 1, b.attempts(t, recent))
	// Other tests of the package delete in parallel: at least these.
	require.GreaterOrEqual(t, testutil.ToFloat64(metrics.RetentionDeleted.WithLabelValues(notify.TableEvents))-events, 2.0)
	require.GreaterOrEqual(t, testutil.ToFloat64(metrics.RetentionDeleted.WithLabelValues(notify.TableAttempts))-attempts, 3.0)

	// A day later the cutoff has passed the id made after it.
	w := b.worker(keep, 0)
	w.Clock = testsupport.NewClock(b.now.Add(24 * time.Hour))
	require.NoError(t, work(t, w))
	require.False(t, b.exists(t, madeAfterOld))
	require.False(t, b.exists(t, atCutoff))
	require.True(t, b.exists(t, recent))
}

// An old event with a delivery not over (queued, scheduled, waiting for a
// retry, running) keeps the event and its attempts; once every delivery
// of it is over (completed, cancelled, discarded), it goes.
func TestRetentionKeepsEventsWithPendingDeliveries(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)
	at := b.cutoff.Add(-24 * time.Hour)
	pending := map[string]uuid.UUID{}
	for _, state := range []string{"available", "scheduled", "retryable", "running", "pending"} {
		id := b.event(t, at, at)
		b.attempt(t, id, notify.OutcomeRetrying)
		b.delivery(t, id, state)
		pending[state] = id
	}
	over := b.event(t, at, at)
	b.attempt(t, over, notify.OutcomeRetrying)
	b.attempt(t, over, notify.OutcomeDelivered)
	b.delivery(t, over, "completed")
	b.delivery(t, over, "cancelled") // a redelivery to an endpoint disabled since
	b.delivery(t, over, "discarded")

	require.NoError(t, work(t, b.worker(keep, 0)))
	for state, id := range pending {
		require.True(t, b.exists(t, id), "delivery %s", state)
		require.Equal(t, 1, b.attempts(t, id), "delivery %s", state)
	}
	require.False(t, b.exists(t, over))
	require.Zero(t, b.attempts(t, over))

	// The retry delivered: the event goes on the next run.
	_, err := b.pool.Exec(context.Background(), `UPDATE river_job SET state = 'completed', finalized_at = now()
		WHERE args->>'event_id' = $1`, pending["retryable"].String())
	require.NoError(t, err)
	require.NoError(t, work(t, b.worker(keep, 0)))
	require.False(t, b.exists(t, pending["retryable"]))
	require.True(t, b.exists(t, pending["running"]))
}

// Deleting goes batch by batch, each its own transaction, until a batch is
// short; a call bounded in batches says when more are left, and the
// worker then snoozes to go on.
func TestRetentionDeletesInBatches(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)
	ctx := context.Background()
	var ids []uuid.UUID
	for i := range 7 {
		at := b.cutoff.Add(-time.Duration(7-i) * time.Hour)
		ids = append(ids, b.event(t, at, at))
		b.attempt(t, ids[i], notify.OutcomeDelivered)
	}
	recent := b.event(t, b.now, b.now)

	done, err := notify.DeleteOldEvents(ctx, b.pool, b.cutoff, 3, 2)
	require.NoError(t, err)
	require.Equal(t, notify.Purged{Events: 6, Attempts: 6, More: true}, done)
	for _, id := range ids[:6] {
		require.False(t, b.exists(t, id), "oldest first")
	}
	require.True(t, b.exists(t, ids[6]))

	done, err = notify.DeleteOldEvents(ctx, b.pool, b.cutoff, 3, 0)
	require.NoError(t, err)
	require.Equal(t, notify.Purged{Events: 1, Attempts: 1}, done)
	require.True(t, b.exists(t, recent))

	// The worker: 50 batches per run, then a snooze.
	for range 101 {
		at := b.cutoff.Add(-time.Minute)
		b.event(t, at, at)
	}
	err = work(t, b.worker(keep, 2))
	var snooze *river.JobSnoozeError
	require.ErrorAs(t, err, &snooze)
	var left int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE created_at < $1`, b.cutoff).Scan(&left))
	require.Equal(t, 1, left)
	require.NoError(t, work(t, b.worker(keep, 2)))
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE created_at < $1`, b.cutoff).Scan(&left))
	require.Zero(t, left)
	require.True(t, b.exists(t, recent))
}

// Without a retention (the default) nothing is deleted, however old.
func TestRetentionOffDeletesNothing(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)
	ancient := b.event(t, b.now.AddDate(-10, 0, 0), b.now.AddDate(-10, 0, 0))
	b.attempt(t, ancient, notify.OutcomeDelivered)
	require.NoError(t, work(t, b.worker(0, 0)))
	require.True(t, b.exists(t, ancient))
	require.Equal(t, 1, b.attempts(t, ancient))
}

// A delivery whose event the retention deleted (a redelivery queued in
// the instant the event went) is cancelled at once: nothing is sent, no
// attempt is recorded, and it is not retried for days.
func TestDeliveryOfADeletedEventIsCancelled(t *testing.T) {
	t.Parallel()
	b := startDeliveries(t, true)
	rc := &receiver{reply: func(int) int { return http.StatusOK }}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	endpoint, _ := b.endpoint(t, srv.URL, "*")
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.recorder.Enqueue.InsertManyTx(ctx, tx, []river.InsertManyParams{
			{Args: notify.DeliverArgs{EventID: uuid.New(), EndpointID: endpoint}}})
		return err
	}))
	require.Eventually(t, func() bool {
		var state string
		err := b.pool.QueryRow(ctx, `SELECT state FROM river_job WHERE kind = 'webhook_deliver'`).Scan(&state)
		return err == nil && state == "cancelled"
	}, 10*time.Second, 20*time.Millisecond)
	attempts, err := b.webhooks.Attempts(ctx, endpoint, 0, 10)
	require.NoError(t, err)
	require.Empty(t, attempts)
	require.Empty(t, rc.requests())
}
