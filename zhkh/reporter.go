package zhkh

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/platform/pg"
	"github.com/rebill/rebill/platform/riverjob"
	"github.com/rebill/rebill/zhkh/party"
)

// Queue enqueues the reports' jobs in the caller's transaction.
type Queue interface {
	InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// Reporter reports captured housing payments to GIS ZhKH through the
// parties, and annuls the reports of refunded ones.
type Reporter struct {
	Pool    *pgxpool.Pool
	Parties *party.Balancer
	Clock   clock.Clock
	// Queue enqueues the jobs; nil: the River client of the job that runs
	// the hook (a capture is recorded by a job, a refund's outcome too).
	Queue Queue
	// RetryBase and RetryMax bound the jittered waits for a party that
	// did nothing or has not answered yet (real time).
	RetryBase, RetryMax time.Duration
	Logger              zerolog.Logger
}

func (r *Reporter) queue(ctx context.Context) (Queue, error) {
	if r.Queue != nil {
		return r.Queue, nil
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return nil, fmt.Errorf("enqueue a GIS ZhKH job: no queue outside a job: %w", err)
	}
	return client, nil
}

// Captured stores the report of a captured housing payment and enqueues
// its job, in tx (the transaction that records the capture): the report
// exists if and only if the capture does. A capture already reported is
// left as it is.
func (r *Reporter) Captured(ctx context.Context, tx pgx.Tx, c Capture) error {
	id := IDOf(c)
	now := r.Clock.Now()
	tag, err := tx.Exec(ctx, `INSERT INTO zhkh_reports (report_id, charge_id, enrollment_id, account, bill_id,
			payment_document_id, service_id, period, supplier_inn, supplier_kpp, supplier_name, amount, currency, captured_at,
			status, due_at, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, nullif($6, ''), nullif($7, ''), nullif($8, ''), nullif($9, ''), nullif($10, ''),
			nullif($11, ''), $12, $13, $14, $15, $16, $17, $17)
		ON CONFLICT DO NOTHING`,
		id, c.ChargeID, c.EnrollmentID, c.Account, c.BillID, c.PaymentDocumentID, c.ServiceID, c.Period, c.SupplierINN,
		c.SupplierKPP, c.SupplierName, c.Amount, c.Currency, c.CapturedAt, Pending, DueBy(c.CapturedAt), now)
	if err != nil {
		return fmt.Errorf("store the GIS ZhKH report of charge %s: %w", c.ChargeID, err)
	}
	if tag.RowsAffected() == 0 {
		return nil
	}
	q, err := r.queue(ctx)
	if err != nil {
		return err
	}
	_, err = q.InsertTx(ctx, tx, ReportArgs{ReportID: id}, nil)
	return err
}

// Refunded adds a succeeded refund of amount to the report of charge
// chargeID's capture, in tx (the refund's): refunded in full, the report
// is annulled (its annulment job enqueued); in part, it goes to review,
// since GIS ZhKH's payment information is annulled whole and a person
// decides what the supplier is told. A charge without a report (not a
// housing payment) changes nothing.
func (r *Reporter) Refunded(ctx context.Context, tx pgx.Tx, chargeID uuid.UUID, amount int64, at time.Time) error {
	var rep Report
	err := tx.QueryRow(ctx, `UPDATE zhkh_reports SET amount_refunded = amount_refunded + $2, updated_at = $3
		WHERE charge_id = $1 RETURNING report_id, status, amount, amount_refunded`, chargeID, amount, r.Clock.Now()).
		Scan(&rep.ReportID, &rep.Status, &rep.Capture.Amount, &rep.AmountRefunded)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("refund of the GIS ZhKH report of charge %s: %w", chargeID, err)
	}
	now := r.Clock.Now()
	if rep.AmountRefunded < rep.Capture.Amount {
		// A refused report keeps its refusal as the reason it is in review.
		_, err := tx.Exec(ctx, `UPDATE zhkh_reports SET review_reason = $2, reviewed_at = NULL, reviewed_by = NULL
			WHERE report_id = $1 AND status = ANY($3)`, rep.ReportID, fmt.Sprintf("refunded in part (%d of %d): GIS ZhKH's payment information "+
			"is annulled whole; tell the supplier, or annul it and report the rest by hand", rep.AmountRefunded, rep.Capture.Amount),
			[]string{string(Pending), string(Accepted)})
		if err != nil {
			return fmt.Errorf("send GIS ZhKH report %s to review: %w", rep.ReportID, err)
		}
		return nil
	}
	moved, err := move(ctx, tx, rep.ReportID, []Status{Pending, Accepted}, CancelPending, now, "due_at = $4", DueBy(at))
	if err != nil || !moved {
		return err // refused: GIS ZhKH never held it; cancel_pending or cancelled: annulled once already
	}
	q, err := r.queue(ctx)
	if err != nil {
		return err
	}
	_, err = q.InsertTx(ctx, tx, CancelArgs{ReportID: rep.ReportID}, nil)
	return err
}

