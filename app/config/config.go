// Package config reads rebill's settings from environment variables, the
// one place that lists them all (and so the one place `--help` reads).
package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Config is every setting of `rebill serve`.
type Config struct {
	Addr              string
	DatabaseURL       string
	DataDir           string
	AdminKey          string
	Dev               bool
	IdempotencyTTL    time.Duration
	IdempotencyLease  time.Duration
	LogLevel          string
	ScanInterval      time.Duration
	ScanBatch         int
	ScanWorkers       int
	CatchUpWindow     time.Duration
	BreakerOpenFor    time.Duration
	UnavailableFor    time.Duration
	DunningSchedule   []time.Duration
	GatewayTimeout    time.Duration
	ChargeMaxAttempts int
	RetryBase         time.Duration
	RetryMax          time.Duration
	Workers           int
	TargetChargeRate  int           // sizes Workers when it is not set
	GatewayLatency    time.Duration // expected latency of a gateway call; sizes Workers
	// Gateways are the configured gateways besides dev mode's simulators:
	// REBILL_GATEWAYS_FILE's, or REBILL_GATEWAYS's simulators.
	Gateways     []Gateway
	GatewaysFile string
	// BillSources are REBILL_BILL_SOURCES_FILE's bill sources, at most one
	// per kind of bill; none: dev mode's simulated sources, or none.
	BillSources     []BillSource
	BillSourcesFile string
	// ExperimentsFile lists the billing-policy experiments (package
	// experiments reads it, against the guard rails the node's settings
	// give).
	ExperimentsFile string
	// DunningMax bounds every dunning schedule, the default and an
	// experiment arm's: a charge's retries end within it of its first
	// decline.
	DunningMax        time.Duration
	ShutdownTimeout   time.Duration
	RescueAfter       time.Duration
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
	DBMaxConns        int // database connections of one node, in-process simulator included
	// EncryptionKey encrypts secrets at rest (32 bytes); nil in dev mode
	// means the one kept in DataDir (generated on first start).
	EncryptionKey       []byte
	WebhookRetryBase    time.Duration
	WebhookAllowPrivate bool
	WebhookWorkers      int
	UpcomingNotice      time.Duration
	// CustomerProration is the proration of a customer key's immediate
	// subscription change (none, charge_now, credit_next): customers do
	// not choose it, so that none picks whichever is cheaper for them.
	CustomerProration string
	TrialNotice       time.Duration
	// EventsRetention: events older than this are deleted (0: kept forever).
	EventsRetention time.Duration
	// MetricsAddr, when set, serves /metrics there instead of on Addr.
	MetricsAddr string
	// OTLPEndpoint, when set, exports traces there (OTLP over HTTP).
	OTLPEndpoint string
	// Operations: the read replica, the inspector's thresholds
	// and the reconciliation's catch-up window.
	ReplicaURL          string
	InspectInterval     time.Duration
	InspectNoJobAfter   time.Duration // 0: twice the gateway timeout plus the rescue time
	InspectUnknownAfter time.Duration
	InspectHoldWarn     time.Duration
	ReconcileDays       int
	// Velocity limits of customer keys and of declines (0: off).
	VelocityCreationsPerHour  int
	VelocityCardChangesPerDay int
	VelocityDeclinesPerDay    int
	// VelocityApprovedInFlight bounds a customer's first attempts in
	// flight on cards approved within 30 days, which the declines limit
	// does not hold to VelocityDeclinesPerDay until they decline.
	VelocityApprovedInFlight int
	// EncryptionOldKeys still decrypt secrets sealed before a rotation.
	EncryptionOldKeys [][]byte
	// The support console's sessions: idle timeout, and whether a proxy's
	// X-Forwarded-Proto and X-Forwarded-For are believed.
	ConsoleIdleTimeout time.Duration
	ConsoleTrustProxy  bool
	// StartupRetryFor bounds how long start-up steps that talk to the
	// database are tried again on transient errors (0: once).
	StartupRetryFor time.Duration
	// Registries are REBILL_REGISTRY_FILE's registry gateways; none: dev
	// mode's simulated ones, or no registry outside dev mode.
	Registries   []Registry
	RegistryFile string
	// ZhkhParties are REBILL_ZHKH_PARTIES_FILE's parties that housing
	// payments are reported to GIS ZhKH through; none: dev mode's
	// simulated party, or no report outside dev mode (said at start).
	ZhkhParties     []ZhkhParty
	ZhkhPartiesFile string
	// SimLedger is where a dev node's in-process simulated gateways keep
	// their books: SimLedgerPostgres or SimLedgerMemory.
	SimLedger string
	// BillReceipts says who sends the 54-FZ receipts of bill payments.
	BillReceipts BillReceipts
}

