package experiments

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/rebill/rebill/experiments/stats"
)

// The metrics of a report.
const (
	// MetricFirstAttempt: charges approved at their first attempt, of
	// those whose first attempt has an outcome.
	MetricFirstAttempt = "first_attempt_approval"
	// MetricRecovery: charges declined once that were later paid, of
	// those declined whose outcome is final: paid after a decline, or
	// failed (a hard decline at the first attempt counts too: arms are
	// randomised, so it dilutes every arm alike).
	MetricRecovery = "dunning_recovery"
)

// Alpha is the two-sided significance level of a report, before the
// Bonferroni correction for several treatments.
const Alpha = 0.05

// Primary is the metric an experiment of policy is judged by: recovery for
// a dunning schedule, which only acts after a decline; first-attempt
// approval for the others.
func Primary(policy Policy) string {
	if policy == PolicyDunning {
		return MetricRecovery
	}
	return MetricFirstAttempt
}

// Rate is a proportion with its 95 % Wilson interval (NaN bounds: no
// trials yet).
type Rate struct {
	Successes, Trials int64
	Value, Low, High  float64
}

func rate(successes, trials int64) Rate {
	p := stats.Proportion{Successes: successes, Trials: trials}
	r := Rate{Successes: successes, Trials: trials, Value: math.NaN(), Low: math.NaN(), High: math.NaN()}
	if trials > 0 {
		r.Value = p.Rate()
		r.Low, r.High = stats.Wilson(p, 0.95)
	}
	return r
}

// Money is an amount in minor units of a currency.
type Money struct {
	Currency string
	Amount   int64
}

// Comparison is a treatment's primary metric against control's.
type Comparison struct {
	// Difference is treatment less control, with its 95 % interval
	// (Newcombe's hybrid score interval).
	Difference, Low, High float64
	// PValue is the pooled two-proportion z-test's, two-sided; Alpha is
	// the level it is judged at (Bonferroni-corrected).
	PValue, Alpha float64
	Verdict       stats.Verdict
}

// ArmResult is one arm's figures.
type ArmResult struct {
	Arm string
	// Weight is the arm's weight in the file; InFile is false for an arm
	// the data records but the file no longer has (its subscriptions
	// follow the default policy now).
	Weight        int
	InFile        bool
	Subscriptions int64
	Charges       int64
	FirstAttempt  Rate
	Recovery      Rate
	Review        Rate // guard rail: charges sent to review (now or resolved since)
	Unknown       Rate // guard rail: charges whose outcome is not proven yet
	// MedianTimeToPay is the median from period start to payment of the
	// arm's paid charges; nil: none paid.
	MedianTimeToPay *time.Duration
	Collected       []Money
	Commission      []Money
	// Versus is the primary metric against control (treatments only).
	Versus *Comparison
}

// Report is an experiment's results at a moment.
type Report struct {
	Experiment Experiment
	Status     string
	Primary    string
	Arms       []ArmResult
}

// Commission is a gateway's commission on one charge of amount in
// currency, in minor units (0 when unknown).
type Commission func(gateway, currency string, amount int64) int64

// Results computes the report of e from the records alone: the arms
// recorded on subscriptions and charges, whatever the weights say now.
func Results(ctx context.Context, records Records, e Experiment, now time.Time, commission Commission) (Report, error) {
	rep := Report{Experiment: e, Status: e.Status(now), Primary: Primary(e.Policy)}
	arms := map[string]*ArmResult{}
	arm := func(name string) *ArmResult {
		if a, ok := arms[name]; ok {
			return a
		}
		a := &ArmResult{Arm: name, FirstAttempt: rate(0, 0), Recovery: rate(0, 0), Review: rate(0, 0), Unknown: rate(0, 0)}
		if conf, ok := e.Arm(name); ok {
			a.Weight, a.InFile = conf.Weight, true
		}
		arms[name] = a
		return a
	}
	for _, a := range e.Arms {
		arm(a.Name)
	}
	subs, byArm, err := records.Subscriptions(ctx, e.Key)
	if err != nil {
		return Report{}, fmt.Errorf("experiment %s: subscriptions: %w", e.Key, err)
	}
	for name, n := range byArm {
		arm(name).Subscriptions = n
	}
	figures, err := records.Charges(ctx, e.Key, subs)
	if err != nil {
		return Report{}, fmt.Errorf("experiment %s: charges: %w", e.Key, err)
	}
	for _, f := range figures {
		a := arm(f.Arm)
		a.Charges = f.Count
		a.FirstAttempt = rate(f.FirstApproved, f.FirstTrials)
		a.Recovery = rate(f.Recovered, f.RecoveryTrials)
		a.Review = rate(f.Review, f.Count)
		a.Unknown = rate(f.Unknown, f.Count)
		if f.MedianToPay != nil {
			d := f.MedianToPay.Round(time.Second)
			a.MedianTimeToPay = &d
		}
	}
	paid, err := records.Paid(ctx, e.Key, subs)
	if err != nil {
		return Report{}, fmt.Errorf("experiment %s: amounts: %w", e.Key, err)
	}
	add := func(list []Money, currency string, amount int64) []Money {
		for i := range list {
			if list[i].Currency == currency {
				list[i].Amount += amount
				return list
			}
		}
		return append(list, Money{Currency: currency, Amount: amount})
	}
	for _, p := range paid {
		a := arm(p.Arm)
		a.Collected = add(a.Collected, p.Currency, p.Amount*p.Count)
		if commission != nil {
			a.Commission = add(a.Commission, p.Currency, commission(p.Gateway, p.Currency, p.Amount)*p.Count)
		}
	}
	names := make([]string, 0, len(arms))
	for name := range arms {
		names = append(names, name)
	}
	order := e.ArmNames()
	slices.SortFunc(names, func(a, b string) int { // the file's order, then the removed arms by name
		ia, ib := slices.Index(order, a), slices.Index(order, b)
		switch {
		case ia >= 0 && ib >= 0:
			return ia - ib
		case ia >= 0:
			return -1
		case ib >= 0:
			return 1
		}
		if a < b {
			return -1
		}
		return 1
	})
	for _, name := range names {
		rep.Arms = append(rep.Arms, *arms[name])
	}
	compare(&rep, e.MinPerArm)
	return rep, nil
}

