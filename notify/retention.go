package notify

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/platform/riverjob"
)

// Retention defaults.
const (
	// RetentionBatch is how many events one transaction reads, and so
	// deletes at most.
	RetentionBatch = 1000
	// retentionBatchesPerRun bounds one run of the job, so that it never
	// holds a worker long enough to look stuck; a run that stops with
	// more to read snoozes and goes on a second later.
	retentionBatchesPerRun = 50
)

// The tables the retention deletes from: the closed set of
// rebill_retention_deleted_total's table label.
const (
	TableEvents   = "events"
	TableAttempts = "webhook_attempts"
)

// RetentionTables lists every table label of rebill_retention_deleted_total.
var RetentionTables = []string{TableEvents, TableAttempts}

// pendingDeliveryStates are the River states of a delivery not over yet:
// queued, waiting for its retry, or running, written from River's
// constants.
var pendingDeliveryStates = "('" + strings.Join([]string{string(rivertype.JobStateAvailable), string(rivertype.JobStatePending),
	string(rivertype.JobStateRetryable), string(rivertype.JobStateRunning), string(rivertype.JobStateScheduled)}, "', '") + "')"

// Purged is what one DeleteOldEvents call deleted.
type Purged struct {
	Events, Attempts int64
	// More: it stopped at maxBatches with events left to read.
	More bool
}

// DeleteOldEvents deletes the events created before cutoff, with their
// delivery attempts, reading at most batch events per transaction (at most
// maxBatches transactions; 0: until none is left), and returns how many
// events and attempts it deleted. An event with a delivery still pending
// (its webhook_deliver job queued, running or waiting for a retry) is
// kept, so that no delivery loses its event; so is an event another
// transaction holds locked. Every delivery of a deleted event is over, so
// all its attempts are history and go with it: the foreign key needs no
// less.
//
// Each transaction reads the next batch events in id order from where the
// last one stopped, so that a batch costs the same however many events
// are left or kept. Event ids are UUIDv7, in creation order: only ids made
// before cutoff are read, so the last batch stops at the cutoff instead
// of reading every event kept. An event whose id was made after its
// created_at (a transition timestamped at the start of a long
// transaction) goes on a later run, never before cutoff.
func DeleteOldEvents(ctx context.Context, pool *pgxpool.Pool, cutoff time.Time, batch, maxBatches int) (Purged, error) {
	if batch <= 0 {
		batch = RetentionBatch
	}
	bound := idBefore(cutoff)
	var done Purged
	var after uuid.UUID // the last id read
	for i := 0; maxBatches <= 0 || i < maxBatches; i++ {
		var read, n, m int64
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			// The batch is read first, in index order, so that the
			// pending deliveries are matched against it alone.
			var ids []uuid.UUID
			err := tx.QueryRow(ctx, `WITH batch AS MATERIALIZED (
					SELECT id, created_at FROM events WHERE id > $1 AND id < $2 ORDER BY id LIMIT $3
				), doomed AS (
					SELECT e.id FROM events e JOIN batch b ON b.id = e.id
					WHERE b.created_at < $4
					  AND NOT EXISTS (SELECT 1 FROM river_job j
						WHERE j.kind = $5 AND j.state IN `+pendingDeliveryStates+`
						  AND j.args->>'event_id' = e.id::text)
					FOR UPDATE OF e SKIP LOCKED
				)
				SELECT (SELECT count(*) FROM batch), coalesce((SELECT id FROM batch ORDER BY id DESC LIMIT 1), $1),
					array(SELECT id FROM doomed)`, after, bound, batch, cutoff.UTC(), DeliverArgs{}.Kind()).Scan(&read, &after, &ids)
			if err != nil {
				return fmt.Errorf("find events before %s: %w", cutoff.UTC().Format(time.RFC3339), err)
			}
			if len(ids) == 0 {
				return nil
			}
			tag, err := tx.Exec(ctx, `DELETE FROM webhook_attempts WHERE event_id = ANY($1)`, ids)
			if err != nil {
				return fmt.Errorf("delete the delivery attempts of old events: %w", err)
			}
			m = tag.RowsAffected()
			if tag, err = tx.Exec(ctx, `DELETE FROM events WHERE id = ANY($1)`, ids); err != nil {
				return fmt.Errorf("delete old events: %w", err)
			}
			n = tag.RowsAffected()
			return nil
		})
		if err != nil {
			return done, err
		}
		done.Events, done.Attempts = done.Events+n, done.Attempts+m
		metrics.RetentionDeleted.WithLabelValues(TableEvents).Add(float64(n))
		metrics.RetentionDeleted.WithLabelValues(TableAttempts).Add(float64(m))
		if read < int64(batch) {
			return done, nil
		}
	}
	done.More = true
	return done, nil
}

// idBefore is the least UUIDv7 of cutoff's millisecond, rounded up: every
// id made before cutoff sorts below it (PostgreSQL compares uuids byte by
// byte, and a UUIDv7 begins with its big-endian Unix milliseconds).
func idBefore(cutoff time.Time) uuid.UUID {
	ms := cutoff.UnixMilli()
	if cutoff.After(time.UnixMilli(ms)) {
		ms++
	}
	var id uuid.UUID
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], uint64(ms))
	copy(id[:6], buf[2:])
	return id
}

// RetentionArgs is the periodic job that deletes events older than the
// retention (REBILL_EVENTS_RETENTION).
type RetentionArgs struct{}

// Kind names the job in River.
func (RetentionArgs) Kind() string { return "events_retention" }

// InsertOpts allows one pending or running retention job: the leader's
// next tick while one runs or snoozes is absorbed.
func (RetentionArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 5, UniqueOpts: riverjob.OneAtATime()}
}

// RetentionWorker deletes the events older than Keep by the service
// clock. Keep 0 (the default: events are kept forever) deletes nothing;
// the worker is registered anyway, so that a job queued while a node had
// a retention still finds its worker.
type RetentionWorker struct {
	river.WorkerDefaults[RetentionArgs]
	Pool  *pgxpool.Pool
	Clock clock.Clock
	Keep  time.Duration
	Batch int // events per transaction (RetentionBatch when 0)
}

// Work deletes a bounded share of the old events, and snoozes to go on
// when more are left (a retention turned on over years of events).
func (w *RetentionWorker) Work(ctx context.Context, _ *river.Job[RetentionArgs]) error {
	if w.Keep <= 0 {
		return nil
	}
	done, err := DeleteOldEvents(ctx, w.Pool, w.Clock.Now().Add(-w.Keep), w.Batch, retentionBatchesPerRun)
	if err != nil {
		return fmt.Errorf("events retention: %w", err)
	}
	if done.More {
		return river.JobSnooze(time.Second)
	}
	return nil
}
