package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/api/idempotency"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/rebilltype"
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

// setDevClock moves the clock in the request's transaction, so that one
// Idempotency-Key moves it once: a retry that runs beside the original
// (its lease expired) rolls its move back with everything else. Due work is
// scanned only after the move committed, or the scan would see the old time.
func (s *Server) setDevClock(w http.ResponseWriter, r *http.Request) {
	var req setClockRequest
	tx, ok := s.decodeInTx(w, r, &req)
	if !ok {
		return
	}
	var (
		field string
		move  func(tx pgx.Tx) (time.Time, error)
	)
	switch {
	case (req.Advance == nil) == (req.Now == nil):
		s.fail(w, r, rebilltype.Errors{{Field: "", Message: "send exactly one of advance and now"}})
		return
	case req.Advance != nil:
		d, err := time.ParseDuration(*req.Advance)
		if err != nil || d <= 0 {
			s.fail(w, r, rebilltype.Errors{{Field: "advance", Message: `must be a positive duration such as "744h" or "90m"`}})
			return
		}
		field, move = "advance", func(tx pgx.Tx) (time.Time, error) { return s.Dev.Clock.Advance(r.Context(), tx, d) }
	default:
		field, move = "now", func(tx pgx.Tx) (time.Time, error) { return s.Dev.Clock.Set(r.Context(), tx, *req.Now) }
	}
	now, err := move(tx)
	if errors.Is(err, clock.ErrBackwards) || errors.Is(err, clock.ErrTooFar) {
		err = rebilltype.Errors{{Field: field, Message: err.Error()}}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if s.Dev.ClockMoved != nil {
		idempotency.AfterCommit(r.Context(), s.Dev.ClockMoved)
	}
	writeJSON(w, http.StatusOK, clockJSON{Now: now})
}

func (s *Server) gatewayLedger(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	if !s.KnownGateway(name) {
		s.fail(w, r, errUnknownID)
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
		s.fail(w, r, errUnknownID)
		return
	}
	var patch sim.FaultsPatch
	if err := decodeBody(r, &patch); err != nil {
		s.fail(w, r, err)
		return
	}
	var errs rebilltype.Errors
	if patch.LatencyMS != nil && (*patch.LatencyMS < 0 || *patch.LatencyMS > 120_000) {
		errs.Add("latency_ms", "must be 0..120000")
	}
	if patch.ErrorRate != nil && (*patch.ErrorRate < 0 || *patch.ErrorRate > 1) {
		errs.Add("error_rate", "must be between 0 and 1")
	}
	if err := errs.Err(); err != nil {
		s.fail(w, r, err)
		return
	}
	faults, err := s.Dev.Gateways.SetFaults(r.Context(), name, patch)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, faults)
}
