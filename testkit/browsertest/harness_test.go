//go:build browser

package browsertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app"
	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

const (
	adminKey      = "browser-admin-key-0123456789abcdefghij" // REBILL_ADMIN_KEY needs 32 characters
	encryptionKey = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

	// actionTimeout bounds one browser step (a navigation, a click and
	// the page it leads to); waitTimeout bounds waiting for a state.
	actionTimeout = 20 * time.Second
	waitTimeout   = 30 * time.Second
)

// browser is the one Chromium every test opens its tabs in; each tab gets
// a browser context of its own, so cookies never leak between tests.
var browser context.Context

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	path := os.Getenv("REBILL_CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := os.Stat(path); err != nil {
		fmt.Fprintf(os.Stderr, "browsertest: no browser at %s (apt-get install chromium, or set REBILL_CHROMIUM): %v\n", path, err)
		return 1
	}
	profile, err := os.MkdirTemp("", "rebill-chromium-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "browsertest: %v\n", err)
		return 1
	}
	defer os.RemoveAll(profile)
	// The machine may have no network: without these flags Chromium waits
	// on connections of its own (updates, sync, QUIC probes) and hangs.
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(profile),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1280, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	if err := chromedp.Do(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "browsertest: start %s: %v\n", path, err)
		return 1
	}
	browser = ctx
	code := m.Run()
	closeCtx, cancelClose := context.WithTimeout(ctx, 10*time.Second)
	defer cancelClose()
	if err := chromedp.Cancel(closeCtx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "browsertest: stop the browser: %v\n", err)
	}
	return code
}

// node is one rebill node served on loopback, with the console's POSTs
// counted as they arrive (so a test knows the browser really sent them).
type node struct {
	t     *testing.T
	url   string
	pool  *pgxpool.Pool
	svc   *app.Service
	posts sync.Map // path -> *atomic.Int64
	gates sync.Map // path -> *pairGate
	seq   atomic.Int64
}

// pairGate holds the first POST to a path until a second one arrives, as
// a slow network does to a double click: the browser sends the form again
// while the first answer is still on its way. The first request then goes
// on even though the browser gave up waiting for it (it had already
// reached rebill), so both run, at the same time.
type pairGate struct {
	arrived atomic.Int64
	second  chan struct{}
}

// pairPosts makes the node hold the first POST to path until the second.
func (n *node) pairPosts(path string) {
	n.gates.Store(path, &pairGate{second: make(chan struct{})})
}

func (n *node) gate(r *http.Request) *http.Request {
	g, ok := n.gates.Load(r.URL.Path)
	if !ok {
		return r
	}
	gate := g.(*pairGate)
	switch gate.arrived.Add(1) {
	case 1:
		select {
		case <-gate.second:
		case <-time.After(actionTimeout):
		}
		return r.WithContext(context.WithoutCancel(r.Context()))
	case 2:
		close(gate.second)
	}
	return r
}

// devEnv is a fast dev-mode node's environment: manual clock, simulated
// gateways and registry, short gateway timeouts and backoff.
func devEnv() map[string]string {
	return map[string]string{
		"REBILL_DEV":              "1",
		"REBILL_ADMIN_KEY":        adminKey,
		"REBILL_GATEWAY_TIMEOUT":  "400ms",
		"REBILL_RETRY_BASE":       "50ms",
		"REBILL_RETRY_MAX":        "300ms",
		"REBILL_SCAN_INTERVAL":    "200ms",
		"REBILL_RESCUE_AFTER":     "15s",
		"REBILL_LOG_LEVEL":        "warn",
		"REBILL_DUNNING_SCHEDULE": "24h,72h,120h,168h",
		"REBILL_DB_MAX_CONNS":     "10", // the suite shares the server
		"REBILL_ENCRYPTION_KEY":   encryptionKey,
	}
}

// startDevNode starts a dev-mode node on a fresh database; env overrides
// devEnv.
func startDevNode(t *testing.T, env map[string]string) *node {
	t.Helper()
	return startNode(t, dbtest.Pool(t), merge(devEnv(), env))
}

// startProductionNode starts a node without REBILL_DEV (the wall clock,
// no /v1/dev), whose one gateway is a simulator on loopback keeping its
// books in the same database.
func startProductionNode(t *testing.T, env map[string]string) *node {
	t.Helper()
	dbURL := dbtest.URL(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	cfg.MaxConns = dbtest.PoolConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	simCfg := cfg.Copy()
	simCfg.MaxConns = 2
	simPool, err := pgxpool.NewWithConfig(ctx, simCfg)
	require.NoError(t, err)
	simURL, stopSim, err := sim.Start(ctx, simPool, []string{"sim1"}, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = stopSim(context.Background())
		simPool.Close()
	})
	prod := devEnv()
	delete(prod, "REBILL_DEV")
	prod["REBILL_GATEWAYS"] = "sim1=" + simURL + "/sim1"
	return startNode(t, pool, merge(prod, env))
}

