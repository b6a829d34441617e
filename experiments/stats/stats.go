// Package stats holds the statistics an experiment report needs to compare
// the arms of a billing-policy experiment (a control and one or more
// treatments) without claiming more than its methods support.
//
// Reports use a fixed horizon. Each experiment plans a minimum sample per
// arm before it starts, and significance is only reported once every arm
// has reached it: before that, Decide answers VerdictTooEarly and the report
// shows rates and confidence intervals but no verdict. Looking at a
// fixed-sample test repeatedly and stopping at the first small p-value
// inflates the false-positive rate far above alpha; refusing a verdict
// before the planned sample is how this package handles peeking, instead of
// a sequential method whose boundaries the report would have to explain.
//
// With several treatments each is compared with the control, and the family
// of comparisons must keep its overall error rate: the caller passes
// Bonferroni(alpha, treatments) to Decide rather than alpha itself.
package stats

import (
	"math"
	"slices"
)

// z95 is the two-sided 95% normal quantile. TwoProportion's interval is
// always 95%, and Wilson at 0.95 uses the same constant so that its arm
// intervals are exactly the ones TwoProportion combines.
const z95 = 1.959963984540054

// Proportion is a count of successes out of trials, such as recovered
// renewals out of renewals retried. Callers build it from counts, so
// 0 <= Successes <= Trials is assumed; other values give NaN results.
type Proportion struct {
	Successes int64
	Trials    int64
}

func (p Proportion) valid() bool {
	return p.Trials >= 0 && p.Successes >= 0 && p.Successes <= p.Trials
}

// Rate is Successes/Trials, or NaN with no trials: a report should show
// "no data" rather than a rate of zero nobody observed.
func (p Proportion) Rate() float64 {
	if p.Trials == 0 {
		return math.NaN()
	}
	return float64(p.Successes) / float64(p.Trials)
}

// Wilson is the Wilson score interval for a proportion at the given
// two-sided confidence (0.95 for 95%). Unlike the textbook Wald interval it
// stays inside [0, 1] and keeps close to its nominal coverage for small
// samples and rates near 0 or 1, which is where retry experiments live.
//
// With no trials nothing is known about the rate, so the interval is the
// whole range (0, 1).
func Wilson(p Proportion, confidence float64) (lo, hi float64) {
	return wilsonZ(p, zFor(confidence))
}

func zFor(confidence float64) float64 {
	if confidence == 0.95 {
		return z95
	}
	return NormalQuantile(1 - (1-confidence)/2)
}

func wilsonZ(p Proportion, z float64) (lo, hi float64) {
	if !p.valid() {
		return math.NaN(), math.NaN()
	}
	if p.Trials == 0 {
		return 0, 1
	}
	n := float64(p.Trials)
	x := float64(p.Successes)
	z2 := z * z
	centre := (x + z2/2) / (n + z2)
	half := z * math.Sqrt(x*(n-x)/n+z2/4) / (n + z2)
	lo, hi = centre-half, centre+half
	// At x = 0 or x = n the exact bound is 0 or 1; rounding could put it a
	// hair outside, which a report would print as -0.0000.
	if p.Successes == 0 {
		lo = 0
	}
	if p.Successes == p.Trials {
		hi = 1
	}
	return lo, hi
}

// NormalCDF is the standard normal distribution function. Erfc keeps the
// relative accuracy of the lower tail, which 1+Erf would lose.
func NormalCDF(x float64) float64 {
	return 0.5 * math.Erfc(-x/math.Sqrt2)
}

// Coefficients of Acklam's rational approximation to the normal quantile.
var (
	acklamA = [6]float64{-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00}
	acklamB = [5]float64{-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01, -1.328068155288572e+01}
	acklamC = [6]float64{-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00}
	acklamD = [4]float64{7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00}
)

