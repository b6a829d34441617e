package api

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/rebill/rebill/rebilltype"
	zhkhsim "github.com/rebill/rebill/zhkh/party/sim"
)

// DevZhkh is dev mode's simulated GIS ZhKH party: its ledger of the
// payment information it holds, and its parties' fault switches.
type DevZhkh interface {
	Known(party string) bool
	Ledger(ctx context.Context) ([]ZhkhLedgerEntry, error)
	SetFaults(ctx context.Context, party string, patch zhkhsim.FaultsPatch) (zhkhsim.Faults, error)
}

// ZhkhLedgerEntry is one report the simulated party holds, with the
// charge whose capture it reports ("" when rebill has no report of that
// id: none of its own).
type ZhkhLedgerEntry struct {
	ChargeID            string `json:"charge_id,omitempty"`
	zhkhsim.LedgerEntry `json:",inline"`
}

// maxZhkhProcessingLooks bounds the processing switch, as the registry's.
const maxZhkhProcessingLooks = 1000

// maxRefuseReason bounds a refusal's reason.
const maxRefuseReason = 500

func (s *Server) zhkhLedger(w http.ResponseWriter, r *http.Request) {
	if s.Dev.Zhkh == nil {
		s.fail(w, r, errUnknownID)
		return
	}
	entries, err := s.Dev.Zhkh.Ledger(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if entries == nil {
		entries = []ZhkhLedgerEntry{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": entries})
}

func (s *Server) zhkhFaults(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "party")
	if s.Dev.Zhkh == nil || !s.Dev.Zhkh.Known(name) {
		s.fail(w, r, errUnknownID)
		return
	}
	var patch zhkhsim.FaultsPatch
	if err := decodeBody(r, &patch); err != nil {
		s.fail(w, r, err)
		return
	}
	var errs rebilltype.Errors
	if patch.ErrorRate != nil && (*patch.ErrorRate < 0 || *patch.ErrorRate > 1) {
		errs.Add("error_rate", "must be between 0 and 1")
	}
	if patch.Processing != nil && (*patch.Processing < 0 || *patch.Processing > maxZhkhProcessingLooks) {
		errs.Add("processing", "must be 0..1000")
	}
	if patch.Refuse != nil && len(*patch.Refuse) > maxRefuseReason {
		errs.Add("refuse", "must be at most 500 bytes")
	}
	if err := errs.Err(); err != nil {
		s.fail(w, r, err)
		return
	}
	faults, err := s.Dev.Zhkh.SetFaults(r.Context(), name, patch)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, faults)
}