func merge(base, over map[string]string) map[string]string {
	for k, v := range over {
		base[k] = v
	}
	return base
}

func startNode(t *testing.T, pool *pgxpool.Pool, env map[string]string) *node {
	t.Helper()
	cfg, err := config.Load(func(k string) string { return env[k] })
	require.NoError(t, err)
	ctx := context.Background()
	logs := &testsupport.LockedBuffer{}
	svc, err := app.Build(ctx, cfg, pool, zerolog.New(logs).Level(zerolog.WarnLevel))
	require.NoError(t, err)
	require.NoError(t, svc.River.Start(ctx))
	n := &node{t: t, svc: svc, pool: pool}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/console/") {
			c, _ := n.posts.LoadOrStore(r.URL.Path, new(atomic.Int64))
			c.(*atomic.Int64).Add(1)
			r = n.gate(r)
		}
		svc.Handler.ServeHTTP(w, r)
	}))
	n.url = server.URL
	t.Cleanup(func() {
		server.Close()
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.River.Stop(stopCtx)
		svc.Close()
		if t.Failed() {
			t.Logf("node log:\n%s", logs.String())
		}
	})
	return n
}

// postsTo is how many POSTs reached path on the node.
func (n *node) postsTo(path string) int64 {
	if c, ok := n.posts.Load(path); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

// call sends a JSON request with key (POSTs get a fresh Idempotency-Key)
// and returns the status and the decoded body.
func (n *node) call(key, method, path string, body any) (int, map[string]any) {
	n.t.Helper()
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		require.NoError(n.t, err)
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, n.url+path, reader)
	require.NoError(n.t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	if method == http.MethodPost {
		req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%d", n.t.Name(), n.seq.Add(1)))
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(n.t, err)
	defer res.Body.Close()
	var out map[string]any
	raw, err := io.ReadAll(res.Body)
	require.NoError(n.t, err)
	if len(raw) > 0 {
		require.NoError(n.t, json.Unmarshal(raw, &out), "%s %s: %s", method, path, raw)
	}
	return res.StatusCode, out
}

// admin sends a request with the admin key and requires a 2xx answer.
func (n *node) admin(method, path string, body any) map[string]any {
	n.t.Helper()
	status, out := n.call(adminKey, method, path, body)
	require.Less(n.t, status, 300, "%s %s: %v", method, path, out)
	return out
}

// list is the data of a list endpoint.
func (n *node) list(path string) []map[string]any {
	n.t.Helper()
	data, _ := n.admin(http.MethodGet, path, nil)["data"].([]any)
	out := make([]map[string]any, len(data))
	for i, d := range data {
		out[i] = d.(map[string]any)
	}
	return out
}

// createKey makes an API key of role (customer keys need a customer) and
// returns its id and its secret.
func (n *node) createKey(role, customer string) (id, secret string) {
	n.t.Helper()
	body := map[string]any{"role": role}
	if customer != "" {
		body["customer_id"] = customer
	}
	out := n.admin(http.MethodPost, "/v1/api-keys", body)
	return out["id"].(string), out["key"].(string)
}

func (n *node) createSubscription(customer, token string) string {
	n.t.Helper()
	return n.admin(http.MethodPost, "/v1/subscriptions", map[string]any{
		"customer_id": customer, "amount": 1500, "currency": "USD", "interval": "month", "timezone": "UTC",
		"payment_method": map[string]any{"gateway": "sim1", "token": token, "brand": "visa", "last4": "4242",
			"exp_month": 12, "exp_year": 2035},
	})["id"].(string)
}

// createHousingEnrollment enrols the customer's housing account 75ДА533315
// with a cap of maxAmount kopecks.
func (n *node) createHousingEnrollment(customer string, maxAmount int64) string {
	n.t.Helper()
	return n.admin(http.MethodPost, "/v1/enrollments", map[string]any{
		"customer_id": customer, "kind": "housing", "account_ref": "75ДА533315", "currency": "RUB", "max_amount": maxAmount,
		"payment_method": map[string]any{"gateway": "sim1", "token": "tok_ok", "brand": "mir", "last4": "4242",
			"exp_month": 12, "exp_year": 2035},
	})["id"].(string)
}

func (n *node) subscription(id string) map[string]any {
	n.t.Helper()
	return n.admin(http.MethodGet, "/v1/subscriptions/"+id, nil)
}

func (n *node) charges(sub string) []map[string]any {
	n.t.Helper()
	return n.list("/v1/subscriptions/" + sub + "/charges?limit=100")
}

// waitCharge waits until the subscription's only charge has status.
func (n *node) waitCharge(sub, status string) map[string]any {
	n.t.Helper()
	var got []map[string]any
	n.waitFor(fmt.Sprintf("the charge of %s is %s", sub, status), func() bool {
		got = n.charges(sub)
		return len(got) == 1 && got[0]["status"] == status
	}, func() any { return got })
	return got[0]
}

// events is the subscription's log of state changes, oldest first.
func (n *node) events(sub string) []map[string]any {
	n.t.Helper()
	return n.list("/v1/subscriptions/" + sub + "/events?limit=100")
}

// eventsOf keeps the events of type typ.
func eventsOf(events []map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, e := range events {
		if e["type"] == typ {
			out = append(out, e)
		}
	}
	return out
}

// faults sets sim1's fault switches.
func (n *node) faults(body map[string]any) {
	n.t.Helper()
	n.admin(http.MethodPost, "/v1/dev/gateways/sim1/faults", body)
}

// ledgerOps counts sim1's operations under the charge key by op:status.
func (n *node) ledgerOps(chargeKey string) map[string]int {
	n.t.Helper()
	counts := map[string]int{}
	for _, e := range n.list("/v1/dev/gateways/sim1/ledger") {
		if strings.HasPrefix(e["idempotency_key"].(string), chargeKey+":") {
			counts[fmt.Sprintf("%s:%s", e["op"], e["status"])]++
		}
	}
	return counts
}

// waitFor polls cond until it holds, failing the test at waitTimeout with
// what state shows last.
func (n *node) waitFor(what string, cond func() bool, state func() any) {
	n.t.Helper()
	waitFor(n.t, what, cond, state)
}

func waitFor(t *testing.T, what string, cond func() bool, state func() any) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for: %s; last state: %v", waitTimeout, what, state())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tab is one browser tab in a browser context of its own (its own cookie
// jar), pointed at a node.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string
}

func newTab(t *testing.T, n *node) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(ctx), "open a tab")
	return &tab{t: t, ctx: ctx, base: n.url}
}

