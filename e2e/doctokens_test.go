package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api/openapitest"
	"github.com/rebill/rebill/app"
	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/testkit/dbtest"
)

// tokenRow is one row of the test-token table of docs/dev-mode.md.
type tokenRow struct {
	name     string   // the first cell, as written
	token    string   // the card's token
	gateway  string   // the gateway its subscription uses
	fault    string   // JSON body of POST /v1/dev/gateways/{gateway}/faults, if any
	advance  string   // a dev-clock advance the row makes after its fault
	statuses []string // the statuses a client sees, in order
	optional []bool   // statuses that last too little to be seen surely
}

var (
	tokenRe   = regexp.MustCompile("^`(tok_[a-z0-9_]+)`")
	faultRe   = regexp.MustCompile("^`POST /v1/dev/gateways/(sim[0-9])/faults` `(\\{[^`]*\\})`")
	advanceRe = regexp.MustCompile("`POST /v1/dev/clock` `\\{\"advance\": \"([0-9a-z]+)\"\\}`")
	statusRe  = regexp.MustCompile("^(\\()?`([a-z_]+)`\\)?$")
)

// docTokenRows parses the table, so that the table and this test cannot
// drift apart.
func docTokenRows(t *testing.T) []tokenRow {
	t.Helper()
	text, err := os.ReadFile("../docs/dev-mode.md")
	require.NoError(t, err)
	var rows []tokenRow
	inTable := false
	for _, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(line, "| token or fault | statuses a client sees |") {
			inTable = true
			continue
		}
		if !inTable || strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		require.GreaterOrEqual(t, len(cells), 2, line)
		first := strings.TrimSpace(cells[0])
		row := tokenRow{name: first, gateway: "sim1", token: "tok_ok"}
		if m := tokenRe.FindStringSubmatch(first); m != nil {
			row.token = m[1]
		} else if m := faultRe.FindStringSubmatch(first); m != nil {
			row.gateway, row.fault = m[1], m[2]
			if a := advanceRe.FindStringSubmatch(first); a != nil {
				row.advance = a[1]
			}
		} else {
			t.Fatalf("docs/dev-mode.md: row %q names neither a token nor a fault", first)
		}
		for _, part := range strings.Split(strings.TrimSpace(cells[1]), " → ") {
			m := statusRe.FindStringSubmatch(strings.TrimSpace(part))
			require.NotNil(t, m, "docs/dev-mode.md: %q: %q is no status", first, part)
			row.statuses = append(row.statuses, m[2])
			row.optional = append(row.optional, m[1] == "(")
		}
		rows = append(rows, row)
	}
	require.NotEmpty(t, rows, "docs/dev-mode.md: no test-token table")
	return rows
}

// matchesDoc reports whether seen is the documented sequence less some of
// its optional statuses.
func matchesDoc(row tokenRow, seen []string) bool {
	var walk func(i, j int) bool
	walk = func(i, j int) bool {
		if i == len(row.statuses) {
			return j == len(seen)
		}
		if j < len(seen) && row.statuses[i] == seen[j] && walk(i+1, j+1) {
			return true
		}
		return row.optional[i] && walk(i+1, j)
	}
	return walk(0, 0)
}

// observation is a charge as a client saw it change.
type observation struct {
	Status      string `json:"status"`
	FailureCode string `json:"failure_code"`
	Attempt     int    `json:"attempt_count"`
}

func (o observation) String() string {
	return fmt.Sprintf("%s/%s/a%d", o.Status, o.FailureCode, o.Attempt)
}

// poller records every change of a charge a client polling it sees.
type poller struct {
	mu   sync.Mutex
	seen []observation
}

func (p *poller) add(o observation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.seen); n == 0 || p.seen[n-1] != o {
		p.seen = append(p.seen, o)
	}
}

func (p *poller) last() observation {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.seen) == 0 {
		return observation{}
	}
	return p.seen[len(p.seen)-1]
}

// statuses are the distinct statuses seen in order.
// statuses are the statuses the client saw, one per change: the same
// status under a new attempt is a change too (a poller may miss the new
// attempt's brief steps before it).
func (p *poller) statuses() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	var last observation
	for i, o := range p.seen {
		if i == 0 || last.Status != o.Status || last.Attempt != o.Attempt {
			out = append(out, o.Status)
		}
		last = o
	}
	return out
}

func (p *poller) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	parts := make([]string, len(p.seen))
	for i, o := range p.seen {
		parts[i] = o.String()
	}
	return strings.Join(parts, " → ")
}

