// Package stripetest is a fake of the part of the Stripe API that rebill's
// Stripe adapter uses, with the state stripe-mock lacks: it keeps
// PaymentIntents, answers a repeated Idempotency-Key with its first answer
// for 24 hours of its clock, and can lose an answer after doing the work.
// Tests across rebill use it to run charges through the adapter end to
// end.
//
// # Cards
//
// The payment method id of a token decides the card's behaviour:
//
//   - pm_decline_<code>: the hold is declined, 402 card_error with that
//     decline code (pm_decline_stolen_card, pm_decline_generic_decline…);
//   - pm_auth_required: 402 authentication_required, as Stripe answers an
//     off-session payment that needs 3-D Secure;
//   - pm_missing: 400 resource_missing (no such payment method);
//   - pm_refund_fail: the hold is placed, and every refund of it fails
//     (status failed, failure_reason expired_or_canceled_card), as
//     Stripe's pm_card_refundFail test card does;
//   - pm_refund_pending: the hold is placed, and its refunds stay pending
//     until [Server.SetRefundStatus] moves them;
//   - any other: the hold is placed (requires_capture).
//
// # Refunds
//
// POST /v1/refunds refunds a succeeded PaymentIntent (payment_intent,
// amount: the rest when absent) while the refunds that did not fail stay
// within what was captured (else 400 amount_too_large; a PaymentIntent not
// succeeded is 400 payment_intent_unexpected_state). GET /v1/refunds lists
// them newest first, by payment_intent and created[gte]/created[lt].
//
// # Faults
//
// [Server.Fail] queues a fault for the next request of an operation:
// [Answer] answers a status without doing anything (503, 429 lock_timeout,
// a 500 before the work); [LoseAnswer] does the work and cuts the
// connection; [Hang] does the work and answers nothing until the client
// gives up.
package stripetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Operations a fault can target.
const (
	OpCreate   = "create"
	OpCapture  = "capture"
	OpCancel   = "cancel"
	OpRetrieve = "retrieve"
	OpList     = "list"
	// OpRefund is POST /v1/refunds; OpListRefunds is GET /v1/refunds.
	OpRefund      = "refund"
	OpListRefunds = "list_refunds"
)

// keyLifetime is how long Stripe remembers an idempotency key.
const keyLifetime = 24 * time.Hour

// Fault is what the server does to one request instead of answering it
// normally.
type Fault struct {
	kind   faultKind
	status int
	code   string
}

type faultKind int

const (
	faultAnswer faultKind = iota + 1
	faultLose
	faultHang
)

// Answer answers status with an api_error (code may be empty, or
// lock_timeout, rate_limit…) and does nothing.
func Answer(status int, code string) Fault {
	return Fault{kind: faultAnswer, status: status, code: code}
}

// LoseAnswer does the work, records it, then cuts the connection without
// a byte of answer. On a reused keep-alive connection Go's transport sends
// such a request again by itself (it carries an Idempotency-Key, so
// net/http deems it safe to repeat) and gets the replayed answer: tests of
// lost answers use a client without keep-alives.
func LoseAnswer() Fault { return Fault{kind: faultLose} }

// Hang does the work and then answers nothing until the client gives up.
func Hang() Fault { return Fault{kind: faultHang} }

// Intent is a PaymentIntent as the fake's ledger keeps it.
type Intent struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountCapturable   int64             `json:"amount_capturable"`
	AmountReceived     int64             `json:"amount_received"`
	Currency           string            `json:"currency"`
	Customer           string            `json:"customer"`
	PaymentMethod      string            `json:"payment_method"`
	CaptureMethod      string            `json:"capture_method"`
	Status             string            `json:"status"`
	Created            int64             `json:"created"`
	CanceledAt         *int64            `json:"canceled_at"`
	CancellationReason *string           `json:"cancellation_reason"`
	LastPaymentError   *apiError         `json:"last_payment_error"`
	Metadata           map[string]string `json:"metadata"`
	Livemode           bool              `json:"livemode"`
}

type apiError struct {
	Type          string  `json:"type"`
	Code          string  `json:"code,omitempty"`
	DeclineCode   string  `json:"decline_code,omitempty"`
	Message       string  `json:"message,omitempty"`
	PaymentIntent *Intent `json:"payment_intent,omitempty"`
}

type answer struct {
	fingerprint string
	status      int
	body        []byte
	at          time.Time
}

