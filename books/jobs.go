package books

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/platform/pg"
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
	// Registries are the registry gateways to reconcile, by name.
	Registries map[string]registry.Gateway
	// AnnulWithin bounds, on the service clock from the later of a
	// posting's and its charge's last change, how long a payment the
	// registry accepted without a capture, or still processes, is taken
	// as settling by itself (an annulment or a capture in flight).
	AnnulWithin time.Duration
	Clock       clock.Clock
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

// RegistryDayArgs checks one registry gateway's UTC day.
type RegistryDayArgs struct {
	Registry string `json:"registry" river:"unique"`
	Day      string `json:"day" river:"unique"` // YYYY-MM-DD, UTC
}

// Kind names the job in River.
func (RegistryDayArgs) Kind() string { return "registry_reconcile_day" }

// InsertOpts makes the job unique per registry and day while it waits or
// runs, as DayArgs.
func (RegistryDayArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 10, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// enqueued is what one enqueue planned: N days over Gateways gateways and
// Registries registry gateways, the days From..To (UTC) at the widest.
type enqueued struct {
	N, Gateways, Registries int
	From, To                time.Time
}

func (e *enqueued) add(days []time.Time, books *int) {
	if len(days) > 0 {
		*books++
	}
	for _, d := range days {
		if e.From.IsZero() || d.Before(e.From) {
			e.From = d
		}
		if d.After(e.To) {
			e.To = d
		}
	}
}

// Enqueue inserts a DayArgs job for every finished day of the last Days
// days that a gateway has no result for, and a RegistryDayArgs job for
// every such day of a registry gateway, and returns how many.
func (r *Reconciler) Enqueue(ctx context.Context) (int, error) {
	e, err := r.enqueue(ctx)
	return e.N, err
}

func (r *Reconciler) enqueue(ctx context.Context) (enqueued, error) {
	end := Day(r.Clock.Now().Add(-Settle)) // the first day not finished
	from := end.AddDate(0, 0, -r.Days)
	var params []river.InsertManyParams
	var e enqueued
	for _, name := range sortedKeys(r.Gateways) {
		if err := r.refreshGauges(ctx, gatewayBooks, name); err != nil {
			return enqueued{}, err
		}
		days, err := gatewayBooks.unchecked(ctx, r.Pool, name, from, end)
		if err != nil {
			return enqueued{}, err
		}
		e.add(days, &e.Gateways)
		for _, d := range days {
			params = append(params, river.InsertManyParams{Args: DayArgs{Gateway: name, Day: d.Format(time.DateOnly)}})
		}
	}
	for _, name := range sortedKeys(r.Registries) {
		if err := r.refreshGauges(ctx, registryBooks, name); err != nil {
			return enqueued{}, err
		}
		days, err := registryBooks.unchecked(ctx, r.Pool, name, from, end)
		if err != nil {
			return enqueued{}, err
		}
		e.add(days, &e.Registries)
		for _, d := range days {
			params = append(params, river.InsertManyParams{Args: RegistryDayArgs{Registry: name, Day: d.Format(time.DateOnly)}})
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
		op := gateway.OpCapture
		if _, _, ok := charges.ParseRefundKey(key); ok {
			op = gateway.OpRefund
		}
		return g.Lookup(ctx, gateway.ByKey(op, key))
	}, day)
	if err != nil {
		return Result{}, err
	}
	return r.record(ctx, gatewayBooks, name, day, ops, found, false)
}

// NotSettledError is a registry day that cannot be concluded yet: a
// payment on it is still settling (within the annulment bound) until
// Until, on the service clock. Nothing was recorded.
type NotSettledError struct {
	Registry string
	Until    time.Time
}

func (e *NotSettledError) Error() string {
	return fmt.Sprintf("registry %s: a payment is still settling until %s", e.Registry, e.Until.Format(time.RFC3339))
}

// RunRegistryDay checks one registry gateway's day and records the result
// once. Returns a *NotSettledError, recording nothing, while a payment of
// the day is still settling; any other error (River retries) when the
// registry or the database did not answer.
func (r *Reconciler) RunRegistryDay(ctx context.Context, name string, day time.Time) (Result, error) {
	g, ok := r.Registries[name]
	if !ok {
		return Result{}, fmt.Errorf("reconcile: registry %q is not configured", name)
	}
	day = Day(day)
	check, err := CheckRegistry(ctx, r.Read, g, day, r.Clock.Now(), r.AnnulWithin)
	if err != nil {
		return Result{}, err
	}
	if !check.WaitUntil.IsZero() {
		return Result{}, &NotSettledError{Registry: name, Until: check.WaitUntil}
	}
	if check.Unsupported {
		r.Logger.Info().Str("registry", name).Str("day", day.Format(time.DateOnly)).Int("payments", check.Payments).
			Msg("the registry has no export of payments (404): its day was checked by a look-up per payment id")
	}
	return r.record(ctx, registryBooks, name, day, check.Payments, check.Found, check.Unsupported)
}

// record saves a checked day once and, the first time, reports it.
func (r *Reconciler) record(ctx context.Context, b books, name string, day time.Time, n int, found []Discrepancy,
	unsupported bool) (Result, error) {
	var saved bool
	err := pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		var err error
		saved, err = b.save(ctx, tx, name, day, n, found, unsupported, r.Clock.Now())
		return err
	})
	if err != nil {
		return Result{}, err
	}
	if saved {
		r.report(ctx, b, name, day, n, found)
	}
	return b.get(ctx, r.Pool, name, day)
}

