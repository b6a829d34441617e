package console_test

import (
	"context"
	"html"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/console"
	"github.com/rebill/rebill/experiments"
	"github.com/rebill/rebill/experiments/stats"
	"github.com/rebill/rebill/testkit/dbtest"
)

// fakeExperiments serves fixed reports.
type fakeExperiments struct{ reports []experiments.Report }

func (f fakeExperiments) List(context.Context) ([]experiments.Report, error) { return f.reports, nil }

func (f fakeExperiments) Get(_ context.Context, key string) (experiments.Report, error) {
	for _, r := range f.reports {
		if r.Experiment.Key == key {
			return r, nil
		}
	}
	return experiments.Report{}, experiments.ErrNotFound
}

func nan() experiments.Rate {
	return experiments.Rate{Value: math.NaN(), Low: math.NaN(), High: math.NaN()}
}

// dunningReport is a running dunning experiment: a treatment found
// better, one still short of its sample, and an arm removed from the file
// that the records still hold.
func dunningReport() experiments.Report {
	hour := 10
	median := 76*time.Hour + 20*time.Minute
	e := experiments.Experiment{Key: "dunning-2027", Description: "Shorter dunning " + evil, Policy: experiments.PolicyDunning,
		Arms: []experiments.Arm{{Name: "control", Weight: 50},
			{Name: "fast", Weight: 30, Params: experiments.Params{Dunning: []time.Duration{24 * time.Hour, 72 * time.Hour}, Hour: &hour}},
			{Name: "slow", Weight: 20, Params: experiments.Params{Dunning: []time.Duration{36 * time.Hour}}}},
		Eligible:  experiments.Eligibility{Currencies: []string{"RUB", "USD"}},
		Start:     time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC),
		MinPerArm: 100}
	return experiments.Report{Experiment: e, Status: "running", Primary: experiments.MetricRecovery, Arms: []experiments.ArmResult{
		{Arm: "control", Weight: 50, InFile: true, Subscriptions: 400, Charges: 420,
			FirstAttempt:    experiments.Rate{Successes: 290, Trials: 400, Value: 0.725, Low: 0.6789, High: 0.7668},
			Recovery:        experiments.Rate{Successes: 60, Trials: 120, Value: 0.5, Low: 0.4116, High: 0.5884},
			Review:          experiments.Rate{Successes: 4, Trials: 420, Value: 4.0 / 420, Low: 0.0037, High: 0.0242},
			Unknown:         experiments.Rate{Successes: 0, Trials: 420, Value: 0, Low: 0, High: 0.0091},
			MedianTimeToPay: &median,
			Collected:       []experiments.Money{{Currency: "RUB", Amount: 4350000}, {Currency: "USD", Amount: 150000}},
			Commission:      []experiments.Money{{Currency: "RUB", Amount: 60900}}},
		{Arm: "fast", Weight: 30, InFile: true, Subscriptions: 240, Charges: 250,
			FirstAttempt: experiments.Rate{Successes: 170, Trials: 240, Value: 170.0 / 240, Low: 0.65, High: 0.76},
			Recovery:     experiments.Rate{Successes: 83, Trials: 141, Value: 0.5887, Low: 0.5062, High: 0.6663},
			Review:       nan(), Unknown: nan(),
			Versus: &experiments.Comparison{Difference: 0.0887, Low: 0.0123, High: 0.1511, PValue: 0.0213, Alpha: 0.025,
				Verdict: stats.VerdictTreatmentBetter}},
		{Arm: "slow", Weight: 20, InFile: true, Subscriptions: 90, Charges: 95,
			FirstAttempt: nan(), Recovery: experiments.Rate{Successes: 20, Trials: 40, Value: 0.5, Low: 0.352, High: 0.648},
			Review: nan(), Unknown: nan(),
			Versus: &experiments.Comparison{Difference: 0, Low: -0.18, High: 0.18, PValue: 1, Alpha: 0.025,
				Verdict: stats.VerdictTooEarly}},
		{Arm: "legacy", Subscriptions: 7, Charges: 7,
			FirstAttempt: nan(), Recovery: nan(), Review: nan(), Unknown: nan()},
	}}
}

func timeoutReport() experiments.Report {
	e := experiments.Experiment{Key: "timeout-2026", Policy: experiments.PolicyGatewayTimeout,
		Arms: []experiments.Arm{{Name: "control", Weight: 1},
			{Name: "patient", Weight: 1, Params: experiments.Params{Timeout: 20 * time.Second, RetryBase: 500 * time.Millisecond}}},
		Start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Stop: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), MinPerArm: 1000}
	return experiments.Report{Experiment: e, Status: "stopped", Primary: experiments.MetricFirstAttempt, Arms: []experiments.ArmResult{
		{Arm: "control", Weight: 1, InFile: true, FirstAttempt: experiments.Rate{Successes: 900, Trials: 1000, Value: 0.9, Low: 0.88, High: 0.92},
			Recovery: nan(), Review: nan(), Unknown: nan()},
		{Arm: "patient", Weight: 1, InFile: true, FirstAttempt: experiments.Rate{Successes: 850, Trials: 1000, Value: 0.85, Low: 0.83, High: 0.87},
			Recovery: nan(), Review: nan(), Unknown: nan(),
			Versus: &experiments.Comparison{Difference: -0.05, Low: -0.08, High: -0.02, PValue: 0.00004, Alpha: 0.05,
				Verdict: stats.VerdictTreatmentWorse}},
	}}
}

