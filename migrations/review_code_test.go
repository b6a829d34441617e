package migrations_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/migrations"
	"github.com/rebill/rebill/testkit/dbtest"
)

// The review code migration runs on charges that went to review under the
// earlier versions' texts: each gets the code its text was written for,
// 'legacy' when none, and the code's sentence in place of the text (no
// host, URL or Go error left), keeping the hold check's notes; a charge
// that never went to review keeps NULL in both.
func TestReviewCodeMigrationOfExistingCharges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	provider, db, err := migrations.NewProvider(pool)
	require.NoError(t, err)
	defer db.Close()
	_, err = provider.DownTo(ctx, 25)
	require.NoError(t, err)

	timeout := `authorize gave no verdict after its last attempt: gateway sim4: look up "k:a1": Get "http://127.0.0.1:45267/sim4/operations/k:a1": context deadline exceeded`
	cases := []struct{ old, code, reason string }{
		{timeout + " (the gateway shows no hold and no capture)", "gateway_timeout",
			charges.ReviewGatewayTimeout.Sentence() + " (the gateway shows no hold and no capture)"},
		{`capture gave no verdict after its last attempt: gateway sim1: capture: 500 Internal Server Error`, "gateway_error",
			charges.ReviewGatewayError.Sentence()},
		{`authorize: the gateway did nothing for longer than 6h0m0s: gateway unavailable: dial tcp 10.0.0.7:443: connect: connection refused`,
			"gateway_unavailable", charges.ReviewGatewayUnavailable.Sentence()},
		{`the authorize of attempt 1 got no answer and yookassa can no longer tell whether it happened: check the gateway's dashboard`,
			"outcome_unprovable", charges.ReviewOutcomeUnprovable.Sentence()},
		{`the gateway refused the capture of an authorized hold: failed authorization_expired (no capture at the gateway; hold auth_9 was voided)`,
			"capture_refused", charges.ReviewCaptureRefused.Sentence() + " (no capture at the gateway; hold auth_9 was voided)"},
		{`the gateway refused to void the hold: failed x (the gateway shows a succeeded capture cap_1 of attempt 1) (the gateway refused to void hold auth_9: failed )`,
			"void_refused", charges.ReviewVoidRefused.Sentence() +
				" (the gateway shows a succeeded capture cap_1 of attempt 1) (the gateway refused to void hold auth_9: failed )"},
		{`unknown gateway "gone"`, "gateway_not_configured", charges.ReviewGatewayNotConfigured.Sentence()},
		{`the state payment registry did not accept the posting: post "https://gmp.example/api": 400`, "registry_rejected",
			charges.ReviewRegistryRejected.Sentence()},
		{`a fine was held but no payment registry is configured to post it to`, "registry_not_configured",
			charges.ReviewRegistryNotConfigured.Sentence()},
		{`velocity limit: the customer reached the declined charges allowed per day; POST /v1/charges/{id}/retry sends it to the gateway`,
			"declines_limit", charges.ReviewDeclinesLimit.Sentence()},
		{`River discarded the charge_capture job after its last attempt`, "job_discarded", charges.ReviewJobDiscarded.Sentence()},
		{`inspector: outcome unknown since 2026-01-01T00:00:00Z and its reconciliation is more than 1h0m0s overdue`,
			"unknown_overdue", charges.ReviewUnknownOverdue.Sentence()},
		{`inspector: capturing since 2026-01-01T00:00:00Z with no live job, and its charge_capture job cannot be enqueued again (x)`,
			"stuck", charges.ReviewStuck.Sentence()},
		{`something an older version wrote: dial tcp 10.1.2.3:5432`, "legacy", charges.ReviewLegacy.Sentence()},
	}
	_, err = pool.Exec(ctx, `INSERT INTO enrollments (id, customer_id, kind, els, status, currency, max_amount, pm_gateway, pm_token,
		pm_exp_month, pm_exp_year, created_at, updated_at) VALUES
		('00000000-0000-0000-0000-0000000000e1', 'ann', 'housing', '75KA533315', 'active', 'RUB', 100000, 'sim1', 't', 1, 2035, now(), now())`)
	require.NoError(t, err)
	insert := func(i int, reason *string) {
		_, err := pool.Exec(ctx, `INSERT INTO charges (id, enrollment_id, customer_id, period_key, period_start, amount, currency,
			gateway, pm_token, status, review_reason, created_at, updated_at, attempt_due_at)
			VALUES (('00000000-0000-0000-0000-' || lpad($1::int::text, 12, '0'))::uuid, '00000000-0000-0000-0000-0000000000e1',
			'ann', 'B-' || $1::int::text, now(), 5000, 'RUB', 'sim1', 't', CASE WHEN $2::text IS NULL THEN 'succeeded' ELSE 'requires_review' END,
			$2, now(), now(), now())`, i, reason)
		require.NoError(t, err)
	}
	for i, tc := range cases {
		insert(i+1, &tc.old)
	}
	insert(100, nil)

	_, err = provider.UpTo(ctx, 26)
	require.NoError(t, err)
	for i, tc := range cases {
		var code, reason string
		require.NoError(t, pool.QueryRow(ctx, `SELECT review_code, review_reason FROM charges
			WHERE id = ('00000000-0000-0000-0000-' || lpad($1::int::text, 12, '0'))::uuid`, i+1).Scan(&code, &reason))
		require.Equal(t, tc.code, code, tc.old)
		require.Equal(t, tc.reason, reason, tc.old)
		require.NotRegexp(t, `http|127\.0|10\.\d|deadline|dial tcp`, reason)
	}
	var code, reason *string
	require.NoError(t, pool.QueryRow(ctx, `SELECT review_code, review_reason FROM charges
		WHERE id = '00000000-0000-0000-0000-000000000100'`).Scan(&code, &reason))
	require.Nil(t, code)
	require.Nil(t, reason)
}

// The migration writes each code's sentence as charges.ReviewCode does:
// an old row reads as a new one.
func TestReviewCodeMigrationSentences(t *testing.T) {
	t.Parallel()
	sql, err := os.ReadFile("sql/00026_review_code.sql")
	require.NoError(t, err)
	got := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s+\('(\w+)', '((?:[^']|'')*)'\)`).FindAllStringSubmatch(string(sql), -1) {
		got[m[1]] = strings.ReplaceAll(m[2], "''", "'")
	}
	for code, sentence := range got {
		require.Contains(t, charges.ReviewCodes, charges.ReviewCode(code))
		require.Equal(t, charges.ReviewCode(code).Sentence(), sentence, code)
	}
	for _, m := range regexp.MustCompile(`THEN '(\w+)'|ELSE '(\w+)'`).FindAllStringSubmatch(string(sql), -1) {
		require.Contains(t, got, m[1]+m[2], "a code the backfill gives has no sentence")
	}
}
