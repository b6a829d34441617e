package inspector_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/inspector"
	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/opstest"
	"github.com/rebill/rebill/testkit/testsupport"
)

var now = time.Date(2026, 12, 10, 12, 0, 0, 0, time.UTC)

func TestInspectorKicksTheStepItStandsInAndReportsOldHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	insp := &inspector.Inspector{Pool: pool, Jobs: client, Clock: testsupport.NewClock(now), Logger: zerolog.New(io.Discard),
		Thresholds: inspector.Thresholds{NoJobAfter: time.Minute, UnknownAfter: time.Hour, HoldWarnAfter: 72 * time.Hour}}
	sub := opstest.Subscription(t, pool, "sim1", now.AddDate(0, -6, 0))
	charge := func(n int, status string, since time.Duration) string {
		id, _ := opstest.InsertCharge(t, pool, opstest.Charge{Subscription: sub, PeriodStart: now.AddDate(0, -n, 0),
			Gateway: "sim1", Status: status, UpdatedAt: now.Add(-since)})
		return id.String()
	}
	capturing := charge(1, "capturing", 2*time.Minute)
	authorized := charge(2, "authorized", 2*time.Minute)
	cancelled := charge(3, "authorized", 2*time.Minute)
	_, err = pool.Exec(ctx, `UPDATE charges SET void_requested = true WHERE id = $1`, cancelled)
	require.NoError(t, err)
	resend := charge(4, "authorizing", 2*time.Minute)
	_, err = pool.Exec(ctx, `UPDATE charges SET unknown_phase = 'authorize' WHERE id = $1`, resend)
	require.NoError(t, err)
	recent := charge(5, "capturing", 30*time.Second)
	// Authorized, with a job of a step the inspector does not know (one
	// added later, such as a posting to a payment registry): alive.
	posting := charge(7, "authorized", 2*time.Minute)
	_, err = client.Insert(ctx, laterStepArgs{ChargeID: uuid.MustParse(posting), Attempt: 1}, nil)
	require.NoError(t, err)
	// A fine's hold waiting on its registry posting, whose jobs name the
	// posting and not the charge: not kicked (a capture now would take a
	// fine never posted).
	fine := charge(8, "authorized", 2*time.Minute)
	_, err = pool.Exec(ctx, `UPDATE charges SET registry_uin = '18810000000000000001' WHERE id = $1`, fine)
	require.NoError(t, err)
	// The same, waiting long enough for its hold to near expiry (a clock
	// jump in dev mode, a registry down for days): reported, never kicked
	// into a capture either.
	oldFine := charge(9, "authorized", 96*time.Hour)
	_, err = pool.Exec(ctx, `UPDATE charges SET registry_uin = '18810000000000000002' WHERE id = $1`, oldFine)
	require.NoError(t, err)
	// Held for four days, its capture job alive (waiting on the gateway).
	held := charge(6, "authorized", 96*time.Hour)
	_, err = client.Insert(ctx, charges.CaptureArgs{ChargeID: uuid.MustParse(held), Attempt: 1}, &river.InsertOpts{ScheduledAt: now.Add(time.Hour)})
	require.NoError(t, err)

	sum, err := insp.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, inspector.Summary{Kicked: 4, Reported: 2}, sum)

	jobs := map[string]string{}
	rows, err := pool.Query(ctx, `SELECT args->>'charge_id', kind || coalesce(':' || (args->>'phase'), '') FROM river_job`)
	require.NoError(t, err)
	pairs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		ID   string
		Kind string
	}])
	require.NoError(t, err)
	for _, p := range pairs {
		jobs[p.ID] = p.Kind
	}
	require.Equal(t, map[string]string{
		capturing:  "charge_capture",
		authorized: "charge_capture",
		cancelled:  "charge_void",
		resend:     "charge_reconcile:authorize",
		held:       "charge_capture",
		posting:    "test_later_step",
	}, jobs, "recent (%s) and the fines waiting on their postings (%s, %s) are left alone", recent, fine, oldFine)

	// The kicked jobs are alive now: nothing more to do but report the holds.
	sum, err = insp.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, inspector.Summary{Reported: 2}, sum)
}

// laterStepArgs stands for a charge step added after the inspector.
type laterStepArgs struct {
	ChargeID uuid.UUID `json:"charge_id"`
	Attempt  int       `json:"attempt"`
}

func (laterStepArgs) Kind() string { return "test_later_step" }

// Refunds unknown are counted per gateway, and those unknown longer than
// UnknownAfter as overdue (the alert's gauge); a later run with none left
// reads 0. Not parallel: the gauges are the process's.
func TestInspectorCountsRefundsUnknown(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	insp := &inspector.Inspector{Pool: pool, Jobs: client, Clock: testsupport.NewClock(now), Logger: zerolog.New(io.Discard),
		Thresholds: inspector.Thresholds{NoJobAfter: time.Minute, UnknownAfter: time.Hour}}
	sub := opstest.Subscription(t, pool, "simq", now.AddDate(0, -6, 0))
	refund := func(n int, status string, since time.Duration) {
		id, key := opstest.InsertCharge(t, pool, opstest.Charge{Subscription: sub, PeriodStart: now.AddDate(0, -n, 0),
			Gateway: "simq", Status: "succeeded", UpdatedAt: now.Add(-48 * time.Hour)})
		opstest.InsertRefund(t, pool, opstest.Refund{ChargeID: id, ChargeKey: key, Amount: 400, Gateway: "simq",
			Status: status, At: now.Add(-since)})
	}
	refund(1, "unknown", 2*time.Hour)
	refund(2, "unknown", 3*time.Hour)
	refund(3, "unknown", 10*time.Minute)
	refund(4, "succeeded", 5*time.Hour)
	refund(5, "pending", 5*time.Hour)

	_, err = insp.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, 3.0, testutil.ToFloat64(metrics.RefundsUnknown.WithLabelValues("simq")))
	require.Equal(t, 2.0, testutil.ToFloat64(metrics.RefundsUnknownOverdue.WithLabelValues("simq")))

	_, err = pool.Exec(ctx, `UPDATE refunds SET status = 'succeeded', settled_at = $1`, now)
	require.NoError(t, err)
	_, err = insp.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, testutil.CollectAndCount(metrics.RefundsUnknownOverdue))
	require.Equal(t, 0.0, testutil.ToFloat64(metrics.RefundsUnknown.WithLabelValues("simq")))
}