// Where a dev node's simulated gateways keep their ledger
// (REBILL_SIM_LEDGER).
const (
	// SimLedgerPostgres: the schema gatewaysim of the node's database,
	// shared by every node and `rebill gatewaysim` on it.
	SimLedgerPostgres = "postgres"
	// SimLedgerMemory: the node's memory, seen by that node alone and
	// lost when it stops; for a single dev node only.
	SimLedgerMemory = "memory"
)

// variable documents one environment variable.
type variable struct {
	name, def, help string
	set             func(*Config, string) error
}

// secretVariables are never quoted in an error (a key, or a URL that may
// hold a password): their setters say what is wrong without the value.
var secretVariables = map[string]bool{
	"REBILL_ADMIN_KEY": true, "REBILL_ENCRYPTION_KEY": true, "REBILL_ENCRYPTION_OLD_KEYS": true,
	"DATABASE_URL": true, "REBILL_REPLICA_URL": true,
}

var variables = []variable{
	{"REBILL_ADDR", "127.0.0.1:8080", "HTTP listen address",
		func(c *Config, v string) error { c.Addr = v; return nil }},
	{"DATABASE_URL", "", "PostgreSQL URL; empty starts a private cluster in REBILL_DATA_DIR/pg",
		func(c *Config, v string) error { c.DatabaseURL = v; return checkPostgresURL(v) }},
	{"REBILL_DATA_DIR", ".rebill", "folder for the private PostgreSQL cluster",
		func(c *Config, v string) error { c.DataDir = v; return nil }},
	{"REBILL_ADMIN_KEY", "", "bootstrap admin API key, at least 32 characters (no database row); empty: the first start creates one and prints it",
		func(c *Config, v string) error {
			// A bearer secret with every right and no row to revoke: a
			// short one can be guessed (generated keys carry 256 bits).
			if len([]rune(v)) < 32 {
				return errors.New("must be at least 32 characters (e.g. openssl rand -base64 32)")
			}
			c.AdminKey = v
			return nil
		}},
	{"REBILL_DEV", "", "1: dev mode (manual clock, /v1/dev/*, simulated gateways sim1..sim5)",
		func(c *Config, v string) (err error) { c.Dev, err = parseBool(v); return }},
	{"REBILL_SIM_LEDGER", "postgres", "dev mode only: where the in-process simulated gateways keep their ledger, postgres (the schema gatewaysim of the node's database, shared by the nodes on it) or memory (this node's memory: single node only, lost at stop, unseen by other nodes, `rebill gatewaysim` and `rebill audit`, which refuse it); any other value, or memory without REBILL_DEV=1, stops the start (docs/dev-mode.md)",
		func(c *Config, v string) error {
			if v != SimLedgerPostgres && v != SimLedgerMemory {
				return errors.New("want postgres or memory")
			}
			c.SimLedger = v
			return nil
		}},
	{"REBILL_IDEMPOTENCY_TTL", "24h", "how long idempotency records are kept",
		durationInto(func(c *Config) *time.Duration { return &c.IdempotencyTTL })},
	{"REBILL_IDEMPOTENCY_LEASE", "60s", "how long a key reserved by a node of an earlier version (which reserved keys in a transaction of their own) holds it before a retry may take it over; keys are otherwise free as soon as their request's transaction ends",
		durationInto(func(c *Config) *time.Duration { return &c.IdempotencyLease })},
	{"REBILL_LOG_LEVEL", "info", "debug, info, warn or error",
		func(c *Config, v string) error { c.LogLevel = v; return nil }},
	{"REBILL_SCAN_INTERVAL", "1m (1s in dev mode)", "how often the leader scans for due periods",
		durationInto(func(c *Config) *time.Duration { return &c.ScanInterval })},
	{"REBILL_SCAN_BATCH", "500", "subscriptions per scan transaction",
		intInto(func(c *Config) *int { return &c.ScanBatch })},
	{"REBILL_SCAN_WORKERS", "2", "scan batches run at once (about one per database core)",
		intInto(func(c *Config) *int { return &c.ScanWorkers })},
	{"REBILL_CATCH_UP_WINDOW", "2160h (90 days)", "after downtime, the current period and missed periods that began within this window are charged; older ones are skipped and logged",
		durationInto(func(c *Config) *time.Duration { return &c.CatchUpWindow })},
	{"REBILL_DUNNING_SCHEDULE", "24h,72h,120h,168h", "delays after the first decline of the dunning attempts (by the service clock)",
		func(c *Config, v string) error {
			c.DunningSchedule = nil
			for _, part := range strings.Split(v, ",") {
				d, err := time.ParseDuration(strings.TrimSpace(part))
				if err != nil || d <= 0 {
					return fmt.Errorf("want positive durations separated by commas")
				}
				c.DunningSchedule = append(c.DunningSchedule, d)
			}
			return nil
		}},
	{"REBILL_DUNNING_MAX", "720h (30 days)", "every dunning schedule (REBILL_DUNNING_SCHEDULE and an experiment arm's) ends within this of the first decline; at most 720h, the window of decision 7 (15 attempts per charge in 30 days)",
		func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 || d > 720*time.Hour {
				return errors.New("want a positive duration of at most 720h")
			}
			c.DunningMax = d
			return nil
		}},
	{"REBILL_EXPERIMENTS_FILE", "", "path of a JSON or YAML list of billing-policy experiments (docs/experiments.md): key, policy, arms with weights and parameters, eligibility, start and stop; checked against the guard rails at start; empty: none",
		func(c *Config, v string) error { c.ExperimentsFile = v; return nil }},
	{"REBILL_GATEWAY_TIMEOUT", "10s (2s in dev mode)", "timeout of every gateway call",
		durationInto(func(c *Config) *time.Duration { return &c.GatewayTimeout })},
	{"REBILL_CHARGE_MAX_ATTEMPTS", "8", "technical attempts of a charge job before it goes to review",
		intInto(func(c *Config) *int { return &c.ChargeMaxAttempts })},
	{"REBILL_RETRY_BASE", "5s (1s in dev mode)", "base of the capped exponential backoff with full jitter",
		durationInto(func(c *Config) *time.Duration { return &c.RetryBase })},
	{"REBILL_RETRY_MAX", "10m (5s in dev mode)", "cap of a single technical retry delay (also of a charge's waits on a gateway that answers it did nothing; a review's hold check backs off further, to 30 min or REBILL_UNAVAILABLE_FOR if shorter)",
		durationInto(func(c *Config) *time.Duration { return &c.RetryMax })},
	{"REBILL_BREAKER_OPEN_FOR", "5s", "how long a gateway's circuit stays open (after over 50 % of at least 10 calls in 30 s got no answer) before a probe",
		durationInto(func(c *Config) *time.Duration { return &c.BreakerOpenFor })},
	{"REBILL_UNAVAILABLE_FOR", "24h", "how long a charge step waits on a gateway that answers it did nothing (503, circuit open) before it goes to review",
		durationInto(func(c *Config) *time.Duration { return &c.UnavailableFor })},
	{"REBILL_WORKERS", "by Little's law", "concurrent charge jobs per node (gateway calls hold no database connection); by default enough for REBILL_TARGET_CHARGE_RATE at REBILL_GATEWAY_LATENCY: rate × latency × 2 calls per charge, doubled for the rest of a charge's time",
		intInto(func(c *Config) *int { return &c.Workers })},
	{"REBILL_TARGET_CHARGE_RATE", "1000", "charges per second one node should sustain; sizes REBILL_WORKERS",
		intInto(func(c *Config) *int { return &c.TargetChargeRate })},
	{"REBILL_GATEWAY_LATENCY", "300ms", "expected latency of one gateway call; sizes REBILL_WORKERS",
		durationInto(func(c *Config) *time.Duration { return &c.GatewayLatency })},
	{"REBILL_GATEWAYS_FILE", "", "path of the gateways file (JSON or YAML; see below): stripe, yookassa and sim gateways with their priority, commissions, currencies, hold lifetime, timeout and the environment variables that hold their credentials",
		func(c *Config, v string) error { c.GatewaysFile = v; return nil }},
	{"REBILL_GATEWAYS", "", "shorthand for simulated gateways only (not with REBILL_GATEWAYS_FILE): name=URL pairs, comma separated, priority in the order listed, no commission; URL is a simulator's root plus /<its gateway>, e.g. sim1=http://127.0.0.1:8090/sim1",
		func(c *Config, v string) error {
			var pairs [][2]string
			seen := map[string]bool{}
			for _, part := range strings.Split(v, ",") {
				if part = strings.TrimSpace(part); part == "" {
					continue
				}
				name, url, ok := strings.Cut(part, "=")
				if !ok || name == "" || url == "" {
					return fmt.Errorf("want name=URL pairs")
				}
				if seen[name] {
					return fmt.Errorf("gateway %q is listed twice", name)
				}
				seen[name] = true
				pairs = append(pairs, [2]string{name, url})
			}
			c.Gateways = simShorthand(pairs)
			return nil
		}},
	{"REBILL_REGISTRY_FILE", "", "path of the registry file (JSON or YAML list, see docs/registry.md): the gateways to the state payment registry (GIS GMP) that fines are posted through, kind http (a bank or payment agent, mTLS and a bearer token) or sim (dev mode only), with priority, timeout and the payment identifier format; empty: dev mode's simulated gmp1 and gmp2, no registry outside dev mode (fines are refused)",
		func(c *Config, v string) error { c.RegistryFile = v; return nil }},
	{"REBILL_BILL_RECEIPTS", "housing=gateway,fines=gateway", "who sends the 54-FZ receipts of each kind of bill's payments: rebill (a receipt of one item, the bill, with the payment agent's attributes, sent through gateways that fiscalize: YooKassa; Stripe files none) or gateway (the gateway's own fiscalisation, or none); kind=who pairs, comma separated; a kind left out stays gateway. Sending any kind's needs REBILL_BILL_RECEIPT_AGENT_TYPE and that kind's REBILL_BILL_RECEIPT_SUPPLIER_*, else the start stops (docs/autopay.md, Receipts)",
		setBillReceipts},
	{"REBILL_BILL_RECEIPT_AGENT_TYPE", "", "the operator's payment agent type on rebill's bill receipts (54-FZ tag 1222), in YooKassa's names: banking_payment_agent, banking_payment_subagent, payment_agent, payment_subagent, attorney, commissioner or agent; required when REBILL_BILL_RECEIPTS names rebill",
		setAgentType},
	{"REBILL_BILL_RECEIPT_SUPPLIER_HOUSING", "", "the supplier rebill's housing bill receipts name while a bill names none: inn=...;phone=...;name=... (54-FZ tags 1226, 1171 in E.164, 1225; name last); required when REBILL_BILL_RECEIPTS sends housing receipts",
		supplierSetter("housing")},
	{"REBILL_BILL_RECEIPT_SUPPLIER_FINES", "", "the fines' administrator rebill's fine receipts name while a fine names none: inn=...;phone=...;name=... (as REBILL_BILL_RECEIPT_SUPPLIER_HOUSING); required when REBILL_BILL_RECEIPTS sends fines receipts",
		supplierSetter("fines")},
	{"REBILL_BILL_RECEIPT_VAT_CODE", "1", "VAT code of rebill's bill receipt items in YooKassa's table, 1..12 (1: без НДС, as a payment agent's receipt carries)",
		codeSetter(func(c *Config) *int { return &c.BillReceipts.VATCode }, 1, 12)},
	{"REBILL_BILL_RECEIPT_TAX_SYSTEM", "", "the operator's tax system code on rebill's bill receipts, 1..6; empty: the one set up at the gateway",
		codeSetter(func(c *Config) *int { return &c.BillReceipts.TaxSystemCode }, 1, 6)},
	{"REBILL_BILL_RECEIPT_PAYMENT_SUBJECTS", "housing=service,fines=payment", "payment subject (54-FZ tag 1212) of each kind's receipt item, in YooKassa's names: kind=subject pairs",
		setPaymentSubjects},
	{"REBILL_ZHKH_PARTIES_FILE", "", "path of the GIS ZhKH parties file (JSON or YAML list, see docs/registry.md): the banks or payment agents every captured housing payment is reported to GIS ZhKH through, kind http (mTLS and a bearer token) or sim (dev mode only), with priority and timeout; empty: dev mode's simulated party zhkh1, none outside dev mode (housing payments are captured but not reported, said at start)",
		func(c *Config, v string) error { c.ZhkhPartiesFile = v; return nil }},
	{"REBILL_BILL_SOURCES_FILE", "", "path of the bill sources file (JSON or YAML; see docs/bill-sources.md): the HTTP sources autopay pulls housing bills and fines from, at most one per kind, with their URL, bearer token variable, TLS files, timeout, batch size, rate limit, re-read window and silence alert; unset: dev mode's simulated sources, none outside dev mode",
		func(c *Config, v string) error { c.BillSourcesFile = v; return nil }},
	{"REBILL_RESCUE_AFTER", "5m (30s in dev mode)", "a job running this long belonged to a crashed node: River runs it again (same gateway key)",
		durationInto(func(c *Config) *time.Duration { return &c.RescueAfter })},
	{"REBILL_FETCH_COOLDOWN", "20ms", "least time between two fetches of jobs by one node",
		durationInto(func(c *Config) *time.Duration { return &c.FetchCooldown })},
	{"REBILL_FETCH_POLL_INTERVAL", "1s", "how often a node polls for jobs besides LISTEN notifications",
		durationInto(func(c *Config) *time.Duration { return &c.FetchPollInterval })},
	{"REBILL_SHUTDOWN_TIMEOUT", "30s", "how long shutdown waits for in-flight requests and jobs",
		durationInto(func(c *Config) *time.Duration { return &c.ShutdownTimeout })},
	{"REBILL_DB_MAX_CONNS", "25", "most database connections of one node (at least 8): River's LISTEN connection and, in dev mode, the simulated gateways' fifth and the dev clock's 2 included; pool_max_conns in DATABASE_URL sets the service's own pool instead",
		func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 8 {
				return errors.New("want an integer of at least 8")
			}
			c.DBMaxConns = n
			return nil
		}},
	{"REBILL_ENCRYPTION_KEY", "", "32 bytes, base64 (openssl rand -base64 32): encrypts payment tokens and webhook secrets at rest (AES-GCM; each ciphertext names its key); required outside dev mode, where it is generated into REBILL_DATA_DIR/encryption.key",
		func(c *Config, v string) (err error) { c.EncryptionKey, err = notifyKey(v); return }},
	{"REBILL_WEBHOOK_RETRY_BASE", "5s", "first webhook retry after about this, then 5x longer each time up to 1h, for 3 days",
		durationInto(func(c *Config) *time.Duration { return &c.WebhookRetryBase })},
	{"REBILL_WEBHOOK_ALLOW_PRIVATE", "", "1: webhooks may go to http and to loopback/private addresses (always so in dev mode)",
		func(c *Config, v string) (err error) { c.WebhookAllowPrivate, err = parseBool(v); return }},
	{"REBILL_WEBHOOK_WORKERS", "20", "concurrent webhook deliveries per node (their own River queue; a quarter of them at most, 2 at least, per endpoint)",
		intInto(func(c *Config) *int { return &c.WebhookWorkers })},
	{"REBILL_UPCOMING_NOTICE", "72h", "charge.upcoming is published this long before each renewal",
		durationInto(func(c *Config) *time.Duration { return &c.UpcomingNotice })},
	{"REBILL_CUSTOMER_PRORATION", "charge_now", "proration of a subscription change a customer key makes effective now (none, charge_now or credit_next); staff keys choose their own, customers cannot",
		func(c *Config, v string) error {
			switch v {
			case "none", "charge_now", "credit_next":
				c.CustomerProration = v
				return nil
			}
			return errors.New("want none, charge_now or credit_next")
		}},
	{"REBILL_TRIAL_NOTICE", "72h", "subscription.trial_will_end is published this long before a trial ends",
		durationInto(func(c *Config) *time.Duration { return &c.TrialNotice })},
	{"REBILL_EVENTS_RETENTION", "", "events (GET /v1/events) older than this by the service clock are deleted with their webhook delivery attempts, hourly; a Go duration or days (400d), at least 396d (13 months, 9504h); an event whose delivery is not over is kept; empty or 0: events are kept forever (docs/operations.md, Events retention)",
		func(c *Config, v string) (err error) { c.EventsRetention, err = parseRetention(v); return }},
	{"REBILL_METRICS_ADDR", "", "listen address of /metrics (e.g. 127.0.0.1:9090); when set, REBILL_ADDR no longer serves /metrics, so it need not be public. The experiments' series (rebill_experiment_*) are served only here: set it in production (docs/operations.md, Metrics listener)",
		func(c *Config, v string) error { c.MetricsAddr = v; return nil }},
	{"OTEL_EXPORTER_OTLP_ENDPOINT", "", "OTLP/HTTP collector base URL (e.g. http://127.0.0.1:4318): traces of requests, jobs and gateway calls go to its /v1/traces; empty: no tracing. The other OTEL_EXPORTER_OTLP_* variables (headers, timeout) apply (docs/operations.md, Tracing)",
		func(c *Config, v string) error { c.OTLPEndpoint = v; return nil }},
	{"REBILL_REPLICA_URL", "", "PostgreSQL URL of a read replica for reconciliation, reports and `rebill audit` (a second pool); empty: they read the primary",
		func(c *Config, v string) error { c.ReplicaURL = v; return checkPostgresURL(v) }},
	{"REBILL_INSPECT_INTERVAL", "1m", "how often the inspector looks for stuck charges",
		durationInto(func(c *Config) *time.Duration { return &c.InspectInterval })},
	{"REBILL_INSPECT_NO_JOB_AFTER", "2 x REBILL_GATEWAY_TIMEOUT + REBILL_RESCUE_AFTER", "a charge authorizing, capturing or authorized this long with no live job is kicked (its job enqueued again, same key)",
		durationInto(func(c *Config) *time.Duration { return &c.InspectNoJobAfter })},
	{"REBILL_INSPECT_UNKNOWN_AFTER", "1h", "a charge whose outcome is unknown this long past its reconcile schedule goes to review",
		durationInto(func(c *Config) *time.Duration { return &c.InspectUnknownAfter })},
	{"REBILL_INSPECT_HOLD_WARN", "72h", "an authorized charge held this long is reported: its hold nears expiry (the gateways re-authorize)",
		durationInto(func(c *Config) *time.Duration { return &c.InspectHoldWarn })},
	{"REBILL_RECONCILE_DAYS", "7", "finished UTC days back that the daily reconciliation catches up",
		intInto(func(c *Config) *int { return &c.ReconcileDays })},
	{"REBILL_VELOCITY_CREATIONS_PER_HOUR", "20", "subscriptions and enrollments a customer key may create per clock hour, counted together (service clock; 0: no limit); over it: 429 velocity-limit",
		countInto(func(c *Config) *int { return &c.VelocityCreationsPerHour })},
	{"REBILL_VELOCITY_CARD_CHANGES_PER_DAY", "10", "payment-method changes a customer key may make per UTC day (the card given at creation and the same card again do not count; 0: no limit)",
		countInto(func(c *Config) *int { return &c.VelocityCardChangesPerDay })},
	{"REBILL_VELOCITY_DECLINES_PER_DAY", "5", "declined charges of a customer per UTC day past which its new subscription charges go to review instead of the gateway (0: no limit)",
		countInto(func(c *Config) *int { return &c.VelocityDeclinesPerDay })},
	{"REBILL_VELOCITY_APPROVED_IN_FLIGHT", "200", "first attempts of a customer in flight at once on cards a first attempt of the customer approved within 30 days, which REBILL_VELOCITY_DECLINES_PER_DAY does not hold until the card declines (0: such cards are held as new ones)",
		countInto(func(c *Config) *int { return &c.VelocityApprovedInFlight })},
	{"REBILL_ENCRYPTION_OLD_KEYS", "", "previous REBILL_ENCRYPTION_KEYs, comma separated: they still decrypt until `rebill secrets rotate` (or the hourly job) has sealed everything under the current key",
		func(c *Config, v string) error {
			c.EncryptionOldKeys = nil
			parts := strings.Split(v, ",")
			for i, part := range parts {
				if part = strings.TrimSpace(part); part == "" {
					continue
				}
				key, err := notifyKey(part)
				if err != nil {
					return fmt.Errorf("entry %d of %d: %w", i+1, len(parts), err)
				}
				c.EncryptionOldKeys = append(c.EncryptionOldKeys, key)
			}
			return nil
		}},
	{"REBILL_CONSOLE_IDLE_TIMEOUT", "30m", "a support console session ends after this long without a request (1s..12h; it also ends 12 h after login and when its key is deleted; docs/console.md)",
		func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Second || d > 12*time.Hour {
				return errors.New("want a duration from 1s to 12h, such as 30m")
			}
			c.ConsoleIdleTimeout = d
			return nil
		}},
	{"REBILL_CONSOLE_TRUST_PROXY", "", "1: rebill is behind a reverse proxy that sets X-Forwarded-Proto and X-Forwarded-For: the console's cookie is Secure when the proxy says https, and failed logins are counted per the address the proxy saw",
		func(c *Config, v string) (err error) { c.ConsoleTrustProxy, err = parseBool(v); return }},
	{"REBILL_STARTUP_RETRY_FOR", "60s", "how long a start waits out transient database errors (a restart, a failover, too many connections), trying each step again with backoff and logging each try, before it gives up (0: no retry, 0s..1h); errors a retry cannot cure (a wrong password, a missing database, a bad migration) stop it at once",
		func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if v == "0" {
				d, err = 0, nil
			}
			if err != nil || d < 0 || d > time.Hour {
				return errors.New("want a duration from 0s to 1h, such as 60s (0 turns the retry off)")
			}
			c.StartupRetryFor = d
			return nil
		}},
}