// ReportArgs reports one capture.
type ReportArgs struct {
	ReportID string `json:"report_id" river:"unique"`
}

// Kind names the job in River.
func (ReportArgs) Kind() string { return "zhkh_report" }

// InsertOpts makes the job unique per report in every state.
func (ReportArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: riverjob.UniqueForever()}
}

// CancelArgs annuls the report of a refunded payment.
type CancelArgs struct {
	ReportID string `json:"report_id" river:"unique"`
}

// Kind names the job in River.
func (CancelArgs) Kind() string { return "zhkh_cancel" }

// InsertOpts makes the job unique per report in every state: a report is
// annulled once.
func (CancelArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: riverjob.UniqueForever()}
}

// ReportWorker runs ReportArgs jobs.
type ReportWorker struct {
	river.WorkerDefaults[ReportArgs]
	Reporter *Reporter
}

// Work reports the capture, or waits for a party that has not said.
func (w *ReportWorker) Work(ctx context.Context, job *river.Job[ReportArgs]) error {
	return w.Reporter.report(ctx, job.Args.ReportID, job.Attempt)
}

// CancelWorker runs CancelArgs jobs.
type CancelWorker struct {
	river.WorkerDefaults[CancelArgs]
	Reporter *Reporter
}

// Work annuls the report, or waits for a party that has not said.
func (w *CancelWorker) Work(ctx context.Context, job *river.Job[CancelArgs]) error {
	return w.Reporter.cancel(ctx, job.Args.ReportID, job.Attempt)
}

func (r *Reporter) payment(rep Report) party.Payment {
	c := rep.Capture
	return party.Payment{ReportID: rep.ReportID, Account: c.Account, BillID: c.BillID, Amount: c.Amount, Currency: c.Currency,
		PaidAt: c.CapturedAt, PaymentRef: c.EnrollmentID.String() + ":" + c.BillID, PaymentDocumentID: c.PaymentDocumentID, ServiceID: c.ServiceID,
		Period: c.Period, SupplierINN: c.SupplierINN, SupplierKPP: c.SupplierKPP, SupplierName: c.SupplierName}
}

func (r *Reporter) report(ctx context.Context, reportID string, attempt int) error {
	rep, err := Get(ctx, r.Pool, reportID)
	if err != nil {
		return err
	}
	if rep.Status != Pending {
		metrics.ZhkhReportRuns.WithLabelValues("report", "stale").Inc()
		return nil
	}
	if rep.SentAt != nil {
		// Sent before, by a run whose answer was lost or that died: the
		// party is asked what it holds before anything is sent again.
		status, reason, err := r.Parties.Lookup(ctx, reportID)
		if done, err := r.settleLooked(ctx, rep, status, reason, err, attempt); done {
			return err
		}
	}
	// Recorded under the status guard: a refund that moved the report on
	// meanwhile stops the send, and one that comes after it finds the
	// send's time (inFlight).
	tag, err := r.Pool.Exec(ctx, `UPDATE zhkh_reports SET sent_at = $2 WHERE report_id = $1 AND status = $3`,
		reportID, r.Clock.Now(), Pending)
	if err != nil {
		return fmt.Errorf("record GIS ZhKH report %s sent: %w", reportID, err)
	}
	if tag.RowsAffected() == 0 {
		metrics.ZhkhReportRuns.WithLabelValues("report", "stale").Inc()
		return nil
	}
	name, err := r.Parties.Report(ctx, r.payment(rep))
	if _, pending := party.Pending(err); errors.Is(err, party.ErrUnknownOutcome) && !pending {
		metrics.ZhkhReportRuns.WithLabelValues("report", "answer_lost").Inc()
		status, reason, lerr := r.Parties.Lookup(ctx, reportID)
		if done, err := r.settleLooked(ctx, rep, status, reason, lerr, attempt); done {
			return err
		}
		// Not there: it never arrived. The next run sends it again, under
		// the same id, after looking it up once more.
		return river.JobSnooze(r.wait(attempt))
	}
	return r.settle(ctx, rep, name, err, attempt)
}

