package reconcile

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/internal/clock"
	"github.com/rebill/rebill/internal/metrics"
	"github.com/rebill/rebill/internal/pg"
)

// Settle is how long after a UTC day ends it is checked: operations in
// flight at midnight have settled by then.
const Settle = time.Hour

// Reconciler runs the daily reconciliation of every gateway.
type Reconciler struct {
	// Pool is the primary: results are written there.
	Pool *pgxpool.Pool
	// Read is where charges and results are read: the replica when one
	// is configured (REBILL_REPLICA_URL), else the primary.
	Read pg.DBTX
	// Gateways are the gateways to reconcile, by name.
	Gateways map[string]gateway.Gateway
	Clock    clock.Clock
	// Days is how far back finished days are caught up.
	Days int
	// JobTimeout bounds one day's check (0: River's default).
	JobTimeout time.Duration
	Logger     zerolog.Logger
	// Jobs enqueues the days to check.
	Jobs JobInserter
	// Paused tells whether calls to a gateway are paused, its circuit
	// open after failures (decision 20); nil: never. A paused gateway is
	// not asked: its day is retried later, at the day's back-off.
	Paused func(gateway string) bool
}

// ErrPaused: the gateway's circuit is open; its day was not asked.
var ErrPaused = errors.New("gateway paused: its circuit is open")

// JobInserter inserts jobs; *river.Client[pgx.Tx] is one. The days are
// enqueued outside any transaction: a day enqueued twice is one job
// (DayArgs are unique), and one not enqueued is found by the next tick.
type JobInserter interface {
	InsertMany(ctx context.Context, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
}

// TickArgs is the periodic job that enqueues the days to check.
type TickArgs struct{}

// Kind names the job in River.
func (TickArgs) Kind() string { return "reconcile_tick" }

// DayArgs checks one gateway's UTC day.
type DayArgs struct {
	Gateway string `json:"gateway" river:"unique"`
	Day     string `json:"day" river:"unique"` // YYYY-MM-DD, UTC
}

// Kind names the job in River.
func (DayArgs) Kind() string { return "reconcile_day" }

// InsertOpts makes the job unique per gateway and day while it waits or
// runs; once it is done the day has a result and is not enqueued again.
// A day River discarded (its gateway down through every attempt) is not
// held by that job: River's default unique states leave discarded jobs
// out, so the next tick enqueues the day again.
func (DayArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: dayMaxAttempts, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// dayMaxAttempts, dayRetryBase and dayRetryMax pace a day whose check
// failed (mostly a gateway that is down): waits double from a minute to
// an hour, so ten attempts span hours rather than the seconds of the
// charges' retry policy in dev mode; a gateway that stays down longer
// gets the day discarded, and the tick enqueues it again.
const (
	dayMaxAttempts = 10
	dayRetryBase   = time.Minute
	dayRetryMax    = time.Hour
)

// dayRetryDelay is the wait before retry n (n >= 1): the ceiling
// min(dayRetryMax, dayRetryBase*2^(n-1)), jittered within its upper half.
func dayRetryDelay(n int) time.Duration {
	ceiling := dayRetryBase
	for i := 1; i < n && ceiling < dayRetryMax; i++ {
		ceiling *= 2
	}
	ceiling = min(ceiling, dayRetryMax)
	return ceiling/2 + time.Duration(rand.Int64N(int64(ceiling/2)+1))
}

// enqueued is what one enqueue planned: N gateway-days over Gateways
// gateways, the days From..To (UTC) at the widest.
type enqueued struct {
	N, Gateways int
	From, To    time.Time
}

// Enqueue inserts a DayArgs job for every finished day of the last Days
// days that a gateway has no result for, and returns how many.
func (r *Reconciler) Enqueue(ctx context.Context) (int, error) {
	e, err := r.enqueue(ctx)
	return e.N, err
}

func (r *Reconciler) enqueue(ctx context.Context) (enqueued, error) {
	end := Day(r.Clock.Now().Add(-Settle)) // the first day not finished
	from := end.AddDate(0, 0, -r.Days)
	names := make([]string, 0, len(r.Gateways))
	for name := range r.Gateways {
		names = append(names, name)
	}
	sort.Strings(names)
	var params []river.InsertManyParams
	var e enqueued
	for _, name := range names {
		if err := r.refreshGauges(ctx, name); err != nil {
			return enqueued{}, err
		}
		days, err := unchecked(ctx, r.Pool, name, from, end)
		if err != nil {
			return enqueued{}, err
		}
		if len(days) > 0 {
			e.Gateways++
		}
		for _, d := range days {
			params = append(params, river.InsertManyParams{Args: DayArgs{Gateway: name, Day: d.Format(time.DateOnly)}})
			if e.From.IsZero() || d.Before(e.From) {
				e.From = d
			}
			if d.After(e.To) {
				e.To = d
			}
		}
	}
	if len(params) == 0 {
		return enqueued{}, nil
	}
	if _, err := r.Jobs.InsertMany(ctx, params); err != nil {
		return enqueued{}, fmt.Errorf("enqueue reconciliation days: %w", err)
	}
	e.N = len(params)
	return e, nil
}

// RunDay checks one gateway's day and records the result once. Returns an
// error (River retries) when the gateway or the database did not answer.
func (r *Reconciler) RunDay(ctx context.Context, name string, day time.Time) (Result, error) {
	g, ok := r.Gateways[name]
	if !ok {
		return Result{}, fmt.Errorf("reconcile: gateway %q is not configured", name)
	}
	day = Day(day)
	if r.Paused != nil && r.Paused(name) {
		return Result{}, fmt.Errorf("reconcile %s on %s: %w", name, day.Format(time.DateOnly), ErrPaused)
	}
	found, ops, err := Check(ctx, r.Read, g, func(ctx context.Context, key string) (gateway.Result, error) {
		return g.Lookup(ctx, gateway.ByKey(gateway.OpCapture, key))
	}, day)
	if err != nil {
		return Result{}, err
	}
	var saved bool
	err = pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		saved, err = save(ctx, tx, name, day, ops, found, r.Clock.Now())
		return err
	})
	if err != nil {
		return Result{}, err
	}
	if saved {
		r.report(ctx, name, day, ops, found)
	}
	return Get(ctx, r.Pool, name, day)
}