// MinEventsRetention is 13 months, taken as 396 days (a year of 365 days
// and a 31-day month): a year of events, with a month to spare for a
// dispute about the oldest, is never deleted.
const MinEventsRetention = 396 * 24 * time.Hour

// parseRetention reads REBILL_EVENTS_RETENTION: a Go duration or whole
// days ("400d"), at least MinEventsRetention; "0" is off, like empty.
func parseRetention(v string) (time.Duration, error) {
	if v == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if days, ok := strings.CutSuffix(v, "d"); ok {
		var n int
		n, err = strconv.Atoi(days)
		d = time.Duration(n) * 24 * time.Hour
		if n > math.MaxInt64/int(24*time.Hour) {
			err = errors.New("too long")
		}
	}
	if err != nil || d < MinEventsRetention {
		return 0, fmt.Errorf("want at least 13 months, %dd (%dh), as days (400d) or a Go duration (9600h); empty or 0 keeps events forever",
			int(MinEventsRetention.Hours()/24), int(MinEventsRetention.Hours()))
	}
	return d, nil
}

func countInto(field func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return errors.New("want an integer of at least 0 (0 turns the limit off)")
		}
		*field(c) = n
		return nil
	}
}

func durationInto(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return errors.New("want a positive duration such as 30s or 24h")
		}
		*field(c) = d
		return nil
	}
}

