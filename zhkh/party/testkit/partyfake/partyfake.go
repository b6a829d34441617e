// Package partyfake is an in-memory party that places payment information
// in GIS ZhKH on rebill's behalf, speaking docs/registry.md's protocol as
// the real one must: a replay of a report id answers as the first, a
// report may stay processing (202) for a while, GIS ZhKH may refuse one
// for good (422 with the reason), an answer may be lost after the work is
// done, a cancellation of an unknown id changes nothing. Tests (and the
// hand-run production check, as a process) drive it through its fault
// switches and see its ledger. The client certificate is the TLS
// server's business (tls.RequireAndVerifyClientCert).
package partyfake

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// Faults are the fake's switches.
type Faults struct {
	// Down answers every call 503 (nothing done).
	Down bool `json:"down"`
	// LoseAnswers does each report and cancellation, then drops the
	// connection without an answer.
	LoseAnswers bool `json:"lose_answers"`
	// Processing is how many looks a report made meanwhile answers 202 to
	// before GIS ZhKH answers.
	Processing int `json:"processing"`
	// Refuse, when set, is the reason GIS ZhKH refuses the reports made
	// meanwhile with.
	Refuse string `json:"refuse"`
}

// Entry is one report in the fake's ledger.
type Entry struct {
	Request map[string]any `json:"request"`
	// Status is processing, accepted, refused or cancelled.
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`

	looksLeft int
	refuse    string
}

// Fake is the party; use New.
type Fake struct {
	// BearerToken, when set, is required as Authorization: Bearer (401
	// otherwise).
	BearerToken string

	mu      sync.Mutex
	faults  Faults
	reports map[string]*Entry
}

// New is an empty party.
func New() *Fake { return &Fake{reports: map[string]*Entry{}} }

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

// Ledger returns a copy of the ledger, by report id.
func (f *Fake) Ledger() map[string]Entry {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]Entry, len(f.reports))
	for id, e := range f.reports {
		out[id] = *e
	}
	return out
}

// ServeHTTP answers the protocol below any prefix ending in /reports, and
// /faults (GET, PUT) and /ledger (GET) for a test driving it as a process.
func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.BearerToken != "" && r.Header.Get("Authorization") != "Bearer "+f.BearerToken {
		write(w, http.StatusUnauthorized, map[string]any{"error": map[string]string{"code": "unauthorized", "message": "bearer token"}})
		return
	}
	switch {
	case strings.HasSuffix(r.URL.Path, "/faults"):
		if r.Method == http.MethodPut {
			var faults Faults
			if err := json.NewDecoder(r.Body).Decode(&faults); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			f.SetFaults(faults)
		}
		write(w, http.StatusOK, f.Faults())
		return
	case strings.HasSuffix(r.URL.Path, "/ledger"):
		write(w, http.StatusOK, f.Ledger())
		return
	}
	_, rest, ok := strings.Cut(r.URL.Path, "/reports")
	if !ok {
		http.NotFound(w, r)
		return
	}
	f.mu.Lock()
	lose := f.serve(w, r, rest)
	f.mu.Unlock()
	if lose {
		panic(http.ErrAbortHandler) // the work is done; the connection drops without an answer
	}
}

func (f *Fake) serve(w http.ResponseWriter, r *http.Request, rest string) (lose bool) {
	if f.faults.Down {
		write(w, http.StatusServiceUnavailable, nil)
		return false
	}
	switch {
	case rest == "" && r.Method == http.MethodPost:
		return f.report(w, r)
	case strings.HasSuffix(rest, "/cancellation") && r.Method == http.MethodPost:
		return f.cancel(w, strings.TrimSuffix(strings.TrimPrefix(rest, "/"), "/cancellation"))
	case strings.HasPrefix(rest, "/") && r.Method == http.MethodGet:
		id := strings.TrimPrefix(rest, "/")
		e, ok := f.reports[id]
		if !ok {
			write(w, http.StatusOK, status(id, "not_found", ""))
			return false
		}
		f.look(e)
		write(w, http.StatusOK, status(id, e.Status, e.Reason))
		return false
	}
	http.NotFound(w, r)
	return false
}

func (f *Fake) report(w http.ResponseWriter, r *http.Request) (lose bool) {
	var req map[string]any
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		write(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"code": "bad_request", "message": err.Error()}})
		return false
	}
	id, _ := req["report_id"].(string)
	if id == "" {
		write(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"code": "bad_request", "message": "report_id"}})
		return false
	}
	e, ok := f.reports[id]
	if !ok {
		e = &Entry{Request: req, Status: "processing", looksLeft: f.faults.Processing, refuse: f.faults.Refuse}
		f.reports[id] = e
	}
	f.look(e)
	if f.faults.LoseAnswers {
		return true
	}
	switch e.Status {
	case "processing":
		w.Header().Set("Retry-After", strconv.Itoa(1))
		write(w, http.StatusAccepted, status(id, e.Status, ""))
	case "refused":
		write(w, http.StatusUnprocessableEntity, map[string]any{"error": map[string]string{"code": "refused", "message": e.Reason}})
	default:
		write(w, http.StatusOK, status(id, e.Status, ""))
	}
	return false
}

// look counts one look at a report: one still processing gets GIS ZhKH's
// answer once its looks are used up.
func (f *Fake) look(e *Entry) {
	if e.Status != "processing" {
		return
	}
	if e.looksLeft > 0 {
		e.looksLeft--
		return
	}
	if e.refuse != "" {
		e.Status, e.Reason = "refused", e.refuse
		return
	}
	e.Status = "accepted"
}

func (f *Fake) cancel(w http.ResponseWriter, id string) (lose bool) {
	e, ok := f.reports[id]
	if ok && e.Status == "processing" {
		w.Header().Set("Retry-After", "1")
		write(w, http.StatusAccepted, status(id, e.Status, ""))
		return false
	}
	answer := "not_found"
	if ok {
		if e.Status == "accepted" {
			e.Status = "cancelled"
		}
		answer = e.Status
	}
	if f.faults.LoseAnswers {
		return true
	}
	write(w, http.StatusOK, status(id, answer, ""))
	return false
}

func status(id, s, reason string) map[string]string {
	out := map[string]string{"report_id": id, "status": s}
	if reason != "" {
		out["reason"] = reason
	}
	return out
}

func write(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if body != nil {
		_ = json.NewEncoder(w).Encode(body)
	}
}
