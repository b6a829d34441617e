package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api/idempotency"
	"github.com/rebill/rebill/app"
	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/autopay"
	"github.com/rebill/rebill/books"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/inspector"
	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/renewals"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/vault"
	"github.com/rebill/rebill/velocity"
	"github.com/rebill/rebill/zhkh"
)

// The pins are what a refactoring must leave as it is, because something
// outside this build depends on it: the jobs an older node queued (their
// kind, their arguments' JSON, how River makes them unique), the database
// an older node or an operator's query reads, and the metric names the
// dashboards and alerts query. Each is compared with a file under
// testdata/pins; REBILL_UPDATE_PINS=1 writes the files anew, for a change
// that is meant (and then reviewed as a change of those files).
const pinsDir = "testdata/pins"

// pinSamples is one representative value of the arguments of every job
// kind a node registers. A new kind must be added here (the test fails on
// a registered kind without a sample), and its JSON then joins the pins.
var pinSamples = []river.JobArgs{
	charges.AuthorizeArgs{ChargeID: pinUUID, Attempt: 2},
	charges.CaptureArgs{ChargeID: pinUUID, Attempt: 2},
	charges.VoidArgs{ChargeID: pinUUID, Attempt: 2},
	charges.LookupArgs{ChargeID: pinUUID, Attempt: 2, Op: gateway.OpCapture},
	charges.ReleaseHoldArgs{ChargeID: pinUUID, Attempt: 2},
	charges.SettledLayoutArgs{},
	charges.PostArgs{PaymentID: "10428000000000000000012345"},
	charges.AnnulArgs{PaymentID: "10428000000000000000012345"},
	charges.SweepArgs{},
	charges.RefundSendArgs{RefundID: pinUUID},
	charges.RefundLookupArgs{RefundID: pinUUID},
	notify.DeliverArgs{EventID: pinUUID, EndpointID: uuid.MustParse("01890a5d-ac96-774b-bcce-b302099a8057")},
	notify.RetentionArgs{},
	autopay.ScanArgs{},
	autopay.PullArgs{While: 42},
	renewals.ScanArgs{},
	books.TickArgs{},
	books.DayArgs{Gateway: "sim1", Day: "2026-03-01"},
	books.RegistryDayArgs{Registry: "gmp1", Day: "2026-03-01"},
	inspector.Args{},
	idempotency.CleanupArgs{},
	vault.ResealArgs{},
	velocity.SweepArgs{},
	zhkh.ReportArgs{ReportID: "5f0c6e1a9b2d4c3e8f7a6b5c4d3e2f1a"},
	zhkh.CancelArgs{ReportID: "5f0c6e1a9b2d4c3e8f7a6b5c4d3e2f1a"},
	zhkh.SweepArgs{},
}

var pinUUID = uuid.MustParse("01890a5d-ac96-7b8e-9c3a-1f2e3d4c5b6a")

// jobPin is what an enqueued job of a kind depends on: its arguments as
// stored in river_job.args, and the insert options River applies when
// the kind enqueues itself (its queue, attempts, and what makes two jobs
// one: the unique options and the argument fields tagged river:"unique").
type jobPin struct {
	Args         json.RawMessage `json:"args"`
	Queue        string          `json:"queue,omitempty"`
	MaxAttempts  int             `json:"max_attempts,omitempty"`
	Priority     int             `json:"priority,omitempty"`
	UniqueByArgs bool            `json:"unique_by_args,omitempty"`
	UniqueFields []string        `json:"unique_fields,omitempty"`
	UniquePeriod string          `json:"unique_period,omitempty"`
	UniqueQueue  bool            `json:"unique_by_queue,omitempty"`
	UniqueStates []string        `json:"unique_states,omitempty"`
}

func pinOf(t *testing.T, args river.JobArgs) jobPin {
	t.Helper()
	data, err := json.Marshal(args)
	require.NoError(t, err)
	p := jobPin{Args: data}
	withOpts, ok := args.(river.JobArgsWithInsertOpts)
	if !ok {
		return p
	}
	opts := withOpts.InsertOpts()
	p.Queue, p.MaxAttempts, p.Priority = opts.Queue, opts.MaxAttempts, opts.Priority
	u := opts.UniqueOpts
	p.UniqueByArgs, p.UniqueQueue = u.ByArgs, u.ByQueue
	if u.ByPeriod > 0 {
		p.UniquePeriod = u.ByPeriod.String()
	}
	for _, s := range u.ByState {
		p.UniqueStates = append(p.UniqueStates, string(s))
	}
	slices.Sort(p.UniqueStates)
	typ := reflect.TypeOf(args)
	for i := range typ.NumField() {
		f := typ.Field(i)
		if strings.Contains(f.Tag.Get("river"), "unique") {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			p.UniqueFields = append(p.UniqueFields, name)
		}
	}
	slices.Sort(p.UniqueFields)
	return p
}

// registeredKinds reads the job kinds a River client has workers for.
// River keeps them unexported (Client.config.Workers.workersMap); if an
// upgrade renames them, this fails loudly rather than pinning nothing.
func registeredKinds(t *testing.T, client *river.Client[pgx.Tx]) []string {
	t.Helper()
	cfg := reflect.ValueOf(client).Elem().FieldByName("config")
	require.True(t, cfg.IsValid(), "river.Client has no config field: update registeredKinds for this River version")
	workers := cfg.Elem().FieldByName("Workers")
	require.True(t, workers.IsValid() && !workers.IsNil(), "river.Config has no Workers")
	m := workers.Elem().FieldByName("workersMap")
	require.True(t, m.IsValid() && m.Kind() == reflect.Map, "river.Workers has no workersMap: update registeredKinds for this River version")
	var kinds []string
	for _, k := range m.MapKeys() {
		kinds = append(kinds, k.String())
	}
	slices.Sort(kinds)
	return kinds
}

