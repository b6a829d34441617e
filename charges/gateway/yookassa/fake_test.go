package yookassa_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/rebill/rebill/testkit/testsupport"
)

// fakeYooKassa is a YooKassa shop as API v3's public documentation
// describes it, on an httptest server: it keeps payments, remembers each
// Idempotence-Key for 24 hours of its own clock (a repeat answers the
// first answer; the same key with other parameters is refused), answers
// 202 while a request is "processing", cancels holds at expires_at, and
// lists payments newest first with cursor paging.
//
// The payment method id (the token) picks the issuer's behaviour:
//
//	pm_ok...                 the hold is placed (waiting_for_capture)
//	pm_pending...            pending for two reads, then waiting_for_capture
//	pm_slow...               the create answers 202 twice, then as pm_ok
//	pm_decline_<reason>      canceled with cancellation_details.reason <reason>
//	anything else            400 invalid_request (parameter payment_method_id)
//
// Refunds (POST /refunds) return money of a succeeded payment while the
// refunds not canceled stay within what was captured; a payment that had a
// receipt needs one with a partial refund, adding up to it. GET /refunds
// lists them newest first (payment_id, created_at filters, cursor paging)
// and GET /refunds/{id} reads one. The payment's token picks the outcome:
//
//	pm_refund_cancel...      the refund is canceled, reason general_decline
//	pm_refund_pending...     the refund is pending for two reads, then succeeded
//	any other                succeeded
//
// Faults are queued per action ("create", "capture", "cancel", "get",
// "list", "refund", "refund_get", "refund_list"): a status answered
// before anything is done, or a lost answer (processed, then the
// connection is closed without a word).
type fakeYooKassa struct {
	t      testing.TB
	srv    *httptest.Server
	clock  *testsupport.Clock
	shopID string
	secret string

	mu       sync.Mutex
	payments map[string]*fakePayment
	order    []string // payment ids in creation order
	refunds  []*fakeRefund
	keys     map[string]*keyEntry
	requests []fakeRequest
	statuses map[string][]int // action -> statuses to answer next, doing nothing
	lost     map[string]int   // action -> answers to lose after processing
	// retryAfter is the wait a 202 asks for, in milliseconds.
	retryAfter int
}

// testSecret is the shop's secret key: no error may show it.
const testSecret = "test_secret_DO_NOT_LEAK"

// holdLifetime is how long YooKassa keeps a card hold.
const holdLifetime = 7 * 24 * time.Hour

type fakePayment struct {
	ID                  string            `json:"id"`
	Status              string            `json:"status"`
	Paid                bool              `json:"paid"`
	Amount              fakeAmount        `json:"amount"`
	Description         string            `json:"description,omitempty"`
	CreatedAt           time.Time         `json:"created_at"`
	CapturedAt          *time.Time        `json:"captured_at,omitempty"`
	ExpiresAt           *time.Time        `json:"expires_at,omitempty"`
	Metadata            map[string]string `json:"metadata"`
	PaymentMethod       fakeMethod        `json:"payment_method"`
	CancellationDetails *fakeCancellation `json:"cancellation_details,omitempty"`
	Test                bool              `json:"test"`
	Refundable          bool              `json:"refundable"`
	ReceiptRegistration string            `json:"receipt_registration,omitempty"`
	holdReceipt         json.RawMessage   // the receipt sent with the create
	captureReceipt      json.RawMessage   // the receipt sent with the capture
	pendingReads        int               // reads left before a pending payment is held
}

