// Package sourcefake is an in-memory bill source that speaks billsource's
// protocol as a real one would, for tests: bills numbered in publication
// order, publications that become visible after higher sequences
// (Reserve, then Commit), duplicates, pagination, and faults on demand
// (5xx, 429, stalls past the client's timeout, a required bearer token).
package sourcefake

import (
	"encoding/json"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/rebill/rebill/autopay/billsource"
)

// Source is the fake. The zero value is not usable: call New.
type Source struct {
	mu       sync.Mutex
	next     int64
	visible  []billsource.Bill // by sequence
	token    string
	faults   []Fault
	requests []Request
}

// Fault is how the next request is answered instead of normally.
type Fault struct {
	Status     int           // answered with this status (0: none)
	RetryAfter string        // the Retry-After header of a 429
	Stall      time.Duration // waits this long (or until the request is cancelled) first
}

// Request is a request the fake received, and how it answered.
type Request struct {
	Query  billsource.QueryRequest
	Status int
	Bills  int
}

// New returns an empty source; token, when not empty, is the bearer
// token it requires (401 otherwise).
func New(token string) *Source { return &Source{token: token} }

// Publish makes b visible at once under the next sequence, which it
// returns. Publishing a bill id again is a duplicate with its own
// sequence, as a source that republishes a corrected bill does.
func (s *Source) Publish(b billsource.Bill) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	b.Sequence = s.next
	s.visible = append(s.visible, b)
	return b.Sequence
}

// Reserve takes the next sequence for a bill that becomes visible only at
// Commit: a publication whose transaction commits after later ones.
func (s *Source) Reserve() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	return s.next
}

// Commit makes b visible under a sequence Reserve returned.
func (s *Source) Commit(seq int64, b billsource.Bill) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b.Sequence = seq
	s.visible = append(s.visible, b)
	sort.SliceStable(s.visible, func(i, j int) bool { return s.visible[i].Sequence < s.visible[j].Sequence })
}

// Head is the highest visible sequence.
func (s *Source) Head() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.head()
}

func (s *Source) head() int64 {
	if len(s.visible) == 0 {
		return 0
	}
	return s.visible[len(s.visible)-1].Sequence
}

// Inject queues faults for the next requests, one each.
func (s *Source) Inject(faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, faults...)
}

// Requests returns the requests received so far.
func (s *Source) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// ServeHTTP answers POST /bills/query.
func (s *Source) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/bills/query" {
		http.NotFound(w, r)
		return
	}
	var q billsource.QueryRequest
	if err := json.NewDecoder(r.Body).Decode(&q); err != nil || q.Limit < 1 {
		s.record(Request{Query: q, Status: http.StatusBadRequest})
		http.Error(w, "bad query", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	var fault Fault
	if len(s.faults) > 0 {
		fault, s.faults = s.faults[0], s.faults[1:]
	}
	s.mu.Unlock()
	if fault.Stall > 0 {
		select {
		case <-time.After(fault.Stall):
		case <-r.Context().Done():
			s.record(Request{Query: q, Status: 0})
			return
		}
	}
	if s.token != "" && r.Header.Get("Authorization") != "Bearer "+s.token {
		s.record(Request{Query: q, Status: http.StatusUnauthorized})
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if fault.Status != 0 {
		s.record(Request{Query: q, Status: fault.Status})
		if fault.RetryAfter != "" {
			w.Header().Set("Retry-After", fault.RetryAfter)
		}
		http.Error(w, http.StatusText(fault.Status), fault.Status)
		return
	}
	resp := s.answer(q)
	s.record(Request{Query: q, Status: http.StatusOK, Bills: len(resp.Bills)})
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// answer is the page q asks for, from what is visible now.
func (s *Source) answer(q billsource.QueryRequest) billsource.QueryResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	wanted := map[billsource.Account]bool{}
	for _, a := range q.Accounts {
		wanted[a] = true
	}
	resp := billsource.QueryResponse{Bills: []billsource.Bill{}, NextSequence: max(q.AfterSequence, s.head())}
	for _, b := range s.visible {
		if b.Sequence <= q.AfterSequence || !matches(wanted, b.Account) {
			continue
		}
		if len(resp.Bills) == q.Limit {
			resp.HasMore = true
			resp.NextSequence = resp.Bills[len(resp.Bills)-1].Sequence
			break
		}
		resp.Bills = append(resp.Bills, b)
	}
	return resp
}

// matches: a bill filed under several identifiers (an STS and a licence)
// is an answer to any of them.
func matches(wanted map[billsource.Account]bool, a billsource.Account) bool {
	return (a.ELS != "" && wanted[billsource.Account{ELS: a.ELS}]) ||
		(a.STS != "" && wanted[billsource.Account{STS: a.STS}]) ||
		(a.DriverLicense != "" && wanted[billsource.Account{DriverLicense: a.DriverLicense}])
}

func (s *Source) record(r Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r)
}