// NormalQuantile is the inverse of NormalCDF: Acklam's approximation
// (relative error 1.15e-9) followed by one Halley step against Erfc, which
// brings it to close to full double precision. math.Erfinv is not used
// because going through 1-2p loses the tails. It returns -Inf at 0, +Inf at
// 1 and NaN outside [0, 1].
func NormalQuantile(p float64) float64 {
	switch {
	case math.IsNaN(p) || p < 0 || p > 1:
		return math.NaN()
	case p == 0:
		return math.Inf(-1)
	case p == 1:
		return math.Inf(1)
	}
	const pLow = 0.02425
	var x float64
	switch {
	case p < pLow:
		q := math.Sqrt(-2 * math.Log(p))
		x = (((((acklamC[0]*q+acklamC[1])*q+acklamC[2])*q+acklamC[3])*q+acklamC[4])*q + acklamC[5]) /
			((((acklamD[0]*q+acklamD[1])*q+acklamD[2])*q+acklamD[3])*q + 1)
	case p <= 1-pLow:
		q := p - 0.5
		r := q * q
		x = (((((acklamA[0]*r+acklamA[1])*r+acklamA[2])*r+acklamA[3])*r+acklamA[4])*r + acklamA[5]) * q /
			(((((acklamB[0]*r+acklamB[1])*r+acklamB[2])*r+acklamB[3])*r+acklamB[4])*r + 1)
	default:
		q := math.Sqrt(-2 * math.Log1p(-p))
		x = -(((((acklamC[0]*q+acklamC[1])*q+acklamC[2])*q+acklamC[3])*q+acklamC[4])*q + acklamC[5]) /
			((((acklamD[0]*q+acklamD[1])*q+acklamD[2])*q+acklamD[3])*q + 1)
	}
	e := NormalCDF(x) - p
	u := e * math.Sqrt(2*math.Pi) * math.Exp(x*x/2)
	return x - u/(1+x*u/2)
}

// TwoProportion compares a treatment with the control: diff is the
// treatment rate minus the control rate, [lo, hi] its 95% confidence
// interval and pValue the two-sided p-value of the pooled two-proportion
// z-test of equal rates.
//
// The interval is Newcombe's hybrid score interval (method 10 of Newcombe
// 1998, "Interval estimation for the difference between independent
// proportions"), built from the two arms' Wilson intervals; it keeps its
// coverage for small arms and extreme rates where the Wald interval does not.
//
// When either arm has no trials its rate is unknown: diff is 0, the interval
// the whole range (-1, 1) and pValue 1. When the pooled rate is 0 or 1 both
// arms agree exactly, the z statistic is 0/0 and pValue is 1; diff is then 0
// and the interval still reflects the arms' sizes.
func TwoProportion(control, treatment Proportion) (diff, lo, hi, pValue float64) {
	if !control.valid() || !treatment.valid() {
		nan := math.NaN()
		return nan, nan, nan, nan
	}
	if control.Trials == 0 || treatment.Trials == 0 {
		return 0, -1, 1, 1
	}
	pc, pt := control.Rate(), treatment.Rate()
	diff = pt - pc
	lc, uc := wilsonZ(control, z95)
	lt, ut := wilsonZ(treatment, z95)
	lo = diff - math.Sqrt((pt-lt)*(pt-lt)+(uc-pc)*(uc-pc))
	hi = diff + math.Sqrt((ut-pt)*(ut-pt)+(pc-lc)*(pc-lc))

	nc, nt := float64(control.Trials), float64(treatment.Trials)
	pooled := float64(control.Successes+treatment.Successes) / (nc + nt)
	if pooled <= 0 || pooled >= 1 {
		return diff, lo, hi, 1
	}
	se := math.Sqrt(pooled * (1 - pooled) * (1/nc + 1/nt))
	z := diff / se
	return diff, lo, hi, math.Erfc(math.Abs(z) / math.Sqrt2)
}