type fakeRefund struct {
	ID                  string            `json:"id"`
	PaymentID           string            `json:"payment_id"`
	Status              string            `json:"status"`
	Amount              fakeAmount        `json:"amount"`
	CreatedAt           time.Time         `json:"created_at"`
	Description         string            `json:"description,omitempty"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	CancellationDetails *fakeCancellation `json:"cancellation_details,omitempty"`
	receipt             json.RawMessage
	pendingReads        int
}

type fakeAmount struct {
	Value    string `json:"value"`
	Currency string `json:"currency"`
}

type fakeMethod struct {
	Type  string `json:"type"`
	ID    string `json:"id"`
	Saved bool   `json:"saved"`
}

type fakeCancellation struct {
	Party  string `json:"party"`
	Reason string `json:"reason"`
}

type keyEntry struct {
	fingerprint string
	at          time.Time
	processing  int // 202 answers left before the request is performed
	status      int
	body        []byte
}

// fakeRequest is one request the fake received.
type fakeRequest struct {
	Method, Path, Query string
	Key                 string // Idempotence-Key header
	Body                []byte
}

// fakeReceipt is the part of a receipt the fake checks.
type fakeReceipt struct {
	Customer struct {
		Email string `json:"email"`
		Phone string `json:"phone"`
	} `json:"customer"`
	Items []struct {
		Description string      `json:"description"`
		Quantity    json.Number `json:"quantity"`
		Amount      fakeAmount  `json:"amount"`
		VATCode     int         `json:"vat_code"`
	} `json:"items"`
}

func newFake(t testing.TB, clk *testsupport.Clock) *fakeYooKassa {
	f := &fakeYooKassa{t: t, clock: clk, shopID: "506751", secret: testSecret,
		payments: map[string]*fakePayment{}, keys: map[string]*keyEntry{},
		statuses: map[string][]int{}, lost: map[string]int{}, retryAfter: 30}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the API's base URL, like https://api.yookassa.ru/v3.
func (f *fakeYooKassa) URL() string { return f.srv.URL + "/v3" }

// set changes the fake's settings between requests.
func (f *fakeYooKassa) set(fn func(f *fakeYooKassa)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// failNext makes the next requests of action answer these statuses,
// having done nothing.
func (f *fakeYooKassa) failNext(action string, statuses ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses[action] = append(f.statuses[action], statuses...)
}

// loseNext makes the next n requests of action be processed with their
// answer lost.
func (f *fakeYooKassa) loseNext(action string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lost[action] += n
}

// all returns every payment, oldest first, as the shop's dashboard shows.
func (f *fakeYooKassa) all() []fakePayment {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]fakePayment, 0, len(f.order))
	for _, id := range f.order {
		f.expire(f.payments[id])
		out = append(out, *f.payments[id])
	}
	return out
}

func (f *fakeYooKassa) payment(id string) fakePayment {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.payments[id]
	if !ok {
		f.t.Fatalf("fake: no payment %s", id)
	}
	return *p
}

// received returns the requests received, oldest first.
func (f *fakeYooKassa) received() []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

// posts counts the POSTs received.
func (f *fakeYooKassa) posts() int {
	n := 0
	for _, r := range f.received() {
		if r.Method == http.MethodPost {
			n++
		}
	}
	return n
}

func (f *fakeYooKassa) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Header.Get("Idempotence-Key")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, fakeRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Key: key, Body: body})

	if user, pass, ok := r.BasicAuth(); !ok || user != f.shopID || pass != f.secret {
		writeError(w, http.StatusUnauthorized, "invalid_credentials", "")
		return
	}
	if path, ok := strings.CutPrefix(r.URL.Path, "/v3/refunds"); ok {
		f.serveRefunds(w, r, strings.TrimPrefix(path, "/"), key, body)
		return
	}
	path, ok := strings.CutPrefix(r.URL.Path, "/v3/payments")
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "")
		return
	}
	id, action, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	switch {
	case r.Method == http.MethodPost && id == "":
		f.idempotent(w, r, "create", key, body, f.create)
	case r.Method == http.MethodPost && (action == "capture" || action == "cancel"):
		f.idempotent(w, r, action, key, body, func(body []byte) (int, any) { return f.change(id, action, body) })
	case r.Method == http.MethodGet && id == "":
		if f.fault(w, "list") {
			return
		}
		status, out := f.list(r)
		writeJSON(w, status, out)
	case r.Method == http.MethodGet && action == "":
		if f.fault(w, "get") {
			return
		}
		p, ok := f.payments[id]
		if !ok {
			writeError(w, http.StatusNotFound, "not_found", "")
			return
		}
		f.expire(p)
		if p.Status == "pending" {
			p.pendingReads--
			if p.pendingReads <= 0 {
				f.hold(p)
			}
		}
		writeJSON(w, http.StatusOK, p)
	default:
		writeError(w, http.StatusMethodNotAllowed, "invalid_request", "")
	}
}

// fault answers a queued status for action, doing nothing.
func (f *fakeYooKassa) fault(w http.ResponseWriter, action string) bool {
	queue := f.statuses[action]
	if len(queue) == 0 {
		return false
	}
	f.statuses[action] = queue[1:]
	writeError(w, queue[0], http.StatusText(queue[0]), "")
	return true
}

// idempotent runs a POST under YooKassa's idempotence rules.
func (f *fakeYooKassa) idempotent(w http.ResponseWriter, r *http.Request, action, key string, body []byte,
	perform func([]byte) (int, any)) {
	if f.fault(w, action) {
		return
	}
	if key == "" || len(key) > 64 {
		writeError(w, http.StatusBadRequest, "invalid_request", "Idempotence-Key")
		return
	}
	now := f.clock.Now()
	for k, e := range f.keys {
		if now.Sub(e.at) >= 24*time.Hour {
			delete(f.keys, k) // forgotten: the same key is a new request
		}
	}
	fingerprint := r.URL.Path + "\n" + canonical(body)
	e, seen := f.keys[key]
	switch {
	case seen && e.fingerprint != fingerprint:
		writeError(w, http.StatusBadRequest, "invalid_request", "Idempotence-Key")
		return
	case !seen:
		e = &keyEntry{fingerprint: fingerprint, at: now}
		if action == "create" && strings.HasPrefix(methodID(body), "pm_slow") {
			e.processing = 2
		}
		f.keys[key] = e
	}
	if e.processing > 0 {
		e.processing--
		writeJSON(w, http.StatusAccepted, map[string]any{"type": "processing", "description": "Request accepted",
			"retry_after": f.retryAfter})
		return
	}
	if e.body == nil {
		status, out := perform(body)
		if status != http.StatusOK {
			delete(f.keys, key) // a refusal did nothing: the key may be used again
			writeJSON(w, status, out)
			return
		}
		e.status = status
		e.body, _ = json.Marshal(out)
	}
	if f.lost[action] > 0 {
		f.lost[action]--
		loseAnswer(f.t, w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	_, _ = w.Write(e.body)
}

// create makes a payment.
func (f *fakeYooKassa) create(body []byte) (int, any) {
	var req struct {
		Amount          fakeAmount        `json:"amount"`
		Capture         *bool             `json:"capture"`
		PaymentMethodID string            `json:"payment_method_id"`
		Description     string            `json:"description"`
		Metadata        map[string]string `json:"metadata"`
		Receipt         json.RawMessage   `json:"receipt"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return errorBody(http.StatusBadRequest, "invalid_request", "body")
	}
	if _, ok := minorUnits(req.Amount); !ok {
		return errorBody(http.StatusBadRequest, "invalid_request", "amount")
	}
	if len(req.Description) > 128 || len(req.Metadata) > 16 {
		return errorBody(http.StatusBadRequest, "invalid_request", "metadata")
	}
	if req.Receipt != nil && !receiptAdds(req.Receipt, req.Amount) {
		return errorBody(http.StatusBadRequest, "invalid_request", "receipt")
	}
	if !strings.HasPrefix(req.PaymentMethodID, "pm_") {
		return errorBody(http.StatusBadRequest, "invalid_request", "payment_method_id")
	}
	now := f.clock.Now()
	p := &fakePayment{ID: uuid.NewString(), Amount: req.Amount, Description: req.Description, CreatedAt: now,
		Metadata: req.Metadata, PaymentMethod: fakeMethod{Type: "bank_card", ID: req.PaymentMethodID, Saved: true},
		Test: true, holdReceipt: req.Receipt}
	if req.Receipt != nil {
		p.ReceiptRegistration = "pending"
	}
	switch token := req.PaymentMethodID; {
	case strings.HasPrefix(token, "pm_decline_"):
		reason := strings.TrimPrefix(token, "pm_decline_")
		party := "payment_network"
		if reason == "internal_timeout" || reason == "fraud_suspected" {
			party = "yoo_money"
		}
		p.Status, p.CancellationDetails = "canceled", &fakeCancellation{Party: party, Reason: reason}
	case strings.HasPrefix(token, "pm_pending"):
		p.Status, p.pendingReads = "pending", 2
	default:
		f.hold(p)
		if req.Capture != nil && *req.Capture {
			p.Status, p.CapturedAt, p.ExpiresAt = "succeeded", &now, nil
		}
	}
	f.payments[p.ID] = p
	f.order = append(f.order, p.ID)
	return http.StatusOK, p
}

