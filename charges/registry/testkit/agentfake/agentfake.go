// Package agentfake is an in-memory party that posts payments to the
// state payment registry on rebill's behalf, speaking docs/registry.md's
// protocol as the real one must: a replay of a payment id answers as the
// first, a payment may stay processing (202) for a while, an answer may be
// lost after the work is done, an annulment of an unknown id changes
// nothing, a rate limit (429) does nothing; its export lists a day's
// payments (or answers 404, as a party without one). Tests drive it through its
// fault switches and see its ledger; PaidOutside records a payment made
// elsewhere. The client certificate is the TLS server's business
// (tls.RequireAndVerifyClientCert); RequireClientCert also refuses, with
// 403, a request that came without one.
package agentfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Faults are the fake's switches.
type Faults struct {
	// Down answers every call 503 (nothing done).
	Down bool `json:"down"`
	// RateLimited answers every call 429 with Retry-After (nothing done).
	RateLimited bool `json:"rate_limited"`
	// LoseAnswers does each post and annulment, then drops the connection
	// without an answer.
	LoseAnswers bool `json:"lose_answers"`
	// Processing is how many looks (the post itself, its replays and
	// look-ups) a payment posted meanwhile answers 202 to before it is
	// accepted: a count, not a switch (0: accepted at once).
	Processing int `json:"processing"`
	// NoExport answers the export of payments 404, as a party that does
	// not offer it.
	NoExport bool `json:"no_export"`
}

// Entry is one payment in the fake's ledger.
type Entry struct {
	PaymentID   string `json:"payment_id"`
	UIN         string `json:"uin"`
	Amount      int64  `json:"amount"`
	PaymentDate string `json:"payment_date,omitempty"`
	// Status is processing, accepted or annulled.
	Status string `json:"status"`
	// Outside: paid elsewhere (PaidOutside), not through the API.
	Outside bool `json:"outside,omitempty"`
	// ReceivedAt is when the fake took it: the day it is exported under.
	ReceivedAt time.Time `json:"received_at"`
	// AcceptedAt and AnnulledAt are when it was accepted and annulled.
	AcceptedAt *time.Time `json:"accepted_at,omitempty"`
	AnnulledAt *time.Time `json:"annulled_at,omitempty"`

	looksLeft int
}

// Fake is the party; its zero value is not ready, use New.
type Fake struct {
	// BearerToken, when set, is required as Authorization: Bearer (401
	// otherwise).
	BearerToken string
	// RequireClientCert refuses, with 403, a request without a verified
	// client certificate.
	RequireClientCert bool
	// RetryAfter is what 202 and 429 say (whole seconds, at least 1).
	RetryAfter time.Duration
	// Now stamps the payments' times; nil: time.Now.
	Now func() time.Time
	// ExportPage is how many payments one page of the export holds.
	ExportPage int

	mu       sync.Mutex
	faults   Faults
	payments map[string]*Entry
	order    []string
	outside  int
	settled  map[string]bool
	calls    int
}

// New returns an empty fake.
func New() *Fake {
	return &Fake{payments: map[string]*Entry{}, RetryAfter: time.Second, ExportPage: 100}
}

func (f *Fake) now() time.Time {
	if f.Now != nil {
		return f.Now().UTC()
	}
	return time.Now().UTC() // the registry stamps its own wall clock, not rebill's
}

// SetFaults sets the switches.
func (f *Fake) SetFaults(faults Faults) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = faults
}

// Faults returns the switches.
func (f *Fake) Faults() Faults {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.faults
}

// PaidOutside records a payment of amount against uin made elsewhere (at
// another bank, under a payment id of its own) and returns its id.
func (f *Fake) PaidOutside(uin string, amount int64) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.outside++
	id := fmt.Sprintf("outside-%d", f.outside)
	now := f.now()
	f.add(&Entry{PaymentID: id, UIN: uin, Amount: amount, Status: "accepted", Outside: true, ReceivedAt: now, AcceptedAt: &now})
	return id
}

// Settle makes the fake report the accrual uin settled (paid in full in
// the registry's judgement, as GIS GMP judges a fine paid at its discount
// before the deadline).
func (f *Fake) Settle(uin string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.settled == nil {
		f.settled = map[string]bool{}
	}
	f.settled[uin] = true
}

// Ledger lists the payments, oldest first.
func (f *Fake) Ledger() []Entry {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Entry, len(f.order))
	for i, id := range f.order {
		out[i] = *f.payments[id]
	}
	return out
}

// Calls counts the calls that reached the API (refused ones included).
func (f *Fake) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *Fake) add(e *Entry) {
	f.payments[e.PaymentID] = e
	f.order = append(f.order, e.PaymentID)
}

