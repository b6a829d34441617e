package e2e_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app"
	"github.com/rebill/rebill/books"
	"github.com/rebill/rebill/charges/registry/agentapi"
	"github.com/rebill/rebill/charges/registry/testkit/agentfake"
	"github.com/rebill/rebill/testkit/dbtest"
)

// The registry's book is the second safety net: a capture whose payment
// the registry holds annulled (what a capture on an annulled look-up
// leaves) is found by the registry reconciliation and by `rebill audit`,
// which exits non-zero, although rebill's own postings say accepted.
func TestRegistryBookFindsACaptureTheRegistryAnnulled(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	ctx := context.Background()
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	id := uin(31)
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", fine(id, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	b.waitBill(t, enr, id, "paid")
	posted := b.registryLedger(t, id)
	require.Len(t, posted, 1)
	out, err := auditInProcess(t, b.pool)
	require.NoError(t, err, "clean before the registry annuls it: %s", out)

	_, err = b.pool.Exec(ctx, `UPDATE dev_registry_ledger SET status = 'annulled', annulled_at = at WHERE payment_id = $1`,
		posted[0].PaymentID)
	require.NoError(t, err)
	out, err = auditInProcess(t, b.pool)
	require.Error(t, err, "the audit reads the registry's book: %s", out)
	require.Contains(t, out, "fine-capture-posted")
	require.Contains(t, out, "registry annulled")

	res, err := b.nodes[0].svc.Reconciler.RunRegistryDay(ctx, posted[0].Gateway, books.Day(start))
	require.NoError(t, err)
	require.Len(t, res.Discrepancies, 1, "%+v", res.Discrepancies)
	require.Equal(t, books.CapturedNotAccepted, res.Discrepancies[0].Kind)
	require.Equal(t, posted[0].PaymentID, res.Discrepancies[0].GatewayReference)
	got := b.call(t, http.MethodGet, "/v1/reconciliation?date="+books.Day(start).Format(time.DateOnly)+"&registry="+posted[0].Gateway, nil)
	require.Equal(t, "discrepancies", got["status"])
}

// A payment the registry accepted after rebill gave its posting up and
// released the hold (a registry that finished processing late) stands
// with no money behind it: past the annulment bound the registry
// reconciliation and `rebill audit` both report it.
func TestRegistryBookFindsAnAcceptedPaymentWithNoCapture(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, map[string]string{"REBILL_UNAVAILABLE_FOR": "2s"})
	ctx := context.Background()
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	b.call(t, http.MethodPost, "/v1/dev/registry/gmp1/faults", map[string]any{"error_rate": 1})
	b.call(t, http.MethodPost, "/v1/dev/registry/gmp2/faults", map[string]any{"error_rate": 1})
	id := uin(32)
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", fine(id, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	require.Eventually(t, func() bool {
		var tried bool
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM river_job
			WHERE kind = 'registry_post' AND (state = 'scheduled' OR attempt > 0))`).Scan(&tried))
		return tried
	}, 20*time.Second, 10*time.Millisecond, "held, posting")
	b.advance(t, "1h")
	var charge string
	require.Eventually(t, func() bool {
		cs := b.enrollmentCharges(t, enr)
		if len(cs) == 0 || cs[0]["status"] != "requires_review" {
			return false
		}
		charge = cs[0]["id"].(string)
		return true
	}, 30*time.Second, 100*time.Millisecond, "the posting failed for good and the charge went to review")
	b.call(t, http.MethodPost, "/v1/charges/"+charge+"/resolve", map[string]any{"outcome": "failed", "evidence": "registry failing"})
	require.Eventually(t, func() bool {
		var released bool
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT hold_released_at IS NOT NULL FROM charges WHERE id = $1`, charge).Scan(&released))
		return released
	}, 30*time.Second, 50*time.Millisecond, "the hold released: the charge's last change, from which the bound counts")
	b.call(t, http.MethodPost, "/v1/dev/registry/gmp1/faults", map[string]any{"error_rate": 0})
	b.call(t, http.MethodPost, "/v1/dev/registry/gmp2/faults", map[string]any{"error_rate": 0})

	// The registry finishes the payment rebill gave up on, after a defect
	// recorded the posting as never made (rebill keeps asking about an
	// abandoned posting and annuls it: the state only a defect leaves).
	var paymentID string
	require.NoError(t, b.pool.QueryRow(ctx, `UPDATE registry_postings SET status = 'failed' WHERE uin = $1
		RETURNING payment_id`, id).Scan(&paymentID))
	_, err := b.pool.Exec(ctx, `INSERT INTO dev_registry_ledger (payment_id, gateway, uin, amount, status, at)
		VALUES ($1, 'gmp1', $2, 50000, 'accepted', $3)`, paymentID, id, start)
	require.NoError(t, err)

	out, err := auditInProcess(t, b.pool)
	require.NoError(t, err, "within the annulment bound it may still be annulled: %s", out)
	_, err = b.nodes[0].svc.Reconciler.RunRegistryDay(ctx, "gmp1", books.Day(start))
	var wait *books.NotSettledError
	require.ErrorAs(t, err, &wait, "the day waits while the payment may still be annulled")

	b.advance(t, "25h")
	out, err = auditInProcess(t, b.pool)
	require.Error(t, err, "past the bound: %s", out)
	require.Contains(t, out, "bill-posting-annulled")
	res, err := b.nodes[0].svc.Reconciler.RunRegistryDay(ctx, "gmp1", books.Day(start))
	require.NoError(t, err)
	require.Len(t, res.Discrepancies, 1, "%+v", res.Discrepancies)
	require.Equal(t, books.AcceptedNotCaptured, res.Discrepancies[0].Kind)
	require.Equal(t, paymentID, res.Discrepancies[0].GatewayReference)
}