// Refund is a refund as the fake's ledger keeps it.
type Refund struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	PaymentIntent string            `json:"payment_intent"`
	Reason        string            `json:"reason,omitempty"`
	Status        string            `json:"status"`
	FailureReason string            `json:"failure_reason,omitempty"`
	Created       int64             `json:"created"`
	Metadata      map[string]string `json:"metadata"`
}

// Server is the fake Stripe API on a loopback httptest server.
type Server struct {
	*httptest.Server
	// Now is the fake's clock: PaymentIntents' created times and the
	// lifetime of idempotency keys. Set it before the first request.
	Now func() time.Time

	mu      sync.Mutex
	intents map[string]*Intent
	order   []string  // ids, oldest first
	refunds []*Refund // oldest first
	keys    map[string]answer
	faults  map[string][]Fault
	calls   map[string]int
	seq     int
}

// NewServer starts a fake; it is closed when the test ends.
func NewServer(t interface{ Cleanup(func()) }) *Server {
	s := &Server{Now: time.Now, intents: map[string]*Intent{}, keys: map[string]answer{},
		faults: map[string][]Fault{}, calls: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/payment_intents", s.handle(OpCreate, s.create))
	mux.HandleFunc("POST /v1/payment_intents/{id}/capture", s.handle(OpCapture, s.capture))
	mux.HandleFunc("POST /v1/payment_intents/{id}/cancel", s.handle(OpCancel, s.cancel))
	mux.HandleFunc("GET /v1/payment_intents/{id}", s.handle(OpRetrieve, s.retrieve))
	mux.HandleFunc("GET /v1/payment_intents", s.handle(OpList, s.list))
	mux.HandleFunc("POST /v1/refunds", s.handle(OpRefund, s.refund))
	mux.HandleFunc("GET /v1/refunds", s.handle(OpListRefunds, s.listRefunds))
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// Fail queues f for the next request of op (OpCreate…).
func (s *Server) Fail(op string, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[op] = append(s.faults[op], f)
}

// Calls is how many requests of op arrived.
func (s *Server) Calls(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// Intents is the ledger: every PaymentIntent, oldest first.
func (s *Server) Intents() []Intent {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Intent, 0, len(s.order))
	for _, id := range s.order {
		out = append(out, *s.intents[id])
	}
	return out
}

// Refunds is the ledger of refunds, oldest first.
func (s *Server) Refunds() []Refund {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Refund, 0, len(s.refunds))
	for _, re := range s.refunds {
		out = append(out, *re)
	}
	return out
}

// SetRefundStatus forces a refund's status (a pending refund settles, a
// succeeded card refund fails later), with failure_reason reason.
func (s *Server) SetRefundStatus(id, status, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, re := range s.refunds {
		if re.ID == id {
			re.Status, re.FailureReason = status, reason
		}
	}
}

// SetStatus forces a PaymentIntent's status, as Stripe's own processes do
// (a hold that expires is canceled, a slow method is processing).
func (s *Server) SetStatus(id, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.intents[id].Status = status
}

type handler func(r *http.Request) (int, any)

// handle runs one request: counts it, applies a queued fault, replays an
// idempotent answer, or does the work and stores its answer under the key.
func (s *Server) handle(op string, h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": apiError{Type: "invalid_request_error", Code: "parameter_invalid"}})
			return
		}
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer sk_") {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"error": apiError{Type: "invalid_request_error", Message: "Invalid API Key provided"}})
			return
		}
		s.mu.Lock()
		s.calls[op]++
		var fault Fault
		if q := s.faults[op]; len(q) > 0 {
			fault, s.faults[op] = q[0], q[1:]
		}
		if fault.kind == faultAnswer {
			s.mu.Unlock()
			writeJSON(w, fault.status, map[string]any{"error": apiError{Type: "api_error", Code: fault.code}})
			return
		}
		status, body := s.answer(r, h)
		s.mu.Unlock()
		switch fault.kind {
		case faultLose:
			cut(w)
		case faultHang:
			<-r.Context().Done()
			cut(w)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Request-Id", "req_fake")
			w.WriteHeader(status)
			_, _ = w.Write(body)
		}
	}
}

// answer does the work or replays the key's first answer; s.mu is held.
func (s *Server) answer(r *http.Request, h handler) (int, []byte) {
	key := r.Header.Get("Idempotency-Key")
	if r.Method != http.MethodPost || key == "" {
		status, v := h(r)
		return status, mustJSON(v)
	}
	fp := r.Method + " " + r.URL.Path + "?" + r.PostForm.Encode()
	if prev, ok := s.keys[key]; ok && s.Now().Sub(prev.at) < keyLifetime {
		if prev.fingerprint != fp {
			return http.StatusBadRequest, mustJSON(map[string]any{"error": apiError{Type: "idempotency_error",
				Message: "Keys for idempotent requests can only be used with the same parameters they were first used with."}})
		}
		return prev.status, prev.body
	}
	status, v := h(r)
	body := mustJSON(v)
	s.keys[key] = answer{fingerprint: fp, status: status, body: body, at: s.Now()}
	return status, body
}