// metricsOf are a kind of day's metric families.
func metricsOf(b books) (found *prometheus.CounterVec, open, last *prometheus.GaugeVec) {
	if b == registryBooks {
		return metrics.RegistryReconciliationDiscrepancies, metrics.RegistryReconciliationOpen, metrics.RegistryReconciliationLastDay
	}
	return metrics.ReconciliationDiscrepancies, metrics.ReconciliationOpen, metrics.ReconciliationLastDay
}

// refreshGauges sets the gateway's or registry's alert gauges from the
// database, so that they survive restarts and leader changes.
func (r *Reconciler) refreshGauges(ctx context.Context, b books, name string) error {
	_, openGauge, lastGauge := metricsOf(b)
	open, err := b.openCount(ctx, r.Pool, name)
	if err != nil {
		return err
	}
	openGauge.WithLabelValues(name).Set(float64(open))
	last, err := b.lastDay(ctx, r.Pool, name)
	if err != nil {
		return err
	}
	if !last.IsZero() {
		lastGauge.WithLabelValues(name).Set(float64(last.Unix()))
	}
	return nil
}

// report counts, logs and raises the alert gauges of a freshly checked day.
func (r *Reconciler) report(ctx context.Context, b books, name string, day time.Time, n int, found []Discrepancy) {
	counter, _, _ := metricsOf(b)
	for _, d := range found {
		counter.WithLabelValues(name, string(d.Kind)).Inc()
		ev := r.Logger.Warn().Str(b.name, name).Str("day", day.Format(time.DateOnly)).Str("kind", string(d.Kind)).
			Str(b.ref, d.GatewayReference).Str("detail", d.Detail)
		if d.ChargeID != nil {
			ev = ev.Str("charge_id", d.ChargeID.String())
		}
		ev.Msg("reconciliation discrepancy")
	}
	// Debug: a start catches up every book's last Days days, and the
	// tick's line already summarises them; discrepancies are warnings above.
	r.Logger.Debug().Str(b.name, name).Str("day", day.Format(time.DateOnly)).Int(b.count, n).
		Int("discrepancies", len(found)).Msg(b.name + " day reconciled")
	if err := r.refreshGauges(ctx, b, name); err != nil {
		r.Logger.Error().Err(err).Str(b.name, name).Msg("reconciliation gauges")
	}
}

func sortedKeys[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
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
		w.Reconciler.Logger.Info().Int("days", e.N).Int("gateways", e.Gateways).Int("registries", e.Registries).
			Str("from", e.From.Format(time.DateOnly)).Str("to", e.To.Format(time.DateOnly)).
			Msg("days to reconcile enqueued")
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

// RegistryDayWorker runs RegistryDayArgs.
type RegistryDayWorker struct {
	river.WorkerDefaults[RegistryDayArgs]
	Reconciler *Reconciler
}

// maxSettleWait bounds one wait for a registry day still settling: the
// bound is on the service clock, which may move faster than River's.
const maxSettleWait = time.Hour

// Work checks the day, or waits while a payment of it is still settling
// (a wait is no failed attempt).
func (w *RegistryDayWorker) Work(ctx context.Context, job *river.Job[RegistryDayArgs]) error {
	day, err := time.Parse(time.DateOnly, job.Args.Day)
	if err != nil {
		return river.JobCancel(fmt.Errorf("reconcile: bad day %q: %w", job.Args.Day, err))
	}
	_, err = w.Reconciler.RunRegistryDay(ctx, job.Args.Registry, day)
	var wait *NotSettledError
	if errors.As(err, &wait) {
		return river.JobSnooze(min(max(wait.Until.Sub(w.Reconciler.Clock.Now()), time.Minute), maxSettleWait))
	}
	return err
}

// Timeout allows a day of many payments and look-ups, as DayWorker's.
func (w *RegistryDayWorker) Timeout(*river.Job[RegistryDayArgs]) time.Duration {
	return w.Reconciler.JobTimeout
}

// Register adds the reconciliation workers.
func Register(workers *river.Workers, r *Reconciler) {
	river.AddWorker(workers, &TickWorker{Reconciler: r})
	river.AddWorker(workers, &DayWorker{Reconciler: r})
	river.AddWorker(workers, &RegistryDayWorker{Reconciler: r})
}

// PeriodicJob is the tick, run hourly and at every leader's start.
func PeriodicJob() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
		func() (river.JobArgs, *river.InsertOpts) { return TickArgs{}, nil },
		&river.PeriodicJobOpts{ID: "reconcile_tick", RunOnStart: true})
}
