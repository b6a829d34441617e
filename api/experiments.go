package api

import (
	"context"
	"math"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/rebill/rebill/experiments"
)

// Experiments reads the experiments' reports (support and admin).
type Experiments interface {
	List(ctx context.Context) ([]experiments.Report, error)
	// Get returns experiments.ErrNotFound for a key not in the file.
	Get(ctx context.Context, key string) (experiments.Report, error)
}

type rateJSON struct {
	Successes int64    `json:"successes"`
	Trials    int64    `json:"trials"`
	Rate      *float64 `json:"rate"`
	CILow     *float64 `json:"ci_low"`
	CIHigh    *float64 `json:"ci_high"`
}

type moneyJSON struct {
	Currency string `json:"currency"`
	Amount   int64  `json:"amount"`
}

type comparisonJSON struct {
	Metric      string  `json:"metric"`
	Difference  float64 `json:"difference"`
	CILow       float64 `json:"ci_low"`
	CIHigh      float64 `json:"ci_high"`
	PValue      float64 `json:"p_value"`
	Alpha       float64 `json:"alpha"`
	Verdict     string  `json:"verdict"`
	VerdictText string  `json:"verdict_text"`
}

type armParamsJSON struct {
	DunningSeconds  []int64  `json:"dunning_seconds,omitempty"`
	Hour            *int     `json:"hour,omitempty"`
	TimeoutMS       *int64   `json:"timeout_ms,omitempty"`
	RetryBaseMS     *int64   `json:"retry_base_ms,omitempty"`
	RetryMaxMS      *int64   `json:"retry_max_ms,omitempty"`
	Rule            string   `json:"rule,omitempty"`
	Priority        []string `json:"priority,omitempty"`
	UpcomingSeconds *int64   `json:"upcoming_seconds,omitempty"`
}

type armJSON struct {
	Name                 string          `json:"name"`
	Weight               int             `json:"weight"`
	InFile               bool            `json:"in_file"`
	Parameters           armParamsJSON   `json:"parameters"`
	Subscriptions        int64           `json:"subscriptions"`
	Charges              int64           `json:"charges"`
	FirstAttemptApproval rateJSON        `json:"first_attempt_approval"`
	DunningRecovery      rateJSON        `json:"dunning_recovery"`
	ReviewRate           rateJSON        `json:"review_rate"`
	UnknownRate          rateJSON        `json:"unknown_rate"`
	MedianTimeToPay      *int64          `json:"median_time_to_pay_seconds"`
	Collected            []moneyJSON     `json:"collected"`
	Commission           []moneyJSON     `json:"commission"`
	VersusControl        *comparisonJSON `json:"versus_control"`
}

type eligibleJSON struct {
	Currencies   []string   `json:"currencies"`
	Intervals    []string   `json:"intervals"`
	CreatedAfter *time.Time `json:"created_after"`
}

type experimentJSON struct {
	Object        string       `json:"object"`
	Key           string       `json:"key"`
	Description   string       `json:"description"`
	Policy        string       `json:"policy"`
	Status        string       `json:"status"`
	Start         time.Time    `json:"start"`
	Stop          *time.Time   `json:"stop"`
	Eligible      eligibleJSON `json:"eligible"`
	Method        string       `json:"method"`
	MinPerArm     int64        `json:"min_per_arm"`
	PrimaryMetric string       `json:"primary_metric"`
	Alpha         float64      `json:"alpha"`
	Arms          []armJSON    `json:"arms"`
}

func finite(f float64) *float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	v := math.Round(f*1_000_000) / 1_000_000
	return &v
}

func toRateJSON(r experiments.Rate) rateJSON {
	return rateJSON{Successes: r.Successes, Trials: r.Trials, Rate: finite(r.Value), CILow: finite(r.Low), CIHigh: finite(r.High)}
}

func toMoneyJSON(list []experiments.Money) []moneyJSON {
	out := make([]moneyJSON, len(list))
	for i, m := range list {
		out[i] = moneyJSON(m)
	}
	return out
}

func ms(d time.Duration) *int64 {
	if d == 0 {
		return nil
	}
	v := d.Milliseconds()
	return &v
}

