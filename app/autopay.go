package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/api"
	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/autopay"
	"github.com/rebill/rebill/autopay/billsource"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/charges/registry/agentapi"
	registrysim "github.com/rebill/rebill/charges/registry/sim"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/metrics"
)

// billCaptureMargin is how long before a fine's discount deadline its
// last discounted attempt starts, leaving time for hold, posting and
// capture: the margin by which charges prices an attempt in full.
const billCaptureMargin = charges.PostingDiscountMargin

// billPullInterval is how often the bill sources are pulled (real time);
// dev mode also pulls at every clock move and every publish.
const billPullInterval = time.Minute

// buildAutopay wires enrollments and the charging of their bills: the
// store publishing through recorder, the outcomes the pipeline reports
// bills' charges to, and the bill sources (billSources).
func buildAutopay(cfg config.Config, pool *pgxpool.Pool, clk clock.Clock, recorder *notify.Recorder, log zerolog.Logger) (*autopay.Autopay, autopay.Outcomes) {
	store := enrollments.NewStore(clk)
	store.SetEventSink(recorder)
	rules := enrollments.Rules{Dunning: cfg.DunningSchedule, CaptureMargin: billCaptureMargin}
	a := &autopay.Autopay{Pool: pool, Enrollments: store, Clock: clk, Rules: rules, BatchSize: cfg.ScanBatch,
		Logger: log.With().Str("component", "autopay").Logger()}
	a.Sources = billSources(cfg, pool, log)
	a.Receipts = billReceipts(cfg.BillReceipts)
	return a, autopay.Outcomes{Enrollments: store, Rules: rules}
}

// billReceipts is REBILL_BILL_RECEIPTS and its settings as autopay sends
// receipts by them.
func billReceipts(c config.BillReceipts) autopay.BillReceipts {
	r := autopay.BillReceipts{Kinds: map[enrollments.Kind]bool{}, AgentType: c.AgentType, VATCode: c.VATCode,
		TaxSystemCode: c.TaxSystemCode, PaymentSubject: map[enrollments.Kind]string{},
		Suppliers: map[enrollments.Kind]gateway.ReceiptSupplier{}}
	for kind, on := range c.ByRebill {
		r.Kinds[enrollments.Kind(kind)] = on
	}
	for kind, subject := range c.PaymentSubjects {
		r.PaymentSubject[enrollments.Kind(kind)] = subject
	}
	for kind, s := range c.Suppliers {
		r.Suppliers[enrollments.Kind(kind)] = gateway.ReceiptSupplier{Name: s.Name, Phone: s.Phone, INN: s.INN}
	}
	return r
}

// billSources are REBILL_BILL_SOURCES_FILE's sources or, without it, dev
// mode's simulated ones; outside dev mode without it, none (said in the
// log). Each source's metrics are created here, so that its series exist
// from the start.
func billSources(cfg config.Config, pool *pgxpool.Pool, log zerolog.Logger) map[enrollments.Kind]autopay.BillSource {
	sources := map[enrollments.Kind]autopay.BillSource{}
	switch {
	case len(cfg.BillSources) > 0:
		for _, s := range cfg.BillSources {
			sources[enrollments.Kind(s.Bills)] = billsource.New(billsource.Config{Name: s.Name, BaseURL: s.BaseURL, Token: s.Token,
				TLS: s.TLS, Timeout: s.Timeout, BatchSize: s.BatchSize, RateLimit: s.RateLimit, RereadWindow: s.RereadWindow})
			metrics.ZeroBillSource(s.Name, s.SilentAfter)
			log.Info().Str("source", s.Name).Str("bills", s.Bills).Msg("bill source configured")
		}
	case cfg.Dev:
		for _, kind := range []enrollments.Kind{enrollments.Housing, enrollments.Fines} {
			src := autopay.DevSource{Pool: pool, Kind: kind}
			sources[kind] = src
			metrics.ZeroBillSource(src.Info().Name, config.DefaultBillSourceSilentAfter)
		}
	default:
		log.Info().Msg("no bill sources configured (REBILL_BILL_SOURCES_FILE): bills arrive only through the API")
	}
	return sources
}

// registerAutopay adds the bill scan and pull workers, and the registry's
// when fines are posted.
func registerAutopay(workers *river.Workers, a *autopay.Autopay, poster *charges.Poster) {
	river.AddWorker(workers, &autopay.ScanWorker{Autopay: a})
	river.AddWorker(workers, &autopay.PullWorker{Autopay: a})
	if poster != nil {
		charges.RegisterPoster(workers, poster)
	}
}