// startExperimentsConsole is a console alone over a database, reading
// exps (nil: none configured).
func startExperimentsConsole(t *testing.T, exps console.Experiments) (*httptest.Server, *apikeys.Store) {
	t.Helper()
	pool := dbtest.Pool(t)
	keys := apikeys.NewStore(pool, adminKey)
	server := httptest.NewServer(console.New(console.Options{Pool: pool, Keys: keys, Experiments: exps}))
	t.Cleanup(server.Close)
	return server, keys
}

func TestExperimentsPages(t *testing.T) {
	t.Parallel()
	server, keys := startExperimentsConsole(t, fakeExperiments{[]experiments.Report{dunningReport(), timeoutReport()}})
	support, err := keys.CreateWithPool(context.Background(), "support", "")
	require.NoError(t, err)
	u := newBrowser(t, server.URL)
	u.login(support.Secret)
	require.Contains(t, u.get("/console/").body, `<li><a href="/console/experiments">Experiments</a></li>`, "the navigation links the pages")

	list := u.get("/console/experiments")
	require.Equal(t, http.StatusOK, list.status, list.body)
	requireNeutralised(t, list.body, "list")
	for _, want := range []string{
		`<a href="/console/experiments/dunning-2027">dunning-2027</a>`,
		`dunning schedule (<code>dunning</code>)`,
		`<span class="status status-running">running</span>`,
		`<time datetime="2027-01-01T00:00:00Z">2027-01-01 00:00:00 UTC</time>`,
		`<li>control: 50 (50.0 %)</li><li>fast: 30 (30.0 %)</li><li>slow: 20 (20.0 %)</li>`,
		`<li>legacy: <strong class="removed">no longer in the file</strong></li>`,
		`<td>dunning recovery</td>`,
		`<li>fast: <span class="status status-treatment_better">treatment better</span></li>`,
		`<li>slow: <span class="status status-too_early">too early: fewer than 100 per arm</span></li>`,
		`<a href="/console/experiments/timeout-2026">timeout-2026</a>`,
		`<span class="status status-stopped">stopped</span>`,
		`<time datetime="2026-03-01T00:00:00Z">`,
		`<td>first-attempt approval</td>`,
		`<li>patient: <span class="status status-treatment_worse">treatment worse</span></li>`,
	} {
		require.Contains(t, list.body, want)
	}

	detail := u.get("/console/experiments/dunning-2027")
	require.Equal(t, http.StatusOK, detail.status, detail.body)
	requireNeutralised(t, detail.body, "detail")
	body := html.UnescapeString(detail.body) // html/template writes + as &#43;
	for _, want := range []string{
		"<title>Experiment dunning-2027 — rebill console</title>",
		"currencies: RUB, USD; intervals: all",
		"none: it runs until it is removed from the file",
		"every arm has 100 on the primary metric",
		"alpha 0.05 divided by its 2 treatments (Bonferroni)",
		"<td>retries 1d, 3d after the first decline, each at 10:00 in the subscription's time zone</td>",
		"<td>retries 36h after the first decline</td>",
		"<td>the default policy</td>",
		// control's figures
		`<td class="num">400</td><td class="num">420</td>`,
		`72.5 %<br><span class="hint">290 of 400; CI 67.9 % – 76.7 %</span>`,
		`50.0 %<br><span class="hint">60 of 120; CI 41.2 % – 58.8 %</span>`,
		`1.0 %<br><span class="hint">4 of 420</span>`,
		`0.0 %<br><span class="hint">0 of 420</span>`,
		`<td class="num">3 d 4 h</td><td class="num">43500.00 RUB, 1500.00 USD</td><td class="num">609.00 RUB</td>`,
		// fast against control
		`<td class="num">+8.9 pp</td><td class="num">+1.2 pp to +15.1 pp</td><td class="num">0.0213</td><td class="num">0.025</td>`,
		`<span class="status status-treatment_better">treatment better</span>`,
		`<td class="num">0.0 pp</td><td class="num">-18.0 pp to +18.0 pp</td><td class="num">1.0000</td>`,
		`too early: fewer than 100 per arm`,
		// the removed arm
		`<tr><td>legacy</td><td colspan="2"><strong class="removed">no longer in the file</strong>`,
		`<th scope="row">legacy <strong class="removed">(no longer in the file)</strong></th>`,
		`<td colspan="5">not compared: <strong class="removed">no longer in the file</strong></td>`,
	} {
		require.Contains(t, body, want)
	}
	// Rates with no trials are a dash, never 0 %.
	legacy := body[strings.Index(body, `<tr id="arm-legacy">`):]
	legacy = legacy[:strings.Index(legacy, "</tr>")]
	require.Equal(t, 7, strings.Count(legacy, "—"), legacy)
	require.NotContains(t, legacy, "%")

	stopped := html.UnescapeString(u.get("/console/experiments/timeout-2026").body)
	require.Contains(t, stopped, "timeout 20s; retry backoff from 500ms")
	require.Contains(t, stopped, `<td class="num">-5.0 pp</td><td class="num">-8.0 pp to -2.0 pp</td><td class="num">< 0.0001</td><td class="num">0.05</td>`)
	require.NotContains(t, stopped, "Bonferroni", "one treatment: alpha undivided")

	missing := u.get("/console/experiments/no-such-experiment")
	require.Equal(t, http.StatusNotFound, missing.status)
	require.Contains(t, missing.body, `<p role="alert" class="alert">Not found: there is no such object, or this key may not see it.</p>`)
	require.Equal(t, http.StatusNotFound, u.get("/console/experiments/dunning-2027/x").status)
}