// settleLooked settles rep by what a look-up found; done is false when the
// party holds nothing under its id (it may be sent).
func (r *Reporter) settleLooked(ctx context.Context, rep Report, status party.Status, reason string, err error,
	attempt int) (bool, error) {
	if err != nil {
		return true, r.waitFor(rep, err, attempt)
	}
	switch status {
	case party.StatusAccepted:
		return true, r.settle(ctx, rep, "", nil, attempt)
	case party.StatusRefused:
		return true, r.settle(ctx, rep, "", &party.RefusedError{Party: "look-up", Reason: reason}, attempt)
	case party.StatusCancelled:
		return true, r.settle(ctx, rep, "", party.ErrCancelled, attempt)
	case party.StatusProcessing:
		return true, r.settle(ctx, rep, "", &party.PendingError{Party: "look-up"}, attempt)
	}
	return false, nil
}

// settle records the party's answer to rep's report.
func (r *Reporter) settle(ctx context.Context, rep Report, name string, err error, attempt int) error {
	now := r.Clock.Now()
	if re, ok := party.Refused(err); ok {
		metrics.ZhkhReportRuns.WithLabelValues("report", "refused").Inc()
		r.Logger.Warn().Str("report_id", rep.ReportID).Str("charge_id", rep.Capture.ChargeID.String()).Str("reason", re.Reason).
			Msg("GIS ZhKH refused a housing payment's information: the money stays captured, the report goes to review")
		_, err := move(ctx, r.Pool, rep.ReportID, []Status{Pending}, Refused, now,
			"last_error = $4, review_reason = $5, party = coalesce(nullif($6, ''), party)", re.Reason,
			"GIS ZhKH refused the payment information: "+re.Reason, name)
		return err
	}
	if errors.Is(err, party.ErrCancelled) {
		metrics.ZhkhReportRuns.WithLabelValues("report", "cancelled_there").Inc()
		_, err := move(ctx, r.Pool, rep.ReportID, []Status{Pending}, Cancelled, now,
			"last_error = $4, review_reason = $4", "the party holds the payment information cancelled: no refund of rebill's annulled it")
		return err
	}
	if err != nil {
		return r.waitFor(rep, err, attempt)
	}
	metrics.ZhkhReportRuns.WithLabelValues("report", "accepted").Inc()
	r.Logger.Info().Str("report_id", rep.ReportID).Str("charge_id", rep.Capture.ChargeID.String()).Str("party", name).
		Msg("housing payment reported to GIS ZhKH")
	_, err = move(ctx, r.Pool, rep.ReportID, []Status{Pending}, Accepted, now, "last_error = NULL, party = coalesce(nullif($4, ''), party)", name)
	return err
}

