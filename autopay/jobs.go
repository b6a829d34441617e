package autopay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/platform/riverjob"
	"github.com/rebill/rebill/rebilltype"
)

// ScanArgs charges the bills whose pay_at has come and expires those
// whose last payable day is over.
type ScanArgs struct{}

// Kind names the job in River.
func (ScanArgs) Kind() string { return "bills_scan" }

// InsertOpts allows one pending or running scan.
func (ScanArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 5, UniqueOpts: riverjob.OneAtATime()}
}

// ScanWorker runs ScanArgs jobs.
type ScanWorker struct {
	river.WorkerDefaults[ScanArgs]
	Autopay *Autopay
}

// Work scans at the service clock's now.
func (w *ScanWorker) Work(ctx context.Context, _ *river.Job[ScanArgs]) error {
	_, err := w.Autopay.Scan(ctx, w.Autopay.Clock.Now())
	return err
}

// ScanResult counts what one scan did.
type ScanResult struct {
	Released int
	Charged  int
	Expired  int
}

// releaseIdentities lets go of the bill identities whose charges may
// release them (charges.Releasable, asking enrollments which bills have a
// copy waiting to pay), each in its own transaction with the promotion of
// the next copy (see enrollments.Store.ReleaseIdentity, which lets the
// charge go through charges.Store.ReleaseIdentity). Returns how many.
func (a *Autopay) releaseIdentities(ctx context.Context, now time.Time, batch int) (int, error) {
	done := 0
	for {
		due, err := charges.Releasable(ctx, a.Pool, batch, func(ctx context.Context, identities []string) (map[string]bool, error) {
			return a.Enrollments.CopiesWaiting(ctx, a.Pool, identities)
		})
		if err != nil {
			return done, err
		}
		n := 0
		for _, r := range due {
			released := false
			err := pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) (err error) {
				held := enrollments.Released{ChargeID: r.ChargeID, EnrollmentID: r.EnrollmentID, Identity: r.Identity,
					DocumentIdentity: r.DocumentIdentity}
				_, released, err = a.Enrollments.ReleaseIdentity(ctx, tx, held, a.Charges.ReleaseIdentity, now)
				return err
			})
			if err != nil {
				return done, fmt.Errorf("release bill identity %s: %w", r.Identity, err)
			}
			if released {
				n++
			}
		}
		done += n
		if len(due) < batch || n == 0 {
			return done, nil
		}
	}
}

// Scan releases the identities of bills whose paying charge provably
// moved no money (the next copy takes over), schedules the fines that
// awaited a registry once one is configured, charges due bills and expires
// lapsed ones, in batches of BatchSize, each its own transaction. Safe on
// several nodes at once: rows are claimed with SKIP LOCKED or guarded, and
// each charge is created under its bill's unique key and identity.
func (a *Autopay) Scan(ctx context.Context, now time.Time) (ScanResult, error) {
	var res ScanResult
	batch := max(a.BatchSize, 1)
	released, err := a.releaseIdentities(ctx, now, batch)
	res.Released = released
	if err != nil {
		return res, err
	}
	for a.Registry {
		n := 0
		err := pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) (err error) {
			n, err = a.Enrollments.RegistryReady(ctx, tx, batch)
			return err
		})
		if err != nil {
			return res, err
		}
		if n < batch {
			break
		}
	}
	for {
		n := 0
		err := pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error {
			bills, enrolled, err := a.Enrollments.LockDue(ctx, tx, now, batch)
			if err != nil {
				return err
			}
			n = len(bills)
			byIdentity(bills)
			for _, b := range bills {
				if _, err := a.charge(ctx, tx, enrolled[b.EnrollmentID], b, now); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("charge due bills: %w", err)
		}
		res.Charged += n
		if n < batch {
			break
		}
	}
	for {
		n := 0
		err := pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error {
			expired, err := a.Enrollments.ExpireDue(ctx, tx, now, batch)
			n = len(expired)
			if err != nil {
				return err
			}
			return a.voidCharges(ctx, tx, expired, "bill_expired")
		})
		if err != nil {
			return res, fmt.Errorf("expire bills: %w", err)
		}
		res.Expired += n
		if n < batch {
			return res, nil
		}
	}
}