func (f *fakeYooKassa) hold(p *fakePayment) {
	expires := f.clock.Now().Add(holdLifetime)
	p.Status, p.Paid, p.ExpiresAt = "waiting_for_capture", true, &expires
}

// expire cancels a hold whose expires_at has passed.
func (f *fakeYooKassa) expire(p *fakePayment) {
	if p.Status == "waiting_for_capture" && !f.clock.Now().Before(*p.ExpiresAt) {
		p.Status, p.Paid = "canceled", false
		p.CancellationDetails = &fakeCancellation{Party: "yoo_money", Reason: "expired_on_capture"}
	}
}

// change captures or cancels a held payment.
func (f *fakeYooKassa) change(id, action string, body []byte) (int, any) {
	p, ok := f.payments[id]
	if !ok {
		return errorBody(http.StatusNotFound, "not_found", "")
	}
	f.expire(p)
	if p.Status != "waiting_for_capture" {
		return errorBody(http.StatusBadRequest, "invalid_request", "payment is "+p.Status)
	}
	now := f.clock.Now()
	if action == "cancel" {
		p.Status, p.Paid = "canceled", false
		p.CancellationDetails = &fakeCancellation{Party: "merchant", Reason: "canceled_by_merchant"}
		return http.StatusOK, p
	}
	var req struct {
		Amount  *fakeAmount     `json:"amount"`
		Receipt json.RawMessage `json:"receipt"`
	}
	if len(body) > 0 && json.Unmarshal(body, &req) != nil {
		return errorBody(http.StatusBadRequest, "invalid_request", "body")
	}
	captured := p.Amount
	if req.Amount != nil {
		want, ok1 := minorUnits(*req.Amount)
		held, _ := minorUnits(p.Amount)
		if !ok1 || req.Amount.Currency != p.Amount.Currency || want > held || want <= 0 {
			return errorBody(http.StatusBadRequest, "invalid_request", "amount")
		}
		captured = *req.Amount
	}
	if req.Receipt != nil && !receiptAdds(req.Receipt, captured) {
		return errorBody(http.StatusBadRequest, "invalid_request", "receipt")
	}
	p.Status, p.Amount, p.CapturedAt, p.ExpiresAt = "succeeded", captured, &now, nil
	p.captureReceipt = req.Receipt
	return http.StatusOK, p
}