// Every row of the test-token table in docs/dev-mode.md is driven against
// a dev node on dev mode's default timings, as the walk-through runs it,
// and what a client polling the charge sees is held against the row.
func TestDocTestTokenTableMatchesTheAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out dev mode's real timeouts (about a minute)")
	}
	t.Parallel()
	rows := docTokenRows(t)
	env := map[string]string{
		"REBILL_DEV": "1", "REBILL_ADMIN_KEY": adminKey, "REBILL_ENCRYPTION_KEY": testEncryptionKey,
		"REBILL_DB_MAX_CONNS": "10", "REBILL_LOG_LEVEL": "warn",
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	require.NoError(t, err)
	ctx := context.Background()
	pool := dbtest.Pool(t)
	svc, err := app.Build(ctx, cfg, pool, zerolog.New(io.Discard))
	require.NoError(t, err)
	require.NoError(t, svc.River.Start(ctx))
	server := httptest.NewServer(openapitest.Wrap(t, svc.Handler))
	t.Cleanup(func() {
		server.Close()
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.River.Stop(stopCtx)
		svc.Close()
	})
	b := testBundle{pool: pool, nodes: []*node{{svc: svc, server: server}}}

	getCharge := func(id string) (observation, error) {
		req, err := http.NewRequest(http.MethodGet, server.URL+"/v1/charges/"+id, nil)
		if err != nil {
			return observation{}, err
		}
		req.Header.Set("Authorization", "Bearer "+adminKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return observation{}, err
		}
		defer res.Body.Close()
		var o observation
		if err := json.NewDecoder(res.Body).Decode(&o); err != nil {
			return observation{}, err
		}
		return o, nil
	}
	// watch polls the charge of a new subscription until stop is closed.
	watch := func(t *testing.T, row tokenRow, stop <-chan struct{}) *poller {
		body := subscriptionBody(row.token, "month")
		body["payment_method"].(map[string]any)["gateway"] = row.gateway
		subID := b.call(t, http.MethodPost, "/v1/subscriptions", body)["id"].(string)
		var chargeID string
		require.Eventually(t, func() bool {
			cs := b.charges(t, subID)
			if len(cs) == 1 {
				chargeID = cs[0]["id"].(string)
			}
			return chargeID != ""
		}, 10*time.Second, 5*time.Millisecond, "%s: no charge", row.name)
		p := &poller{}
		go func() {
			for {
				if o, err := getCharge(chargeID); err == nil {
					p.add(o)
				}
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
		return p
	}
	waitFor := func(t *testing.T, row tokenRow, p *poller, limit time.Duration, cond func(observation) bool, what string) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for !cond(p.last()) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not %s within %s; seen %s", row.name, what, limit, p)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	final := func(row tokenRow) string { return row.statuses[len(row.statuses)-1] }
	isStatus := func(s string) func(observation) bool { return func(o observation) bool { return o.Status == s } }

	run := func(t *testing.T, row tokenRow) *poller {
		stop := make(chan struct{})
		defer close(stop)
		fault := map[string]any{}
		if row.fault != "" {
			require.NoError(t, json.Unmarshal([]byte(row.fault), &fault), row.name)
			b.call(t, http.MethodPost, "/v1/dev/gateways/"+row.gateway+"/faults", fault)
		}
		p := watch(t, row, stop)
		switch {
		case fault["down"] == true:
			// Waiting on a gateway that does nothing, then its return.
			waitFor(t, row, p, 30*time.Second, func(o observation) bool { return o.FailureCode == "gateway_unavailable" }, "waiting on the gateway")
			b.call(t, http.MethodPost, "/v1/dev/gateways/"+row.gateway+"/faults", map[string]any{"down": false})
		case fault["captures_down"] == true:
			waitFor(t, row, p, 30*time.Second, func(o observation) bool {
				return o.Status == "capturing" && o.FailureCode == "gateway_unavailable"
			}, "capturing, waiting on the gateway")
			b.advance(t, row.advance)
			waitFor(t, row, p, 60*time.Second, func(o observation) bool {
				return o.Attempt == 2 && o.Status == "capturing" && o.FailureCode == "gateway_unavailable"
			}, "a second attempt's capture waiting on the gateway")
			b.call(t, http.MethodPost, "/v1/dev/gateways/"+row.gateway+"/faults", map[string]any{"captures_down": false})
		}
		waitFor(t, row, p, 120*time.Second, isStatus(final(row)), final(row))
		return p
	}

	// The rows without a clock move run at once; a clock move would start
	// the dunning of the others, so those rows run after them.
	check := func(t *testing.T, row tokenRow) {
		p := run(t, row)
		t.Logf("%s: %s", row.name, p)
		require.True(t, matchesDoc(row, p.statuses()), "docs/dev-mode.md row %s says %v (parenthesised ones optional), a client saw %s",
			row.name, row.statuses, p)
	}
	t.Run("at once", func(t *testing.T) {
		for _, row := range rows {
			if row.advance == "" {
				t.Run(row.name, func(t *testing.T) {
					t.Parallel()
					check(t, row)
				})
			}
		}
	})
	for _, row := range rows {
		if row.advance != "" {
			t.Run(row.name, func(t *testing.T) { check(t, row) })
		}
	}
}