// buildRegistry is the poster of fines to the state payment registry,
// balanced over REBILL_REGISTRY_FILE's gateways; without the file, in dev
// mode through the simulated gateways gmp1 and gmp2, and nil outside it
// (no fine is charged, see warnNoRegistry). The simulated book is returned
// when a gateway uses it, for the dev endpoints.
func buildRegistry(cfg config.Config, pool *pgxpool.Pool, clk clock.Clock, holds *fleet.Gateways, retry charges.RetryPolicy,
	log zerolog.Logger) (*charges.Poster, *registrysim.Sim, error) {
	var gateways []registry.Gateway
	var sim *registrysim.Sim
	var ids registry.PaymentIDs
	switch {
	case len(cfg.Registries) > 0:
		var err error
		if gateways, sim, err = registryGateways(cfg.Registries, pool, clk, log); err != nil {
			return nil, nil, err
		}
		// The file's entries agree on it (config checks).
		id := cfg.Registries[0].PaymentID
		ids = registry.PaymentIDs{Format: id.Format, BIK: id.BIK, Branch: id.Branch}
	case cfg.Dev:
		sim = &registrysim.Sim{Pool: pool, Clock: clk, Accruals: simAccruals(pool)}
		gateways = sim.Gateways()
	default:
		return nil, nil, nil
	}
	return &charges.Poster{Pool: pool, Gateways: registry.NewBalancer(gateways, cfg.GatewayTimeout), Clock: clk, Holds: holds,
		GiveUpAfter: cfg.UnavailableFor, Retry: retry, PaymentIDs: ids,
		Logger: log.With().Str("component", "registry").Logger()}, sim, nil
}

// simAccruals tells the simulated registry a fine's accrual from the
// fine's first bill in rebill's records, read by the bills' owner.
func simAccruals(pool *pgxpool.Pool) func(ctx context.Context, uin string) (registrysim.Accrual, bool, error) {
	return func(ctx context.Context, uin string) (registrysim.Accrual, bool, error) {
		b, err := enrollments.FirstCopy(ctx, pool, enrollments.Identity(enrollments.Fines, enrollments.AccountRef{}, uin))
		if errors.Is(err, enrollments.ErrBillNotFound) {
			return registrysim.Accrual{}, false, nil
		}
		if err != nil {
			return registrysim.Accrual{}, false, err
		}
		return registrysim.Accrual{Amount: b.Amount, Discounted: b.DiscountedAmount, DiscountEnds: b.DiscountEnds()}, true, nil
	}
}

// registryGateways builds the registry file's entries, each with its
// priority and timeout; the sim entries share one simulated book (config
// refuses them outside dev mode). An http entry whose TLS handshake fails
// over a certificate is logged as a warning naming it (at most once a
// minute): its postings wait until the files are fixed.
func registryGateways(entries []config.Registry, pool *pgxpool.Pool, clk clock.Clock, log zerolog.Logger) ([]registry.Gateway, *registrysim.Sim, error) {
	var simNames []string
	for _, e := range entries {
		if e.Kind == config.RegistrySim {
			simNames = append(simNames, e.Name)
		}
	}
	var sim *registrysim.Sim
	simGateways := map[string]registry.Gateway{}
	if len(simNames) > 0 {
		sim = &registrysim.Sim{Pool: pool, Clock: clk, Names: simNames, Accruals: simAccruals(pool)}
		for _, g := range sim.Gateways() {
			simGateways[g.Name()] = g
		}
	}
	out := make([]registry.Gateway, 0, len(entries))
	for _, e := range entries {
		var g registry.Gateway
		switch e.Kind {
		case config.RegistrySim:
			g = simGateways[e.Name]
		case config.RegistryHTTP:
			name := e.Name
			client, err := agentapi.New(agentapi.Options{Name: e.Name, BaseURL: e.BaseURL, TLS: e.TLS,
				BearerToken: e.Secrets[config.RegistryBearerCredential],
				OnCertificateError: func(err error) {
					log.Warn().Str("component", "registry").Str("registry", name).Err(err).
						Msg("the registry gateway's TLS handshake failed over a certificate: nothing is posted through it " +
							"until tls.client_cert_file, tls.client_key_file or tls.ca_file of REBILL_REGISTRY_FILE is fixed")
				}})
			if err != nil {
				return nil, nil, err
			}
			g = client
		default:
			return nil, nil, fmt.Errorf("registry %s: kind %q has no gateway", e.Name, e.Kind)
		}
		out = append(out, registry.WithSettings(g, registry.Settings{Priority: e.Priority, Timeout: e.Timeout}))
	}
	return out, sim, nil
}