// PullArgs pulls every bill source.
type PullArgs struct {
	// While, when set, is the pull job that was running when this one was
	// asked for (a bill was published): that one may have read the source
	// before the bill was there, so this one is queued beside it rather
	// than absorbed by it. Zero for the periodic pull.
	While int64 `json:"while,omitempty" river:"unique"`
}

// Kind names the job in River.
func (PullArgs) Kind() string { return "bills_pull" }

// InsertOpts allows one pending or running pull per While: a trigger
// while a pull runs queues one more (see While). Two pulls side by side
// are safe: bills are stored once, and the cursor only moves up, under its
// row lock.
func (PullArgs) InsertOpts() river.InsertOpts {
	unique := riverjob.OneAtATime()
	unique.ByArgs = true
	return river.InsertOpts{MaxAttempts: 5, UniqueOpts: unique}
}

// PullWorker runs PullArgs jobs.
type PullWorker struct {
	river.WorkerDefaults[PullArgs]
	Autopay *Autopay
}

// Work pulls.
func (w *PullWorker) Work(ctx context.Context, _ *river.Job[PullArgs]) error {
	_, err := w.Autopay.Pull(ctx)
	return err
}

// Pull reads every source's new bills (see pullSource) and pushes each to
// the enrollments of its account (cancelled ones take none). A bill
// already stored is a no-op; a bill the source got wrong (bad UIN, dates)
// is logged and skipped, never stored. A failing source does not keep the
// others from being pulled. Returns how many bills were new.
func (a *Autopay) Pull(ctx context.Context) (int, error) {
	created := 0
	var errs []error
	kinds := make([]enrollments.Kind, 0, len(a.Sources))
	for kind := range a.Sources {
		kinds = append(kinds, kind)
	}
	slices.Sort(kinds)
	for _, kind := range kinds {
		n, err := a.pullSource(ctx, kind, a.Sources[kind])
		created += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	return created, errors.Join(errs...)
}

func (a *Autopay) deliver(ctx context.Context, kind enrollments.Kind, sb SourcedBill) (int, error) {
	matched, err := a.Enrollments.ByAccount(ctx, a.Pool, kind, sb.Account)
	if err != nil {
		return 0, err
	}
	created := 0
	for _, e := range matched {
		if e.Status == enrollments.Cancelled {
			continue
		}
		isNew := false
		err := pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error {
			b, created, err := a.Push(ctx, tx, e.ID, sb.Bill)
			isNew = created
			switch {
			case err != nil:
				return err
			case kind == enrollments.Fines:
				return a.sourceReported(ctx, tx, b, sb.PaidOutside)
			case sb.PaidOutside > b.PaidOutside:
				return a.sourcePaid(ctx, tx, b, sb.PaidOutside)
			}
			return nil
		})
		if err == nil && isNew {
			created++
		}
		var fields rebilltype.Errors
		var transition *fsm.TransitionError
		// An enrollment or a bill that refuses the bill skips it; any
		// other machine's refusal is a failure of the pull.
		refused := errors.As(err, &transition) &&
			(transition.Machine == enrollments.Machine.Name() || transition.Machine == enrollments.BillMachine.Name())
		switch {
		case errors.As(err, &fields), errors.Is(err, enrollments.ErrBillConflict), refused:
			a.Logger.Warn().Str("enrollment_id", e.ID.String()).Str("bill_id", sb.Bill.BillID).Err(err).
				Msg("pulled bill skipped")
		case err != nil:
			return created, fmt.Errorf("push pulled bill %s: %w", sb.Bill.BillID, err)
		}
	}
	return created, nil
}