func toParamsJSON(p experiments.Params) armParamsJSON {
	out := armParamsJSON{Hour: p.Hour, TimeoutMS: ms(p.Timeout), RetryBaseMS: ms(p.RetryBase), RetryMaxMS: ms(p.RetryMax),
		Rule: p.Rule, Priority: p.Priority}
	for _, d := range p.Dunning {
		out.DunningSeconds = append(out.DunningSeconds, int64(d/time.Second))
	}
	if p.Upcoming > 0 {
		s := int64(p.Upcoming / time.Second)
		out.UpcomingSeconds = &s
	}
	return out
}

func toExperimentJSON(rep experiments.Report) experimentJSON {
	e := rep.Experiment
	out := experimentJSON{Object: "experiment", Key: e.Key, Description: e.Description, Policy: string(e.Policy), Status: rep.Status,
		Start: e.Start.UTC(), Method: "fixed_horizon", MinPerArm: e.MinPerArm, PrimaryMetric: rep.Primary, Alpha: experiments.Alpha,
		Eligible: eligibleJSON{Currencies: e.Eligible.Currencies, Intervals: e.Eligible.Intervals}, Arms: []armJSON{}}
	if out.Eligible.Currencies == nil {
		out.Eligible.Currencies = []string{}
	}
	if out.Eligible.Intervals == nil {
		out.Eligible.Intervals = []string{}
	}
	if !e.Eligible.CreatedAfter.IsZero() {
		t := e.Eligible.CreatedAfter.UTC()
		out.Eligible.CreatedAfter = &t
	}
	if !e.Stop.IsZero() {
		t := e.Stop.UTC()
		out.Stop = &t
	}
	for _, a := range rep.Arms {
		arm := armJSON{Name: a.Arm, Weight: a.Weight, InFile: a.InFile, Subscriptions: a.Subscriptions, Charges: a.Charges,
			FirstAttemptApproval: toRateJSON(a.FirstAttempt), DunningRecovery: toRateJSON(a.Recovery),
			ReviewRate: toRateJSON(a.Review), UnknownRate: toRateJSON(a.Unknown),
			Collected: toMoneyJSON(a.Collected), Commission: toMoneyJSON(a.Commission)}
		if conf, ok := e.Arm(a.Arm); ok {
			arm.Parameters = toParamsJSON(conf.Params)
		}
		if a.MedianTimeToPay != nil {
			s := int64(*a.MedianTimeToPay / time.Second)
			arm.MedianTimeToPay = &s
		}
		if c := a.Versus; c != nil {
			arm.VersusControl = &comparisonJSON{Metric: rep.Primary, Difference: *finiteOr0(c.Difference),
				CILow: *finiteOr0(c.Low), CIHigh: *finiteOr0(c.High), PValue: *finiteOr0(c.PValue), Alpha: c.Alpha,
				Verdict: string(c.Verdict), VerdictText: experiments.VerdictText(c.Verdict, e.MinPerArm)}
		}
		out.Arms = append(out.Arms, arm)
	}
	return out
}

func finiteOr0(f float64) *float64 {
	if v := finite(f); v != nil {
		return v
	}
	zero := 0.0
	return &zero
}

// listExperiments answers GET /v1/experiments: every configured
// experiment with its results.
func (s *Server) listExperiments(w http.ResponseWriter, r *http.Request) {
	data := []experimentJSON{}
	if s.Experiments != nil {
		reps, err := s.Experiments.List(r.Context())
		if err != nil {
			s.fail(w, r, err)
			return
		}
		for _, rep := range reps {
			data = append(data, toExperimentJSON(rep))
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Data []experimentJSON `json:"data"`
	}{data})
}

// getExperiment answers GET /v1/experiments/{key}.
func (s *Server) getExperiment(w http.ResponseWriter, r *http.Request) {
	if s.Experiments == nil {
		s.fail(w, r, experiments.ErrNotFound)
		return
	}
	rep, err := s.Experiments.Get(r.Context(), chi.URLParam(r, "key"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toExperimentJSON(rep))
}