// A production node's registry behind HTTP without the export (404): the
// registry reconciliation marks the day unsupported and still finds, by
// looking the payment up, a capture whose payment the party annulled, and
// `rebill audit` with REBILL_REGISTRY_FILE reports it too.
func TestRegistryBookWithoutExportIsAskedPerPayment(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	simURL := startTestSim(t, pool.Config().ConnString())
	fake := agentfake.New()
	party := httptest.NewServer(fake)
	t.Cleanup(party.Close)
	file := filepath.Join(t.TempDir(), "registries.yaml")
	require.NoError(t, os.WriteFile(file, []byte("- {name: bank, kind: http, base_url: \""+party.URL+"\"}\n"), 0o600))
	env := noRegistryEnv(simURL)
	env["REBILL_REGISTRY_FILE"] = file
	prod := startNodeOn(t, pool, env, true)
	pb := prod.bundle(pool)
	enr := pb.createFinesEnrollment(t, "tok_ok", 500000)
	id := uin(33)
	pb.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", dueFine(id))
	pb.waitBill(t, enr, id, "paid")
	ledger := fake.Ledger()
	require.Len(t, ledger, 1)

	audit := func() (string, error) {
		all := testEnv(env)
		var out, errOut strings.Builder
		err := app.Run(context.Background(), []string{"rebill", "audit"}, func(k string) string {
			if k == "DATABASE_URL" {
				return pool.Config().ConnString()
			}
			return all(k)
		}, &out, &errOut)
		return out.String() + errOut.String(), err
	}
	fake.SetFaults(agentfake.Faults{NoExport: true})
	out, err := audit()
	require.NoError(t, err, "clean: %s", out)

	ctx := context.Background()
	client, err := agentapi.New(agentapi.Options{Name: "bank", BaseURL: party.URL})
	require.NoError(t, err)
	require.NoError(t, client.Annul(ctx, ledger[0].PaymentID), "the party annuls the payment behind the capture")
	out, err = audit()
	require.Error(t, err, "%s", out)
	require.Contains(t, out, "fine-capture-posted")

	day := books.Day(time.Now())
	res, err := prod.svc.Reconciler.RunRegistryDay(ctx, "bank", day)
	if !books.Day(time.Now()).Equal(day) {
		t.Skip("the UTC day turned during the test")
	}
	require.NoError(t, err)
	require.True(t, res.Unsupported, "the day is marked unsupported")
	require.Len(t, res.Discrepancies, 1, "%+v", res.Discrepancies)
	require.Equal(t, books.CapturedNotAccepted, res.Discrepancies[0].Kind)
	require.Equal(t, ledger[0].PaymentID, res.Discrepancies[0].GatewayReference)
}

// registryBookFinds runs `rebill audit` and the registry reconciliation of
// gateway's day, and returns what each reports: the audit's output when it
// exits non-zero, and the reconciliation's discrepancies.
func (b testBundle) registryBookFinds(t *testing.T, gateway string, day time.Time) (string, []books.Discrepancy) {
	t.Helper()
	var audit string
	if out, err := auditInProcess(t, b.pool); err != nil {
		audit = out
	}
	res, err := b.nodes[0].svc.Reconciler.RunRegistryDay(context.Background(), gateway, books.Day(day))
	require.NoError(t, err, "the day is settled")
	return audit, res.Discrepancies
}