// Median of xs, or NaN when xs is empty. xs is not reordered.
func Median(xs []float64) float64 {
	n := len(xs)
	if n == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Bonferroni is the per-comparison significance level that keeps the
// family-wise error rate of the given number of comparisons at alpha. It is
// conservative, but exact in what it promises without assumptions about how
// the treatments' comparisons with the shared control are correlated. A
// single comparison (or fewer) needs no correction.
func Bonferroni(alpha float64, comparisons int) float64 {
	if comparisons <= 1 {
		return alpha
	}
	return alpha / float64(comparisons)
}

// Verdict is the outcome of one treatment-versus-control comparison.
type Verdict string

const (
	// VerdictTooEarly: an arm has not reached the planned sample, so no
	// significance is reported whatever the data show so far.
	VerdictTooEarly Verdict = "too_early"
	// VerdictTreatmentBetter: the treatment's rate is significantly higher.
	VerdictTreatmentBetter Verdict = "treatment_better"
	// VerdictTreatmentWorse: the treatment's rate is significantly lower.
	VerdictTreatmentWorse Verdict = "treatment_worse"
	// VerdictNoDifference: the planned sample showed no significant
	// difference. This is not evidence the arms are equal; the interval
	// says how large a difference remains plausible.
	VerdictNoDifference Verdict = "no_difference_detected"
)

// Decide gives the fixed-horizon verdict on a treatment against the
// control. A Proportion counts the outcome the experiment wants more of, so
// a higher treatment rate is better. alpha is the per-comparison level: with
// several treatments the caller passes Bonferroni(alpha, treatments).
// Counts that are not a valid Proportion have a NaN p-value and so never
// yield a significant verdict.
func Decide(control, treatment Proportion, minPerArm int64, alpha float64) Verdict {
	if control.Trials < minPerArm || treatment.Trials < minPerArm {
		return VerdictTooEarly
	}
	diff, _, _, pValue := TwoProportion(control, treatment)
	switch {
	case !(pValue < alpha):
		return VerdictNoDifference
	case diff > 0:
		return VerdictTreatmentBetter
	case diff < 0:
		return VerdictTreatmentWorse
	default:
		return VerdictNoDifference
	}
}

// ChiSquareUniformity is Pearson's chi-square goodness-of-fit test of
// observed counts against expected counts proportional to weights, as when
// checking that arm assignment follows the configured split. pValue is the
// probability of a statistic at least this large if assignment does follow
// the weights.
//
// A category of weight 0 is expected to stay empty: if it is, it is left out
// (and does not count towards the degrees of freedom); if it is not, the fit
// is impossible and the result is (+Inf, 0). The result is (NaN, NaN) when
// the inputs do not describe a test: lengths differ, a count is negative, a
// weight is negative or not finite, nothing was observed, or fewer than two
// categories have a positive weight.
func ChiSquareUniformity(observed []int64, weights []float64) (statistic float64, pValue float64) {
	undefined := math.NaN()
	if len(observed) != len(weights) {
		return undefined, undefined
	}
	var total int64
	var weightSum float64
	categories := 0
	for i, w := range weights {
		if observed[i] < 0 || w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
			return undefined, undefined
		}
		total += observed[i]
		weightSum += w
		if w > 0 {
			categories++
		}
	}
	if total == 0 || categories < 2 {
		return undefined, undefined
	}
	for i, w := range weights {
		if w == 0 && observed[i] > 0 {
			return math.Inf(1), 0
		}
	}
	n := float64(total)
	for i, w := range weights {
		if w == 0 {
			continue
		}
		expected := n * w / weightSum
		d := float64(observed[i]) - expected
		statistic += d * d / expected
	}
	return statistic, chiSquareSurvival(statistic, float64(categories-1))
}

// chiSquareSurvival is P(X >= x) for X chi-square with df degrees of
// freedom: the regularized upper incomplete gamma function Q(df/2, x/2).
func chiSquareSurvival(x, df float64) float64 {
	return gammaQ(df/2, x/2)
}

const (
	gammaEps     = 1e-15
	gammaMaxIter = 10000
)

// gammaQ is the regularized upper incomplete gamma function Q(a, x), after
// Numerical Recipes' gammq: the series for P converges fast below x = a+1,
// the continued fraction for Q above it, so each is used where it is
// accurate and Q is never found as 1-P where P is close to 1.
func gammaQ(a, x float64) float64 {
	switch {
	case math.IsNaN(a) || math.IsNaN(x) || a <= 0 || x < 0:
		return math.NaN()
	case x == 0:
		return 1
	case math.IsInf(x, 1):
		return 0
	case x < a+1:
		return 1 - gammaPSeries(a, x)
	default:
		return gammaQContinuedFraction(a, x)
	}
}

// logGammaPrefix is log(x^a e^-x / Γ(a)), the factor both expansions share.
func logGammaPrefix(a, x float64) float64 {
	lg, _ := math.Lgamma(a)
	return a*math.Log(x) - x - lg
}

func gammaPSeries(a, x float64) float64 {
	ap := a
	term := 1 / a
	sum := term
	for range gammaMaxIter {
		ap++
		term *= x / ap
		sum += term
		if math.Abs(term) < math.Abs(sum)*gammaEps {
			break
		}
	}
	return sum * math.Exp(logGammaPrefix(a, x))
}

// gammaQContinuedFraction evaluates the continued fraction for Q by the
// modified Lentz method.
func gammaQContinuedFraction(a, x float64) float64 {
	const tiny = 1e-300
	b := x + 1 - a
	c := 1 / tiny
	d := 1 / b
	h := d
	for i := 1; i <= gammaMaxIter; i++ {
		an := -float64(i) * (float64(i) - a)
		b += 2
		d = an*d + b
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = b + an/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		delta := d * c
		h *= delta
		if math.Abs(delta-1) < gammaEps {
			break
		}
	}
	return h * math.Exp(logGammaPrefix(a, x))
}
