package migrations_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/migrations"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/testkit/dbtest"
)

// The housing identifiers migration runs on a database holding housing
// bills, one paid and one waiting, with their charges. It must not fail,
// and every stored bill stays as it was and readable, with no
// identifiers; afterwards a payment document is one identity among the
// charges that hold theirs, and a malformed period or INN cannot be
// stored. It also goes down and up again.
func TestHousingIdentifiersMigrationKeepsStoredBills(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	provider, db, err := migrations.NewProvider(pool)
	require.NoError(t, err)
	defer db.Close()
	_, err = provider.DownTo(ctx, 40)
	require.NoError(t, err)

	_, err = pool.Exec(ctx, `
INSERT INTO enrollments (id, customer_id, kind, els, status, currency, max_amount, pm_gateway, pm_token, pm_exp_month,
    pm_exp_year, created_at, updated_at) VALUES
 ('00000000-0000-0000-0000-0000000000a1', 'ann', 'housing', '75ДА533315', 'active', 'RUB', 100000, 'sim1', 't', 1, 2035, now(), now()),
 ('00000000-0000-0000-0000-0000000000a2', 'bob', 'housing', '75ДА533315', 'active', 'RUB', 100000, 'sim1', 't', 1, 2035, now(), now());
INSERT INTO bills (id, enrollment_id, customer_id, bill_id, identity, amount, issued_at, due_date, status, pay_at, expires_at,
    charge_id, received_at, updated_at) VALUES
 ('00000000-0000-0000-0000-00000000b0a1', '00000000-0000-0000-0000-0000000000a1', 'ann', 'Z-1', 'els:75ДА533315:Z-1', 5000,
  now(), '2030-01-01', 'paid', now(), now() + interval '30 days', '00000000-0000-0000-0000-00000000c0a1', now(), now()),
 ('00000000-0000-0000-0000-00000000b0a2', '00000000-0000-0000-0000-0000000000a1', 'ann', 'Z-2', 'els:75ДА533315:Z-2', 7000,
  now(), '2030-01-01', 'paying', now(), now() + interval '30 days', '00000000-0000-0000-0000-00000000c0a2', now(), now());
INSERT INTO charges (id, enrollment_id, customer_id, period_key, period_start, amount, currency, gateway, pm_token, status,
    created_at, updated_at, attempt_due_at, bill_identity, identity_held) VALUES
 ('00000000-0000-0000-0000-00000000c0a1', '00000000-0000-0000-0000-0000000000a1', 'ann', 'Z-1', now(), 5000, 'RUB', 'sim1', 't',
  'succeeded', now(), now(), now(), 'els:75ДА533315:Z-1', true),
 ('00000000-0000-0000-0000-00000000c0a2', '00000000-0000-0000-0000-0000000000a1', 'ann', 'Z-2', now(), 7000, 'RUB', 'sim1', 't',
  'scheduled', now(), now(), now(), 'els:75ДА533315:Z-2', true);
`)
	require.NoError(t, err)

	_, err = provider.UpTo(ctx, 47)
	require.NoError(t, err, "the migration does not fail on stored bills")

	store := enrollments.NewStore(clock.Wall{})
	e := uuid.MustParse("00000000-0000-0000-0000-0000000000a1")
	for id, status := range map[string]enrollments.BillStatus{"Z-1": enrollments.BillPaid, "Z-2": enrollments.BillPaying} {
		b, err := store.GetBill(ctx, pool, e, id)
		require.NoError(t, err, "a stored bill is readable")
		require.Equal(t, status, b.Status)
		require.Empty(t, b.PaymentDocumentID)
		require.Empty(t, b.DocumentIdentity)
		require.Equal(t, enrollments.Supplier{}, b.Supplier)
		require.Equal(t, []string{"els:75ДА533315:" + id}, b.Identities())
	}

	// A payment document is held by one charge at a time.
	claim := func(id, key string) error {
		_, err := pool.Exec(ctx, `INSERT INTO charges (id, enrollment_id, customer_id, period_key, period_start, amount, currency,
			gateway, pm_token, status, created_at, updated_at, attempt_due_at, bill_identity, identity_held, document_identity)
			VALUES ($1, '00000000-0000-0000-0000-0000000000a2', 'bob', $2, now(), 100, 'RUB', 'sim1', 't', 'scheduled', now(), now(),
			now(), 'els:75ДА533315:' || $2, true, 'ipd:75ДА533315-01-6011')`, id, key)
		return err
	}
	require.NoError(t, claim("00000000-0000-0000-0000-00000000c0b1", "D-1"))
	require.ErrorContains(t, claim("00000000-0000-0000-0000-00000000c0b2", "D-2"), "charges_document_identity")
	for _, bad := range []string{`period = '2027-13'`, `supplier_inn = '77430139'`, `supplier_kpp = '7736010'`,
		`payment_document_id = '75ДА533315-01-6011'`} {
		_, err := pool.Exec(ctx, `UPDATE bills SET `+bad+` WHERE id = '00000000-0000-0000-0000-00000000b0a1'`)
		require.Error(t, err, bad)
	}

	_, err = pool.Exec(ctx, `DELETE FROM charges WHERE document_identity IS NOT NULL`)
	require.NoError(t, err)
	_, err = provider.DownTo(ctx, 40)
	require.NoError(t, err)
	_, err = provider.UpTo(ctx, 47)
	require.NoError(t, err)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM bills WHERE document_identity IS NULL`).Scan(&n))
	require.Equal(t, 2, n)
}