// do runs steps within actionTimeout.
func (b *tab) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	b.check(chromedp.Do(ctx, steps...), "browser steps")
}

// check fails the test on err, saying which page the tab was on and what
// it showed, so a selector that never matched is explained.
func (b *tab) check(err error, what string) {
	b.t.Helper()
	if err == nil {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + (document.body ? document.body.innerText : "")`))
	b.t.Fatalf("%s: %v\npage: %s", what, err, page)
}

// run runs one action within actionTimeout and returns its value.
func run[T any](b *tab, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	b.check(err, "browser action")
	return v
}

// open loads path and returns the HTTP status of the page it ends on
// (after redirects). A navigation the tab aborts because a form's answer
// was still arriving (a double click's second page) is made again, and so
// is one that ends with no response of its own: the second page's arrival
// took its place.
func (b *tab) open(path string) int64 {
	b.t.Helper()
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
		resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(b.base+path))
		cancel()
		replaced := (err != nil && strings.Contains(err.Error(), "net::ERR_ABORTED")) || (err == nil && resp == nil)
		if replaced && try < 3 {
			continue
		}
		if err == nil && resp == nil {
			err = errors.New("the navigation ended with no response, three times")
		}
		b.check(err, "open "+path)
		return resp.Status
	}
}

// submit clicks the element sel (a form's button) and returns the status
// of the page the form leads to, once it has loaded.
func (b *tab) submit(sel chromedp.Search) int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(sel))
	b.check(err, fmt.Sprintf("submit %s", sel))
	return resp.Status
}

// doubleClick clicks twice where the element sel is, as a person's double
// click does: the second click once between has returned (the first
// click's form has been sent, its page has not come back yet).
func (b *tab) doubleClick(sel chromedp.Search, between func()) {
	b.t.Helper()
	xpath, err := json.Marshal(string(sel))
	require.NoError(b.t, err)
	xy := run(b, chromedp.Evaluate[[]float64](fmt.Sprintf(`(function(){
		const e = document.evaluate(%s, document, null, XPathResult.FIRST_ORDERED_NODE_TYPE, null).singleNodeValue;
		if (!e) return null;
		e.scrollIntoView({block: 'center'});
		const r = e.getBoundingClientRect();
		return [r.left + r.width / 2, r.top + r.height / 2];
	})()`, xpath)))
	if len(xy) != 2 {
		b.check(fmt.Errorf("nothing matches %s", sel), "double click")
	}
	b.do(chromedp.MouseClickXY(xy[0], xy[1]))
	between()
	b.do(chromedp.MouseClickXY(xy[0], xy[1], chromedp.ClickCount(2)))
}

// doubleSubmit double-clicks the form button sel whose POST goes to path
// on n, holding the first POST until the second arrives, and waits until
// both reached rebill.
func (b *tab) doubleSubmit(n *node, sel chromedp.Search, path string) {
	b.t.Helper()
	n.pairPosts(path)
	b.doubleClick(sel, func() {
		waitFor(b.t, "the first click's form reaches rebill", func() bool { return n.postsTo(path) == 1 },
			func() any { return n.postsTo(path) })
	})
	waitFor(b.t, "both clicks reach rebill", func() bool { return n.postsTo(path) == 2 }, func() any { return n.postsTo(path) })
}

// button selects the button whose text is label.
func button(label string) chromedp.Search {
	return chromedp.Search(fmt.Sprintf(`//button[normalize-space()=%q]`, label))
}

// link selects the link whose href is exactly href.
func link(href string) chromedp.Search {
	return chromedp.Search(fmt.Sprintf(`//a[@href=%q]`, href))
}

// login submits key on the login page and returns the answer's status.
func (b *tab) login(key string) int64 {
	b.t.Helper()
	b.open("/console/login")
	b.do(chromedp.SendKeys(chromedp.ID("api_key"), key))
	return b.submit(button("Log in"))
}

// path is the page's path and query.
func (b *tab) path() string {
	b.t.Helper()
	return run(b, chromedp.Evaluate[string](`location.pathname + location.search`))
}

// body is the page's visible text.
func (b *tab) body() string {
	b.t.Helper()
	return run(b, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
}

// text is the visible text of the first element that css selects, or ""
// when there is none.
func (b *tab) text(css string) string {
	b.t.Helper()
	sel, err := json.Marshal(css)
	require.NoError(b.t, err)
	return run(b, chromedp.Evaluate[string](fmt.Sprintf(
		`(function(){ const e = document.querySelector(%s); return e ? e.innerText.trim() : ""; })()`, sel)))
}

// rows is the text of every table row of the page, cells joined by tabs.
func (b *tab) rows() []string {
	b.t.Helper()
	return run(b, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll('tr')).map(r => Array.from(r.cells).map(c => c.innerText.trim()).join('\t'))`))
}

// hrefs is the href attribute of every link of the page.
func (b *tab) hrefs() []string {
	b.t.Helper()
	return run(b, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href'))`))
}