// waitFor snoozes the job of a report the party has not settled: still
// processing (after its Retry-After), did nothing, or answered otherwise
// (kept as last_error). The job spends no attempts and never gives up:
// the deadline's alert tells people when it takes too long.
func (r *Reporter) waitFor(rep Report, cause error, attempt int) error {
	delay := r.wait(attempt)
	outcome := "error"
	switch pe, pending := party.Pending(cause); {
	case pending:
		outcome = "pending"
		if pe.RetryAfter > 0 {
			delay = pe.RetryAfter
		}
	case errors.Is(cause, party.ErrUnavailable):
		outcome = "unavailable"
	}
	metrics.ZhkhReportRuns.WithLabelValues("report", outcome).Inc()
	if _, err := r.Pool.Exec(context.Background(), `UPDATE zhkh_reports SET last_error = $2 WHERE report_id = $1`,
		rep.ReportID, cause.Error()); err != nil {
		r.Logger.Error().Err(err).Str("report_id", rep.ReportID).Msg("record a GIS ZhKH report's wait")
	}
	r.Logger.Info().Str("report_id", rep.ReportID).Err(cause).Dur("wait", delay).Msg("GIS ZhKH party has not settled the report: asking again later")
	return river.JobSnooze(max(delay, time.Second))
}

// wait is the jittered wait before run attempt+1, between RetryBase and
// RetryMax, growing with the runs so that a long outage is asked thinly
// and reports that waited together do not ask together.
func (r *Reporter) wait(attempt int) time.Duration {
	base, ceiling := max(r.RetryBase, time.Second), max(r.RetryMax, time.Second)
	d := base
	for i := 1; i < attempt && d < ceiling; i++ {
		d *= 2
	}
	d = min(d, ceiling)
	return d/2 + rand.N(d/2+1)
}

func (r *Reporter) cancel(ctx context.Context, reportID string, attempt int) error {
	rep, err := Get(ctx, r.Pool, reportID)
	if err != nil {
		return err
	}
	if rep.Status != CancelPending {
		metrics.ZhkhReportRuns.WithLabelValues("cancel", "stale").Inc()
		return nil
	}
	now := r.Clock.Now()
	if rep.SentAt == nil {
		// Refunded before its report was ever sent: the party never held
		// it, and GIS ZhKH is told of neither.
		metrics.ZhkhReportRuns.WithLabelValues("cancel", "never_sent").Inc()
		_, err := move(ctx, r.Pool, reportID, []Status{CancelPending}, Cancelled, now,
			"last_error = $4", "refunded before it was reported: nothing to annul")
		return err
	}
	if _, err := r.Pool.Exec(ctx, `UPDATE zhkh_reports SET cancel_sent_at = coalesce(cancel_sent_at, $2) WHERE report_id = $1`,
		reportID, now); err != nil {
		return fmt.Errorf("record GIS ZhKH annulment %s sent: %w", reportID, err)
	}
	if _, err := r.Parties.Cancel(ctx, reportID); err != nil && !errors.Is(err, party.ErrUnknownOutcome) {
		return r.cancelWait(rep, err, attempt)
	}
	// Whatever the answer (even a lost one), the party is asked what it
	// holds: the annulment is done only once it holds the report
	// cancelled, or holds nothing (a report still in flight when the
	// refund came, which a later look may find).
	status, _, err := r.Parties.Lookup(ctx, reportID)
	if err != nil {
		return r.cancelWait(rep, err, attempt)
	}
	switch {
	case status == party.StatusNotFound && r.inFlight(rep):
		return r.cancelWait(rep, errors.New("the report's last send may still be on its way to the party: asking again once it cannot be"), attempt)
	case status == party.StatusCancelled, status == party.StatusNotFound, status == party.StatusRefused:
	default:
		return r.cancelWait(rep, fmt.Errorf("the party holds the report %s after its annulment", status), attempt)
	}
	metrics.ZhkhReportRuns.WithLabelValues("cancel", "cancelled").Inc()
	r.Logger.Info().Str("report_id", reportID).Str("charge_id", rep.Capture.ChargeID.String()).
		Msg("a refunded housing payment's information annulled in GIS ZhKH")
	_, err = move(ctx, r.Pool, reportID, []Status{CancelPending}, Cancelled, r.Clock.Now(), "last_error = NULL")
	return err
}

// inFlight reports whether rep's last send may still reach the party: it
// began less than two call timeouts ago. A party that holds nothing under
// its id then may take it a moment later, so its annulment is not
// recorded done until the send is surely over.
func (r *Reporter) inFlight(rep Report) bool {
	return rep.SentAt != nil && r.Clock.Now().Sub(*rep.SentAt) < 2*r.Parties.CallTimeout
}

