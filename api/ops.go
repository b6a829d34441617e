package api

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/rebill/rebill/books"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/reports"
)

// Reconciliation reads the daily reconciliation's results (the replica
// when one is configured).
type Reconciliation interface {
	// Day returns the gateway's UTC day, pending when not yet checked.
	Day(ctx context.Context, gateway string, day time.Time) (books.Result, error)
	// Known reports whether gateway is one rebill reconciles.
	Known(gateway string) bool
	// RegistryDay returns the registry gateway's UTC day, pending when
	// not yet checked.
	RegistryDay(ctx context.Context, registry string, day time.Time) (books.Result, error)
	// KnownRegistry reports whether registry is a registry gateway rebill
	// reconciles.
	KnownRegistry(registry string) bool
}

// Reports builds the daily financial report.
type Reports interface {
	Daily(ctx context.Context, day time.Time) (reports.Daily, error)
}

type discrepancyJSON struct {
	Kind             books.Kind `json:"kind"`
	ChargeID         *uuid.UUID `json:"charge_id"`
	GatewayReference *string    `json:"gateway_reference"`
	Detail           string     `json:"detail"`
}

type reconciliationJSON struct {
	Date          string            `json:"date"`
	Gateway       string            `json:"gateway"`
	Status        books.Status      `json:"status"`
	CheckedAt     *time.Time        `json:"checked_at"`
	Operations    int               `json:"operations"`
	Discrepancies []discrepancyJSON `json:"discrepancies"`
}

// queryDate reads the required query parameter date (YYYY-MM-DD), a UTC
// day from 2000-01-01 to now's UTC day + 1, adding what is wrong with it
// to errs.
func queryDate(r *http.Request, now time.Time, errs *rebilltype.Errors) time.Time {
	v := r.URL.Query().Get("date")
	if v == "" {
		errs.Add("date", "is required: a UTC day as YYYY-MM-DD")
		return time.Time{}
	}
	d, err := time.Parse(time.DateOnly, v)
	if err != nil {
		errs.Add("date", "must be a day as YYYY-MM-DD")
		return d
	}
	last := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC).AddDate(0, 0, 1)
	if d.Before(firstReportDay) || d.After(last) {
		errs.Add("date", "must be a day from %s to %s (the service clock's today + 1 day)",
			firstReportDay.Format(time.DateOnly), last.Format(time.DateOnly))
	}
	return d
}

// firstReportDay is the earliest day reconciliation and reports take: no
// payment of rebill's is older, and a year 0000 or 9999 is a typing error.
var firstReportDay = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func (s *Server) getReconciliation(w http.ResponseWriter, r *http.Request) {
	var errs rebilltype.Errors
	day := queryDate(r, s.now().UTC(), &errs)
	gw, registry := r.URL.Query().Get("gateway"), r.URL.Query().Get("registry")
	switch {
	case gw == "" && registry == "":
		errs.Add("gateway", "or registry is required: the name of a configured gateway, or of a registry gateway")
		errs.Add("registry", "or gateway is required: the name of a registry gateway, or of a configured gateway")
	case gw != "" && registry != "":
		errs.Add("gateway", "and registry are exclusive: give one of them")
		errs.Add("registry", "and gateway are exclusive: give one of them")
	case gw != "" && !s.Reconciliation.Known(gw):
		errs.Add("gateway", "is not a configured gateway")
	case registry != "" && !s.Reconciliation.KnownRegistry(registry):
		errs.Add("registry", "is not a configured registry gateway")
	}
	if err := errs.Err(); err != nil {
		s.fail(w, r, err)
		return
	}
	var res books.Result
	var err error
	if registry != "" {
		res, err = s.Reconciliation.RegistryDay(r.Context(), registry, day)
	} else {
		res, err = s.Reconciliation.Day(r.Context(), gw, day)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := reconciliationJSON{Date: res.Date.Format(time.DateOnly), Gateway: res.Gateway, Status: res.Status,
		CheckedAt: res.CheckedAt, Operations: res.Operations, Discrepancies: make([]discrepancyJSON, len(res.Discrepancies))}
	for i, d := range res.Discrepancies {
		out.Discrepancies[i] = discrepancyJSON{Kind: d.Kind, ChargeID: d.ChargeID, Detail: d.Detail}
		if d.GatewayReference != "" {
			ref := d.GatewayReference
			out.Discrepancies[i].GatewayReference = &ref
		}
	}
	writeJSON(w, http.StatusOK, out)
}

type dailyReportJSON struct {
	Date string        `json:"date"`
	Data []reports.Row `json:"data"`
}

// wantsCSV: format=csv, or an Accept header that names text/csv (and not
// JSON first).
func wantsCSV(r *http.Request) bool {
	if f := r.URL.Query().Get("format"); f != "" {
		return f == "csv"
	}
	accept := r.Header.Get("Accept")
	i := strings.Index(accept, "text/csv")
	j := strings.Index(accept, "application/json")
	return i >= 0 && (j < 0 || i < j)
}

func (s *Server) getDailyReport(w http.ResponseWriter, r *http.Request) {
	var errs rebilltype.Errors
	day := queryDate(r, s.now().UTC(), &errs)
	if f := r.URL.Query().Get("format"); f != "" && f != "csv" && f != "json" {
		errs.Add("format", "must be json or csv")
	}
	if err := errs.Err(); err != nil {
		s.fail(w, r, err)
		return
	}
	rep, err := s.Reports.Daily(r.Context(), day)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if wantsCSV(r) {
		var buf bytes.Buffer
		if err := rep.WriteCSV(&buf); err != nil {
			s.fail(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.Header().Set("Content-Disposition", `attachment; filename="rebill-daily-`+day.Format(time.DateOnly)+`.csv"`)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(buf.Bytes())
		return
	}
	rows := rep.Rows
	if rows == nil {
		rows = []reports.Row{}
	}
	writeJSON(w, http.StatusOK, dailyReportJSON{Date: day.Format(time.DateOnly), Data: rows})
}
