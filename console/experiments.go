package console

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/rebill/rebill/experiments"
)

// experimentView is an experiment's report as the pages show it: every
// figure already in words, so that the templates only place them.
type experimentView struct {
	Key, Description string
	Policy, Label    string
	Status           string
	Start            time.Time
	Stop             *time.Time
	Currencies       string
	Intervals        string
	CreatedAfter     *time.Time
	MinPerArm        int64
	Primary          string
	Alpha            string
	Treatments       int
	Arms             []armView
}

type armView struct {
	Name string
	// InFile is false for an arm the records hold but the file no longer
	// has.
	InFile                 bool
	Control                bool
	Weight                 int
	Share                  string
	Params                 string
	Subscriptions, Charges int64
	FirstAttempt, Recovery rateView
	Review, Unknown        rateView
	MedianTimeToPay        string
	Collected, Commission  string
	Versus                 *versusView
}

// rateView is a rate with its counts; CI is empty when the rate has no
// interval to show.
type rateView struct{ Value, Counts, CI string }

type versusView struct {
	Difference, CI, PValue, Alpha string
	Verdict, VerdictText          string
}

func (h *Handler) experimentsList(w http.ResponseWriter, r *http.Request) {
	s := sessionFrom(r.Context())
	var list []experimentView
	if h.opts.Experiments != nil {
		reps, err := h.opts.Experiments.List(r.Context())
		if err != nil {
			h.fail(w, r, s, fmt.Errorf("list experiments: %w", err))
			return
		}
		for _, rep := range reps {
			list = append(list, viewExperiment(rep))
		}
	}
	h.show(w, r, "experiments", "Experiments", list)
}

func (h *Handler) experiment(w http.ResponseWriter, r *http.Request) {
	s := sessionFrom(r.Context())
	if h.opts.Experiments == nil {
		h.fail(w, r, s, errNotFound)
		return
	}
	rep, err := h.opts.Experiments.Get(r.Context(), chi.URLParam(r, "key"))
	if err != nil {
		h.fail(w, r, s, fmt.Errorf("read experiment: %w", err))
		return
	}
	v := viewExperiment(rep)
	h.show(w, r, "experiment", "Experiment "+v.Key, v)
}

func viewExperiment(rep experiments.Report) experimentView {
	e := rep.Experiment
	v := experimentView{Key: e.Key, Description: e.Description, Policy: string(e.Policy), Label: policyLabel(e.Policy),
		Status: rep.Status, Start: e.Start, Currencies: strings.Join(e.Eligible.Currencies, ", "),
		Intervals: strings.Join(e.Eligible.Intervals, ", "), MinPerArm: e.MinPerArm, Primary: metricLabel(rep.Primary),
		Alpha: decimal(experiments.Alpha)}
	if !e.Stop.IsZero() {
		v.Stop = &e.Stop
	}
	if !e.Eligible.CreatedAfter.IsZero() {
		v.CreatedAfter = &e.Eligible.CreatedAfter
	}
	total := 0
	for _, a := range e.Arms {
		total += a.Weight
		if a.Name != experiments.Control {
			v.Treatments++
		}
	}
	for _, a := range rep.Arms {
		av := armView{Name: a.Arm, InFile: a.InFile, Weight: a.Weight, Control: a.Arm == experiments.Control,
			Subscriptions: a.Subscriptions, Charges: a.Charges,
			FirstAttempt: withCI(a.FirstAttempt), Recovery: withCI(a.Recovery),
			Review: counted(a.Review), Unknown: counted(a.Unknown),
			MedianTimeToPay: "—", Collected: moneyList(a.Collected), Commission: moneyList(a.Commission)}
		if a.InFile && total > 0 {
			av.Share = percent(float64(a.Weight) / float64(total))
		}
		if conf, ok := e.Arm(a.Arm); ok {
			av.Params = paramsText(e.Policy, conf)
		}
		if a.MedianTimeToPay != nil {
			av.MedianTimeToPay = span(*a.MedianTimeToPay)
		}
		if c := a.Versus; c != nil {
			av.Versus = &versusView{Difference: points(c.Difference), PValue: pValue(c.PValue), Alpha: decimal(c.Alpha),
				Verdict: string(c.Verdict), VerdictText: experiments.VerdictText(c.Verdict, e.MinPerArm)}
			if !math.IsNaN(c.Low) && !math.IsNaN(c.High) {
				av.Versus.CI = points(c.Low) + " to " + points(c.High)
			}
		}
		v.Arms = append(v.Arms, av)
	}
	return v
}

