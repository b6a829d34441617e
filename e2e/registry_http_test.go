package e2e_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/registry/testkit/agentfake"
	"github.com/rebill/rebill/testkit/dbtest"
)

// A production node with REBILL_REGISTRY_FILE takes fines and posts them
// through the configured party over HTTP, under a credit institution's
// payment identifier (uip): a payment the party keeps processing for a
// while is waited for, then the fine is captured and paid, posted once.
func TestProductionNodePostsFinesThroughAnHTTPRegistry(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	simURL := startTestSim(t, pool.Config().ConnString())
	fake := agentfake.New()
	fake.BearerToken = "agent-token-4711"
	fake.SetFaults(agentfake.Faults{Processing: 1})
	party := httptest.NewServer(fake)
	t.Cleanup(party.Close)
	file := filepath.Join(t.TempDir(), "registries.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
- name: bank
  kind: http
  base_url: `+party.URL+`
  credentials: {bearer_token: AGENT_TOKEN}
  payment_id: {format: uip, bik: "044525225"}
`), 0o600))
	env := noRegistryEnv(simURL)
	env["REBILL_REGISTRY_FILE"], env["AGENT_TOKEN"] = file, fake.BearerToken

	prod := startNodeOn(t, pool, env, true)
	require.NotContains(t, prod.log.String(), "no state payment registry is configured")
	pb := prod.bundle(pool)
	enr := pb.createFinesEnrollment(t, "tok_ok", 500000)
	id := uin(77)
	pb.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", dueFine(id))
	pb.waitBill(t, enr, id, "paid")

	ledger := fake.Ledger()
	require.Len(t, ledger, 1, "posted once")
	require.Equal(t, id, ledger[0].UIN)
	require.EqualValues(t, 50000, ledger[0].Amount)
	require.Equal(t, "accepted", ledger[0].Status)
	require.Regexp(t, `^1044525225000000\d{16}$`, ledger[0].PaymentID)
	var stored, gateway string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT payment_id, gateway FROM registry_postings`).Scan(&stored, &gateway))
	require.Equal(t, ledger[0].PaymentID, stored)
	require.Equal(t, "bank", gateway)
	require.NotContains(t, prod.log.String(), fake.BearerToken)
}
