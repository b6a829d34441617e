package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/migrations"
	"github.com/rebill/rebill/testkit/dbtest"
)

// The vehicle document migration runs on a database where one customer
// enrolled one car twice, under the Latin and the Cyrillic spelling of its
// STS, each enrollment with a bill. It must not fail, and it keeps both
// enrollments and their bills as they were, each now with the canonical
// number, for the audit to list; numbers with a Latin letter that no
// Cyrillic letter looks like are left as they are. The rule is the one
// the API applies (enrollments.CanonicalVehicleDocument).
func TestVehicleDocumentMigrationKeepsBothSpellings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	provider, db, err := migrations.NewProvider(pool)
	require.NoError(t, err)
	defer db.Close()
	_, err = provider.DownTo(ctx, 28)
	require.NoError(t, err)

	_, err = pool.Exec(ctx, `
INSERT INTO enrollments (id, customer_id, kind, els, sts, driver_license, status, currency, max_amount, pm_gateway, pm_token,
    pm_exp_month, pm_exp_year, created_at, updated_at) VALUES
 ('00000000-0000-0000-0000-0000000000f1', 'ann', 'fines', NULL, '77YA123456', NULL, 'active', 'RUB', 100000, 'sim1', 't', 1, 2035, now(), now()),
 ('00000000-0000-0000-0000-0000000000f2', 'ann', 'fines', NULL, '77УА123456', NULL, 'active', 'RUB', 100000, 'sim1', 't', 1, 2035, now(), now()),
 ('00000000-0000-0000-0000-0000000000f3', 'bob', 'fines', NULL, '77DA123456', '77AB654321', 'active', 'RUB', 100000, 'sim1', 't', 1, 2035, now(), now()),
 ('00000000-0000-0000-0000-0000000000f4', 'cat', 'fines', NULL, '7701123456', '7712345678', 'paused', 'RUB', 100000, 'sim1', 't', 1, 2035, now(), now()),
 ('00000000-0000-0000-0000-0000000000a1', 'ann', 'housing', '75КА533315', NULL, NULL, 'active', 'RUB', 100000, 'sim1', 't', 1, 2035, now(), now());
INSERT INTO bills (id, enrollment_id, customer_id, bill_id, identity, amount, issued_at, due_date, status, pay_at, expires_at,
    received_at, updated_at) VALUES
 ('00000000-0000-0000-0000-00000000b0f1', '00000000-0000-0000-0000-0000000000f1', 'ann', 'U1', 'uin:U1', 5000, now(), '2030-01-01',
  'scheduled', now(), now() + interval '30 days', now(), now()),
 ('00000000-0000-0000-0000-00000000b0f2', '00000000-0000-0000-0000-0000000000f2', 'ann', 'U2', 'uin:U2', 5000, now(), '2030-01-01',
  'scheduled', now(), now() + interval '30 days', now(), now());
`)
	require.NoError(t, err)

	_, err = provider.UpTo(ctx, 29)
	require.NoError(t, err, "the migration does not fail on one car enrolled under two spellings")

	type row struct {
		ID, Customer, Status, STS, DriverLicense, ELS string
		Bills                                         int
	}
	rows, err := pool.Query(ctx, `SELECT e.id::text, e.customer_id, e.status, coalesce(e.sts, ''), coalesce(e.driver_license, ''),
		coalesce(e.els, ''), (SELECT count(*) FROM bills b WHERE b.enrollment_id = e.id)::int FROM enrollments e ORDER BY e.id`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	require.Equal(t, []row{
		{"00000000-0000-0000-0000-0000000000a1", "ann", "active", "", "", "75КА533315", 0},
		{"00000000-0000-0000-0000-0000000000f1", "ann", "active", "77УА123456", "", "", 1},
		{"00000000-0000-0000-0000-0000000000f2", "ann", "active", "77УА123456", "", "", 1},
		{"00000000-0000-0000-0000-0000000000f3", "bob", "active", "77DA123456", "77АВ654321", "", 0},
		{"00000000-0000-0000-0000-0000000000f4", "cat", "paused", "7701123456", "7712345678", "", 0},
	}, got, "both of ann's enrollments are kept, with their bills")
	// Every spelling the migration meets ends as the API writes it.
	for i, sts := range []string{"77ya 123456", "77da123456", "77уа123456", "77ÉA123456", "77 УА 123456", "77ХУ123456"} {
		var stored string
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO enrollments (id, customer_id, kind, sts, status, currency, max_amount,
			pm_gateway, pm_token, pm_exp_month, pm_exp_year, created_at, updated_at)
			VALUES (gen_random_uuid(), 'dan', 'fines', $1, 'active', 'RUB', 1, 'sim1', 't', 1, 2035, now(), now()) RETURNING id::text`,
			sts).Scan(&stored))
		_, err = provider.DownTo(ctx, 28)
		require.NoError(t, err)
		_, err = provider.UpTo(ctx, 29)
		require.NoError(t, err)
		require.NoError(t, pool.QueryRow(ctx, `SELECT sts FROM enrollments WHERE id = $1`, stored).Scan(&stored))
		require.Equal(t, enrollments.CanonicalVehicleDocument(sts), stored, "case %d: %q", i, sts)
	}
}