// pinNode builds (does not start) a dev-mode node with every optional
// part that registers workers or periodic jobs switched on.
func pinNode(t *testing.T) *app.Service {
	t.Helper()
	cfg, err := config.Load(testEnv(map[string]string{"REBILL_EVENTS_RETENTION": "400d"}))
	require.NoError(t, err)
	svc, err := app.Build(context.Background(), cfg, dbtest.Pool(t), zerolog.New(io.Discard))
	require.NoError(t, err)
	t.Cleanup(svc.Close)
	return svc
}

// comparePin compares got with the pinned file, or writes the file when
// REBILL_UPDATE_PINS=1.
func comparePin(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join(pinsDir, name)
	if os.Getenv("REBILL_UPDATE_PINS") == "1" {
		require.NoError(t, os.MkdirAll(pinsDir, 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		t.Logf("wrote %s", path)
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "no pin file %s: run with REBILL_UPDATE_PINS=1 to write it", path)
	require.Equal(t, string(want), string(got),
		"%s changed: a job, table or metric an older node, a queued job or a dashboard depends on; "+
			"if the change is meant, run with REBILL_UPDATE_PINS=1 and review the diff", path)
}

// TestPinnedJobs: every job kind the node registers has a sample, and the
// samples' JSON and insert options are the pinned ones. A job queued by an
// older node (its args exactly as pinned) still decodes into today's args
// type with no field unknown or lost, as River decodes it before Work.
func TestPinnedJobs(t *testing.T) {
	t.Parallel()
	svc := pinNode(t)
	var sampled []string
	pins := map[string]jobPin{}
	for _, s := range pinSamples {
		require.NotContains(t, sampled, s.Kind(), "two samples of one kind")
		sampled = append(sampled, s.Kind())
		pins[s.Kind()] = pinOf(t, s)
	}
	slices.Sort(sampled)
	require.Equal(t, sampled, registeredKinds(t, svc.River),
		"the node's registered job kinds differ from pinSamples: add a sample of a new kind (or drop a removed one)")

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	require.NoError(t, enc.Encode(pins)) // map keys sorted
	comparePin(t, "jobs.json", buf.Bytes())

	// A job an older node enqueued: its args as pinned, decoded as River
	// decodes a job's args into the worker's type.
	data, err := os.ReadFile(filepath.Join(pinsDir, "jobs.json"))
	require.NoError(t, err)
	var pinned map[string]jobPin
	require.NoError(t, json.Unmarshal(data, &pinned))
	for _, s := range pinSamples {
		t.Run(s.Kind(), func(t *testing.T) {
			p, ok := pinned[s.Kind()]
			require.True(t, ok, "no pinned args for %s", s.Kind())
			decoded := reflect.New(reflect.TypeOf(s))
			dec := json.NewDecoder(bytes.NewReader(p.Args))
			dec.DisallowUnknownFields()
			require.NoError(t, dec.Decode(decoded.Interface()), "a queued %s job no longer decodes", s.Kind())
			again, err := json.Marshal(decoded.Elem().Interface())
			require.NoError(t, err)
			require.JSONEq(t, string(p.Args), string(again), "a queued %s job loses what its args said", s.Kind())
		})
	}
}

// TestPinnedTables: the tables (and views) of a freshly migrated database,
// River's and goose's included, by schema.
func TestPinnedTables(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	rows, err := pool.Query(context.Background(), `
		SELECT table_schema || '.' || table_name || ' ' || table_type FROM information_schema.tables
		WHERE table_schema NOT IN ('pg_catalog', 'information_schema')
		ORDER BY table_schema, table_name`)
	require.NoError(t, err)
	var lines []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		lines = append(lines, line)
	}
	require.NoError(t, rows.Err())
	require.Contains(t, lines, "public.charges BASE TABLE", "the schema was read")
	comparePin(t, "tables.txt", []byte(strings.Join(lines, "\n")+"\n"))
}

// TestPinnedMetrics: every metric family rebill registers, with its label
// names, as the dashboards and alerts query them. The Go
// runtime's and the process's own families belong to the Prometheus
// client and are left out.
func TestPinnedMetrics(t *testing.T) {
	t.Parallel()
	pinNode(t) // whatever wiring registers, besides the packages' init
	registry, ok := prometheus.DefaultRegisterer.(*prometheus.Registry)
	require.True(t, ok)
	descs := make(chan *prometheus.Desc)
	go func() {
		registry.Describe(descs)
		close(descs)
	}()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	variable := regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	seen := map[string]bool{}
	var lines []string
	for d := range descs {
		m := fqName.FindStringSubmatch(d.String())
		require.NotNil(t, m, "unparsed descriptor %s", d)
		name := m[1]
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") || seen[name] {
			continue
		}
		seen[name] = true
		var labels []string
		if v := variable.FindStringSubmatch(d.String()); v != nil && v[1] != "" {
			labels = strings.Split(v[1], ",")
		}
		slices.Sort(labels)
		lines = append(lines, fmt.Sprintf("%s{%s}", name, strings.Join(labels, ",")))
	}
	slices.Sort(lines)
	require.GreaterOrEqual(t, len(lines), 30, "the registry was read")
	comparePin(t, "metrics.txt", []byte(strings.Join(lines, "\n")+"\n"))
}
