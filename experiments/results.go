package experiments

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/rebill/rebill/experiments/stats"
	"github.com/rebill/rebill/internal/pg"
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
func Results(ctx context.Context, db pg.DBTX, e Experiment, now time.Time, commission Commission, statuses StatusNames) (Report, error) {
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
	rows, err := db.Query(ctx, `SELECT experiments->>$1, count(*) FROM subscriptions
		WHERE `+recordsKey+` GROUP BY 1`, e.Key)
	if err != nil {
		return Report{}, fmt.Errorf("experiment %s: subscriptions: %w", e.Key, err)
	}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			rows.Close()
			return Report{}, fmt.Errorf("experiment %s: subscriptions: %w", e.Key, err)
		}
		arm(name).Subscriptions = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Report{}, fmt.Errorf("experiment %s: subscriptions: %w", e.Key, err)
	}
	if err := chargeFigures(ctx, db, e.Key, statuses, arm); err != nil {
		return Report{}, err
	}
	if err := money(ctx, db, e.Key, statuses, commission, arm); err != nil {
		return Report{}, err
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

// recordsKey selects the subscriptions whose record names the experiment
// $1. It repeats the partial index's predicate, so that the planner uses
// the index (only subscriptions in an experiment are in it).
const recordsKey = `experiments <> '{}' AND experiments ? $1`

// inExperiment are the ids of those subscriptions: their charges are the
// experiment's (a charge's record is its subscription's when it was
// created, and recorded arms are never removed), found through the
// charges' subscription index.
const inExperiment = `SELECT id FROM subscriptions WHERE ` + recordsKey

// StatusNames are the charge statuses the figures count by, given by the
// caller so that this package does not depend on the charges package.
type StatusNames struct {
	Succeeded, Failed, Declined, Review, Unknown string
}

func chargeFigures(ctx context.Context, db pg.DBTX, key string, st StatusNames, arm func(string) *ArmResult) error {
	rows, err := db.Query(ctx, `SELECT experiments->>$1, count(*),
			count(*) FILTER (WHERE status = $2 AND attempt_count = 1),
			count(*) FILTER (WHERE attempt_count > 1 OR status IN ($2, $3, $4)),
			count(*) FILTER (WHERE status = $2 AND attempt_count > 1),
			count(*) FILTER (WHERE (status = $2 AND attempt_count > 1) OR status = $3),
			count(*) FILTER (WHERE status = $5 OR resolution IS NOT NULL),
			count(*) FILTER (WHERE status = $6),
			percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM updated_at - period_start)) FILTER (WHERE status = $2)
		FROM charges WHERE subscription_id IN (`+inExperiment+`) AND experiments ? $1 GROUP BY 1`,
		key, st.Succeeded, st.Failed, st.Declined, st.Review, st.Unknown)
	if err != nil {
		return fmt.Errorf("experiment %s: charges: %w", key, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			name                                                  string
			n, firstOK, firstTrials, recovered, recoveryTrials, r int64
			unknown                                               int64
			median                                                *float64
		)
		if err := rows.Scan(&name, &n, &firstOK, &firstTrials, &recovered, &recoveryTrials, &r, &unknown, &median); err != nil {
			return fmt.Errorf("experiment %s: charges: %w", key, err)
		}
		a := arm(name)
		a.Charges = n
		a.FirstAttempt = rate(firstOK, firstTrials)
		a.Recovery = rate(recovered, recoveryTrials)
		a.Review = rate(r, n)
		a.Unknown = rate(unknown, n)
		if median != nil {
			d := time.Duration(*median * float64(time.Second)).Round(time.Second)
			a.MedianTimeToPay = &d
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("experiment %s: charges: %w", key, err)
	}
	return nil
}

// money sums what the arms' paid charges collected and what their
// gateways kept: the commission is rounded per charge, as gateways take it.
func money(ctx context.Context, db pg.DBTX, key string, st StatusNames, commission Commission, arm func(string) *ArmResult) error {
	rows, err := db.Query(ctx, `SELECT experiments->>$1, gateway, currency, amount, count(*)
		FROM charges WHERE subscription_id IN (`+inExperiment+`) AND experiments ? $1 AND status = $2
		GROUP BY 1, 2, 3, 4 ORDER BY 1, 3`, key, st.Succeeded)
	if err != nil {
		return fmt.Errorf("experiment %s: amounts: %w", key, err)
	}
	defer rows.Close()
	add := func(list []Money, currency string, amount int64) []Money {
		for i := range list {
			if list[i].Currency == currency {
				list[i].Amount += amount
				return list
			}
		}
		return append(list, Money{Currency: currency, Amount: amount})
	}
	for rows.Next() {
		var (
			name, gateway, currency string
			amount, n               int64
		)
		if err := rows.Scan(&name, &gateway, &currency, &amount, &n); err != nil {
			return fmt.Errorf("experiment %s: amounts: %w", key, err)
		}
		a := arm(name)
		a.Collected = add(a.Collected, currency, amount*n)
		if commission != nil {
			a.Commission = add(a.Commission, currency, commission(gateway, currency, amount)*n)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("experiment %s: amounts: %w", key, err)
	}
	return nil
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
