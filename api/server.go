// Package api is rebill's HTTP edge: the chi router, authentication, the
// Idempotency-Key middleware, problem+json errors and the OpenAPI
// document. A handler decodes its request, calls one use case of package
// usecases, and encodes the answer; every error reaches the client through
// one function, Server.fail (problem.go).
package api

import (
	"context"
	_ "embed"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/rebill/rebill/api/idempotency"
	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/experiments"
	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/usecases"
)

//go:embed openapi.json
var openAPIDocument []byte

// Dev is what dev mode adds: the manual clock and the simulated gateways.
type Dev struct {
	Clock *clock.Manual
	// ClockMoved is called once a clock move has committed, to scan due
	// work at once.
	ClockMoved func(ctx context.Context)
	Gateways   DevGateways
	// BillSources are the simulated bill sources (nil: none).
	BillSources *DevBillSources
	// Registry is the simulated state payment registry (nil: none).
	Registry DevRegistry
	// Zhkh is the simulated GIS ZhKH party (nil: none).
	Zhkh DevZhkh
}

// Billing is the use cases the HTTP layer calls: one per request, the
// changes inside the request's transaction so that what they enqueue
// commits with the stored response (see package usecases for the errors).
type Billing interface {
	CreateSubscription(ctx context.Context, tx pgx.Tx, caller usecases.Caller, n subscriptions.New) (subscriptions.Subscription, error)
	Subscription(ctx context.Context, caller usecases.Caller, id uuid.UUID) (subscriptions.Subscription, error)
	ListSubscriptions(ctx context.Context, caller usecases.Caller, p subscriptions.ListParams) ([]subscriptions.Subscription, error)
	Pause(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID, resumeAt *time.Time, onResume subscriptions.OnResume) (subscriptions.Subscription, error)
	Resume(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID) (subscriptions.Subscription, error)
	Cancel(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID, atPeriodEnd bool) (subscriptions.Subscription, error)
	ChangePaymentMethod(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID, pm rebilltype.PaymentMethod) (subscriptions.Subscription, error)
	UpdateSubscription(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID, u subscriptions.Update) (subscriptions.Subscription, error)
	RemovePendingUpdate(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID) (subscriptions.Subscription, error)
	EndTrial(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID) (subscriptions.Subscription, error)
	Events(ctx context.Context, caller usecases.Caller, id uuid.UUID, after int64, limit int) ([]subscriptions.Event, error)
	SubscriptionCharges(ctx context.Context, caller usecases.Caller, id, before uuid.UUID, limit int) ([]charges.Charge, error)
	Charge(ctx context.Context, caller usecases.Caller, id uuid.UUID) (charges.Charge, error)
	ReviewQueue(ctx context.Context, after *charges.ReviewCursor, limit int) ([]charges.Charge, error)
	ResolveCharge(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID, r charges.Resolution) (charges.Charge, error)
	RetryCharge(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID) (charges.Charge, error)
	RefundCharge(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID, in usecases.RefundInput) (charges.Refund, error)
	ChargeRefunds(ctx context.Context, caller usecases.Caller, id uuid.UUID, after int64, limit int) ([]charges.Refund, error)
	PublishedEvents(ctx context.Context, caller usecases.Caller, p notify.ListParams) ([]notify.Event, error)
	PublishedEvent(ctx context.Context, caller usecases.Caller, id uuid.UUID) (notify.Event, error)
}

// Keys authenticates API keys and issues new ones.
type Keys interface {
	// Authenticate returns apikeys.ErrUnauthenticated for a key rebill did
	// not issue.
	Authenticate(ctx context.Context, token string) (apikeys.Key, error)
	// Create returns rebilltype.Errors for a bad role or customer id.
	Create(ctx context.Context, tx pgx.Tx, role, customerID string) (apikeys.Created, error)
}