// Records reads what an experiment's arms recorded, from the tables of
// their owners: the subscriptions' records and their charges. The wiring
// fills it (subscriptions.InExperiment, charges.ExperimentFigures and
// charges.ExperimentPaid), so that this package, which charges imports,
// reads neither table itself.
type Records interface {
	// Subscriptions returns the ids of the subscriptions whose record
	// names the experiment key, and how many each arm holds.
	Subscriptions(ctx context.Context, key string) (ids []uuid.UUID, byArm map[string]int64, err error)
	// Charges sums, by arm, the charges of those subscriptions whose
	// record names key.
	Charges(ctx context.Context, key string, subscriptions []uuid.UUID) ([]ChargeFigures, error)
	// Paid groups the paid ones of those charges by arm, gateway,
	// currency and amount.
	Paid(ctx context.Context, key string, subscriptions []uuid.UUID) ([]PaidCharges, error)
}

// ChargeFigures are one arm's charges, counted for the metrics of a
// report (see MetricFirstAttempt and MetricRecovery).
type ChargeFigures struct {
	Arm   string
	Count int64
	// FirstApproved of FirstTrials were approved at their first attempt.
	FirstApproved, FirstTrials int64
	// Recovered of RecoveryTrials were paid after a decline.
	Recovered, RecoveryTrials int64
	// Review went to manual review; Unknown are left unknown.
	Review, Unknown int64
	// MedianToPay is the median from period start to payment of the paid
	// ones; nil without any.
	MedianToPay *time.Duration
}

// PaidCharges are Count paid charges of Amount (minor units) each.
type PaidCharges struct {
	Arm, Gateway, Currency string
	Amount, Count          int64
}

// compare judges each treatment's primary metric against control's at a
// fixed horizon: no verdict until every arm in the file has minPerArm
// trials, and with several treatments each is judged at Alpha divided by
// their number (Bonferroni).
func compare(rep *Report, minPerArm int64) {
	var control *ArmResult
	treatments := 0
	for i := range rep.Arms {
		switch {
		case rep.Arms[i].Arm == Control:
			control = &rep.Arms[i]
		case rep.Arms[i].InFile:
			treatments++
		}
	}
	if control == nil || treatments == 0 {
		return
	}
	alpha := stats.Bonferroni(Alpha, treatments)
	primary := func(a *ArmResult) stats.Proportion {
		r := a.FirstAttempt
		if rep.Primary == MetricRecovery {
			r = a.Recovery
		}
		return stats.Proportion{Successes: r.Successes, Trials: r.Trials}
	}
	early := false
	for i := range rep.Arms {
		if rep.Arms[i].InFile && primary(&rep.Arms[i]).Trials < minPerArm {
			early = true
		}
	}
	for i := range rep.Arms {
		a := &rep.Arms[i]
		if a.Arm == Control || !a.InFile {
			continue
		}
		diff, lo, hi, p := stats.TwoProportion(primary(control), primary(a))
		c := &Comparison{Difference: diff, Low: lo, High: hi, PValue: p, Alpha: alpha,
			Verdict: stats.Decide(primary(control), primary(a), minPerArm, alpha)}
		if early {
			c.Verdict = stats.VerdictTooEarly
		}
		a.Versus = c
	}
}

// VerdictText is a verdict in plain words, as the API and the console give
// it.
func VerdictText(v stats.Verdict, minPerArm int64) string {
	switch v {
	case stats.VerdictTooEarly:
		return fmt.Sprintf("too early: fewer than %d per arm", minPerArm)
	case stats.VerdictTreatmentBetter:
		return "treatment better"
	case stats.VerdictTreatmentWorse:
		return "treatment worse"
	}
	return "no difference detected"
}