// ServeHTTP answers the protocol's endpoints, and, for a fake served on
// its own and driven from outside, GET /faults, PUT /faults (replaces
// every switch: one left out is off), PATCH /faults (changes only the
// switches given), GET /ledger and POST /outside ({uin, amount}).
func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	if f.BearerToken != "" && r.Header.Get("Authorization") != "Bearer "+f.BearerToken {
		refuse(w, http.StatusUnauthorized, "unauthorized", "no or wrong bearer token")
		return
	}
	if f.RequireClientCert && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
		refuse(w, http.StatusForbidden, "forbidden", "no verified client certificate")
		return
	}
	path := strings.Trim(r.URL.Path, "/")
	switch {
	case r.Method == http.MethodGet && path == "ledger":
		answer(w, http.StatusOK, f.Ledger())
		return
	case path == "faults":
		f.serveFaults(w, r)
		return
	case r.Method == http.MethodPost && path == "outside":
		var body struct {
			UIN    string `json:"uin"`
			Amount int64  `json:"amount"`
		}
		if json.NewDecoder(r.Body).Decode(&body) != nil || body.UIN == "" || body.Amount <= 0 {
			refuse(w, http.StatusBadRequest, "invalid_request", "want {uin, amount}")
			return
		}
		answer(w, http.StatusCreated, map[string]string{"payment_id": f.PaidOutside(body.UIN, body.Amount)})
		return
	}

	f.mu.Lock()
	lose := f.serveAPI(w, r, path)
	f.mu.Unlock()
	if lose {
		panic(http.ErrAbortHandler) // the work is done; the connection drops without an answer
	}
}

// serveAPI answers the protocol's endpoints, under f.mu; true: the answer
// is to be lost (nothing was written).
func (f *Fake) serveAPI(w http.ResponseWriter, r *http.Request, path string) (lose bool) {
	switch {
	case f.faults.Down:
		refuse(w, http.StatusServiceUnavailable, "unavailable", "down")
		return false
	case f.faults.RateLimited:
		w.Header().Set("Retry-After", f.retryAfter())
		refuse(w, http.StatusTooManyRequests, "rate_limited", "too many requests")
		return false
	}
	parts := strings.Split(path, "/")
	switch {
	case r.Method == http.MethodPost && path == "payments":
		return f.post(w, r)
	case r.Method == http.MethodGet && path == "payments":
		f.export(w, r)
	case r.Method == http.MethodPost && len(parts) == 3 && parts[0] == "payments" && parts[2] == "annulment":
		return f.annul(w, parts[1])
	case r.Method == http.MethodGet && len(parts) == 2 && parts[0] == "payments":
		f.lookup(w, parts[1])
	case r.Method == http.MethodGet && len(parts) == 2 && parts[0] == "quittances":
		f.quittance(w, parts[1])
	default:
		refuse(w, http.StatusNotFound, "not_found", "no such endpoint")
	}
	return false
}

func (f *Fake) retryAfter() string { return strconv.Itoa(max(int(f.RetryAfter/time.Second), 1)) }

// post imports a payment, or answers a replay as the first was answered.
func (f *Fake) post(w http.ResponseWriter, r *http.Request) (lose bool) {
	var p Entry
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.PaymentID == "" || p.UIN == "" || p.Amount <= 0 {
		refuse(w, http.StatusBadRequest, "invalid_request", "want payment_id, uin and a positive amount")
		return false
	}
	e, ok := f.payments[p.PaymentID]
	switch {
	case ok && (e.UIN != p.UIN || e.Amount != p.Amount):
		refuse(w, http.StatusConflict, "payment_id_reused", "the payment id is another payment's")
		return false
	case !ok:
		now := f.now()
		e = &Entry{PaymentID: p.PaymentID, UIN: p.UIN, Amount: p.Amount, PaymentDate: p.PaymentDate, Status: "accepted",
			ReceivedAt: now, AcceptedAt: &now}
		if f.faults.Processing > 0 {
			e.Status, e.looksLeft, e.AcceptedAt = "processing", f.faults.Processing, nil
		}
		f.add(e)
	}
	f.look(e)
	if f.faults.LoseAnswers {
		return true
	}
	f.status(w, e, http.StatusCreated)
	return false
}

// look counts one look at e: a processing payment is accepted once its
// looks are used up.
func (f *Fake) look(e *Entry) {
	if e.Status != "processing" {
		return
	}
	if e.looksLeft > 0 {
		e.looksLeft--
		return
	}
	now := f.now()
	e.Status, e.AcceptedAt = "accepted", &now
}

