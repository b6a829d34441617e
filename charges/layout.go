package charges

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/platform/riverjob"
)

// settledBetweenSQL is a FROM item named charges: the rows of charges
// that entered a settled status (succeeded, failed, voided, declined) in
// [$1, $2), read through the index of settled_at. Charges settled before
// the settled_at column existed have none until the layout job
// (FillSettled) gives them their updated_at; until it is done, they are
// read by updated_at as well (a scan of the table, the second branch,
// which a one-time check of charges_layout skips once the job is done).
// Ordering by settledAtSQL orders both kinds by when they settled.
var settledBetweenSQL = `(SELECT * FROM charges WHERE settled_at >= $1 AND settled_at < $2
	UNION ALL
	SELECT * FROM charges WHERE settled_at IS NULL AND ` + statusInSQL("status", settledStatuses...) + `
		AND updated_at >= $1 AND updated_at < $2 AND NOT (SELECT settled_backfilled FROM charges_layout)) AS charges`

// settledAtSQL is when a row of settledBetweenSQL settled.
const settledAtSQL = `coalesce(settled_at, updated_at)`

// SettledLayoutBatch is how many charges, by primary key, one transaction
// of FillSettled looks at.
const SettledLayoutBatch = 5000

// settledLayoutBatchesPerRun bounds one run of the layout job, which
// snoozes to go on: other jobs of its queue get their turn meanwhile.
const settledLayoutBatchesPerRun = 20

// FillSettled gives the charges settled before the settled_at column
// existed their settled_at (their updated_at, when they were last
// changed), and, when voided or failed, their off_path_status and
// off_path_at, walking the table by primary key from where the last run
// stopped: up to batches transactions of batch ids each (SettledLayoutBatch
// when batch is 0). When it reaches the end, it records that the table is
// done, and the window queries stop reading by updated_at. It reports
// whether more is left. One walk suffices: a charge that settles after
// the migration gets its columns from the trigger.
func FillSettled(ctx context.Context, pool *pgxpool.Pool, batch, batches int) (more bool, err error) {
	if batch <= 0 {
		batch = SettledLayoutBatch
	}
	for range batches {
		var done bool
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var cursor *uuid.UUID
			if err := tx.QueryRow(ctx, `SELECT settled_backfilled, settled_cursor FROM charges_layout FOR UPDATE`).
				Scan(&done, &cursor); err != nil {
				return fmt.Errorf("read the layout's progress: %w", err)
			}
			if done {
				return nil
			}
			var upper *uuid.UUID
			err := tx.QueryRow(ctx, `SELECT id FROM charges WHERE $1::uuid IS NULL OR id > $1 ORDER BY id OFFSET $2 LIMIT 1`,
				cursor, batch-1).Scan(&upper)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("find the next batch of charges: %w", err)
			}
			if _, err := tx.Exec(ctx, `UPDATE charges SET settled_at = updated_at,
					off_path_status = CASE WHEN `+statusInSQL("status", Voided, Failed)+` THEN status ELSE off_path_status END,
					off_path_at = CASE WHEN `+statusInSQL("status", Voided, Failed)+` THEN updated_at ELSE off_path_at END
				WHERE ($1::uuid IS NULL OR id > $1) AND ($2::uuid IS NULL OR id <= $2)
				  AND settled_at IS NULL AND `+statusInSQL("status", settledStatuses...), cursor, upper); err != nil {
				return fmt.Errorf("fill settled_at: %w", err)
			}
			done = upper == nil
			if _, err := tx.Exec(ctx, `UPDATE charges_layout SET settled_cursor = $1, settled_backfilled = $2`, upper, done); err != nil {
				return fmt.Errorf("record the layout's progress: %w", err)
			}
			return nil
		})
		if err != nil {
			return false, err
		}
		if done {
			return false, nil
		}
	}
	return true, nil
}

// SettledLayoutArgs is the periodic job that runs FillSettled until the
// table is done; afterwards a run costs one read of charges_layout.
type SettledLayoutArgs struct{}

// Kind names the job in River.
func (SettledLayoutArgs) Kind() string { return "charges_settled_layout" }

// InsertOpts allows one pending or running layout job.
func (SettledLayoutArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 5, UniqueOpts: riverjob.OneAtATime()}
}

// SettledLayoutJob is the hourly run of SettledLayoutArgs, first at start.
func SettledLayoutJob() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
		func() (river.JobArgs, *river.InsertOpts) { return SettledLayoutArgs{}, nil },
		&river.PeriodicJobOpts{ID: SettledLayoutArgs{}.Kind(), RunOnStart: true})
}

// SettledLayoutWorker runs FillSettled, a bounded share at a time.
type SettledLayoutWorker struct {
	river.WorkerDefaults[SettledLayoutArgs]
	Pool  *pgxpool.Pool
	Batch int // charges per transaction (SettledLayoutBatch when 0)
}

// Work fills a share of the old settled charges and snoozes to go on
// when more are left.
func (w *SettledLayoutWorker) Work(ctx context.Context, _ *river.Job[SettledLayoutArgs]) error {
	more, err := FillSettled(ctx, w.Pool, w.Batch, settledLayoutBatchesPerRun)
	if err != nil {
		return fmt.Errorf("settled layout: %w", err)
	}
	if more {
		return river.JobSnooze(time.Second)
	}
	return nil
}