func (r *Reporter) cancelWait(rep Report, cause error, attempt int) error {
	delay := r.wait(attempt)
	if pe, ok := party.Pending(cause); ok && pe.RetryAfter > 0 {
		delay = pe.RetryAfter
	}
	metrics.ZhkhReportRuns.WithLabelValues("cancel", "wait").Inc()
	if _, err := r.Pool.Exec(context.Background(), `UPDATE zhkh_reports SET last_error = $2 WHERE report_id = $1`,
		rep.ReportID, cause.Error()); err != nil {
		r.Logger.Error().Err(err).Str("report_id", rep.ReportID).Msg("record a GIS ZhKH annulment's wait")
	}
	return river.JobSnooze(max(delay, time.Second))
}

// SweepArgs counts the reports past due and in review, for /metrics.
type SweepArgs struct{}

// Kind names the job in River.
func (SweepArgs) Kind() string { return "zhkh_sweep" }

// InsertOpts allows one pending or running sweep.
func (SweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 5, UniqueOpts: riverjob.OneAtATime()}
}

// SweepJob runs the sweep every interval, and at start.
func SweepJob(interval time.Duration) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) { return SweepArgs{}, nil },
		&river.PeriodicJobOpts{ID: SweepArgs{}.Kind(), RunOnStart: true})
}

// SweepWorker runs SweepArgs jobs.
type SweepWorker struct {
	river.WorkerDefaults[SweepArgs]
	Reporter *Reporter
}

// Work sets rebill_zhkh_reports_overdue and rebill_zhkh_reports_in_review.
func (w *SweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	c, err := Count(ctx, w.Reporter.Pool, w.Reporter.Clock.Now())
	if err != nil {
		return err
	}
	metrics.ZhkhReportsOverdue.Set(float64(c.Overdue))
	metrics.ZhkhReportsInReview.Set(float64(c.InReview))
	return nil
}

// Counts are what the sweep counts.
type Counts struct {
	// Overdue: pending or cancel_pending past their due_at.
	Overdue int64
	// InReview: awaiting a person.
	InReview int64
}

// Count counts the reports overdue at now and those in review.
func Count(ctx context.Context, db pg.DBTX, now time.Time) (Counts, error) {
	var c Counts
	err := db.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM zhkh_reports WHERE status = ANY($1) AND due_at <= $2),
			(SELECT count(*) FROM zhkh_reports WHERE review_reason IS NOT NULL AND reviewed_at IS NULL)`,
		[]string{string(Pending), string(CancelPending)}, now).Scan(&c.Overdue, &c.InReview)
	if err != nil {
		return Counts{}, fmt.Errorf("count GIS ZhKH reports: %w", err)
	}
	return c, nil
}

// Register adds the reports' workers.
func Register(workers *river.Workers, r *Reporter) {
	river.AddWorker(workers, &ReportWorker{Reporter: r})
	river.AddWorker(workers, &CancelWorker{Reporter: r})
	river.AddWorker(workers, &SweepWorker{Reporter: r})
}

// ReportOf returns the report of charge chargeID's capture. Returns
// ErrNotFound when it has none.
func (r *Reporter) ReportOf(ctx context.Context, chargeID uuid.UUID) (Report, error) {
	return OfCharge(ctx, r.Pool, chargeID)
}

// ReviewPage lists the reports awaiting a person after report id after.
func (r *Reporter) ReviewPage(ctx context.Context, after string, limit int) ([]Report, error) {
	return Review(ctx, r.Pool, after, limit)
}

// MarkReviewed records, in tx, that actor has seen to the report of
// charge chargeID, and returns it. Returns ErrNotFound when it awaits no
// review.
func (r *Reporter) MarkReviewed(ctx context.Context, tx pgx.Tx, chargeID uuid.UUID, actor string) (Report, error) {
	rep, err := OfCharge(ctx, tx, chargeID)
	if err != nil {
		return Report{}, err
	}
	if err := Reviewed(ctx, tx, rep.ReportID, actor, r.Clock.Now()); err != nil {
		return Report{}, err
	}
	return Get(ctx, tx, rep.ReportID)
}