// warnNoRegistry says at start that fines cannot be paid on this node.
func warnNoRegistry(poster *charges.Poster, log zerolog.Logger) {
	if poster == nil {
		log.Warn().Msg("no state payment registry is configured: fines enrollments are refused (409 registry-not-configured) " +
			"and fines' bills wait in awaiting_registry; no fine is authorized or captured")
	}
}

// autopayPeriodicJobs scans bills (and, with a registry, the postings to
// annul) as often as periods, and pulls the bill sources every minute.
func autopayPeriodicJobs(cfg config.Config, registryConfigured bool) []*river.PeriodicJob {
	jobs := []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(billPullInterval),
		func() (river.JobArgs, *river.InsertOpts) { return autopay.PullArgs{}, nil },
		&river.PeriodicJobOpts{ID: "bills_pull", RunOnStart: true})}
	if cfg.ScanInterval > 0 {
		jobs = append(jobs, river.NewPeriodicJob(river.PeriodicInterval(cfg.ScanInterval),
			func() (river.JobArgs, *river.InsertOpts) { return autopay.ScanArgs{}, nil },
			&river.PeriodicJobOpts{ID: "bills_scan", RunOnStart: true}))
		if registryConfigured {
			jobs = append(jobs, charges.RegistrySweepJob(cfg.ScanInterval))
		}
	}
	return jobs
}

// billsMoved pulls the bill sources and scans bills at once: the dev
// clock moved, or a bill was published. A pull already running may have
// read the sources before the change, so the pull asked for here is
// queued beside it (PullArgs.While).
func billsMoved(ctx context.Context, jobs *river.Client[pgx.Tx], log zerolog.Logger) {
	pull := autopay.PullArgs{}
	running, err := jobs.JobList(ctx, river.NewJobListParams().Kinds(pull.Kind()).States(rivertype.JobStateRunning).First(1))
	if err != nil {
		log.Error().Err(err).Msg("look for a running bill pull")
	} else if len(running.Jobs) > 0 {
		pull.While = running.Jobs[0].ID
	}
	params := []river.InsertManyParams{{Args: pull}, {Args: autopay.ScanArgs{}}, charges.RegistrySweepNow()}
	if _, err := jobs.InsertMany(ctx, params); err != nil {
		log.Error().Err(err).Msg("enqueue bill pull and scan")
	}
}

// devBillSources is what the dev endpoints publish to.
func devBillSources(a *autopay.Autopay, jobs *river.Client[pgx.Tx], log zerolog.Logger) *api.DevBillSources {
	return &api.DevBillSources{
		Publish: func(ctx context.Context, tx pgx.Tx, kind enrollments.Kind, b autopay.SourcedBill) (bool, error) {
			src, ok := a.Sources[kind].(autopay.DevSource)
			if !ok {
				return false, fmt.Errorf("no simulated %s bill source", kind)
			}
			return src.Publish(ctx, tx, b, a.Clock.Now())
		},
		Published: func(ctx context.Context) { billsMoved(ctx, jobs, log) },
	}
}

// devRegistry is the simulated registry as dev mode's endpoints reach it:
// a payment recorded outside rebill is seen by this node's next check at
// once (other nodes within charges.QuittanceMaxAge).
type devRegistry struct {
	*registrysim.Sim
	poster *charges.Poster
}

// PaidOutside records the payment in the book and forgets what the
// registry said of uin.
func (d devRegistry) PaidOutside(ctx context.Context, uin string, amount int64) (registrysim.LedgerEntry, error) {
	e, err := d.Sim.PaidOutside(ctx, uin, amount)
	if err == nil {
		d.poster.Forget(uin)
	}
	return e, err
}

// newDevRegistry is nil without a simulated registry.
func newDevRegistry(sim *registrysim.Sim, poster *charges.Poster) api.DevRegistry {
	if sim == nil || poster == nil {
		return nil
	}
	return devRegistry{Sim: sim, poster: poster}
}
