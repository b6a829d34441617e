package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/charges/gateway"
)

const (
	// lostResponseHold is how long a lost answer keeps its connection open
	// when the caller never gives up; then the connection is dropped.
	lostResponseHold = 60 * time.Second
	// processTimeout bounds the database work for one accepted operation.
	processTimeout = 10 * time.Second
	// flakyFailures is how many calls per idempotency key tok_flaky refuses.
	flakyFailures = 2
	maxBodyBytes  = 64 << 10
	maxKeyLength  = 255
)

// server hosts the named gateways. It is an http.Handler.
type server struct {
	store books
	names map[string]bool
	log   zerolog.Logger
	mux   *http.ServeMux

	// abandon is closed on shutdown so that handlers holding a lost answer
	// drop their connection instead of stalling the shutdown for a minute.
	abandon     chan struct{}
	abandonOnce sync.Once
}

// NewServer returns the HTTP handler of the simulated provider hosting the
// gateways in names, each under "/{name}/" (see the package documentation
// for routes). [Migrate] must have run on pool.
func NewServer(pool *pgxpool.Pool, names []string, logger zerolog.Logger) http.Handler {
	return newServer(NewStore(pool), names, logger)
}

func newServer(store books, names []string, logger zerolog.Logger) *server {
	s := &server{
		store:   store,
		names:   make(map[string]bool, len(names)),
		log:     logger,
		mux:     http.NewServeMux(),
		abandon: make(chan struct{}),
	}
	for _, n := range names {
		s.names[n] = true
	}
	s.handle("POST /{gateway}/authorize", s.handleOperation(gateway.OpAuthorize))
	s.handle("POST /{gateway}/capture", s.handleOperation(gateway.OpCapture))
	s.handle("POST /{gateway}/void", s.handleOperation(gateway.OpVoid))
	s.handle("POST /{gateway}/refund", s.handleOperation(gateway.OpRefund))
	s.handle("GET /{gateway}/operations/{key}", s.handleLookup)
	s.handle("GET /{gateway}/operations", s.handleOperations)
	s.handle("GET /{gateway}/ledger", s.handleLedger)
	s.handle("GET /{gateway}/faults", s.handleGetFaults)
	s.handle("POST /{gateway}/faults", s.handleSetFaults)
	s.handle("GET /{gateway}/health", s.handleHealth)
	return s
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

// abandonLostResponses releases every handler that holds a lost answer.
func (s *server) abandonLostResponses() {
	s.abandonOnce.Do(func() { close(s.abandon) })
}

// handle registers h for pattern, answering 404 for gateways not hosted.
func (s *server) handle(pattern string, h func(w http.ResponseWriter, r *http.Request, gw string)) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		gw := r.PathValue("gateway")
		if !s.names[gw] {
			writeError(w, http.StatusNotFound, "unknown_gateway", "no gateway named "+gw)
			return
		}
		h(w, r, gw)
	})
}

// admit applies gw's faults to a call of the provider's API and reports
// whether to go on. op is the operation called, empty for other calls:
// error_rate applies to operations only, captures_down to captures,
// refunds_down to refunds.
func (s *server) admit(w http.ResponseWriter, r *http.Request, gw string, op gateway.Op) bool {
	isOperation := op != ""
	f, err := s.store.Faults(r.Context(), gw)
	if err != nil {
		s.internalError(w, r, err)
		return false
	}
	if f.Down {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, gw+" is down")
		return false
	}
	if op == gateway.OpCapture && f.CapturesDown {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, gw+" captures are down")
		return false
	}
	if op == gateway.OpRefund && f.RefundsDown {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, gw+" refunds are down")
		return false
	}
	if f.LatencyMS > 0 {
		t := time.NewTimer(time.Duration(f.LatencyMS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return false // the caller is gone; nobody reads an answer
		}
	}
	if isOperation && f.ErrorRate > 0 && rand.Float64() < f.ErrorRate {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, gw+" failed the call")
		return false
	}
	return true
}

func (s *server) handleOperation(op gateway.Op) func(http.ResponseWriter, *http.Request, string) {
	return func(w http.ResponseWriter, r *http.Request, gw string) {
		req, problem := decodeOpRequest(w, r, op)
		if problem != "" {
			writeError(w, http.StatusBadRequest, "invalid_request", problem)
			return
		}
		if !s.admit(w, r, gw, op) {
			return
		}
		// Once accepted, an operation is carried through even if the caller
		// hangs up meanwhile, as at a real provider: that is what makes an
		// outcome unknown rather than simply failed.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), processTimeout)
		defer cancel()

		kind, err := s.store.kindOf(ctx, gw, req)
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		if kind == kindFlaky {
			calls, err := s.store.countCall(ctx, gw, req.IdempotencyKey)
			if err != nil {
				s.internalError(w, r, err)
				return
			}
			if calls <= flakyFailures {
				writeError(w, http.StatusServiceUnavailable, codeUnavailable, gw+" is flaky")
				return
			}
		}
		o, err := s.store.perform(ctx, gw, req, kind)
		if errors.Is(err, errKeyReused) {
			writeError(w, http.StatusConflict, codeKeyReused, err.Error())
			return
		}
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		s.log.Debug().Str("gateway", gw).Str("op", string(o.Op)).
			Str("idempotency_key", o.IdempotencyKey).Str("reference", o.Reference).
			Str("status", string(o.Status)).Str("decline_code", o.DeclineCode).
			Bool("answer_lost", s.answerIsLost(ctx, gw, o)).Msg("operation")
		if s.answerIsLost(ctx, gw, o) {
			s.loseAnswer(r)
		}
		writeJSON(w, http.StatusOK, resultBodyOf(o))
	}
}