func (s *Server) create(r *http.Request) (int, any) {
	f := r.PostForm
	amount, err := strconv.ParseInt(f.Get("amount"), 10, 64)
	switch {
	case err != nil || amount <= 0:
		return invalid("parameter_invalid_integer", nil)
	case f.Get("currency") == "" || f.Get("currency") != strings.ToLower(f.Get("currency")):
		return invalid("parameter_invalid_string_empty", nil)
	case f.Get("capture_method") != "manual" || f.Get("confirm") != "true" || f.Get("off_session") != "true":
		return invalid("parameter_unknown", nil) // rebill only ever sends off-session manual-capture holds
	case !strings.HasPrefix(f.Get("customer"), "cus_"):
		return invalid("resource_missing", nil)
	}
	pm := f.Get("payment_method")
	if pm == "pm_missing" || !strings.HasPrefix(pm, "pm_") {
		return invalid("resource_missing", nil)
	}
	s.seq++
	pi := &Intent{ID: fmt.Sprintf("pi_fake%06d", s.seq), Object: "payment_intent", Amount: amount,
		Currency: f.Get("currency"), Customer: f.Get("customer"), PaymentMethod: pm, CaptureMethod: "manual",
		Status: "requires_capture", AmountCapturable: amount, Created: s.Now().Unix(), Metadata: metadata(f)}
	s.intents[pi.ID] = pi
	s.order = append(s.order, pi.ID)
	var cardErr *apiError
	switch {
	case pm == "pm_auth_required":
		cardErr = &apiError{Type: "card_error", Code: "authentication_required", DeclineCode: "authentication_required"}
	case strings.HasPrefix(pm, "pm_decline_"):
		cardErr = &apiError{Type: "card_error", Code: "card_declined", DeclineCode: strings.TrimPrefix(pm, "pm_decline_")}
	}
	if cardErr == nil {
		return http.StatusOK, pi
	}
	pi.Status, pi.AmountCapturable, pi.LastPaymentError = "requires_payment_method", 0, cardErr
	snapshot := *pi
	e := *cardErr
	e.PaymentIntent = &snapshot
	return http.StatusPaymentRequired, map[string]any{"error": e}
}

func (s *Server) capture(r *http.Request) (int, any) {
	pi, ok := s.intents[r.PathValue("id")]
	if !ok {
		return notFound()
	}
	if pi.Status != "requires_capture" {
		return invalid("payment_intent_unexpected_state", pi)
	}
	amount := pi.AmountCapturable
	if v := r.PostForm.Get("amount_to_capture"); v != "" {
		var err error
		if amount, err = strconv.ParseInt(v, 10, 64); err != nil || amount > pi.AmountCapturable {
			return invalid("amount_too_large", pi)
		}
	}
	pi.Status, pi.AmountReceived, pi.AmountCapturable = "succeeded", amount, 0
	for k, v := range metadata(r.PostForm) {
		pi.Metadata[k] = v
	}
	return http.StatusOK, pi
}

func (s *Server) cancel(r *http.Request) (int, any) {
	pi, ok := s.intents[r.PathValue("id")]
	if !ok {
		return notFound()
	}
	if pi.Status == "succeeded" || pi.Status == "canceled" || pi.Status == "processing" {
		return invalid("payment_intent_unexpected_state", pi)
	}
	now := s.Now().Unix()
	reason := r.PostForm.Get("cancellation_reason")
	pi.Status, pi.AmountCapturable, pi.CanceledAt, pi.CancellationReason = "canceled", 0, &now, &reason
	return http.StatusOK, pi
}

func (s *Server) retrieve(r *http.Request) (int, any) {
	pi, ok := s.intents[r.PathValue("id")]
	if !ok {
		return notFound()
	}
	return http.StatusOK, pi
}