// list serves GET /payments: created_at and captured_at filters, newest
// first, at most limit (default 10, at most 100) a page.
func (f *fakeYooKassa) list(r *http.Request) (int, any) {
	q := r.URL.Query()
	limit := 10
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			return errorBody(http.StatusBadRequest, "invalid_request", "limit")
		}
		limit = n
	}
	type bound struct {
		field, op string
		at        time.Time
	}
	var bounds []bound
	for _, field := range []string{"created_at", "captured_at"} {
		for _, op := range []string{"gte", "gt", "lte", "lt"} {
			if s := q.Get(field + "." + op); s != "" {
				at, err := time.Parse(time.RFC3339Nano, s)
				if err != nil {
					return errorBody(http.StatusBadRequest, "invalid_request", field+"."+op)
				}
				bounds = append(bounds, bound{field, op, at})
			}
		}
	}
	var matched []*fakePayment
	for i := len(f.order) - 1; i >= 0; i-- {
		p := f.payments[f.order[i]]
		f.expire(p)
		keep := true
		for _, b := range bounds {
			at := p.CreatedAt
			if b.field == "captured_at" {
				if p.CapturedAt == nil {
					keep = false
					break
				}
				at = *p.CapturedAt
			}
			switch b.op {
			case "gte":
				keep = keep && !at.Before(b.at)
			case "gt":
				keep = keep && at.After(b.at)
			case "lte":
				keep = keep && !at.After(b.at)
			case "lt":
				keep = keep && at.Before(b.at)
			}
		}
		if keep {
			matched = append(matched, p)
		}
	}
	offset := 0
	if c := q.Get("cursor"); c != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(c, "cur"))
		if err != nil || !strings.HasPrefix(c, "cur") {
			return errorBody(http.StatusBadRequest, "invalid_request", "cursor")
		}
		offset = n
	}
	end := min(offset+limit, len(matched))
	out := map[string]any{"type": "list", "items": matched[min(offset, end):end]}
	if end < len(matched) {
		out["next_cursor"] = fmt.Sprintf("cur%d", end)
	}
	return http.StatusOK, out
}