// Deps lists everything the HTTP layer depends on.
type Deps struct {
	Keys        Keys
	Idempotency *idempotency.Store
	Billing     Billing
	// Ready reports whether the database answers (GET /readyz).
	Ready func(ctx context.Context) error
	// KnownGateway reports whether a dev endpoint may name gateway.
	KnownGateway func(name string) bool
	// Gateways are the configured gateways with this node's view of
	// their health (GET /v1/gateways, GET /v1/routing/binding).
	Gateways *fleet.Gateways
	Dev      *Dev // nil outside dev mode: /v1/dev/* answers 404
	Logger   zerolog.Logger
	// Webhooks are the webhook endpoints' use cases (admin changes them,
	// support and admin read them).
	Webhooks *notify.Webhooks
	// MetricsElsewhere: /metrics has a listener of its own
	// (REBILL_METRICS_ADDR), so this handler does not serve it; otherwise
	// it serves every family but the internal-only ones (experiments).
	MetricsElsewhere bool
	// Autopay is the enrollments' use cases (nil: no /v1/enrollments).
	Autopay Autopay
	// Clock is the service clock (bills' amount_due is read at its now).
	Clock clock.Clock
	// Reconciliation and Reports are the operators' reads (support, admin).
	Reconciliation Reconciliation
	Reports        Reports
	// RiverUI is River's job console, served under /riverui/ to staff
	// (see riverUI); nil leaves the paths out.
	RiverUI http.Handler
	// Experiments are the billing-policy experiments' reports (nil: none
	// configured).
	Experiments Experiments
	// ExperimentSet picks the routing arm of a binding whose customer is
	// named (nil: no experiments).
	ExperimentSet *experiments.Set
	// Zhkh is the GIS ZhKH reports' reads and reviews (nil: no party
	// configured, the paths are left out).
	Zhkh ZhkhReports
	// Console is the support console, served under /console/ (nil leaves
	// the path out). It authenticates with a session cookie of its own,
	// which nothing else here accepts.
	Console http.Handler
}

// Server is the HTTP handler of rebill.
type Server struct {
	Deps
	mux *chi.Mux
}

