package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/internal/validate"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
)

// Limits on free-form fields (Stripe's, for metadata).
const (
	maxCustomerID    = 255
	maxDescription   = 500
	maxMetadataKeys  = 50
	maxMetadataKey   = 40
	maxMetadataValue = 500
	maxToken         = 255
	maxBrand         = 32
	maxAmount        = 999_999_999_999 // minor units; far above any real charge
	maxIntervalCount = 365
	// anchorHorizonYears bounds how far ahead of the service clock an
	// anchor may be: further is a typo, and near year 9999 the periods
	// cannot be written as RFC 3339 at all.
	anchorHorizonYears = 10
)

type periodJSON struct {
	Key   string    `json:"key"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

type pauseJSON struct {
	PausedAt time.Time  `json:"paused_at"`
	ResumeAt *time.Time `json:"resume_at"`
}

type paymentMethodJSON struct {
	Gateway  string  `json:"gateway"`
	Brand    *string `json:"brand"`
	Last4    *string `json:"last4"`
	ExpMonth int     `json:"exp_month"`
	ExpYear  int     `json:"exp_year"`
}

type subscriptionJSON struct {
	ID                uuid.UUID         `json:"id"`
	CustomerID        string            `json:"customer_id"`
	Status            string            `json:"status"`
	Amount            int64             `json:"amount"`
	Currency          string            `json:"currency"`
	Interval          string            `json:"interval"`
	IntervalCount     int               `json:"interval_count"`
	TimeZone          string            `json:"timezone"`
	BillingAnchor     time.Time         `json:"billing_anchor"`
	CurrentPeriod     periodJSON        `json:"current_period"`
	NextChargeAt      *time.Time        `json:"next_charge_at"`
	CancelAtPeriodEnd bool              `json:"cancel_at_period_end"`
	Pause             *pauseJSON        `json:"pause"`
	PaymentMethod     paymentMethodJSON `json:"payment_method"`
	Description       *string           `json:"description"`
	Metadata          map[string]string `json:"metadata"`
	CreatedAt         time.Time         `json:"created_at"`
	UpdatedAt         time.Time         `json:"updated_at"`
	CancelledAt       *time.Time        `json:"cancelled_at"`
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func toSubscriptionJSON(s subscriptions.Subscription) subscriptionJSON {
	p := s.CurrentPeriod()
	out := subscriptionJSON{
		ID: s.ID, CustomerID: s.CustomerID, Status: string(s.Status), Amount: s.Amount, Currency: s.Currency,
		Interval: string(s.Interval), IntervalCount: s.IntervalCount, TimeZone: s.TimeZone,
		BillingAnchor:     s.BillingAnchor,
		CurrentPeriod:     periodJSON{Key: p.Key, Start: p.Start, End: p.End},
		CancelAtPeriodEnd: s.CancelAtPeriodEnd,
		PaymentMethod: paymentMethodJSON{
			Gateway: s.PaymentMethod.Gateway, Brand: optional(s.PaymentMethod.Brand), Last4: optional(s.PaymentMethod.Last4),
			ExpMonth: s.PaymentMethod.ExpMonth, ExpYear: s.PaymentMethod.ExpYear,
		},
		Description: optional(s.Description), Metadata: s.Metadata,
		CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, CancelledAt: utcPtr(s.CancelledAt),
	}
	if s.Status != subscriptions.Cancelled && s.Status != subscriptions.Paused && s.Status != subscriptions.Unpaid {
		next := s.NextChargeAt
		out.NextChargeAt = &next
	}
	if s.PausedAt != nil {
		out.Pause = &pauseJSON{PausedAt: s.PausedAt.UTC(), ResumeAt: utcPtr(s.ResumeAt)}
	}
	return out
}

type paymentMethodRequest struct {
	Gateway  string `json:"gateway"`
	Token    string `json:"token"`
	Brand    string `json:"brand"`
	Last4    string `json:"last4"`
	ExpMonth int    `json:"exp_month"`
	ExpYear  int    `json:"exp_year"`
}

type createSubscriptionRequest struct {
	CustomerID    string                `json:"customer_id"`
	Amount        int64                 `json:"amount"`
	Currency      string                `json:"currency"`
	Interval      string                `json:"interval"`
	IntervalCount *int                  `json:"interval_count"`
	TimeZone      *string               `json:"timezone"`
	BillingAnchor *time.Time            `json:"billing_anchor"`
	PaymentMethod *paymentMethodRequest `json:"payment_method"`
	Description   string                `json:"description"`
	Metadata      map[string]string     `json:"metadata"`
}

// fieldErrors collects validation failures so a client sees all of them.
type fieldErrors []validate.FieldError

func (f *fieldErrors) add(field, format string, args ...any) {
	*f = append(*f, validate.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

func (s *Server) validatePaymentMethod(errs *fieldErrors, prefix string, pm *paymentMethodRequest, now time.Time) subscriptions.PaymentMethod {
	if pm == nil {
		errs.add(prefix, "is required")
		return subscriptions.PaymentMethod{}
	}
	f := func(name string) string {
		if prefix == "" {
			return name
		}
		return prefix + "." + name
	}
	switch {
	case pm.Gateway == "":
		errs.add(f("gateway"), "is required")
	case !s.KnownGateway(pm.Gateway):
		errs.add(f("gateway"), "unknown gateway %q", pm.Gateway)
	}
	if pm.Token == "" {
		errs.add(f("token"), "is required")
	} else if len(pm.Token) > maxToken || !printableASCII(pm.Token) {
		errs.add(f("token"), "must be 1..%d printable ASCII characters", maxToken)
	}
	if len(pm.Brand) > maxBrand {
		errs.add(f("brand"), "must be at most %d characters", maxBrand)
	}
	if pm.Last4 != "" && !fourDigits(pm.Last4) {
		errs.add(f("last4"), "must be exactly 4 digits")
	}
	if pm.ExpMonth < 1 || pm.ExpMonth > 12 {
		errs.add(f("exp_month"), "must be 1..12")
	}
	if pm.ExpYear < 2000 || pm.ExpYear > 2200 {
		errs.add(f("exp_year"), "must be a four-digit year")
	}
	out := subscriptions.PaymentMethod{Gateway: pm.Gateway, Token: pm.Token, Brand: pm.Brand, Last4: pm.Last4,
		ExpMonth: pm.ExpMonth, ExpYear: pm.ExpYear}
	if pm.ExpMonth >= 1 && pm.ExpMonth <= 12 && out.Expired(now) {
		errs.add(f("exp_year"), "the card expired in %02d/%d", pm.ExpMonth, pm.ExpYear)
	}
	return out
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func fourDigits(s string) bool {
	if len(s) != 4 {
		return false
	}
	for i := 0; i < 4; i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func validateMetadata(errs *fieldErrors, meta map[string]string) {
	if len(meta) > maxMetadataKeys {
		errs.add("metadata", "at most %d keys", maxMetadataKeys)
	}
	for k, v := range meta {
		if k == "" || utf8.RuneCountInString(k) > maxMetadataKey {
			errs.add("metadata", "keys must be 1..%d characters", maxMetadataKey)
		}
		if utf8.RuneCountInString(v) > maxMetadataValue {
			errs.add("metadata."+k, "must be at most %d characters", maxMetadataValue)
		}
	}
}

// decodeBody reads a JSON request body strictly, refusing card numbers in
// any field. It writes the 400 itself and returns false on failure.
func decodeBody(w http.ResponseWriter, r *http.Request, dst any) bool {
	body, err := validate.ReadBody(r.Body)
	if errors.Is(err, validate.ErrBodyTooLarge) {
		writeProblem(w, problemBodyTooLarge)
		return false
	}
	if err != nil {
		writeProblem(w, fieldProblem("", "the body could not be read"))
		return false
	}
	if field, found := validate.FindCardNumber(body); found {
		p := newProblem(http.StatusBadRequest, "card-number-refused", "Card number refused",
			"A field contains what looks like a card number. rebill accepts only payment tokens from a gateway.")
		p.Errors = []validate.FieldError{{Field: field, Message: "looks like a card number"}}
		writeProblem(w, p)
		return false
	}
	var decodeErr *validate.DecodeError
	if err := validate.Decode(body, dst); errors.As(err, &decodeErr) {
		writeProblem(w, validationProblem(decodeErr.Errors...))
		return false
	} else if err != nil {
		writeProblem(w, fieldProblem("", err.Error()))
		return false
	}
	return true
}

func (s *Server) createSubscription(w http.ResponseWriter, r *http.Request) {
	var req createSubscriptionRequest
	if !decodeBody(w, r, &req) {
		return
	}
	now := s.Clock.Now()
	var errs fieldErrors
	if req.CustomerID == "" || len(req.CustomerID) > maxCustomerID || !printableASCII(req.CustomerID) {
		errs.add("customer_id", "must be 1..%d printable ASCII characters", maxCustomerID)
	}
	if req.Amount <= 0 || req.Amount > maxAmount {
		errs.add("amount", "must be an integer number of minor units between 1 and %d", int64(maxAmount))
	}
	if _, ok := validate.Currency(req.Currency); !ok {
		errs.add("currency", "must be an active ISO 4217 code in upper case, e.g. USD")
	}
	interval, err := period.ParseInterval(req.Interval)
	if err != nil {
		errs.add("interval", "must be one of day, week, month, quarter, year")
	}
	count := 1
	if req.IntervalCount != nil {
		count = *req.IntervalCount
		if count < 1 || count > maxIntervalCount {
			errs.add("interval_count", "must be 1..%d", maxIntervalCount)
		}
	}
	zone := "UTC"
	if req.TimeZone != nil {
		zone = *req.TimeZone
		if _, err := validate.TimeZone(zone); err != nil {
			errs.add("timezone", "must be an IANA time zone name, e.g. Europe/Moscow")
		}
	}
	switch {
	case req.BillingAnchor == nil:
	case req.BillingAnchor.Before(now.Truncate(time.Second)):
		errs.add("billing_anchor", "must not be in the past (now is %s)", now.Format(time.RFC3339))
	case req.BillingAnchor.After(now.AddDate(anchorHorizonYears, 0, 0)):
		errs.add("billing_anchor", "must be at most %d years ahead (now is %s)", anchorHorizonYears, now.Format(time.RFC3339))
	}
	pm := s.validatePaymentMethod(&errs, "payment_method", req.PaymentMethod, now)
	if utf8.RuneCountInString(req.Description) > maxDescription {
		errs.add("description", "must be at most %d characters", maxDescription)
	}
	validateMetadata(&errs, req.Metadata)
	if len(errs) > 0 {
		writeProblem(w, validationProblem(errs...))
		return
	}
	p := principalFrom(r.Context())
	if !p.canSee(req.CustomerID) {
		writeProblem(w, newProblem(http.StatusForbidden, "forbidden", "Forbidden", "A customer key can only create its own subscriptions."))
		return
	}
	tx, ok := requestTx(w, r)
	if !ok {
		return
	}
	sub, err := s.Subscriptions.Create(r.Context(), tx, subscriptions.New{
		CustomerID: req.CustomerID, Amount: req.Amount, Currency: req.Currency, Interval: interval,
		IntervalCount: count, TimeZone: zone, BillingAnchor: req.BillingAnchor, PaymentMethod: pm,
		Description: req.Description, Metadata: req.Metadata,
	}, p.Actor())
	if err == nil {
		sub, err = s.Billing.Due(r.Context(), tx, sub)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/subscriptions/"+sub.ID.String())
	writeJSON(w, http.StatusCreated, toSubscriptionJSON(sub))
}

// errNotCanonical: an id that uuid.Parse reads but that is not the form
// this API writes.
var errNotCanonical = errors.New("not a canonical lower-case hyphenated uuid")

// parseID reads an id from a URL or a cursor. Only the form the API writes
// (36 characters, lower case, hyphenated) is an id: uuid.Parse also takes
// braces, urn:uuid:, upper case and no hyphens, which would give one object
// many URLs, and so many keys in caches, logs and rate limits.
func parseID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.UUID{}, err
	}
	if id.String() != s {
		return uuid.UUID{}, errNotCanonical
	}
	return id, nil
}

// loadVisible reads a subscription that the principal may see, locking it
// when tx is a transaction. It writes the 404 itself and returns false.
func (s *Server) loadVisible(w http.ResponseWriter, r *http.Request, db subscriptions.DBTX) (subscriptions.Subscription, bool) {
	id, err := parseID(chi.URLParam(r, "id"))
	if err != nil {
		writeProblem(w, problemNotFound)
		return subscriptions.Subscription{}, false
	}
	sub, err := s.Subscriptions.Get(r.Context(), db, id)
	if errors.Is(err, subscriptions.ErrNotFound) || (err == nil && !principalFrom(r.Context()).canSee(sub.CustomerID)) {
		writeProblem(w, problemNotFound)
		return subscriptions.Subscription{}, false
	}
	if err != nil {
		s.fail(w, r, err)
		return subscriptions.Subscription{}, false
	}
	return sub, true
}

func (s *Server) getSubscription(w http.ResponseWriter, r *http.Request) {
	if sub, ok := s.loadVisible(w, r, s.Pool); ok {
		writeJSON(w, http.StatusOK, toSubscriptionJSON(sub))
	}
}

type listJSON[T any] struct {
	Data       []T     `json:"data"`
	NextCursor *string `json:"next_cursor"`
}

// pageParams parses ?limit= and ?cursor=; it writes the 400 itself.
func pageParams(w http.ResponseWriter, r *http.Request) (limit int, cursor string, ok bool) {
	limit = 20
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeProblem(w, fieldProblem("limit", "must be an integer 1..100"))
			return 0, "", false
		}
		limit = n
	}
	if v := r.URL.Query().Get("cursor"); v != "" {
		raw, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil || len(raw) == 0 {
			writeProblem(w, fieldProblem("cursor", "is not a cursor this API returned"))
			return 0, "", false
		}
		cursor = string(raw)
	}
	return limit, cursor, true
}

func encodeCursor(s string) *string {
	c := base64.RawURLEncoding.EncodeToString([]byte(s))
	return &c
}

func (s *Server) listSubscriptions(w http.ResponseWriter, r *http.Request) {
	limit, cursor, ok := pageParams(w, r)
	if !ok {
		return
	}
	params := subscriptions.ListParams{CustomerID: r.URL.Query().Get("customer_id"), Limit: limit + 1}
	if strings.ContainsRune(params.CustomerID, 0) {
		// PostgreSQL refuses NUL in text; no customer id holds one.
		writeProblem(w, fieldProblem("customer_id", `must not contain the NUL character (\u0000)`))
		return
	}
	if cursor != "" {
		id, err := parseID(cursor)
		if err != nil {
			writeProblem(w, fieldProblem("cursor", "is not a cursor this API returned"))
			return
		}
		params.Before = id
	}
	if st := r.URL.Query().Get("status"); st != "" {
		switch subscriptions.Status(st) {
		case subscriptions.Active, subscriptions.Paused, subscriptions.PastDue, subscriptions.Unpaid, subscriptions.Cancelled:
			params.Status = subscriptions.Status(st)
		default:
			writeProblem(w, fieldProblem("status", "must be one of active, paused, past_due, unpaid, cancelled"))
			return
		}
	}
	p := principalFrom(r.Context())
	if p.Role == RoleCustomer {
		if params.CustomerID != "" && params.CustomerID != p.CustomerID {
			writeProblem(w, newProblem(http.StatusForbidden, "forbidden", "Forbidden", "A customer key can only list its own subscriptions."))
			return
		}
		params.CustomerID = p.CustomerID
	}
	subs, err := s.Subscriptions.List(r.Context(), s.Pool, params)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := listJSON[subscriptionJSON]{Data: []subscriptionJSON{}}
	for i, sub := range subs {
		if i == limit {
			out.NextCursor = encodeCursor(subs[i-1].ID.String())
			break
		}
		out.Data = append(out.Data, toSubscriptionJSON(sub))
	}
	writeJSON(w, http.StatusOK, out)
}

type pauseRequest struct {
	ResumeAt *time.Time `json:"resume_at"`
}

type cancelRequest struct {
	AtPeriodEnd bool `json:"at_period_end"`
}

type transitionFunc func(ctx context.Context, tx pgx.Tx, sub subscriptions.Subscription, actor subscriptions.Actor) (subscriptions.Subscription, bool, error)

// transition runs a state change on a subscription the principal may see,
// inside the request's idempotent transaction.
func (s *Server) transition(w http.ResponseWriter, r *http.Request, change transitionFunc) {
	tx, ok := requestTx(w, r)
	if !ok {
		return
	}
	sub, ok := s.loadVisible(w, r, tx)
	if !ok {
		return
	}
	updated, _, err := change(r.Context(), tx, sub, principalFrom(r.Context()).Actor())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toSubscriptionJSON(updated))
}

func (s *Server) pauseSubscription(w http.ResponseWriter, r *http.Request) {
	var req pauseRequest
	if !decodeBody(w, r, &req) {
		return
	}
	s.transition(w, r, func(ctx context.Context, tx pgx.Tx, sub subscriptions.Subscription, actor subscriptions.Actor) (subscriptions.Subscription, bool, error) {
		return s.Subscriptions.Pause(ctx, tx, sub.ID, req.ResumeAt, actor)
	})
}

func (s *Server) resumeSubscription(w http.ResponseWriter, r *http.Request) {
	var req struct{}
	if !decodeBody(w, r, &req) {
		return
	}
	s.transition(w, r, func(ctx context.Context, tx pgx.Tx, sub subscriptions.Subscription, actor subscriptions.Actor) (subscriptions.Subscription, bool, error) {
		resumed, changed, err := s.Subscriptions.Resume(ctx, tx, sub.ID, actor)
		if err != nil || !changed {
			return resumed, changed, err
		}
		resumed, err = s.Billing.Due(ctx, tx, resumed)
		return resumed, changed, err
	})
}

func (s *Server) cancelSubscription(w http.ResponseWriter, r *http.Request) {
	var req cancelRequest
	if !decodeBody(w, r, &req) {
		return
	}
	s.transition(w, r, func(ctx context.Context, tx pgx.Tx, sub subscriptions.Subscription, actor subscriptions.Actor) (subscriptions.Subscription, bool, error) {
		cancelled, changed, err := s.Subscriptions.Cancel(ctx, tx, sub.ID, req.AtPeriodEnd, actor)
		if err == nil && changed && cancelled.Status == subscriptions.Cancelled {
			err = s.Billing.Cancelled(ctx, tx, sub.ID)
		}
		return cancelled, changed, err
	})
}

func (s *Server) changePaymentMethod(w http.ResponseWriter, r *http.Request) {
	var req paymentMethodRequest
	if !decodeBody(w, r, &req) {
		return
	}
	var errs fieldErrors
	pm := s.validatePaymentMethod(&errs, "", &req, s.Clock.Now())
	if len(errs) > 0 {
		writeProblem(w, validationProblem(errs...))
		return
	}
	s.transition(w, r, func(ctx context.Context, tx pgx.Tx, sub subscriptions.Subscription, actor subscriptions.Actor) (subscriptions.Subscription, bool, error) {
		updated, changed, err := s.Subscriptions.ChangePaymentMethod(ctx, tx, sub.ID, pm, actor)
		if err == nil {
			updated, err = s.Billing.PaymentMethodChanged(ctx, tx, updated, actor)
		}
		return updated, changed, err
	})
}

type actorJSON struct {
	ID   string `json:"id"`
	Role string `json:"role"`
}

type eventJSON struct {
	ID         int64     `json:"id"`
	Type       string    `json:"type"`
	FromStatus *string   `json:"from_status"`
	ToStatus   string    `json:"to_status"`
	Actor      actorJSON `json:"actor"`
	At         time.Time `json:"at"`
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	limit, cursor, ok := pageParams(w, r)
	if !ok {
		return
	}
	var after int64
	if cursor != "" {
		n, err := strconv.ParseInt(cursor, 10, 64)
		if err != nil || n < 0 {
			writeProblem(w, fieldProblem("cursor", "is not a cursor this API returned"))
			return
		}
		after = n
	}
	sub, ok := s.loadVisible(w, r, s.Pool)
	if !ok {
		return
	}
	events, err := s.Subscriptions.Events(r.Context(), s.Pool, sub.ID, after, limit+1)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := listJSON[eventJSON]{Data: []eventJSON{}}
	for i, e := range events {
		if i == limit {
			out.NextCursor = encodeCursor(strconv.FormatInt(events[i-1].ID, 10))
			break
		}
		out.Data = append(out.Data, eventJSON{ID: e.ID, Type: e.Type, FromStatus: optional(string(e.From)), ToStatus: string(e.To),
			Actor: actorJSON{ID: e.Actor.ID, Role: e.Actor.Role}, At: e.At})
	}
	writeJSON(w, http.StatusOK, out)
}

// fail maps a domain error to its response; anything unexpected is a 500
// whose details go to the log only.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var transition *subscriptions.TransitionError
	var chargeTransition *charges.TransitionError
	switch {
	case errors.As(err, &transition):
		writeProblem(w, newProblem(http.StatusConflict, "invalid-transition", "Invalid transition", transition.Error()))
	case errors.Is(err, subscriptions.ErrNotFound), errors.Is(err, charges.ErrNotFound):
		writeProblem(w, problemNotFound)
	case errors.As(err, &chargeTransition):
		writeProblem(w, newProblem(http.StatusConflict, "invalid-transition", "Invalid transition", chargeTransition.Error()))
	case errors.Is(err, charges.ErrGatewayUnreachable):
		w.Header().Set("Retry-After", "5")
		writeProblem(w, newProblem(http.StatusServiceUnavailable, "gateway-unavailable", "Gateway unavailable",
			"The payment gateway could not be asked what the charge's last attempt did, so nothing was done. Retry later with the same Idempotency-Key."))
	case errors.Is(err, charges.ErrRetryRefused):
		writeProblem(w, newProblem(http.StatusConflict, "invalid-transition", "Invalid transition", err.Error()))
	case errors.Is(err, subscriptions.ErrResumeAtNotFuture):
		writeProblem(w, fieldProblem("resume_at", err.Error()))
	case databaseUnavailable(err):
		s.Logger.Error().Err(err).Str("request_id", requestID(r)).Msg("database unavailable")
		w.Header().Set("Retry-After", "1")
		writeProblem(w, problemUnavailable)
	default:
		s.Logger.Error().Err(err).Str("request_id", requestID(r)).Msg("request failed")
		writeProblem(w, problemInternal)
	}
}

// databaseUnavailable reports whether err says the database could not be
// reached or dropped the connection, rather than refused the statement.
// That is a passing condition of the server, not a bug, and what the
// request did was not committed: 503 with Retry-After tells clients and
// load balancers to back off and retry, where a 500 would read as a defect.
func databaseUnavailable(err error) bool {
	var (
		connectErr *pgconn.ConnectError
		pgErr      *pgconn.PgError
		netErr     net.Error
	)
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr), pgconn.SafeToRetry(err), pgconn.Timeout(err),
		errors.Is(err, puddle.ErrClosedPool), errors.Is(err, context.DeadlineExceeded):
		return true
	case errors.As(err, &pgErr):
		// Class 08: connection exception; 57P01..57P04: shutdown, crash,
		// cannot connect now, database dropped; 53300: too many connections.
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P") || pgErr.Code == "53300"
	}
	return false
}
