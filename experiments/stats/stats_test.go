package stats

import (
	"math"
	"testing"
)

func near(got, want, tol float64) bool {
	if math.IsNaN(want) {
		return math.IsNaN(got)
	}
	if math.IsInf(want, 0) {
		return got == want
	}
	return math.Abs(got-want) <= tol
}

// round4 rounds as the published tables do, so that a test compares the
// printed digits rather than a tolerance that could hide a wrong last digit.
func round4(x float64) float64 {
	return math.Round(x*1e4) / 1e4
}

func TestWilsonNewcombe1998TableI(t *testing.T) {
	// Newcombe RG (1998), "Two-sided confidence intervals for the single
	// proportion: comparison of seven methods", Statistics in Medicine
	// 17:857-872, Table I, method 3 (score interval without continuity
	// correction), 95%. Each value was also recomputed from the Wilson
	// formula in 30-digit arithmetic and agrees to the 4 published decimals:
	// 81/263 -> 0.25529, 0.36621; 15/148 -> 0.06239, 0.16049;
	// 0/20 -> 0, 0.16113; 1/29 -> 0.00611, 0.17176.
	tests := []struct {
		p      Proportion
		lo, hi float64
	}{
		{Proportion{81, 263}, 0.2553, 0.3662},
		{Proportion{15, 148}, 0.0624, 0.1605},
		{Proportion{0, 20}, 0.0000, 0.1611},
		{Proportion{1, 29}, 0.0061, 0.1718},
	}
	for _, tt := range tests {
		lo, hi := Wilson(tt.p, 0.95)
		if round4(lo) != tt.lo || round4(hi) != tt.hi {
			t.Errorf("Wilson(%d/%d) = %.6f-%.6f, want %.4f-%.4f", tt.p.Successes, tt.p.Trials, lo, hi, tt.lo, tt.hi)
		}
	}
}

func TestWilsonEdges(t *testing.T) {
	tests := []struct {
		name   string
		p      Proportion
		conf   float64
		lo, hi float64
	}{
		// Nothing observed: the whole range.
		{"no trials", Proportion{0, 0}, 0.95, 0, 1},
		// At x = 0 the upper bound is z^2/(n+z^2) = 3.841459/13.841459.
		{"none of 10", Proportion{0, 10}, 0.95, 0, 0.2775327999},
		{"all of 10", Proportion{10, 10}, 0.95, 0.7224672001, 1},
		// Another confidence goes through NormalQuantile: at 99%
		// z = 2.5758293035489008, upper bound z^2/(n+z^2) for 0/10.
		{"none of 10 at 99%", Proportion{0, 10}, 0.99, 0, 2.5758293035489008 * 2.5758293035489008 / (10 + 2.5758293035489008*2.5758293035489008)},
		{"more successes than trials", Proportion{11, 10}, 0.95, math.NaN(), math.NaN()},
		{"negative successes", Proportion{-1, 10}, 0.95, math.NaN(), math.NaN()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo, hi := Wilson(tt.p, tt.conf)
			if !near(lo, tt.lo, 1e-9) || !near(hi, tt.hi, 1e-9) {
				t.Errorf("Wilson = %.10f-%.10f, want %.10f-%.10f", lo, hi, tt.lo, tt.hi)
			}
		})
	}
}