// answerIsLost reports whether the answer to o is swallowed: by its
// token's class (tok_lost_response), or, for a refund, by the refunds_lost
// fault.
func (s *server) answerIsLost(ctx context.Context, gw string, o operation) bool {
	if o.answerIsLost() {
		return true
	}
	if o.Op != gateway.OpRefund {
		return false
	}
	f, err := s.store.Faults(ctx, gw)
	return err == nil && f.RefundsLost
}

// loseAnswer writes nothing: it waits until the caller gives up, the
// server shuts down or lostResponseHold passes, then drops the connection.
// Returning normally instead would send an empty 200.
func (s *server) loseAnswer(r *http.Request) {
	t := time.NewTimer(lostResponseHold)
	defer t.Stop()
	select {
	case <-r.Context().Done():
	case <-t.C:
	case <-s.abandon:
	}
	panic(http.ErrAbortHandler)
}

// decodeOpRequest reads an operation call, or explains what is wrong with
// it. Explanations never quote the token.
func decodeOpRequest(w http.ResponseWriter, r *http.Request, op gateway.Op) (opRequest, string) {
	key := r.Header.Get(idempotencyHeader)
	if key == "" || len(key) > maxKeyLength {
		return opRequest{}, fmt.Sprintf("header %s must hold 1 to %d bytes", idempotencyHeader, maxKeyLength)
	}
	// Reading the body to its end also makes net/http watch the connection
	// and cancel r.Context() when the caller hangs up, which the latency
	// fault and lost answers wait on.
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		return opRequest{}, "body is unreadable or too large"
	}
	var b opBody
	if err := json.Unmarshal(raw, &b); err != nil {
		return opRequest{}, "body is not a JSON operation"
	}
	req := opRequest{
		Op:              op,
		IdempotencyKey:  key,
		Token:           b.Token,
		Amount:          b.Amount,
		Currency:        b.Currency,
		ChargeKey:       b.ChargeKey,
		AuthorizationID: b.AuthorizationID,
		Receipt:         b.Receipt,
	}
	switch {
	case op == gateway.OpAuthorize && req.Token == "":
		return req, "token is required"
	case op != gateway.OpAuthorize && req.AuthorizationID == "":
		return req, "authorization_id is required"
	case op != gateway.OpVoid && req.Amount <= 0:
		return req, "amount must be positive"
	case op != gateway.OpVoid && len(req.Currency) != 3:
		return req, "currency must be an ISO 4217 code"
	}
	return req, ""
}

func (s *server) handleLookup(w http.ResponseWriter, r *http.Request, gw string) {
	if !s.admit(w, r, gw, "") {
		return
	}
	o, err := s.store.lookup(r.Context(), gw, r.PathValue("key"))
	if errors.Is(err, gateway.ErrNotFound) {
		writeError(w, http.StatusNotFound, codeOperationNotFound, "no operation with that idempotency key")
		return
	}
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, resultBodyOf(o))
}

func (s *server) handleOperations(w http.ResponseWriter, r *http.Request, gw string) {
	if !s.admit(w, r, gw, "") {
		return
	}
	day, err := time.Parse(time.DateOnly, r.URL.Query().Get("day"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "day must be YYYY-MM-DD")
		return
	}
	ops, err := s.store.operationsOn(r.Context(), gw, day)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	out := listBody[resultBody]{Data: make([]resultBody, len(ops))}
	for i, o := range ops {
		out.Data[i] = resultBodyOf(o)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *server) handleLedger(w http.ResponseWriter, r *http.Request, gw string) {
	entries, err := s.store.Ledger(r.Context(), gw)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, listBody[LedgerEntry]{Data: entries})
}

func (s *server) handleGetFaults(w http.ResponseWriter, r *http.Request, gw string) {
	f, err := s.store.Faults(r.Context(), gw)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, f)
}

func (s *server) handleSetFaults(w http.ResponseWriter, r *http.Request, gw string) {
	var p FaultsPatch
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	// A misspelt switch would otherwise be a silent no-op.
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "body must be {down?, latency_ms?, error_rate?}")
		return
	}
	f, err := s.store.SetFaults(r.Context(), gw, p)
	if errors.Is(err, ErrInvalidFaults) {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	s.log.Info().Str("gateway", gw).Bool("down", f.Down).Int("latency_ms", f.LatencyMS).
		Float64("error_rate", f.ErrorRate).Msg("faults set")
	writeJSON(w, http.StatusOK, f)
}

// handleHealth tells a caller that gw is hosted here (404 otherwise, from
// handle) and whether it is up: 503 while its down switch is on. Latency
// and error_rate do not apply: rebill probes this once at start to check
// its configuration, not to measure the gateway.
func (s *server) handleHealth(w http.ResponseWriter, r *http.Request, gw string) {
	f, err := s.store.Faults(r.Context(), gw)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if f.Down {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, gw+" is down")
		return
	}
	writeJSON(w, http.StatusOK, healthBody{Gateway: gw, Status: "ok"})
}

// internalError logs err and answers 500 without details.
func (s *server) internalError(w http.ResponseWriter, r *http.Request, err error) {
	s.log.Error().Err(err).Str("method", r.Method).Str("path", r.URL.Path).Msg("gatewaysim request failed")
	writeError(w, http.StatusInternalServerError, "internal", "internal error")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the caller may be gone; nothing to do about it
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, errorBody{Error: code, Message: message})
}