// cookies is the tab's cookies for the node.
func (b *tab) cookies() []*network.Cookie {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{b.base + "/console/"}})
	require.NoError(b.t, err)
	return res.Cookies
}

// postForm builds a form of fields in the page, posts it to path as the
// page's own form would be (same origin, with the tab's cookies; the
// console's CSP lets forms go to its own origin and nowhere else), and
// returns the status of the page it leads to.
func (b *tab) postForm(path string, fields map[string]string) int64 {
	b.t.Helper()
	body, err := json.Marshal(fields)
	require.NoError(b.t, err)
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(function(){
		const f = document.createElement('form');
		f.method = 'post';
		f.action = %q;
		for (const [k, v] of Object.entries(%s)) {
			const i = document.createElement('input');
			i.type = 'hidden'; i.name = k; i.value = v;
			f.appendChild(i);
		}
		document.body.appendChild(f);
		f.submit();
	})()`, path, body)))
	b.check(err, "post "+path)
	return resp.Status
}

// formFields reads the hidden fields of the form that holds the button
// labelled label.
func (b *tab) formFields(label string) map[string]string {
	b.t.Helper()
	fields := run(b, chromedp.Evaluate[map[string]string](fmt.Sprintf(`(function(){
		const btn = Array.from(document.querySelectorAll('form button')).find(x => x.textContent.trim() === %q);
		if (!btn) return null;
		const out = {};
		for (const i of btn.form.querySelectorAll('input[type=hidden]')) out[i.name] = i.value;
		out['@action'] = btn.form.getAttribute('action');
		return out;
	})()`, label)))
	if fields == nil {
		b.check(fmt.Errorf("no form has a button %q", label), "read a form")
	}
	return fields
}

// shot saves a full-page PNG of the page as name.png under
// REBILL_SCREENSHOTS, when that is set.
func (b *tab) shot(name string) {
	b.t.Helper()
	dir := os.Getenv("REBILL_SCREENSHOTS")
	if dir == "" {
		return
	}
	png := run(b, chromedp.FullScreenshot(100))
	require.NoError(b.t, os.MkdirAll(dir, 0o755))
	require.NoError(b.t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}