func intInto(field func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return errors.New("want a positive integer")
		}
		*field(c) = n
		return nil
	}
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "", "0", "false", "no":
		return false, nil
	case "1", "true", "yes":
		return true, nil
	}
	return false, errors.New("want 1 or 0")
}

// Load reads the environment through getenv. Defaults that differ in dev
// mode are applied after REBILL_DEV is known.
func Load(getenv func(string) string) (Config, error) {
	c := Config{
		Addr: "127.0.0.1:8080", DataDir: ".rebill", IdempotencyTTL: 24 * time.Hour, IdempotencyLease: 60 * time.Second,
		LogLevel: "info", ScanBatch: 500, ScanWorkers: 2, CatchUpWindow: 90 * 24 * time.Hour, ChargeMaxAttempts: 8,
		TargetChargeRate: 1000, GatewayLatency: 300 * time.Millisecond,
		DunningSchedule: []time.Duration{24 * time.Hour, 72 * time.Hour, 120 * time.Hour, 168 * time.Hour},
		DunningMax:      720 * time.Hour,
		BreakerOpenFor:  5 * time.Second, UnavailableFor: 24 * time.Hour,
		ShutdownTimeout: 30 * time.Second, FetchCooldown: 20 * time.Millisecond, FetchPollInterval: time.Second,
		DBMaxConns: 25, WebhookRetryBase: 5 * time.Second, WebhookWorkers: 20, UpcomingNotice: 72 * time.Hour, TrialNotice: 72 * time.Hour,
		CustomerProration: "charge_now",
		InspectInterval:   time.Minute, InspectUnknownAfter: time.Hour, InspectHoldWarn: 72 * time.Hour, ReconcileDays: 7,
		VelocityCreationsPerHour: 20, VelocityCardChangesPerDay: 10, VelocityDeclinesPerDay: 5,
		VelocityApprovedInFlight: 200,
		ConsoleIdleTimeout:       30 * time.Minute, StartupRetryFor: time.Minute, SimLedger: SimLedgerPostgres,
		BillReceipts: BillReceipts{ByRebill: map[string]bool{}, VATCode: 1, Suppliers: map[string]Supplier{},
			PaymentSubjects: map[string]string{"housing": "service", "fines": "payment"}},
	}
	for _, v := range variables {
		value := getenv(v.name)
		if value == "" {
			continue
		}
		if err := v.set(&c, value); err != nil {
			if secretVariables[v.name] {
				return Config{}, fmt.Errorf("%s: %w", v.name, err)
			}
			return Config{}, fmt.Errorf("%s=%q: %w", v.name, value, err)
		}
	}
	if err := checkBillReceipts(c.BillReceipts); err != nil {
		return Config{}, err
	}
	if c.SimLedger == SimLedgerMemory && !c.Dev {
		return Config{}, errors.New("REBILL_SIM_LEDGER=memory: only a single dev node (REBILL_DEV=1) runs simulated gateways in process; unset it outside dev mode")
	}
	if c.GatewaysFile != "" {
		if len(c.Gateways) > 0 {
			return Config{}, errors.New("REBILL_GATEWAYS_FILE and REBILL_GATEWAYS are both set: list the simulators in the file (kind: sim)")
		}
		gateways, err := LoadGatewaysFile(c.GatewaysFile, getenv)
		if err != nil {
			return Config{}, PrefixLines("REBILL_GATEWAYS_FILE: ", err)
		}
		c.Gateways = gateways
	}
	if c.RegistryFile != "" {
		registries, err := LoadRegistriesFile(c.RegistryFile, getenv, c.Dev)
		if err != nil {
			return Config{}, PrefixLines("REBILL_REGISTRY_FILE: ", err)
		}
		c.Registries = registries
	}
	if last := c.DunningSchedule[len(c.DunningSchedule)-1]; last > c.DunningMax {
		return Config{}, fmt.Errorf("REBILL_DUNNING_SCHEDULE: its last retry (%s after the first decline) is past REBILL_DUNNING_MAX (%s)", last, c.DunningMax)
	}
	if max := 14; len(c.DunningSchedule) > max { // decision 7: 15 attempts, the first and 14 retries
		return Config{}, fmt.Errorf("REBILL_DUNNING_SCHEDULE: %d retries, but a charge may make at most 15 attempts (decision 7)", len(c.DunningSchedule))
	}
	if c.ZhkhPartiesFile != "" {
		parties, err := LoadZhkhPartiesFile(c.ZhkhPartiesFile, getenv, c.Dev)
		if err != nil {
			return Config{}, PrefixLines("REBILL_ZHKH_PARTIES_FILE: ", err)
		}
		c.ZhkhParties = parties
	}
	if c.BillSourcesFile != "" {
		sources, err := LoadBillSourcesFile(c.BillSourcesFile, getenv)
		if err != nil {
			return Config{}, PrefixLines("REBILL_BILL_SOURCES_FILE: ", err)
		}
		c.BillSources = sources
	}
	defaults := map[*time.Duration][2]time.Duration{ // [production, dev]
		&c.ScanInterval:   {time.Minute, time.Second},
		&c.GatewayTimeout: {10 * time.Second, 2 * time.Second},
		&c.RetryBase:      {5 * time.Second, time.Second},
		&c.RetryMax:       {10 * time.Minute, 5 * time.Second},
		&c.RescueAfter:    {5 * time.Minute, 30 * time.Second},
	}
	for field, def := range defaults {
		if *field == 0 {
			*field = def[0]
			if c.Dev {
				*field = def[1]
			}
		}
	}
	if c.Workers == 0 {
		c.Workers = LittlesLawWorkers(c.TargetChargeRate, c.GatewayLatency)
	}
	if c.InspectNoJobAfter == 0 {
		c.InspectNoJobAfter = 2*c.GatewayTimeout + c.RescueAfter
	}
	return c, nil
}

