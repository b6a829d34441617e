package charges_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/testkit/dbtest"
)

// identityFines files n fines' charges of one enrollment, each holding
// its bill's identity (uin:<UIN>), in identity order.
func identityFines(ctx context.Context, t *testing.T, pool *pgxpool.Pool, n int) []charges.Charge {
	t.Helper()
	enrollmentID := uuid.New()
	_, err := pool.Exec(ctx, `INSERT INTO enrollments (id, customer_id, kind, sts, status, currency, max_amount, pm_gateway,
			pm_token, pm_exp_month, pm_exp_year, created_at, updated_at)
		VALUES ($1, 'cus_1', 'fines', '77УА123456', 'active', 'RUB', 100000, 'sim1', 'tok', 12, 2030, $2, $2)`, enrollmentID, postingStart)
	require.NoError(t, err)
	out := make([]charges.Charge, n)
	for i := range out {
		uin := fmt.Sprintf("188101000000000000%02d", i+1)
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			out[i], _, err = (&charges.Store{Queue: insertOnly(t, pool)}).CreateForBill(ctx, tx, charges.NewBillCharge{EnrollmentID: enrollmentID, CustomerID: "cus_1",
				BillID: uin, Due: postingStart, Amount: 500, Currency: "RUB", Gateway: "sim1", Token: "tok", RegistryUIN: uin,
				Identity: "uin:" + uin}, postingStart)
			return err
		}))
	}
	return out
}

// identity is the identity identityFines gave c's bill.
func identity(c charges.Charge) string { return "uin:" + c.RegistryUIN }

// A charge lets go of its bill's identity once its money provably never
// moved and no posting of it may stand: a voided one always, a failed one
// only to a copy waiting to pay, which the bills' owner answers. The
// list is read page by page, so failed charges with no copy waiting do
// not hide a releasable identity behind them.
func TestReleasableIdentities(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	cs := identityFines(ctx, t, pool, 6)
	set := func(c charges.Charge, sql string) {
		_, err := pool.Exec(ctx, `UPDATE charges SET `+sql+` WHERE id = $1`, c.ID)
		require.NoError(t, err)
	}
	// 0, 1, 2: failed by declines alone (never held money); 3 voided; 4
	// failed holding money not yet released; 5 still scheduled.
	for _, c := range cs[:3] {
		set(c, `status = 'failed'`)
	}
	set(cs[3], `status = 'voided'`)
	set(cs[4], `status = 'failed', authorized_at = now()`)
	waiting := map[string]bool{identity(cs[1]): true}
	var asked [][]string
	copies := func(_ context.Context, identities []string) (map[string]bool, error) {
		asked = append(asked, identities)
		return waiting, nil
	}
	ids := func(hs []charges.HeldIdentity) []uuid.UUID {
		out := make([]uuid.UUID, len(hs))
		for i, h := range hs {
			out[i] = h.ChargeID
		}
		return out
	}

	got, err := charges.Releasable(ctx, pool, 2, copies)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{cs[1].ID, cs[3].ID}, ids(got), "the failed one with a copy waiting, and the voided one")
	require.Equal(t, [][]string{{identity(cs[0]), identity(cs[1])}, {identity(cs[2])}}, asked,
		"only failed charges' identities are asked about, a page at a time")
	require.Equal(t, charges.HeldIdentity{ChargeID: cs[1].ID, EnrollmentID: cs[1].EnrollmentID, Identity: identity(cs[1])}, got[0])

	got, err = charges.Releasable(ctx, pool, 1, copies)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{cs[1].ID}, ids(got))

	// A posting of the voided charge's UIN that may stand keeps it.
	_, err = pool.Exec(ctx, `INSERT INTO registry_postings (payment_id, charge_id, attempt, uin, amount, status, created_at, updated_at)
		VALUES ('p-other', $1, 1, $2, 500, $3, $4, $4)`, cs[5].ID, cs[3].RegistryUIN, charges.PostingAbandoned, postingStart)
	require.NoError(t, err)
	got, err = charges.Releasable(ctx, pool, 10, copies)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{cs[1].ID}, ids(got))

	release := func(c charges.Charge, copyWaiting bool) bool {
		var released bool
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			released, err = (&charges.Store{}).ReleaseIdentity(ctx, tx, c.ID, copyWaiting, postingStart.Add(time.Hour))
			return err
		}))
		return released
	}
	require.False(t, release(cs[0], false), "a failed charge keeps its identity while no copy waits")
	require.True(t, release(cs[0], true))
	require.False(t, release(cs[0], true), "released once")
	require.False(t, release(cs[4], true), "money held and not released: kept")
	require.False(t, release(cs[3], true), "a posting of its UIN may stand: kept")
	require.False(t, release(cs[5], true), "not failed nor voided: kept")
	rows, err := pool.Query(ctx, `SELECT identity_held FROM charges WHERE id = ANY($1) ORDER BY bill_identity`,
		[]uuid.UUID{cs[0].ID, cs[3].ID})
	require.NoError(t, err)
	held, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	require.NoError(t, err)
	require.Equal(t, []bool{false, true}, held)
	got, err = charges.Releasable(ctx, pool, 10, copies)
	require.NoError(t, err)
	require.False(t, slices.Contains(ids(got), cs[0].ID), "an identity released is no longer listed")
}
