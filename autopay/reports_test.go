package autopay_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/zhkh"
	"github.com/rebill/rebill/zhkh/party"
)

// Only money captured for a housing bill is reported to GIS ZhKH: once,
// with the enrollment's account and the bill's id; a housing charge voided
// as not owed, and a fine, are reported to nobody.
func TestOnlyACapturedHousingPaymentIsReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	reporter := &zhkh.Reporter{Pool: b.pool, Parties: party.NewBalancer(nil, 0), Clock: b.clock, Queue: client, Logger: zerolog.Nop()}
	b.outcomes.Reports = reporter
	paid := func(t *testing.T, c charges.Charge) {
		b.inTx(t, func(tx pgx.Tx) error { _, err := b.outcomes.ChargePaid(ctx, tx, c, false); return err })
	}
	reported := func(t *testing.T, c charges.Charge) (zhkh.Report, bool) {
		r, err := zhkh.OfCharge(ctx, b.pool, c.ID)
		if errors.Is(err, zhkh.ErrNotFound) {
			return zhkh.Report{}, false
		}
		require.NoError(t, err)
		return r, true
	}

	home := b.enrol(t, housingOf("cus_1", "75ДА533315", 0, 1_000_000))
	captured := b.charge(t, b.mustPush(t, home, housing(t, "H-1", 5000, "2027-03-25")))
	captured.Status = charges.Succeeded
	paid(t, captured)
	paid(t, captured)
	r, ok := reported(t, captured)
	require.True(t, ok, "a captured housing payment is reported")
	require.Equal(t, "75ДА533315", r.Capture.Account)
	require.Equal(t, "H-1", r.Capture.BillID)
	require.EqualValues(t, 5000, r.Capture.Amount)
	require.Equal(t, zhkh.Pending, r.Status)
	jobs, err := client.JobList(ctx, river.NewJobListParams().Kinds(zhkh.ReportArgs{}.Kind()))
	require.NoError(t, err)
	require.Len(t, jobs.Jobs, 1, "reported once")

	// A bill naming its payment document and supplier is reported under them.
	named := b.charge(t, b.mustPush(t, home, withDocument(t, "H-3")))
	named.Status = charges.Succeeded
	paid(t, named)
	r, ok = reported(t, named)
	require.True(t, ok)
	require.Equal(t, zhkh.Capture{ChargeID: named.ID, EnrollmentID: home.ID, Account: "75ДА533315", BillID: "H-3",
		Amount: housingBill, Currency: "RUB", CapturedAt: r.Capture.CapturedAt, PaymentDocumentID: paymentDoc,
		ServiceID: serviceID, Period: "2027-02", SupplierINN: "7743013901", SupplierKPP: "773601001", SupplierName: "УК Дом"},
		r.Capture)

	voided := b.charge(t, b.mustPush(t, home, housing(t, "H-2", 5000, "2027-03-25")))
	voided.Status = charges.Voided
	paid(t, voided)
	_, ok = reported(t, voided)
	require.False(t, ok, "a charge voided as not owed moved no money")

	e := b.enrol(t, finesOf("cus_2", "77УА123456", 500000))
	fine := b.charge(t, b.mustPush(t, e, fine(t, uin(7), 100000, 50000, "2027-03-20", "2027-05-09")))
	fine.Status = charges.Succeeded
	paid(t, fine)
	_, ok = reported(t, fine)
	require.False(t, ok, "a fine goes to GIS GMP, not GIS ZhKH")
	require.Equal(t, enrollments.BillPaid, b.bill(t, e, uin(7)).Status)
}