// A fine's payment the registry keeps processing past the hold's last
// moment to post, and accepts after the hold was voided: rebill annuls it
// there, so past the annulment bound neither `rebill audit` nor the
// registry reconciliation finds anything. Without that annulment (the
// posting marked failed and never asked about again), both report the
// payment standing with no money behind it: the audit
// "bill-posting-annulled", the reconciliation accepted_not_captured.
func TestRegistryBookFindsNothingOfAPaymentAcceptedPastTheLastMoment(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	ctx := context.Background()
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	for _, gw := range []string{"gmp1", "gmp2"} {
		b.call(t, http.MethodPost, "/v1/dev/registry/"+gw+"/faults", map[string]any{"processing": 1000})
	}
	id := uin(34)
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", fine(id, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	require.Eventually(t, func() bool {
		posted := b.registryLedger(t, id)
		return len(posted) == 1 && posted[0].Status == "processing"
	}, 30*time.Second, 100*time.Millisecond, "posted, processing")
	first := b.registryLedger(t, id)[0]
	for _, gw := range []string{"gmp1", "gmp2"} {
		b.call(t, http.MethodPost, "/v1/dev/registry/"+gw+"/faults", map[string]any{"processing": 0})
	}

	// 2027-03-20 20:00:30Z: within the last hour before the discount ends.
	b.advance(t, "467h0m30s")
	key := enr + ":" + id
	require.Eventually(t, func() bool {
		return opsFor(b.ledger(t, "sim1"), key)["void:succeeded"] == 1
	}, 30*time.Second, 100*time.Millisecond, "the hold is voided")
	postingStatus := func() string {
		var status string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT status FROM registry_postings WHERE payment_id = $1`,
			first.PaymentID).Scan(&status))
		return status
	}
	require.Eventually(t, func() bool { return postingStatus() != "posting" }, 30*time.Second, 100*time.Millisecond,
		"the posting is given up")

	// The registry finishes with the payment and accepts it.
	_, err := b.pool.Exec(ctx, `UPDATE dev_registry_ledger SET status = 'accepted', looks_left = 0 WHERE payment_id = $1`,
		first.PaymentID)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s := postingStatus()
		return s == "annulled" || s == "failed"
	}, 30*time.Second, 100*time.Millisecond, "the posting is settled in rebill")

	// The fine is paid by its next attempt at the full price; then past
	// the annulment bound, which counts from the charge's last change.
	b.advance(t, "25h")
	b.waitBill(t, enr, id, "paid")
	b.advance(t, "25h")
	audit, found := b.registryBookFinds(t, first.Gateway, start)
	assert.Empty(t, audit, "rebill audit")
	assert.Empty(t, found, "the registry reconciliation")

	require.Equal(t, "annulled", postingStatus())
	for _, e := range b.registryLedger(t, id) {
		if e.PaymentID == first.PaymentID {
			require.Equal(t, "annulled", e.Status, "annulled at the registry")
		}
	}
	require.Equal(t, []int64{100000}, captured(b.ledger(t, "sim1"), key), "only the next attempt captured")
}

// A payment the registry annulled unasked (its acceptance went unanswered)
// and then answers annulled, to a lost answer's look-up or to a replay:
// rebill never captures on it, the charge goes to review and its hold is
// released, so neither `rebill audit` nor the registry reconciliation
// finds anything. Were the annulled answer taken as success, the card
// would be captured for a fine the registry holds unpaid, and both report
// it: the audit "fine-capture-posted", the reconciliation
// captured_not_accepted.
func TestRegistryBookFindsNothingOfAPaymentFoundAnnulled(t *testing.T) {
	t.Parallel()
	for name, faults := range map[string]map[string]any{
		"on the look-up after a lost answer": {"lose_response": true, "annul_unanswered": true},
		"on the replay after processing":     {"processing": 1, "annul_unanswered": true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, 1, nil)
			start := b.autopayStart(t)
			enr := b.createFinesEnrollment(t, "tok_ok", 500000)
			for _, gw := range []string{"gmp1", "gmp2"} {
				b.call(t, http.MethodPost, "/v1/dev/registry/"+gw+"/faults", faults)
			}
			id := uin(35)
			b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", fine(id, 100000, 50000, start, "2027-03-20", "2027-05-09"))
			key := enr + ":" + id
			require.Eventually(t, func() bool {
				ops := opsFor(b.ledger(t, "sim1"), key)
				return ops["capture:succeeded"]+ops["void:succeeded"] > 0
			}, 30*time.Second, 100*time.Millisecond, "the hold is captured or released")
			posted := b.registryLedger(t, id)
			require.Len(t, posted, 1, "posted once")
			require.Equal(t, "annulled", posted[0].Status)

			audit, found := b.registryBookFinds(t, posted[0].Gateway, start)
			assert.Empty(t, audit, "rebill audit")
			assert.Empty(t, found, "the registry reconciliation")

			require.Equal(t, map[string]int{"authorize:succeeded": 1, "void:succeeded": 1}, opsFor(b.ledger(t, "sim1"), key),
				"never captured")
			cs := b.enrollmentCharges(t, enr)
			require.Equal(t, "requires_review", cs[0]["status"])
			require.Equal(t, "registry_annulled", cs[0]["review_code"])
		})
	}
}