func TestNormalQuantileAndCDF(t *testing.T) {
	// Reference values: Φ(1.96) = 0.97500 in the NIST/SEMATECH e-Handbook
	// of Statistical Methods, section 1.3.6.7.1 ("Cumulative distribution
	// function of the standard normal distribution"), and the familiar
	// quantiles 1.960 and -3.090 it implies; the digits below are at full
	// double precision, confirmed with 30-digit arithmetic:
	// Φ^-1(0.975) = 1.95996398454005423..., Φ^-1(0.001) =
	// -3.09023230616781354..., Φ(1.96) = 0.97500210485177956...,
	// Φ^-1(1e-20) = -9.26234008979815321...
	quantiles := []struct {
		p, want float64
	}{
		{0.975, 1.959963984540054},
		{0.5, 0},
		{0.001, -3.090232306167813},
		{0.999, 3.090232306167813},
		{0.025, -1.959963984540054},
		// Deep tail, where Erfinv(2p-1) would have lost all digits.
		{1e-20, -9.262340089798153},
		{0, math.Inf(-1)},
		{1, math.Inf(1)},
		{-0.1, math.NaN()},
		{1.1, math.NaN()},
	}
	for _, tt := range quantiles {
		if got := NormalQuantile(tt.p); !near(got, tt.want, 1e-12*math.Max(1, math.Abs(tt.want))) {
			t.Errorf("NormalQuantile(%v) = %.16g, want %.16g", tt.p, got, tt.want)
		}
	}
	cdfs := []struct {
		x, want float64
	}{
		{1.96, 0.9750021048517795},
		{0, 0.5},
		{-1.96, 1 - 0.9750021048517795},
	}
	for _, tt := range cdfs {
		if got := NormalCDF(tt.x); !near(got, tt.want, 1e-15) {
			t.Errorf("NormalCDF(%v) = %.16g, want %.16g", tt.x, got, tt.want)
		}
	}
	// Round trip over the range an experiment uses, crossing the
	// boundaries between Acklam's tail and central regions.
	for _, p := range []float64{1e-10, 1e-5, 0.0001, 0.02, 0.02425, 0.03, 0.1, 0.3, 0.5, 0.7, 0.9, 0.97, 0.97575, 0.98, 0.9999} {
		if got := NormalCDF(NormalQuantile(p)); !near(got, p, 1e-14*math.Max(p, 1e-3)) {
			t.Errorf("NormalCDF(NormalQuantile(%v)) = %.16g", p, got)
		}
	}
}

func TestTwoProportionNewcombe1998(t *testing.T) {
	// Newcombe RG (1998), "Interval estimation for the difference between
	// independent proportions: comparison of eleven methods", Statistics in
	// Medicine 17:873-890, method 10 (hybrid score interval). Newcombe's
	// examples are written as p1 - p2; here the first count is the
	// treatment. Examples (a) and (b) are his published values; each was
	// recomputed from the two Wilson intervals in 30-digit arithmetic
	// ((a) 0.05243-0.33387, (b) 0.17052-0.80902) and agrees.
	// The other rows are his boundary examples with 0 or n successes; their
	// expected values are those the method gives, recomputed the same way,
	// not read from the paper: (e) and (f) reduce to Wilson bounds of 0/10
	// and 0/20, (g) and (h) to 1 - sqrt((1-l1)^2 + u2^2).
	tests := []struct {
		name               string
		treatment, control Proportion
		diff, lo, hi       float64
	}{
		{"(a) 56/70 vs 48/80", Proportion{56, 70}, Proportion{48, 80}, 0.2000, 0.0524, 0.3339},
		{"(b) 9/10 vs 3/10", Proportion{9, 10}, Proportion{3, 10}, 0.6000, 0.1705, 0.8090},
		{"(e) 0/10 vs 0/20", Proportion{0, 10}, Proportion{0, 20}, 0.0000, -0.1611, 0.2775},
		{"(f) 0/10 vs 0/10", Proportion{0, 10}, Proportion{0, 10}, 0.0000, -0.2775, 0.2775},
		{"(g) 10/10 vs 0/20", Proportion{10, 10}, Proportion{0, 20}, 1.0000, 0.6791, 1.0000},
		{"(h) 10/10 vs 0/10", Proportion{10, 10}, Proportion{0, 10}, 1.0000, 0.6075, 1.0000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			diff, lo, hi, _ := TwoProportion(tt.control, tt.treatment)
			if round4(diff) != tt.diff || round4(lo) != tt.lo || round4(hi) != tt.hi {
				t.Errorf("TwoProportion = %.6f (%.6f, %.6f), want %.4f (%.4f, %.4f)", diff, lo, hi, tt.diff, tt.lo, tt.hi)
			}
		})
	}
}