// status answers e's status: 202 while it is processing.
func (f *Fake) status(w http.ResponseWriter, e *Entry, code int) {
	if e.Status == "processing" {
		w.Header().Set("Retry-After", f.retryAfter())
		code = http.StatusAccepted
	}
	answer(w, code, map[string]string{"payment_id": e.PaymentID, "status": e.Status})
}

// annul annuls a payment (withdraws one still processing); an unknown id
// is nothing to annul.
func (f *Fake) annul(w http.ResponseWriter, id string) (lose bool) {
	e, ok := f.payments[id]
	if ok && e.Status != "annulled" {
		now := f.now()
		e.Status, e.AnnulledAt = "annulled", &now
	}
	if f.faults.LoseAnswers {
		return true
	}
	status := "annulled"
	if !ok {
		status = "not_found"
	}
	answer(w, http.StatusOK, map[string]string{"payment_id": id, "status": status})
	return false
}

func (f *Fake) lookup(w http.ResponseWriter, id string) {
	e, ok := f.payments[id]
	if !ok {
		answer(w, http.StatusOK, map[string]string{"payment_id": id, "status": "not_found"})
		return
	}
	f.look(e)
	f.status(w, e, http.StatusOK)
}

// quittance lists the payments the registry holds against uin (not those
// still processing).
func (f *Fake) quittance(w http.ResponseWriter, uin string) {
	type payment struct {
		PaymentID string `json:"payment_id"`
		Amount    int64  `json:"amount"`
		Annulled  bool   `json:"annulled"`
	}
	payments := []payment{}
	for _, id := range f.order {
		if e := f.payments[id]; e.UIN == uin && e.Status != "processing" {
			payments = append(payments, payment{PaymentID: e.PaymentID, Amount: e.Amount, Annulled: e.Status == "annulled"})
		}
	}
	answer(w, http.StatusOK, map[string]any{"uin": uin, "payments": payments, "settled": f.settled[uin]})
}

func (f *Fake) serveFaults(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPut, http.MethodPatch:
		var faults Faults
		if r.Method == http.MethodPatch {
			faults = f.Faults() // the switches the body leaves out stay as they are
		}
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&faults); err != nil {
			refuse(w, http.StatusBadRequest, "invalid_request", "want the faults object: "+err.Error())
			return
		}
		f.SetFaults(faults)
	default:
		refuse(w, http.StatusMethodNotAllowed, "method_not_allowed", "GET, PUT or PATCH")
		return
	}
	answer(w, http.StatusOK, f.Faults())
}

func answer(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

func refuse(w http.ResponseWriter, code int, errCode, message string) {
	answer(w, code, map[string]any{"error": map[string]string{"code": errCode, "message": message}})
}

// exportPayment is one payment of the export.
type exportPayment struct {
	PaymentID  string     `json:"payment_id"`
	UIN        string     `json:"uin"`
	Amount     int64      `json:"amount"`
	Status     string     `json:"status"`
	ReceivedAt time.Time  `json:"received_at"`
	AcceptedAt *time.Time `json:"accepted_at"`
	AnnulledAt *time.Time `json:"annulled_at"`
}

// export lists the payments taken through the API on the UTC day of
// ?date=, a page at a time (?cursor= from the last page's next_cursor);
// payments made elsewhere are no part of this party's export.
func (f *Fake) export(w http.ResponseWriter, r *http.Request) {
	if f.faults.NoExport {
		refuse(w, http.StatusNotFound, "not_found", "no such endpoint")
		return
	}
	day, err := time.Parse(time.DateOnly, r.URL.Query().Get("date"))
	if err != nil {
		refuse(w, http.StatusBadRequest, "invalid_request", "want date=YYYY-MM-DD")
		return
	}
	start := 0
	if c := r.URL.Query().Get("cursor"); c != "" {
		if start, err = strconv.Atoi(c); err != nil || start < 0 {
			refuse(w, http.StatusBadRequest, "invalid_request", "cursor is not one of this export's")
			return
		}
	}
	page := []exportPayment{}
	next := ""
	for i := start; i < len(f.order); i++ {
		e := f.payments[f.order[i]]
		if e.Outside || e.ReceivedAt.Before(day) || !e.ReceivedAt.Before(day.Add(24*time.Hour)) {
			continue
		}
		if len(page) == max(f.ExportPage, 1) {
			next = strconv.Itoa(i)
			break
		}
		page = append(page, exportPayment{PaymentID: e.PaymentID, UIN: e.UIN, Amount: e.Amount, Status: e.Status,
			ReceivedAt: e.ReceivedAt, AcceptedAt: e.AcceptedAt, AnnulledAt: e.AnnulledAt})
	}
	answer(w, http.StatusOK, map[string]any{"date": day.Format(time.DateOnly), "payments": page, "next_cursor": next})
}
