package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/internal/clock"
)

// DevGateways is the simulated gateways' ledger and fault switches.
type DevGateways interface {
	Ledger(ctx context.Context, gateway string) ([]sim.LedgerEntry, error)
	SetFaults(ctx context.Context, gateway string, patch sim.FaultsPatch) (sim.Faults, error)
}

type clockJSON struct {
	Now time.Time `json:"now"`
}

func (s *Server) getDevClock(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, clockJSON{Now: s.Dev.Clock.Now()})
}

type setClockRequest struct {
	Advance *string    `json:"advance"`
	Now     *time.Time `json:"now"`
}

func (s *Server) setDevClock(w http.ResponseWriter, r *http.Request) {
	var req setClockRequest
	if !decodeBody(w, r, &req) {
		return
	}
	var (
		now time.Time
		err error
	)
	switch {
	case (req.Advance == nil) == (req.Now == nil):
		writeProblem(w, fieldProblem("", "send exactly one of advance and now"))
		return
	case req.Advance != nil:
		d, perr := time.ParseDuration(*req.Advance)
		if perr != nil || d <= 0 {
			writeProblem(w, fieldProblem("advance", "must be a positive duration such as \"744h\" or \"90m\""))
			return
		}
		now, err = s.Dev.Clock.Advance(r.Context(), d)
	default:
		now, err = s.Dev.Clock.Set(r.Context(), *req.Now)
	}
	if errors.Is(err, clock.ErrBackwards) {
		writeProblem(w, fieldProblem("now", "the clock only moves forward"))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if s.Dev.ClockMoved != nil {
		s.Dev.ClockMoved(context.WithoutCancel(r.Context()))
	}
	writeJSON(w, http.StatusOK, clockJSON{Now: now})
}

func (s *Server) gatewayLedger(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	if !s.KnownGateway(name) {
		writeProblem(w, problemNotFound)
		return
	}
	entries, err := s.Dev.Gateways.Ledger(r.Context(), name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if entries == nil {
		entries = []sim.LedgerEntry{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": entries})
}

func (s *Server) gatewayFaults(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	if !s.KnownGateway(name) {
		writeProblem(w, problemNotFound)
		return
	}
	var patch sim.FaultsPatch
	if !decodeBody(w, r, &patch) {
		return
	}
	if patch.LatencyMS != nil && (*patch.LatencyMS < 0 || *patch.LatencyMS > 120_000) {
		writeProblem(w, fieldProblem("latency_ms", "must be 0..120000"))
		return
	}
	if patch.ErrorRate != nil && (*patch.ErrorRate < 0 || *patch.ErrorRate > 1) {
		writeProblem(w, fieldProblem("error_rate", "must be between 0 and 1"))
		return
	}
	faults, err := s.Dev.Gateways.SetFaults(r.Context(), name, patch)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, faults)
}