// list pages PaymentIntents newest first, as Stripe does, filtered by
// created[gte] and created[lt].
func (s *Server) list(r *http.Request) (int, any) {
	q := r.URL.Query()
	gte, _ := strconv.ParseInt(q.Get("created[gte]"), 10, 64)
	lt, err := strconv.ParseInt(q.Get("created[lt]"), 10, 64)
	if err != nil {
		lt = 1 << 62
	}
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit <= 0 || limit > 100 {
		limit = 10
	}
	after := q.Get("starting_after")
	var data []*Intent
	started := after == ""
	more := false
	for _, id := range slices.Backward(s.order) {
		pi := s.intents[id]
		if !started {
			started = id == after
			continue
		}
		if pi.Created < gte || pi.Created >= lt || (q.Get("customer") != "" && pi.Customer != q.Get("customer")) {
			continue
		}
		if len(data) == limit {
			more = true
			break
		}
		data = append(data, pi)
	}
	return http.StatusOK, map[string]any{"object": "list", "url": "/v1/payment_intents", "has_more": more, "data": data}
}

// refund returns money of a succeeded PaymentIntent.
func (s *Server) refund(r *http.Request) (int, any) {
	f := r.PostForm
	pi, ok := s.intents[f.Get("payment_intent")]
	if !ok {
		return notFound()
	}
	if pi.Status != "succeeded" {
		return invalid("payment_intent_unexpected_state", nil)
	}
	if reason := f.Get("reason"); reason != "" && reason != "duplicate" && reason != "fraudulent" && reason != "requested_by_customer" {
		return invalid("parameter_invalid_string", nil)
	}
	var refunded int64
	for _, re := range s.refunds {
		if re.PaymentIntent == pi.ID && re.Status != "failed" && re.Status != "canceled" {
			refunded += re.Amount
		}
	}
	amount := pi.AmountReceived - refunded
	if v := f.Get("amount"); v != "" {
		var err error
		if amount, err = strconv.ParseInt(v, 10, 64); err != nil || amount <= 0 {
			return invalid("parameter_invalid_integer", nil)
		}
	}
	if amount <= 0 || refunded+amount > pi.AmountReceived {
		return invalid("amount_too_large", nil)
	}
	s.seq++
	re := &Refund{ID: fmt.Sprintf("re_fake%06d", s.seq), Object: "refund", Amount: amount, Currency: pi.Currency,
		PaymentIntent: pi.ID, Reason: f.Get("reason"), Status: "succeeded", Created: s.Now().Unix(), Metadata: metadata(f)}
	switch pi.PaymentMethod {
	case "pm_refund_fail":
		re.Status, re.FailureReason = "failed", "expired_or_canceled_card"
	case "pm_refund_pending":
		re.Status = "pending"
	}
	s.refunds = append(s.refunds, re)
	c := *re
	return http.StatusOK, &c
}

// listRefunds pages refunds newest first, as Stripe does, filtered by
// payment_intent, created[gte] and created[lt].
func (s *Server) listRefunds(r *http.Request) (int, any) {
	q := r.URL.Query()
	gte, _ := strconv.ParseInt(q.Get("created[gte]"), 10, 64)
	lt, err := strconv.ParseInt(q.Get("created[lt]"), 10, 64)
	if err != nil {
		lt = 1 << 62
	}
	if id := q.Get("payment_intent"); id != "" {
		if _, ok := s.intents[id]; !ok {
			return notFound()
		}
	}
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit <= 0 || limit > 100 {
		limit = 10
	}
	after := q.Get("starting_after")
	var data []Refund
	started := after == ""
	more := false
	for _, re := range slices.Backward(s.refunds) {
		if !started {
			started = re.ID == after
			continue
		}
		if re.Created < gte || re.Created >= lt || (q.Get("payment_intent") != "" && re.PaymentIntent != q.Get("payment_intent")) {
			continue
		}
		if len(data) == limit {
			more = true
			break
		}
		data = append(data, *re)
	}
	return http.StatusOK, map[string]any{"object": "list", "url": "/v1/refunds", "has_more": more, "data": data}
}

func invalid(code string, pi *Intent) (int, any) {
	var snapshot *Intent
	if pi != nil {
		c := *pi
		snapshot = &c
	}
	return http.StatusBadRequest, map[string]any{"error": apiError{Type: "invalid_request_error", Code: code, PaymentIntent: snapshot}}
}

// notFound is Stripe's answer for an id it does not know.
func notFound() (int, any) {
	return http.StatusNotFound, map[string]any{"error": apiError{Type: "invalid_request_error", Code: "resource_missing"}}
}

func metadata(f url.Values) map[string]string {
	m := map[string]string{}
	for k, v := range f {
		if name, ok := strings.CutPrefix(k, "metadata["); ok && len(v) > 0 {
			m[strings.TrimSuffix(name, "]")] = v[0]
		}
	}
	return m
}

// cut closes the connection without an answer.
func cut(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(mustJSON(v))
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