func TestTwoProportionPValue(t *testing.T) {
	tests := []struct {
		name               string
		control, treatment Proportion
		diff, lo, hi, p    float64
	}{
		// Hand computation: control 40/100, treatment 60/100. Pooled rate
		// 100/200 = 0.5, SE = sqrt(0.5*0.5*(1/100+1/100)) = sqrt(0.005)
		// = 0.0707107, z = 0.2/0.0707107 = 2*sqrt(2), so the two-sided
		// p-value is erfc(z/sqrt(2)) = erfc(2) = 0.004677734981047266
		// (Abramowitz & Stegun Table 7.1: erf(2) = 0.995322265018953).
		{"hand computed", Proportion{40, 100}, Proportion{60, 100}, 0.2, math.NaN(), math.NaN(), 0.004677734981047266},
		// Equal rates: z = 0.
		{"equal rates", Proportion{30, 100}, Proportion{60, 200}, 0, math.NaN(), math.NaN(), 1},
		// Pooled rate 0 or 1: the z-test is 0/0, reported as no evidence.
		{"pooled zero", Proportion{0, 50}, Proportion{0, 80}, 0, math.NaN(), math.NaN(), 1},
		{"pooled one", Proportion{50, 50}, Proportion{80, 80}, 0, math.NaN(), math.NaN(), 1},
		// An arm without trials: nothing to compare.
		{"empty control", Proportion{0, 0}, Proportion{5, 10}, 0, -1, 1, 1},
		{"empty treatment", Proportion{5, 10}, Proportion{0, 0}, 0, -1, 1, 1},
		{"both empty", Proportion{0, 0}, Proportion{0, 0}, 0, -1, 1, 1},
		{"invalid counts", Proportion{11, 10}, Proportion{5, 10}, math.NaN(), math.NaN(), math.NaN(), math.NaN()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			diff, lo, hi, p := TwoProportion(tt.control, tt.treatment)
			if !near(diff, tt.diff, 1e-12) || !near(p, tt.p, 1e-14) {
				t.Errorf("diff, p = %.16g, %.16g; want %.16g, %.16g", diff, p, tt.diff, tt.p)
			}
			// NaN in the table means "not checked here" for the bounds of
			// valid inputs; the invalid row checks them through diff.
			if !math.IsNaN(tt.lo) && (lo != tt.lo || hi != tt.hi) {
				t.Errorf("interval = (%v, %v), want (%v, %v)", lo, hi, tt.lo, tt.hi)
			}
		})
	}
}

func TestTwoProportionSymmetry(t *testing.T) {
	// Swapping the arms negates the difference and mirrors the interval;
	// the two-sided p-value does not change. Exchanging successes and
	// failures in both arms does the same.
	pairs := []struct{ a, b Proportion }{
		{Proportion{56, 70}, Proportion{48, 80}},
		{Proportion{9, 10}, Proportion{3, 10}},
		{Proportion{1, 29}, Proportion{15, 148}},
		{Proportion{0, 20}, Proportion{7, 31}},
	}
	flip := func(p Proportion) Proportion { return Proportion{p.Trials - p.Successes, p.Trials} }
	for _, pr := range pairs {
		d, lo, hi, p := TwoProportion(pr.a, pr.b)
		sd, slo, shi, sp := TwoProportion(pr.b, pr.a)
		if !near(sd, -d, 1e-15) || !near(slo, -hi, 1e-15) || !near(shi, -lo, 1e-15) || !near(sp, p, 1e-15) {
			t.Errorf("swap %v %v: (%v %v %v %v) vs (%v %v %v %v)", pr.a, pr.b, d, lo, hi, p, sd, slo, shi, sp)
		}
		fd, flo, fhi, fp := TwoProportion(flip(pr.a), flip(pr.b))
		if !near(fd, -d, 1e-15) || !near(flo, -hi, 1e-15) || !near(fhi, -lo, 1e-15) || !near(fp, p, 1e-15) {
			t.Errorf("flip %v %v: (%v %v %v %v) vs (%v %v %v %v)", pr.a, pr.b, d, lo, hi, p, fd, flo, fhi, fp)
		}
		if !(lo <= d && d <= hi) || lo < -1 || hi > 1 {
			t.Errorf("%v %v: interval (%v, %v) does not hold diff %v inside [-1, 1]", pr.a, pr.b, lo, hi, d)
		}
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		want float64
	}{
		{"empty", nil, math.NaN()},
		{"one", []float64{3}, 3},
		{"odd", []float64{5, 1, 3}, 3},
		{"even takes mean of middle two", []float64{4, 1, 3, 2}, 2.5},
		{"duplicates", []float64{2, 2, 1, 9}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]float64(nil), tt.xs...)
			if got := Median(tt.xs); !near(got, tt.want, 0) {
				t.Errorf("Median(%v) = %v, want %v", tt.xs, got, tt.want)
			}
			for i := range in {
				if in[i] != tt.xs[i] {
					t.Fatalf("Median reordered its input: %v", tt.xs)
				}
			}
		})
	}
}