// The pages are staff pages like the others: no session is sent to log
// in, and a session whose key has become a customer key is ended.
func TestExperimentsNeedAStaffSession(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	keys := apikeys.NewStore(pool, adminKey)
	server := httptest.NewServer(console.New(console.Options{Pool: pool, Keys: keys,
		Experiments: fakeExperiments{[]experiments.Report{dunningReport()}}}))
	t.Cleanup(server.Close)

	anonymous := newBrowser(t, server.URL)
	for _, path := range []string{"/console/experiments", "/console/experiments/dunning-2027"} {
		res := anonymous.get(path)
		require.Equal(t, http.StatusSeeOther, res.status, path)
		require.Equal(t, "/console/login", res.header.Get("Location"), path)
	}

	customer, err := keys.CreateWithPool(context.Background(), "customer", "cust-1")
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, anonymous.post("/console/login", map[string][]string{"api_key": {customer.Secret}}).status)

	support, err := keys.CreateWithPool(context.Background(), "support", "")
	require.NoError(t, err)
	for _, path := range []string{"/console/experiments", "/console/experiments/dunning-2027"} {
		u := newBrowser(t, server.URL)
		u.login(support.Secret)
		require.Equal(t, http.StatusOK, u.get(path).status, path)
		_, err := pool.Exec(context.Background(), `UPDATE api_keys SET role = 'customer', customer_id = 'cust-1' WHERE id = $1`, support.ID)
		require.NoError(t, err)
		res := u.get(path)
		require.Equal(t, http.StatusSeeOther, res.status, path)
		require.Equal(t, "/console/login?ended=1", res.header.Get("Location"), path)
		require.NotContains(t, res.body, "dunning-2027")
		_, err = pool.Exec(context.Background(), `UPDATE api_keys SET role = 'support', customer_id = NULL WHERE id = $1`, support.ID)
		require.NoError(t, err)
	}
}

func TestNoExperimentsConfigured(t *testing.T) {
	t.Parallel()
	server, _ := startExperimentsConsole(t, nil)
	u := newBrowser(t, server.URL)
	u.login(adminKey)
	list := u.get("/console/experiments")
	require.Equal(t, http.StatusOK, list.status)
	require.Contains(t, list.body, "<p>No experiments are configured.</p>")
	require.Equal(t, http.StatusNotFound, u.get("/console/experiments/dunning-2027").status)
}

// A node reads the experiments file and the console shows its reports,
// read from the records (none yet: every rate a dash, too early).
func TestExperimentsFromTheFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "experiments.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
- key: notice-lead
  description: Remind three days ahead
  policy: notice_lead_time
  start: "2020-01-01T00:00:00Z"
  arms:
    - {name: control, weight: 1}
    - {name: early, weight: 1, upcoming: 3d}
`), 0o600))
	n := startNodeWith(t, map[string]string{"REBILL_EXPERIMENTS_FILE": file})
	u := newBrowser(t, n.url)
	u.login(adminKey)
	list := u.get("/console/experiments")
	require.Equal(t, http.StatusOK, list.status, list.body)
	require.Contains(t, list.body, `<a href="/console/experiments/notice-lead">notice-lead</a><br><bdi>Remind three days ahead</bdi>`)
	require.Contains(t, list.body, `<li>early: <span class="status status-too_early">too early: fewer than 1000 per arm</span></li>`)
	detail := u.get("/console/experiments/notice-lead")
	require.Equal(t, http.StatusOK, detail.status, detail.body)
	require.Contains(t, detail.body, "<td>charge.upcoming 3d before the renewal</td>")
	require.Contains(t, detail.body, `<tr id="arm-early"><th scope="row">early</th>`)
	require.Equal(t, http.StatusNotFound, u.get("/console/experiments/other").status)

	// Without a file the pages say so.
	bare := startNode(t)
	v := newBrowser(t, bare.url)
	v.login(adminKey)
	require.Contains(t, v.get("/console/experiments").body, "<p>No experiments are configured.</p>")
}