// NewServer builds the router over deps.
func NewServer(deps Deps) *Server {
	s := &Server{Deps: deps}
	s.mux = s.routes()
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) routes() *chi.Mux {
	r := chi.NewRouter()
	r.Use(requestIDs, s.logRequests, s.recoverPanics, routeOnEscapedPath, headAsGet)
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) { writeProblem(w, problemNotFound) })
	r.MethodNotAllowed(methodNotAllowed)

	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", s.readyz)
	if !s.MetricsElsewhere {
		r.Method(http.MethodGet, "/metrics", metrics.PublicHandler())
	}
	r.Get("/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openAPIDocument)
	})

	idem := idempotency.Middleware(s.Idempotency,
		func(r *http.Request) string { return principalFrom(r.Context()).IdempotencyScope() },
		idempotency.Problems{
			Write: func(w http.ResponseWriter, status int, slug, title, detail string) {
				writeProblem(w, newProblem(status, slug, title, detail))
			},
			BodyTooLarge: func(w http.ResponseWriter) { writeProblem(w, problemBodyTooLarge) },
			Unavailable: func(w http.ResponseWriter) {
				w.Header().Set("Retry-After", "1")
				writeProblem(w, problemUnavailable)
			},
			InternalFailed: func(w http.ResponseWriter) { writeProblem(w, problemInternal) },
		}, s.Logger)

	if s.RiverUI != nil {
		r.Get("/riverui", redirectToRiverUI)
		r.Handle("/riverui/*", s.riverUI(s.RiverUI))
	}
	if s.Console != nil {
		r.Handle("/console", s.Console)
		r.Handle("/console/*", s.Console)
	}

	r.Group(func(r chi.Router) {
		r.Use(unescapePathParams, s.authenticate, s.singleQueryValues, refuseCardNumbers, idem)

		r.With(requireRole(apikeys.Admin)).Post("/v1/api-keys", s.createAPIKey)

		r.Post("/v1/subscriptions", s.createSubscription)
		r.Get("/v1/subscriptions", s.listSubscriptions)
		r.Get("/v1/subscriptions/{id}", s.getSubscription)
		r.Post("/v1/subscriptions/{id}/pause", s.pauseSubscription)
		r.Post("/v1/subscriptions/{id}/resume", s.resumeSubscription)
		r.Post("/v1/subscriptions/{id}/cancel", s.cancelSubscription)
		r.Post("/v1/subscriptions/{id}/payment-method", s.changePaymentMethod)
		r.Post("/v1/subscriptions/{id}/update", s.updateSubscription)
		r.Post("/v1/subscriptions/{id}/pending_update/remove", s.removePendingUpdate)
		r.Get("/v1/subscriptions/{id}/events", s.listEvents)
		r.Get("/v1/subscriptions/{id}/charges", s.listSubscriptionCharges)

		r.Get("/v1/charges/{id}", s.getCharge)
		r.Get("/v1/events", s.listPublishedEvents)
		r.Get("/v1/events/{id}", s.getPublishedEvent)

		staff := r.With(requireRole(apikeys.Admin, apikeys.Support))
		admin := r.With(requireRole(apikeys.Admin))
		admin.Post("/v1/webhook-endpoints", s.createWebhookEndpoint)
		staff.Get("/v1/webhook-endpoints", s.listWebhookEndpoints)
		staff.Get("/v1/webhook-endpoints/{id}", s.getWebhookEndpoint)
		admin.Post("/v1/webhook-endpoints/{id}/disable", s.setWebhookEndpointStatus(notify.Disabled))
		admin.Post("/v1/webhook-endpoints/{id}/enable", s.setWebhookEndpointStatus(notify.Enabled))
		staff.Get("/v1/webhook-endpoints/{id}/deliveries", s.listDeliveries)
		admin.Post("/v1/webhook-endpoints/{id}/redeliver", s.redeliver)
		admin.Post("/v1/webhook-endpoints/{id}/roll-secret", s.rollWebhookSecret)
		staff.Get("/v1/reconciliation", s.getReconciliation)
		staff.Get("/v1/reports/daily", s.getDailyReport)
		r.With(requireRole(apikeys.Admin, apikeys.Support)).Get("/v1/review-queue", s.reviewQueue)
		r.With(requireRole(apikeys.Admin, apikeys.Support)).Post("/v1/charges/{id}/resolve", s.resolveCharge)
		r.With(requireRole(apikeys.Admin, apikeys.Support)).Post("/v1/charges/{id}/retry", s.retryCharge)
		staff.Post("/v1/charges/{id}/refunds", s.refundCharge)
		r.Get("/v1/charges/{id}/refunds", s.listChargeRefunds)
		s.enrollmentRoutes(r)
		s.zhkhRoutes(staff)
		staff.Get("/v1/gateways", s.listGateways)
		staff.Get("/v1/experiments", s.listExperiments)
		staff.Get("/v1/experiments/{key}", s.getExperiment)
		r.Get("/v1/routing/binding", s.routeBinding)

		if s.Dev != nil {
			// The clock and the simulated gateways are shared by every
			// client, and a ledger lists every customer's operations: only
			// staff change or read them. The time is no secret, and a
			// customer needs it to pick a billing_anchor.
			r.Get("/v1/dev/clock", s.getDevClock)
			staff := r.With(requireRole(apikeys.Admin, apikeys.Support))
			staff.Post("/v1/dev/clock", s.setDevClock)
			staff.Get("/v1/dev/gateways/{name}/ledger", s.gatewayLedger)
			staff.Post("/v1/dev/gateways/{name}/faults", s.gatewayFaults)
		}
	})
	return r
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.Ready(ctx); err != nil {
		w.Header().Set("Retry-After", "1")
		writeProblem(w, problemUnavailable)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

type logKeyIDKey struct{}

// setLogKeyID tells the request logger which API key made the request.
func setLogKeyID(ctx context.Context, id string) {
	if holder, ok := ctx.Value(logKeyIDKey{}).(*atomic.Value); ok {
		holder.Store(id)
	}
}

// logRequests writes one line per request and records its metrics: ids,
// route pattern, status and latency; never bodies, keys or card data.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		keyID := &atomic.Value{}
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r.WithContext(context.WithValue(r.Context(), logKeyIDKey{}, keyID)))

		elapsed := time.Since(start)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		statusText := strconv.Itoa(status)
		method := metricMethod(r.Method)
		metrics.HTTPRequests.WithLabelValues(route, method, statusText).Inc()
		metrics.HTTPDuration.WithLabelValues(route, method, statusText).Observe(elapsed.Seconds())
		if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
			span.SetName(method + " " + route)
			span.SetAttributes(attribute.String("http.route", route))
		}

		event := s.Logger.Info()
		if status >= 500 {
			event = s.Logger.Error()
		}
		id, _ := keyID.Load().(string)
		event.Str("request_id", middleware.GetReqID(r.Context())).
			Str("method", r.Method).
			Str("route", route).
			Int("status", status).
			Dur("latency", elapsed).
			Str("api_key_id", id).
			Bool("replayed", ww.Header().Get(idempotency.ReplayedHeader) == "true").
			Msg("request")
	})
}

func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.Logger.Error().Str("request_id", middleware.GetReqID(r.Context())).Interface("panic", v).Msg("handler panicked")
				writeProblem(w, problemInternal)
			}
		}()
		next.ServeHTTP(w, r)
	})
}