// allRefunds returns every refund, oldest first.
func (f *fakeYooKassa) allRefunds() []fakeRefund {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]fakeRefund, 0, len(f.refunds))
	for _, r := range f.refunds {
		out = append(out, *r)
	}
	return out
}

func (f *fakeYooKassa) serveRefunds(w http.ResponseWriter, r *http.Request, id, key string, body []byte) {
	switch {
	case r.Method == http.MethodPost && id == "":
		f.idempotent(w, r, "refund", key, body, f.refund)
	case r.Method == http.MethodGet && id == "":
		if f.fault(w, "refund_list") {
			return
		}
		status, out := f.listRefunds(r)
		writeJSON(w, status, out)
	case r.Method == http.MethodGet:
		if f.fault(w, "refund_get") {
			return
		}
		for _, rf := range f.refunds {
			if rf.ID == id {
				if rf.Status == "pending" {
					if rf.pendingReads--; rf.pendingReads <= 0 {
						rf.Status = "succeeded"
					}
				}
				writeJSON(w, http.StatusOK, rf)
				return
			}
		}
		writeError(w, http.StatusNotFound, "not_found", "")
	default:
		writeError(w, http.StatusMethodNotAllowed, "invalid_request", "")
	}
}

// refund returns money of a succeeded payment.
func (f *fakeYooKassa) refund(body []byte) (int, any) {
	var req struct {
		PaymentID   string            `json:"payment_id"`
		Amount      fakeAmount        `json:"amount"`
		Description string            `json:"description"`
		Metadata    map[string]string `json:"metadata"`
		Receipt     json.RawMessage   `json:"receipt"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return errorBody(http.StatusBadRequest, "invalid_request", "body")
	}
	p, ok := f.payments[req.PaymentID]
	if !ok {
		return errorBody(http.StatusNotFound, "not_found", "payment_id")
	}
	want, ok := minorUnits(req.Amount)
	paid, _ := minorUnits(p.Amount)
	if !ok || req.Amount.Currency != p.Amount.Currency {
		return errorBody(http.StatusBadRequest, "invalid_request", "amount")
	}
	if p.Status != "succeeded" {
		return errorBody(http.StatusBadRequest, "invalid_request", "payment_id")
	}
	var refunded int64
	for _, rf := range f.refunds {
		if rf.PaymentID == p.ID && rf.Status != "canceled" {
			n, _ := minorUnits(rf.Amount)
			refunded += n
		}
	}
	if refunded+want > paid {
		return errorBody(http.StatusBadRequest, "invalid_request", "amount")
	}
	if len(req.Description) > 250 || len(req.Metadata) > 16 {
		return errorBody(http.StatusBadRequest, "invalid_request", "metadata")
	}
	hadReceipt := p.holdReceipt != nil || p.captureReceipt != nil
	if req.Receipt != nil && !receiptAdds(req.Receipt, req.Amount) || hadReceipt && req.Receipt == nil && want != paid {
		return errorBody(http.StatusBadRequest, "invalid_request", "receipt")
	}
	rf := &fakeRefund{ID: uuid.NewString(), PaymentID: p.ID, Status: "succeeded", Amount: req.Amount,
		CreatedAt: f.clock.Now(), Description: req.Description, Metadata: req.Metadata, receipt: req.Receipt}
	switch token := p.PaymentMethod.ID; {
	case strings.HasPrefix(token, "pm_refund_cancel"):
		rf.Status, rf.CancellationDetails = "canceled", &fakeCancellation{Party: "payment_network", Reason: "general_decline"}
	case strings.HasPrefix(token, "pm_refund_pending"):
		rf.Status, rf.pendingReads = "pending", 2
	}
	f.refunds = append(f.refunds, rf)
	c := *rf
	return http.StatusOK, &c
}

// listRefunds serves GET /refunds: payment_id and created_at filters,
// newest first, cursor paging.
func (f *fakeYooKassa) listRefunds(r *http.Request) (int, any) {
	q := r.URL.Query()
	limit := 10
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			return errorBody(http.StatusBadRequest, "invalid_request", "limit")
		}
		limit = n
	}
	var gte, lt time.Time
	for name, at := range map[string]*time.Time{"created_at.gte": &gte, "created_at.lt": &lt} {
		if s := q.Get(name); s != "" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return errorBody(http.StatusBadRequest, "invalid_request", name)
			}
			*at = t
		}
	}
	var matched []*fakeRefund
	for i := len(f.refunds) - 1; i >= 0; i-- {
		rf := f.refunds[i]
		switch {
		case q.Get("payment_id") != "" && rf.PaymentID != q.Get("payment_id"),
			!gte.IsZero() && rf.CreatedAt.Before(gte),
			!lt.IsZero() && !rf.CreatedAt.Before(lt):
			continue
		}
		matched = append(matched, rf)
	}
	offset := 0
	if c := q.Get("cursor"); c != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(c, "cur"))
		if err != nil {
			return errorBody(http.StatusBadRequest, "invalid_request", "cursor")
		}
		offset = n
	}
	end := min(offset+limit, len(matched))
	out := map[string]any{"type": "list", "items": matched[min(offset, end):end]}
	if end < len(matched) {
		out["next_cursor"] = fmt.Sprintf("cur%d", end)
	}
	return http.StatusOK, out
}

// receiptAdds checks YooKassa's rule that a receipt's items add up to the
// amount paid, exactly, and that the tax service can reach the customer.
func receiptAdds(raw json.RawMessage, paid fakeAmount) bool {
	var rc fakeReceipt
	if json.Unmarshal(raw, &rc) != nil || len(rc.Items) == 0 || (rc.Customer.Email == "" && rc.Customer.Phone == "") {
		return false
	}
	sum := new(big.Rat)
	for _, it := range rc.Items {
		price, ok := new(big.Rat).SetString(it.Amount.Value)
		qty, ok2 := new(big.Rat).SetString(it.Quantity.String())
		if !ok || !ok2 || it.Amount.Currency != paid.Currency || it.VATCode < 1 || it.VATCode > 12 {
			return false
		}
		sum.Add(sum, price.Mul(price, qty))
	}
	total, ok := new(big.Rat).SetString(paid.Value)
	return ok && sum.Cmp(total) == 0
}

// minorUnits reads "499.00" as 49900: two places exactly, as YooKassa
// takes RUB.
func minorUnits(a fakeAmount) (int64, bool) {
	whole, frac, ok := strings.Cut(a.Value, ".")
	if !ok || len(frac) != 2 || a.Currency == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(whole+frac, 10, 64)
	return n, err == nil && n > 0
}

func methodID(body []byte) string {
	var req struct {
		PaymentMethodID string `json:"payment_method_id"`
	}
	_ = json.Unmarshal(body, &req)
	return req.PaymentMethodID
}

// canonical is a body with insignificant whitespace removed, so that the
// same parameters compare equal.
func canonical(body []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, body) != nil {
		return string(body)
	}
	return buf.String()
}

func errorBody(status int, code, parameter string) (int, any) {
	return status, map[string]any{"type": "error", "id": uuid.NewString(), "code": code,
		"description": "refused by the fake", "parameter": parameter}
}

func writeError(w http.ResponseWriter, status int, code, parameter string) {
	_, body := errorBody(status, code, parameter)
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// loseAnswer closes the connection without answering: the request was
// processed, and the caller cannot know.
func loseAnswer(t testing.TB, w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("fake: hijack: %v", err)
		return
	}
	_ = conn.Close()
}