func TestBonferroni(t *testing.T) {
	tests := []struct {
		alpha       float64
		comparisons int
		want        float64
	}{
		{0.05, 1, 0.05},
		{0.05, 0, 0.05},
		{0.05, 2, 0.025},
		{0.05, 4, 0.0125},
	}
	for _, tt := range tests {
		if got := Bonferroni(tt.alpha, tt.comparisons); got != tt.want {
			t.Errorf("Bonferroni(%v, %d) = %v, want %v", tt.alpha, tt.comparisons, got, tt.want)
		}
	}
}

func TestDecide(t *testing.T) {
	// 40/100 vs 60/100 has p = 0.00468 (see TestTwoProportionPValue);
	// 50/100 vs 60/100 has p = 0.1552, not significant at 0.05.
	tests := []struct {
		name               string
		control, treatment Proportion
		minPerArm          int64
		alpha              float64
		want               Verdict
	}{
		{"control below plan, however strong the data", Proportion{40, 99}, Proportion{60, 100}, 100, 0.05, VerdictTooEarly},
		{"treatment below plan", Proportion{400, 1000}, Proportion{99, 99}, 100, 0.05, VerdictTooEarly},
		{"both empty", Proportion{0, 0}, Proportion{0, 0}, 1, 0.05, VerdictTooEarly},
		{"treatment better", Proportion{40, 100}, Proportion{60, 100}, 100, 0.05, VerdictTreatmentBetter},
		{"treatment worse", Proportion{60, 100}, Proportion{40, 100}, 100, 0.05, VerdictTreatmentWorse},
		{"no difference", Proportion{50, 100}, Proportion{60, 100}, 100, 0.05, VerdictNoDifference},
		{"equal rates", Proportion{50, 100}, Proportion{50, 100}, 100, 0.05, VerdictNoDifference},
		// p = 0.00468 passes 0.05/4 = 0.0125 but not 0.05/20 = 0.0025.
		{"passes Bonferroni for 4 treatments", Proportion{40, 100}, Proportion{60, 100}, 100, Bonferroni(0.05, 4), VerdictTreatmentBetter},
		{"fails Bonferroni for 20 treatments", Proportion{40, 100}, Proportion{60, 100}, 100, Bonferroni(0.05, 20), VerdictNoDifference},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Decide(tt.control, tt.treatment, tt.minPerArm, tt.alpha); got != tt.want {
				t.Errorf("Decide = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestChiSquareSurvival(t *testing.T) {
	// Upper 5% points of the chi-square distribution: NIST/SEMATECH
	// e-Handbook of Statistical Methods, section 1.3.6.7.4 ("Critical
	// values of the chi-square distribution"), 3.841, 5.991, 7.815 and
	// 18.307 for 1, 2, 3 and 10 degrees of freedom, here at full double
	// precision; Q at each was confirmed as 0.05 to 16 digits with 30-digit
	// arithmetic.
	tests := []struct {
		df, x, want float64
	}{
		{1, 3.841458820694124, 0.05},
		{2, 5.991464547107979, 0.05},
		{10, 18.307038053275146, 0.05},
		{3, 7.814727903251178, 0.05},
		{4, 0, 1},
		{4, math.Inf(1), 0},
		{0, 1, math.NaN()},
		{2, -1, math.NaN()},
	}
	for _, tt := range tests {
		if got := chiSquareSurvival(tt.x, tt.df); !near(got, tt.want, 1e-12) {
			t.Errorf("Q(df=%v, x=%v) = %.16g, want %v", tt.df, tt.x, got, tt.want)
		}
	}
	// Closed forms on both sides of the series/continued-fraction switch
	// at x/2 = df/2 + 1: Q(1 df, x) = erfc(sqrt(x/2)), Q(2 df, x) = e^(-x/2).
	for _, x := range []float64{0.01, 0.5, 1, 2.9, 3, 3.1, 5, 10, 30, 100} {
		if got, want := chiSquareSurvival(x, 1), math.Erfc(math.Sqrt(x/2)); !near(got, want, 1e-13*math.Max(want, 1e-3)) {
			t.Errorf("Q(df=1, x=%v) = %.16g, want %.16g", x, got, want)
		}
		if got, want := chiSquareSurvival(x, 2), math.Exp(-x/2); !near(got, want, 1e-13*math.Max(want, 1e-3)) {
			t.Errorf("Q(df=2, x=%v) = %.16g, want %.16g", x, got, want)
		}
	}
}

func TestChiSquareUniformity(t *testing.T) {
	tests := []struct {
		name      string
		observed  []int64
		weights   []float64
		statistic float64
		p         float64
	}{
		// Hand computation: 60/40 against a 50/50 split of 100 gives
		// (10^2 + 10^2)/50 = 4 on 1 df, p = erfc(sqrt(2)) = 0.04550026389635842.
		{"even split", []int64{60, 40}, []float64{1, 1}, 4, 0.04550026389635842},
		// Weights need not sum to 1: 1:3 of 200 expects 50 and 150;
		// (60-50)^2/50 + (140-150)^2/150 = 2 + 2/3 on 1 df.
		{"weighted split", []int64{60, 140}, []float64{1, 3}, 8.0 / 3, math.Erfc(math.Sqrt(4.0 / 3))},
		// Exact fit: nothing to reject.
		{"exact fit", []int64{25, 25, 50}, []float64{0.25, 0.25, 0.5}, 0, 1},
		// 3 categories, 2 df: Q = e^(-x/2). Expected 30 each;
		// (10^2 + 0 + 10^2)/30 = 20/3.
		{"three arms", []int64{40, 30, 20}, []float64{1, 1, 1}, 20.0 / 3, math.Exp(-10.0 / 3)},
		// A disabled arm that stays empty drops out, leaving 1 df.
		{"empty zero-weight arm", []int64{60, 40, 0}, []float64{1, 1, 0}, 4, 0.04550026389635842},
		{"assignment to zero-weight arm", []int64{50, 50, 1}, []float64{1, 1, 0}, math.Inf(1), 0},
		{"length mismatch", []int64{1, 2}, []float64{1}, math.NaN(), math.NaN()},
		{"nothing observed", []int64{0, 0}, []float64{1, 1}, math.NaN(), math.NaN()},
		{"one category", []int64{10}, []float64{1}, math.NaN(), math.NaN()},
		{"negative weight", []int64{10, 10}, []float64{1, -1}, math.NaN(), math.NaN()},
		{"negative count", []int64{10, -1}, []float64{1, 1}, math.NaN(), math.NaN()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stat, p := ChiSquareUniformity(tt.observed, tt.weights)
			if !near(stat, tt.statistic, 1e-12) || !near(p, tt.p, 1e-14) {
				t.Errorf("ChiSquareUniformity = (%.16g, %.16g), want (%.16g, %.16g)", stat, p, tt.statistic, tt.p)
			}
		})
	}
}
