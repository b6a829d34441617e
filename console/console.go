// Package console is the support console: server-rendered pages under
// /console/ where support staff and admins find a customer's
// subscriptions, enrollments and charges, act on them, work the review
// queue, watch operations and read the billing-policy experiments'
// results. It is an HTTP layer beside package api, not part of the JSON
// API: it calls the same use cases (package usecases) with the logged-in
// key as the actor, so a support key can do here exactly what the API lets
// it do.
//
// A session is a random id in an HttpOnly, SameSite=Strict cookie; only a
// hash of it is stored, in PostgreSQL (console_sessions), so every node
// shares it. It authenticates /console/ only. Every state change is a POST
// carrying the session's CSRF token and a form_id that makes it act once
// (console_actions). See docs/console.md.
package console

import (
	"context"
	"embed"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/books"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/experiments"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/reports"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/usecases"
)

// Keys authenticates API keys, at login by the key and afterwards by the
// fingerprint the session keeps (package apikeys).
type Keys interface {
	Authenticate(ctx context.Context, token string) (apikeys.Key, error)
	ByFingerprint(ctx context.Context, sum []byte) (apikeys.Key, error)
}

// Billing is the subscription and charge use cases the console calls
// (package usecases), the same the API calls.
type Billing interface {
	Subscription(ctx context.Context, caller usecases.Caller, id uuid.UUID) (subscriptions.Subscription, error)
	ListSubscriptions(ctx context.Context, caller usecases.Caller, p subscriptions.ListParams) ([]subscriptions.Subscription, error)
	Pause(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID, resumeAt *time.Time, onResume subscriptions.OnResume) (subscriptions.Subscription, error)
	Resume(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID) (subscriptions.Subscription, error)
	EndTrial(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID) (subscriptions.Subscription, error)
	Cancel(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID, atPeriodEnd bool) (subscriptions.Subscription, error)
	UpdateSubscription(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID, u subscriptions.Update) (subscriptions.Subscription, error)
	RemovePendingUpdate(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID) (subscriptions.Subscription, error)
	Events(ctx context.Context, caller usecases.Caller, id uuid.UUID, after int64, limit int) ([]subscriptions.Event, error)
	SubscriptionCharges(ctx context.Context, caller usecases.Caller, id, before uuid.UUID, limit int) ([]charges.Charge, error)
	Charge(ctx context.Context, caller usecases.Caller, id uuid.UUID) (charges.Charge, error)
	ReviewQueue(ctx context.Context, after *charges.ReviewCursor, limit int) ([]charges.Charge, error)
	ResolveCharge(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID, r charges.Resolution) (charges.Charge, error)
	RetryCharge(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID) (charges.Charge, error)
	RefundCharge(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID, in usecases.RefundInput) (charges.Refund, error)
}

// Autopay is the enrollments' use cases (package usecases).
type Autopay interface {
	Enrollment(ctx context.Context, caller usecases.Caller, id uuid.UUID) (enrollments.Enrollment, error)
	ListEnrollments(ctx context.Context, caller usecases.Caller, p enrollments.ListParams) ([]enrollments.Enrollment, error)
	Bills(ctx context.Context, caller usecases.Caller, id, before uuid.UUID, limit int) ([]enrollments.Bill, error)
	Bill(ctx context.Context, caller usecases.Caller, id uuid.UUID, billID string) (enrollments.Bill, error)
	ConfirmBill(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID, billID string) (enrollments.Bill, error)
	WithdrawBill(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID, billID string) (enrollments.Bill, error)
	EnrollmentCharges(ctx context.Context, caller usecases.Caller, id, before uuid.UUID, limit int) ([]charges.Charge, error)
}

// Reconciliation reads the daily reconciliation's results.
type Reconciliation interface {
	Day(ctx context.Context, gateway string, day time.Time) (books.Result, error)
	// Known reports whether gateway is one rebill reconciles.
	Known(gateway string) bool
}

// Reports builds the daily financial report.
type Reports interface {
	Daily(ctx context.Context, day time.Time) (reports.Daily, error)
}

// Experiments reads the billing-policy experiments' reports (package
// experiments), the same the API serves to staff.
type Experiments interface {
	List(ctx context.Context) ([]experiments.Report, error)
	// Get returns an error with code fault.NotFound for a key not in the
	// file (experiments.ErrNotFound).
	Get(ctx context.Context, key string) (experiments.Report, error)
}

// Defaults of Options.
const (
	DefaultIdleTimeout = 30 * time.Minute
	DefaultMaxAge      = 12 * time.Hour
)

// Options is what the console depends on.
type Options struct {
	// Pool holds the sessions and the console's action records, and runs
	// each action's transaction.
	Pool     *pgxpool.Pool
	Keys     Keys
	Billing  Billing
	Autopay  Autopay // nil: enrollments are not shown
	Gateways *fleet.Gateways
	// Reconciliation and Reports may be nil (not shown).
	Reconciliation Reconciliation
	Reports        Reports
	// Experiments may be nil: the Experiments page then says none is
	// configured.
	Experiments Experiments
	// Clock is the service clock: when actions happen, what "today" is.
	Clock  clock.Clock
	Logger zerolog.Logger
	// IdleTimeout and MaxAge end a session (0: the defaults). They run on
	// Now, real time, not the service clock: moving dev mode's clock a
	// month ahead must not log everyone out.
	IdleTimeout time.Duration
	MaxAge      time.Duration
	Now         func() time.Time // nil: the wall clock
	// TrustProxy: a request with X-Forwarded-Proto: https came over HTTPS
	// through the operator's proxy (the cookie is then Secure), and the
	// client's address is the last X-Forwarded-For entry.
	TrustProxy bool
	// RiverUI: /riverui/ is served, so Operations links to it.
	RiverUI bool
	// Sleep waits before answering a login from an address and key prefix
	// that failed before (nil: a timer honouring ctx).
	Sleep func(ctx context.Context, d time.Duration) error
}

