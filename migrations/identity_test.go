package migrations_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/migrations"
	"github.com/rebill/rebill/testkit/dbtest"
)

// The bill identity migration runs on a database that already holds
// copies of one bill: an ELS spelt in Latin twins, a fine enrolled by two
// customers and paid by one while the other waits in dunning, a fine
// paid twice, and a copy with no charge yet. It must not fail; the waiting
// copy loses (its charge voided, its bill a duplicate of the payer's), the
// copy with no charge becomes a duplicate, the pair paid twice stays out
// of the identity index for the audit to report, and each remaining
// identity is held by one charge.
func TestBillIdentityMigrationWithExistingDuplicates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	provider, db, err := migrations.NewProvider(pool)
	require.NoError(t, err)
	defer db.Close()
	_, err = provider.DownTo(ctx, 9)
	require.NoError(t, err)

	_, err = pool.Exec(ctx, `
INSERT INTO enrollments (id, customer_id, kind, els, sts, status, currency, max_amount, pm_gateway, pm_token, pm_exp_month,
    pm_exp_year, created_at, updated_at) VALUES
 ('00000000-0000-0000-0000-0000000000a1', 'ann', 'housing', '75KA533315', NULL, 'active', 'RUB', 100000, 'sim1', 't', 1, 2035, now(), now()),
 ('00000000-0000-0000-0000-0000000000a2', 'ann', 'housing', '75ка533315', NULL, 'active', 'RUB', 100000, 'sim1', 't', 1, 2035, now(), now()),
 ('00000000-0000-0000-0000-0000000000f1', 'ann', 'fines', NULL, '77УА123456', 'active', 'RUB', 100000, 'sim1', 't', 1, 2035, now(), now()),
 ('00000000-0000-0000-0000-0000000000f2', 'bob', 'fines', NULL, '77УА123456', 'active', 'RUB', 100000, 'sim1', 't', 1, 2035, now(), now()),
 ('00000000-0000-0000-0000-0000000000f3', 'cat', 'fines', NULL, '77УА123456', 'active', 'RUB', 100000, 'sim1', 't', 1, 2035, now(), now());
INSERT INTO dev_bill_source (kind, account_key, bill_id, bill, received_at) VALUES
 ('housing', '75KA533315', 'Z-1', '{"bill_id": "Z-1", "els": "75KA533315"}', now() - interval '1 hour'),
 ('housing', '75КА533315', 'Z-1', '{"bill_id": "Z-1", "els": "75КА533315"}', now());
INSERT INTO bills (id, enrollment_id, customer_id, bill_id, amount, issued_at, due_date, status, pay_at, expires_at, charge_id,
    received_at, updated_at) VALUES
 -- one housing bill, two copies: the first paid, the second scheduled with no charge
 ('00000000-0000-0000-0000-00000000b0a1', '00000000-0000-0000-0000-0000000000a1', 'ann', 'Z-1', 5000, now(), '2030-01-01',
  'paid', now(), now() + interval '30 days', '00000000-0000-0000-0000-00000000c0a1', now() - interval '2 hours', now()),
 ('00000000-0000-0000-0000-00000000b0a2', '00000000-0000-0000-0000-0000000000a2', 'ann', 'Z-1', 5000, now(), '2030-01-01',
  'scheduled', now(), now() + interval '30 days', NULL, now() - interval '1 hour', now()),
 -- fine U1: ann paid it, bob's copy waits in dunning, cat's has no charge
 ('00000000-0000-0000-0000-00000000b0f1', '00000000-0000-0000-0000-0000000000f1', 'ann', 'U1', 5000, now(), '2030-01-01',
  'paid', now(), now() + interval '30 days', '00000000-0000-0000-0000-00000000c0f1', now() - interval '3 hours', now()),
 ('00000000-0000-0000-0000-00000000b0f2', '00000000-0000-0000-0000-0000000000f2', 'bob', 'U1', 5000, now(), '2030-01-01',
  'paying', now(), now() + interval '30 days', '00000000-0000-0000-0000-00000000c0f2', now() - interval '2 hours', now()),
 ('00000000-0000-0000-0000-00000000b0f3', '00000000-0000-0000-0000-0000000000f3', 'cat', 'U1', 5000, now(), '2030-01-01',
  'scheduled', now(), now() + interval '30 days', NULL, now() - interval '1 hour', now()),
 -- fine U2: paid by ann and by bob
 ('00000000-0000-0000-0000-00000000b1f1', '00000000-0000-0000-0000-0000000000f1', 'ann', 'U2', 5000, now(), '2030-01-01',
  'paid', now(), now() + interval '30 days', '00000000-0000-0000-0000-00000000c1f1', now() - interval '3 hours', now()),
 ('00000000-0000-0000-0000-00000000b1f2', '00000000-0000-0000-0000-0000000000f2', 'bob', 'U2', 5000, now(), '2030-01-01',
  'paid', now(), now() + interval '30 days', '00000000-0000-0000-0000-00000000c1f2', now() - interval '2 hours', now());
INSERT INTO charges (id, enrollment_id, customer_id, period_key, period_start, amount, currency, gateway, pm_token, status,
    next_attempt_at, created_at, updated_at, attempt_due_at) VALUES
 ('00000000-0000-0000-0000-00000000c0a1', '00000000-0000-0000-0000-0000000000a1', 'ann', 'Z-1', now(), 5000, 'RUB', 'sim1', 't',
  'succeeded', NULL, now() - interval '2 hours', now(), now()),
 ('00000000-0000-0000-0000-00000000c0f1', '00000000-0000-0000-0000-0000000000f1', 'ann', 'U1', now(), 5000, 'RUB', 'sim1', 't',
  'succeeded', NULL, now() - interval '3 hours', now(), now()),
 ('00000000-0000-0000-0000-00000000c0f2', '00000000-0000-0000-0000-0000000000f2', 'bob', 'U1', now(), 5000, 'RUB', 'sim1', 't',
  'declined', now() + interval '1 day', now() - interval '2 hours', now(), now()),
 ('00000000-0000-0000-0000-00000000c1f1', '00000000-0000-0000-0000-0000000000f1', 'ann', 'U2', now(), 5000, 'RUB', 'sim1', 't',
  'succeeded', NULL, now() - interval '3 hours', now(), now()),
 ('00000000-0000-0000-0000-00000000c1f2', '00000000-0000-0000-0000-0000000000f2', 'bob', 'U2', now(), 5000, 'RUB', 'sim1', 't',
  'succeeded', NULL, now() - interval '2 hours', now(), now());
`)
	require.NoError(t, err)

	_, err = provider.UpTo(ctx, 10)
	require.NoError(t, err, "the migration does not fail on existing duplicates")

	var els []string
	rows, err := pool.Query(ctx, `SELECT els FROM enrollments WHERE kind = 'housing' ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		els = append(els, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"75КА533315", "75КА533315"}, els, "both spellings are the one canonical ELS")
	var keys, devELS string
	require.NoError(t, pool.QueryRow(ctx, `SELECT string_agg(account_key, ','), string_agg(bill ->> 'els', ',')
		FROM dev_bill_source`).Scan(&keys, &devELS))
	require.Equal(t, "75КА533315", keys, "the simulated source keeps the first of the two spellings, canonical")
	require.Equal(t, "75КА533315", devELS)

	status := func(id string) (string, *string) {
		var s string
		var payer *string
		require.NoError(t, pool.QueryRow(ctx, `SELECT status, paid_by_enrollment_id::text FROM bills WHERE id = $1`, id).
			Scan(&s, &payer))
		return s, payer
	}
	s, payer := status("00000000-0000-0000-0000-00000000b0a2")
	require.Equal(t, "duplicate", s, "the housing copy with no charge loses to the paid one")
	require.Equal(t, "00000000-0000-0000-0000-0000000000a1", *payer)
	s, payer = status("00000000-0000-0000-0000-00000000b0f2")
	require.Equal(t, "duplicate", s, "bob's copy in dunning loses to ann's paid one")
	require.Equal(t, "00000000-0000-0000-0000-0000000000f1", *payer)
	s, _ = status("00000000-0000-0000-0000-00000000b0f3")
	require.Equal(t, "duplicate", s)
	for _, id := range []string{"00000000-0000-0000-0000-00000000b1f1", "00000000-0000-0000-0000-00000000b1f2"} {
		s, _ = status(id)
		require.Equal(t, "paid", s, "a pair paid twice is left as it is")
	}
	var chargeStatus, code string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status, failure_code FROM charges WHERE id = '00000000-0000-0000-0000-00000000c0f2'`).
		Scan(&chargeStatus, &code))
	require.Equal(t, "voided", chargeStatus, "the losing copy's dunning stops")
	require.Equal(t, "duplicate_bill", code)

	var held []string
	rows, err = pool.Query(ctx, `SELECT bill_identity || '=' || id FROM charges WHERE identity_held ORDER BY bill_identity`)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		held = append(held, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{
		"els:75КА533315:Z-1=00000000-0000-0000-0000-00000000c0a1",
		"uin:U1=00000000-0000-0000-0000-00000000c0f1",
		"uin:U2=00000000-0000-0000-0000-00000000c1f1",
	}, held, "one holder per identity; the second payment of U2 is outside the index")

	// The index now refuses a second holder.
	_, err = pool.Exec(ctx, `UPDATE charges SET identity_held = true WHERE id = '00000000-0000-0000-0000-00000000c1f2'`)
	require.ErrorContains(t, err, "charges_bill_identity")
}