// LittlesLawWorkers is how many charge jobs must run at once to sustain
// rate charges per second when each gateway call takes latency: a charge
// is two calls (hold, then capture), so by Little's law rate × 2 × latency
// jobs are in flight for the calls alone, and as many again for the rest
// of a charge's time in the system. Measured with 250 ms per call on two
// cores, a charge took 0.82 s from its first job's start to its capture's
// commit with 750 workers and 0.90 s with 1,200 (the database work around
// the calls, the queue between the hold and the capture; BENCHMARKS.md),
// not 0.5 s: sized for the calls plus a quarter, a node reached 918 of
// its 1,000 charges/s.
func LittlesLawWorkers(rate int, latency time.Duration) int {
	inFlight := float64(rate) * 2 * latency.Seconds()
	return max(1, int(math.Ceil(inFlight*2)))
}

// PrintHelp lists every variable with its default.
func PrintHelp(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tDEFAULT\tMEANING")
	for _, v := range variables {
		def := v.def
		if def == "" {
			def = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", v.name, def, v.help)
	}
	_ = tw.Flush()
}

// notifyKey decodes a base64 key of 32 bytes (standard or URL alphabet,
// padded or not).
func notifyKey(v string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if key, err := enc.DecodeString(strings.TrimSpace(v)); err == nil {
			if len(key) != 32 {
				return nil, fmt.Errorf("must be 32 bytes, base64; got %d bytes", len(key))
			}
			return key, nil
		}
	}
	return nil, errors.New("must be base64 (e.g. openssl rand -base64 32)")
}