func policyLabel(p experiments.Policy) string {
	switch p {
	case experiments.PolicyDunning:
		return "dunning schedule"
	case experiments.PolicyGatewayTimeout:
		return "gateway timeout and technical retry backoff"
	case experiments.PolicyRouting:
		return "gateway routing of new card bindings"
	case experiments.PolicyNoticeLead:
		return "lead time of the upcoming-charge notice"
	}
	return string(p)
}

func metricLabel(m string) string {
	switch m {
	case experiments.MetricFirstAttempt:
		return "first-attempt approval"
	case experiments.MetricRecovery:
		return "dunning recovery"
	}
	return m
}

// paramsText says what an arm sets, in the file's units.
func paramsText(policy experiments.Policy, a experiments.Arm) string {
	if a.Name == experiments.Control {
		return "the default policy"
	}
	p := a.Params
	var parts []string
	switch policy {
	case experiments.PolicyDunning:
		offsets := make([]string, len(p.Dunning))
		for i, d := range p.Dunning {
			offsets[i] = fileDuration(d)
		}
		s := "retries " + strings.Join(offsets, ", ") + " after the first decline"
		if p.Hour != nil {
			s += fmt.Sprintf(", each at %02d:00 in the subscription's time zone", *p.Hour)
		}
		parts = append(parts, s)
	case experiments.PolicyGatewayTimeout:
		if p.Timeout > 0 {
			parts = append(parts, "timeout "+fileDuration(p.Timeout))
		}
		if p.RetryBase > 0 {
			parts = append(parts, "retry backoff from "+fileDuration(p.RetryBase))
		}
		if p.RetryMax > 0 {
			parts = append(parts, "retry backoff up to "+fileDuration(p.RetryMax))
		}
	case experiments.PolicyRouting:
		s := "rule " + p.Rule
		if len(p.Priority) > 0 {
			s += ": " + strings.Join(p.Priority, ", ")
		}
		parts = append(parts, s)
	case experiments.PolicyNoticeLead:
		parts = append(parts, "charge.upcoming "+fileDuration(p.Upcoming)+" before the renewal")
	}
	return strings.Join(parts, "; ")
}

// fileDuration writes d as the experiments file does: whole days as "3d",
// and no zero minutes or seconds ("36h", not "36h0m0s").
func fileDuration(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// span writes a time to pay to the precision a person reads it at.
func span(d time.Duration) string {
	switch {
	case d >= 24*time.Hour:
		return fmt.Sprintf("%d d %d h", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
	case d >= time.Hour:
		return fmt.Sprintf("%d h %d min", d/time.Hour, d%time.Hour/time.Minute)
	case d >= time.Minute:
		return fmt.Sprintf("%d min %d s", d/time.Minute, d%time.Minute/time.Second)
	}
	return fmt.Sprintf("%d s", d/time.Second)
}

// withCI is a rate with its 95 % interval; a rate with no trials is a
// dash, not 0 %.
func withCI(r experiments.Rate) rateView {
	v := counted(r)
	if r.Trials > 0 && !math.IsNaN(r.Low) && !math.IsNaN(r.High) {
		v.CI = percent(r.Low) + " – " + percent(r.High)
	}
	return v
}

func counted(r experiments.Rate) rateView {
	if r.Trials == 0 || math.IsNaN(r.Value) {
		return rateView{Value: "—"}
	}
	return rateView{Value: percent(r.Value), Counts: fmt.Sprintf("%d of %d", r.Successes, r.Trials)}
}

// points writes a difference of rates in percentage points, signed.
func points(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "—"
	}
	s := strconv.FormatFloat(f*100, 'f', 1, 64)
	if s == "-0.0" {
		s = "0.0"
	}
	if !strings.HasPrefix(s, "-") && s != "0.0" {
		s = "+" + s
	}
	return s + " pp"
}

func pValue(p float64) string {
	switch {
	case math.IsNaN(p):
		return "—"
	case p < 0.0001:
		return "< 0.0001"
	}
	return strconv.FormatFloat(p, 'f', 4, 64)
}

func decimal(f float64) string { return strconv.FormatFloat(f, 'g', 3, 64) }

func moneyList(list []experiments.Money) string {
	if len(list) == 0 {
		return "—"
	}
	out := make([]string, len(list))
	for i, m := range list {
		out[i] = money(m.Amount, m.Currency)
	}
	return strings.Join(out, ", ")
}