// refreshGauges sets the gateway's alert gauges from the database, so
// that they survive restarts and leader changes.
func (r *Reconciler) refreshGauges(ctx context.Context, name string) error {
	open, err := openCount(ctx, r.Pool, name)
	if err != nil {
		return err
	}
	metrics.ReconciliationOpen.WithLabelValues(name).Set(float64(open))
	last, err := lastDay(ctx, r.Pool, name)
	if err != nil {
		return err
	}
	if !last.IsZero() {
		metrics.ReconciliationLastDay.WithLabelValues(name).Set(float64(last.Unix()))
	}
	return nil
}

// report counts, logs and raises the alert gauges of a freshly checked day.
func (r *Reconciler) report(ctx context.Context, name string, day time.Time, ops int, found []Discrepancy) {
	for _, d := range found {
		metrics.ReconciliationDiscrepancies.WithLabelValues(name, string(d.Kind)).Inc()
		ev := r.Logger.Warn().Str("gateway", name).Str("day", day.Format(time.DateOnly)).Str("kind", string(d.Kind)).
			Str("gateway_reference", d.GatewayReference).Str("detail", d.Detail)
		if d.ChargeID != nil {
			ev = ev.Str("charge_id", d.ChargeID.String())
		}
		ev.Msg("reconciliation discrepancy")
	}
	// Debug: a start catches up every gateway's last Days days, and the
	// tick's line already summarises them; discrepancies are warnings above.
	r.Logger.Debug().Str("gateway", name).Str("day", day.Format(time.DateOnly)).Int("operations", ops).
		Int("discrepancies", len(found)).Msg("gateway day reconciled")
	if err := r.refreshGauges(ctx, name); err != nil {
		r.Logger.Error().Err(err).Str("gateway", name).Msg("reconciliation gauges")
	}
}

// TickWorker runs TickArgs.
type TickWorker struct {
	river.WorkerDefaults[TickArgs]
	Reconciler *Reconciler
}

// Work enqueues the days to check.
func (w *TickWorker) Work(ctx context.Context, _ *river.Job[TickArgs]) error {
	e, err := w.Reconciler.enqueue(ctx)
	if e.N > 0 {
		w.Reconciler.Logger.Info().Int("days", e.N).Int("gateways", e.Gateways).
			Str("from", e.From.Format(time.DateOnly)).Str("to", e.To.Format(time.DateOnly)).
			Msg("gateway days to reconcile enqueued")
	}
	return err
}

// DayWorker runs DayArgs.
type DayWorker struct {
	river.WorkerDefaults[DayArgs]
	Reconciler *Reconciler
}

// Work checks the day.
func (w *DayWorker) Work(ctx context.Context, job *river.Job[DayArgs]) error {
	day, err := time.Parse(time.DateOnly, job.Args.Day)
	if err != nil {
		return river.JobCancel(fmt.Errorf("reconcile: bad day %q: %w", job.Args.Day, err))
	}
	_, err = w.Reconciler.RunDay(ctx, job.Args.Gateway, day)
	return err
}

// NextRetry paces a failed day by dayRetryDelay, on River's own time (the
// failed attempt's start), whatever the client's policy.
func (w *DayWorker) NextRetry(job *river.Job[DayArgs]) time.Time {
	if job.AttemptedAt == nil {
		return time.Time{} // the client's policy
	}
	return job.AttemptedAt.Add(dayRetryDelay(len(job.Errors) + 1))
}

// Timeout allows a day of many operations and look-ups, within River's
// rescue time (a rescued run that finishes too records nothing twice).
func (w *DayWorker) Timeout(*river.Job[DayArgs]) time.Duration { return w.Reconciler.JobTimeout }

// Register adds the reconciliation workers.
func Register(workers *river.Workers, r *Reconciler) {
	river.AddWorker(workers, &TickWorker{Reconciler: r})
	river.AddWorker(workers, &DayWorker{Reconciler: r})
}

// PeriodicJob is the tick, run hourly and at every leader's start.
func PeriodicJob() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
		func() (river.JobArgs, *river.InsertOpts) { return TickArgs{}, nil },
		&river.PeriodicJobOpts{ID: "reconcile_tick", RunOnStart: true})
}
