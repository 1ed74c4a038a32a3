package dp

import "math"

// GaussianRho returns ρ = 1/(2z²): one use of the Gaussian mechanism whose
// noise standard deviation is z times the L2 sensitivity is ρ-zCDP
// (Bun and Steinke 2016). ρ-zCDP composes additively.
func GaussianRho(z float64) float64 {
	return 1 / (2 * z * z)
}

// ZCDPDelta returns the δ of the exact conversion of Canonne, Kamath and
// Steinke (2020, Prop. 12 / Cor. 13) from ρ-zCDP to (ε, δ)-DP:
//
//	δ = min_{α>1} exp((α−1)(αρ−ε)) / (α−1) · (1−1/α)^α,
//
// capped at 1. The logarithm of the objective is strictly convex in α with
// derivative (2α−1)ρ − ε + log(1−1/α), which increases from −∞ to +∞, so
// ZCDPDelta finds the optimal α as the root of that derivative by bisection
// on log(α−1) over a bracket that provably contains it: no grid, no local
// minimum to miss. ρ = 0 gives δ = 0.
func ZCDPDelta(rho, eps float64) (float64, error) {
	if err := checkRho(rho); err != nil {
		return 0, err
	}
	if err := checkEpsilon(eps); err != nil {
		return 0, err
	}
	ld, _ := cksLogDelta(rho, eps)
	return math.Min(1, math.Exp(ld)), nil
}

// ZCDPEpsilon returns the smallest ε ≥ 0 such that ρ-zCDP implies
// (ε, δ)-DP by the conversion of ZCDPDelta. It solves ZCDPDelta(ρ, ε) = δ for
// ε by bisection to the last bit (δ falls as ε grows) and returns the upper
// end of the final bracket, so the guarantee it reports is never optimistic.
func ZCDPEpsilon(rho, delta float64) (float64, error) {
	if err := checkRho(rho); err != nil {
		return 0, err
	}
	if err := checkDelta(delta); err != nil {
		return 0, err
	}
	switch {
	case rho == 0:
		return 0, nil
	case math.IsInf(rho, 1):
		return math.Inf(1), nil
	}
	logDelta := math.Log(delta)
	// ok reports whether ε is large enough: its δ is at most the target.
	ok := func(eps float64) bool {
		ld, _ := cksLogDelta(rho, eps)
		return ld <= logDelta
	}
	if ok(0) {
		return 0, nil
	}
	return boundary(1, true, ok), nil
}

// ZCDPRho returns the largest ρ such that ρ-zCDP implies (ε, δ)-DP by the
// conversion of ZCDPDelta: the zCDP budget equivalent to an (ε, δ) budget.
// It solves ZCDPDelta(ρ, ε) = δ for ρ by bisection to the last bit (δ grows
// with ρ) and returns the lower end of the final bracket, so the budget is
// never overstated.
func ZCDPRho(eps, delta float64) (float64, error) {
	if err := checkEpsilon(eps); err != nil {
		return 0, err
	}
	if err := checkDelta(delta); err != nil {
		return 0, err
	}
	logDelta := math.Log(delta)
	// ok reports whether ρ is affordable: its δ is at most the target.
	ok := func(rho float64) bool {
		ld, _ := cksLogDelta(rho, eps)
		return ld <= logDelta
	}
	return boundary(eps, false, ok), nil
}

// cksLogDelta returns log δ and the optimal α of the Canonne–Kamath–Steinke
// conversion for ρ > 0 and ε ≥ 0. It minimises, over x = log(α−1),
//
//	g(α) = (α−1)(αρ−ε) − log(α−1) + α·log(1−1/α),
//
// which is strictly convex in α (its second derivative is 2ρ + 1/(α(α−1)) > 0). Its
// derivative g'(α) = (2α−1)ρ − ε + log(1−1/α) tends to −∞ as α → 1 and to
// +∞ as α → ∞, so the minimiser is the unique root of g', found by
// bisection on x. Every α > 1 gives a valid bound, so an α off the optimum
// (at the end of the search range) only loosens δ, never breaks it.
func cksLogDelta(rho, eps float64) (logDelta, alpha float64) {
	if rho == 0 {
		return math.Inf(-1), math.Inf(1)
	}
	if math.IsInf(rho, 1) {
		return 0, 1
	}
	// parts returns α, α−1 and log(1−1/α) at x = log(α−1), each accurate
	// for x of any sign.
	parts := func(x float64) (a, am1, l float64) {
		am1 = math.Exp(x)
		a = 1 + am1
		if x < 0 {
			l = x - math.Log1p(am1) // log((α−1)/α) without cancellation near α = 1
		} else {
			l = math.Log1p(-1 / a)
		}
		return a, am1, l
	}
	slope := func(x float64) float64 {
		a, _, l := parts(x)
		return (2*a-1)*rho - eps + l
	}
	g := func(x float64) float64 {
		a, am1, l := parts(x)
		return am1*(a*rho-eps) - x + a*l
	}
	// Bracket the root of the slope within x ∈ [−700, 709]. As x → −∞ the
	// slope behaves like ρ − ε + x, so stepping down terminates; stepping up
	// stops at α = 1 + e^709, beyond which α itself overflows.
	const xMin, xMax = -700, 709
	if slope(xMin) >= 0 {
		// ρ so large that the optimum has α − 1 < e^−700, where δ rounds
		// to 1 anyway: report the trivial bound.
		return 0, 1 + math.Exp(xMin)
	}
	lo, hi := 0.0, 0.0
	for step := 1.0; slope(lo) >= 0; step *= 2 {
		lo = math.Max(lo-step, xMin)
	}
	for step := 1.0; slope(hi) <= 0 && hi < xMax; step *= 2 {
		hi = math.Min(hi+step, xMax)
	}
	if slope(hi) <= 0 {
		return g(hi), 1 + math.Exp(hi)
	}
	for range 2000 {
		mid := lo + (hi-lo)/2
		if mid <= lo || mid >= hi {
			break
		}
		if slope(mid) < 0 {
			lo = mid
		} else {
			hi = mid
		}
	}
	x := lo
	if g(hi) < g(lo) {
		x = hi
	}
	return g(x), 1 + math.Exp(x)
}

// boundary returns the point v* > 0 where the monotone predicate ok changes
// value: if okAbove, ok(v) holds for v ≥ v* and fails below; otherwise it
// holds for v ≤ v* and fails above. It brackets v* by doubling or halving
// from start, bisects until the bracket is two adjacent floats, and returns
// the end of the bracket where ok holds (so a bound built on it is never
// optimistic). It returns 0 or +Inf when v* lies beyond the floats.
func boundary(start float64, okAbove bool, ok func(float64) bool) float64 {
	// above is true for v above v*, false below.
	above := func(v float64) bool { return ok(v) == okAbove }
	var lo, hi float64
	if above(start) {
		hi, lo = start, start/2
		for above(lo) {
			if lo < 0x1p-1000 {
				lo = 0
				break
			}
			hi, lo = lo, lo/2
		}
	} else {
		lo, hi = start, 2*start
		for !above(hi) {
			if math.IsInf(hi, 1) {
				if okAbove {
					return hi
				}
				return math.MaxFloat64
			}
			lo, hi = hi, 2*hi
		}
	}
	for {
		mid := lo + (hi-lo)/2
		if mid <= lo || mid >= hi {
			break
		}
		if above(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	if okAbove {
		return hi
	}
	return lo
}
