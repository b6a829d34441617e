package e2e_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/autopay"
	"github.com/rebill/rebill/autopay/billsource"
	"github.com/rebill/rebill/autopay/billsource/testkit/sourcefake"
	"github.com/rebill/rebill/charges/registry/testkit/agentfake"
	"github.com/rebill/rebill/testkit/dbtest"
)

// Production-mode autopay against the conformance fakes: no REBILL_DEV,
// the wall clock, a registry and a bill source reached over HTTP.

// productionAutopay is a production node whose registry is the fake party
// and, when source is set, whose fines come from the fake bill source.
type productionAutopay struct {
	pool   *pgxpool.Pool
	node   *stoppableNode
	bundle testBundle
	party  *agentfake.Fake
}

func startProductionAutopay(t *testing.T, source *sourcefake.Source, env map[string]string) productionAutopay {
	t.Helper()
	pool := dbtest.Pool(t)
	simURL := startTestSim(t, pool.Config().ConnString())
	party := agentfake.New()
	server := httptest.NewServer(party)
	t.Cleanup(server.Close)
	dir := t.TempDir()
	registries := filepath.Join(dir, "registries.yaml")
	require.NoError(t, os.WriteFile(registries, []byte("- {name: bank, kind: http, base_url: "+server.URL+"}\n"), 0o600))
	overrides := noRegistryEnv(simURL)
	overrides["REBILL_REGISTRY_FILE"] = registries
	if source != nil {
		src := httptest.NewServer(source)
		t.Cleanup(src.Close)
		sources := filepath.Join(dir, "sources.yaml")
		require.NoError(t, os.WriteFile(sources, []byte("- {name: gmp-bank, kind: http, bills: fines, base_url: "+src.URL+
			", rate_limit: 1000}\n"), 0o600))
		overrides["REBILL_BILL_SOURCES_FILE"] = sources
	}
	for k, v := range env {
		overrides[k] = v
	}
	n := startNodeOn(t, pool, overrides, true)
	return productionAutopay{pool: pool, node: n, bundle: n.bundle(pool), party: party}
}

// A fine paid in full at another bank is never held; one paid in part is
// held, posted and captured for the rest.
func TestProductionFinePaidElsewhere(t *testing.T) {
	t.Parallel()
	p := startProductionAutopay(t, nil, nil)
	b := p.bundle
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)

	full, part := uin(81), uin(82)
	p.party.PaidOutside(full, 50000)
	p.party.PaidOutside(part, 20000)
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", dueFine(full))
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", dueFine(part))
	b.waitBill(t, enr, full, "paid_elsewhere")
	b.waitBill(t, enr, part, "paid")
	require.Empty(t, gatewayOps(t, p.pool, enr+":"+full), "nothing is held for a fine paid elsewhere")
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, gatewayOps(t, p.pool, enr+":"+part))

	byUIN := map[string][]agentfake.Entry{}
	for _, e := range p.party.Ledger() {
		byUIN[e.UIN] = append(byUIN[e.UIN], e)
	}
	require.Len(t, byUIN[full], 1, "only the other bank's payment")
	require.Len(t, byUIN[part], 2, "the other bank's and rebill's")
	var total int64
	for _, e := range byUIN[part] {
		require.Equal(t, "accepted", e.Status)
		total += e.Amount
	}
	require.EqualValues(t, 50000, total, "together they pay the discounted price")
}

// A registry down for longer than the whole dunning schedule holds
// nothing and burns no attempt: the fine's charge waits, and once the
// registry answers the fine is held, posted and captured once.
func TestProductionRegistryDownLongerThanTheDunningRoom(t *testing.T) {
	t.Parallel()
	const room = 3 * time.Second
	p := startProductionAutopay(t, nil, map[string]string{"REBILL_DUNNING_SCHEDULE": "1s,2s"})
	b := p.bundle
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	p.party.SetFaults(agentfake.Faults{Down: true})
	down := time.Now()
	id := uin(83)
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", dueFine(id))
	key := enr + ":" + id
	require.Eventually(t, func() bool {
		cs := b.enrollmentCharges(t, enr)
		return len(cs) == 1 && cs[0]["failure_code"] == "registry_unavailable" && time.Since(down) > room
	}, 30*time.Second, 50*time.Millisecond, "the fine's attempt waits for the registry")
	cs := b.enrollmentCharges(t, enr)
	require.Equal(t, "scheduled", cs[0]["status"])
	require.EqualValues(t, 1, cs[0]["attempt_count"], "no attempt was spent")
	require.Empty(t, gatewayOps(t, p.pool, key), "nothing is held blind")

	p.party.SetFaults(agentfake.Faults{})
	b.waitBill(t, enr, id, "paid")
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, gatewayOps(t, p.pool, key))
	require.Len(t, p.party.Ledger(), 1, "posted once")
}

// A fine pulled from the bill source twice and pushed once through the
// API is one bill, charged and posted once.
func TestProductionFinePulledTwicePushedOnce(t *testing.T) {
	t.Parallel()
	source := sourcefake.New("")
	p := startProductionAutopay(t, source, nil)
	b := p.bundle
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	id := uin(84)
	deadline, discounted := time.Now().AddDate(0, 0, 20).Format(time.DateOnly), int64(50000)
	issued, due := time.Now().Add(-time.Hour).UTC().Truncate(time.Second), time.Now().AddDate(0, 2, 0).Format(time.DateOnly)
	source.Publish(billsource.Bill{BillID: id, Account: billsource.Account{STS: "77УА123456"}, Amount: 100000,
		DiscountedAmount: &discounted, DiscountDeadline: &deadline, IssuedAt: issued, DueDate: due})
	pull := func() {
		_, err := p.node.svc.River.Insert(context.Background(), autopay.PullArgs{}, nil)
		require.NoError(t, err)
	}
	pull()
	b.waitBill(t, enr, id, "paid")
	status, pushed := b.callStatus(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", map[string]any{
		"bill_id": id, "amount": 100000, "discounted_amount": discounted, "discount_deadline": deadline,
		"issued_at": issued.Format(time.RFC3339), "due_date": due})
	require.Equal(t, http.StatusOK, status, "the pushed bill is the pulled one: %v", pushed)
	require.Equal(t, "paid", pushed["status"])
	// The pull is one job at a time: an insert while the first pull's job
	// is still finishing is that job, so ask again until a pull reads.
	before := len(source.Requests())
	require.Eventually(t, func() bool {
		pull()
		return len(source.Requests()) > before
	}, 30*time.Second, 100*time.Millisecond, "pulled again")
	require.Len(t, b.bills(t, enr), 1, "one bill")
	require.Len(t, b.enrollmentCharges(t, enr), 1, "one charge")
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, gatewayOps(t, p.pool, enr+":"+id))
	require.Len(t, p.party.Ledger(), 1, "posted once")
}