// Handler serves /console/.
type Handler struct {
	opts     Options
	mux      *chi.Mux
	throttle *throttle
}

// New builds the console over opts.
func New(opts Options) *Handler {
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = DefaultMaxAge
	}
	if opts.Now == nil {
		opts.Now = clock.Wall{}.Now
	}
	if opts.Clock == nil {
		opts.Clock = clock.Wall{}
	}
	if opts.Sleep == nil {
		opts.Sleep = sleep
	}
	parsed() // a template that does not parse fails at start, not on a page
	h := &Handler{opts: opts, throttle: newThrottle(opts.Now)}
	h.mux = h.routes()
	return h
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ServeHTTP routes on the full path: a router mounting the console passes
// its own route context, which is dropped here.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r = r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, (*chi.Context)(nil)))
	h.mux.ServeHTTP(w, r)
}

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

func (h *Handler) routes() *chi.Mux {
	r := chi.NewRouter()
	r.Use(securityHeaders, routeOnEscapedPath, middleware.GetHead)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		h.renderError(w, r, nil, http.StatusNotFound, "No such page.")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		h.renderError(w, r, nil, http.StatusMethodNotAllowed, "This page does not take that method.")
	})
	r.Get("/console", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/console/", http.StatusMovedPermanently)
	})
	r.Handle("/console/static/*", http.StripPrefix("/console/", http.FileServerFS(staticFiles)))
	r.Get("/console/login", h.loginPage)
	r.Post("/console/login", h.login)

	r.Group(func(r chi.Router) {
		r.Use(h.unescapeParams, h.requireSession, h.checkForm)
		r.Get("/console/", h.home)
		r.Get("/console/search", h.search)
		r.Get("/console/subscriptions/{id}", h.subscription)
		r.Post("/console/subscriptions/{id}/pause", h.pause)
		r.Post("/console/subscriptions/{id}/resume", h.resume)
		r.Post("/console/subscriptions/{id}/end-trial", h.endTrial)
		r.Get("/console/subscriptions/{id}/cancel", h.cancelPage)
		r.Post("/console/subscriptions/{id}/cancel", h.cancel)
		r.Post("/console/subscriptions/{id}/update", h.changeSubscription)
		r.Post("/console/subscriptions/{id}/pending_update/remove", h.removePendingChange)
		r.Get("/console/charges/{id}", h.charge)
		r.Post("/console/charges/{id}/retry", h.retry)
		r.Post("/console/charges/{id}/resolve", h.resolve)
		r.Post("/console/charges/{id}/refund", h.refund)
		r.Get("/console/review", h.review)
		r.Get("/console/enrollments/{id}", h.enrollment)
		r.Post("/console/enrollments/{id}/bills/{bill}/confirm", h.confirmBill)
		r.Post("/console/enrollments/{id}/bills/{bill}/withdraw", h.withdrawBill)
		r.Get("/console/operations", h.operations)
		r.Get("/console/experiments", h.experimentsList)
		r.Get("/console/experiments/{key}", h.experiment)
		r.Get("/console/settings", h.settingsPage)
		r.Post("/console/settings", h.settings)
		r.Post("/console/logout", h.logout)
		r.With(h.adminOnly).Get("/console/sessions", h.sessions)
		r.With(h.adminOnly).Post("/console/sessions/{key}/end", h.endSessions)
	})
	return r
}

// routeOnEscapedPath makes the router match r.URL.EscapedPath(), as the
// API does: chi matches RawPath when the URL has one and Path otherwise,
// and Go keeps RawPath only for a non-canonical encoding, so an id holding
// "%2F" would be matched escaped and one holding a space or "%41"
// decoded (and then decoded again). On the escaped path each segment is
// matched as sent and unescapeParams decodes it exactly once.
func routeOnEscapedPath(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.RoutePath == "" {
			rctx.RoutePath = r.URL.EscapedPath()
		}
		next.ServeHTTP(w, r)
	})
}

// unescapeParams decodes each path parameter of the matched route once,
// so that handlers read the id the page escaped (seg); a parameter that
// does not decode names nothing.
func (h *Handler) unescapeParams(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rctx := chi.RouteContext(r.Context()); rctx != nil {
			for i := range rctx.URLParams.Keys {
				v, err := url.PathUnescape(rctx.URLParams.Values[i])
				if err != nil {
					h.renderError(w, r, nil, http.StatusNotFound, "No such page.")
					return
				}
				rctx.URLParams.Values[i] = v
			}
		}
		next.ServeHTTP(w, r)
	})
}

// csp allows no script at all and nothing from elsewhere.
const csp = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", csp)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "same-origin")
		// Pages show customers' data: no copy in shared or browser caches.
		hd.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}
