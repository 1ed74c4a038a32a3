package dp

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Distributed discrete noise: the Skellam mechanism.
//
// Under secure aggregation (package secagg) nobody sees a client's
// contribution in the clear, so nobody can add central noise after the
// sum. Instead every client adds its share of integer noise to its
// quantised vector before masking, and the unmasked sum carries the
// total. The Skellam distribution Sk(μ) — the difference of two
// independent Poisson(μ/2) variables, mean 0, variance μ — is closed under
// addition, so s clients each adding Sk(v) put exactly Sk(s·v) on every
// coordinate of the sum (Agarwal, Kairouz and Liu, "The Skellam Mechanism
// for Differentially Private Federated Learning", NeurIPS 2021).
//
// Here μ (the Variance of a Skellam) is the variance of the total noise
// on one coordinate of the sum, in quantised units. The RDP bound of the
// mechanism (their Theorem 3.5 / Corollary 3.6) holds at integer orders
// α > 1, for an integer-valued query whose L1 and L2 sensitivities are at
// most Δ₁ and Δ₂:
//
//	ε(α) = α·Δ₂²/(2μ) + min( ((2α−1)·Δ₂² + 6·Δ₁)/(4μ²), 3·Δ₁/(2μ) ).
//
// The first term is the Gaussian mechanism's; the second is the price of
// discreteness and vanishes as μ grows. RDP is non-decreasing in the
// order, so at a fractional order α the value at ⌈α⌉ is a valid bound;
// that is how an RDPAccountant over DefaultOrders composes a Skellam
// mechanism. The bound holds at integer orders only, which zCDP (a bound
// at every α > 1) cannot use without losing up to a factor 2, so a Ledger
// accepts Skellam releases under the RDP accountant only.
//
// Dropouts. Each client's share of noise is sized for the fewest clients
// that may survive a round (SkellamPlan.Survivors): with per-client
// variance v and s survivors the sum carries Sk(s·v). More survivors than
// planned means more noise (and more privacy); fewer means less.
//
// Shares. A round with s survivors is charged as Skellam{Variance:
// SkellamShares(s)·v} = (s − 1)·v: the protected client's own share is
// not counted. Under add/remove adjacency the neighbouring sum without
// the protected client lacks its share, so the bound for s shares (which
// assumes the same noise on both sides) would credit the client with
// noise that only one of the two sums has; the s − 1 shares of the others
// are on both sides. This is the more conservative of the two usual
// conventions (Kairouz, Liu and Steinke 2021 count every share under
// their replace-one analysis); it costs one client's share of noise.
//
// Rounding. A client's update, clipped to L2 norm C and scaled by γ, is
// rounded to integers by stochastic rounding, which can lengthen it: the
// sensitivities to account are those of the rounded vector,
// RoundedL2Bound and RoundedL1Bound (Kairouz, Liu and Steinke, "The
// Distributed Discrete Gaussian Mechanism for Federated Learning with
// Secure Aggregation", ICML 2021, §4.1).

// Skellam describes Count Skellam mechanisms applied in one round: each
// adds Sk(Variance) noise to every coordinate of an integer-valued sum
// whose L1 and L2 sensitivities are at most L1 and L2. The zero value is
// not a valid mechanism.
type Skellam struct {
	// Variance is the variance μ > 0 of the total noise on one coordinate
	// of the sum, in the units of the sum (quantised units under secure
	// aggregation): the per-client variance times the number of clients
	// whose noise reached the sum.
	Variance float64
	// L1 and L2 are the L1 and L2 sensitivities Δ₁, Δ₂ > 0 of the sum, in
	// the same units (see RoundedL1Bound and RoundedL2Bound).
	L1, L2 float64
	// Count is the number of such sums per round; 0 means 1.
	Count int
}

func (s Skellam) count() int {
	if s.Count == 0 {
		return 1
	}
	return s.Count
}

func (s Skellam) validate() error {
	if !(s.Variance > 0) || math.IsInf(s.Variance, 1) {
		return invalidf("Skellam variance = %v; it must be finite and > 0", s.Variance)
	}
	if err := CheckClip("Skellam L1 sensitivity", s.L1); err != nil {
		return err
	}
	if err := CheckClip("Skellam L2 sensitivity", s.L2); err != nil {
		return err
	}
	if s.Count < 0 {
		return invalidf("Skellam count = %d; it must be ≥ 0", s.Count)
	}
	return nil
}

// RDP returns the Rényi DP at order α > 1 of one round of s (all Count
// mechanisms): Count·ε(⌈α⌉) with ε the bound of SkellamRDP.
func (s Skellam) RDP(alpha float64) float64 {
	return float64(s.count()) * skellamRDP(math.Ceil(alpha), s.Variance, s.L1, s.L2)
}

// SkellamRDP returns the RDP bound of Agarwal, Kairouz and Liu (2021,
// Theorem 3.5) of one Skellam mechanism at the integer order α ≥ 2, with
// total noise variance μ and sensitivities Δ₁ = l1 and Δ₂ = l2:
//
//	α·Δ₂²/(2μ) + min( ((2α−1)·Δ₂² + 6·Δ₁)/(4μ²), 3·Δ₁/(2μ) ).
//
// It returns an error wrapping ErrInvalid for a non-integer order or
// parameters out of their domain.
func SkellamRDP(alpha, variance, l1, l2 float64) (float64, error) {
	if err := checkOrder(alpha); err != nil {
		return 0, err
	}
	if alpha != math.Trunc(alpha) {
		return 0, invalidf("Rényi order = %v; the Skellam bound holds at integer orders only", alpha)
	}
	if err := (Skellam{Variance: variance, L1: l1, L2: l2}).validate(); err != nil {
		return 0, err
	}
	return skellamRDP(alpha, variance, l1, l2), nil
}

func skellamRDP(a, mu, l1, l2 float64) float64 {
	l2sq := l2 * l2
	return a*l2sq/(2*mu) + math.Min(((2*a-1)*l2sq+6*l1)/(4*mu*mu), 3*l1/(2*mu))
}

// ComposeSkellam adds steps ≥ 1 rounds of s (validated as for a Ledger)
// to a's curve: at each order α it adds steps·s.RDP(α). It takes no credit
// for sampling clients, which is conservative.
func (a *RDPAccountant) ComposeSkellam(s Skellam, steps int) error {
	if err := s.validate(); err != nil {
		return err
	}
	if err := checkCount("steps", steps); err != nil {
		return err
	}
	a.init()
	for i, alpha := range a.orders {
		a.rdp[i] += float64(steps) * s.RDP(alpha)
	}
	return nil
}

// SkellamEpsilon returns the ε at δ, and the order that gives it, of
// rounds rounds of the Skellam mechanism s, composed over DefaultOrders
// (fractional orders take the bound at the next integer) and converted
// with RDPEpsilon.
func SkellamEpsilon(s Skellam, rounds int, delta float64) (eps, order float64, err error) {
	var a RDPAccountant
	if err := a.ComposeSkellam(s, rounds); err != nil {
		return 0, 0, err
	}
	return a.Epsilon(delta)
}

// RoundedL2Bound returns the L2 norm bound of a vector of dim coordinates
// and L2 norm at most c (already scaled to quantised units) after
// stochastic rounding of every coordinate to a neighbouring integer
// (Kairouz, Liu and Steinke 2021, §4.1). With beta = 0 the bound is the
// deterministic c + √dim. With beta ∈ (0, 1) it is the smaller
//
//	min( c + √d, √(c² + d/4 + √(2·ln(1/β))·(c + √d/2)) ),
//
// which an unconditional rounding meets with probability at least 1 − β;
// conditional rounding (rounding again until the norm meets it, as
// secagg.Quantizer does with Beta > 0) makes it hold always. It panics if
// c < 0, dim < 1 or beta ∉ [0, 1).
func RoundedL2Bound(c float64, dim int, beta float64) float64 {
	if !(c >= 0) || dim < 1 || !(beta >= 0 && beta < 1) {
		panic(fmt.Sprintf("dp: RoundedL2Bound(%v, %d, %v): want c ≥ 0, dim ≥ 1, beta in [0, 1)", c, dim, beta))
	}
	d := float64(dim)
	b1 := c + math.Sqrt(d)
	if beta == 0 {
		return b1
	}
	sq := c*c + d/4 + math.Sqrt(2*math.Log(1/beta))*(c+math.Sqrt(d)/2)
	return math.Min(b1, math.Sqrt(sq))
}

// RoundedL1Bound returns the L1 norm bound of an integer vector of dim
// coordinates and L2 norm at most l2: min(√dim·l2, l2²), since L1 ≤ √d·L2
// always and L1 ≤ L2² for integers. It panics if l2 < 0 or dim < 1.
func RoundedL1Bound(l2 float64, dim int) float64 {
	if !(l2 >= 0) || dim < 1 {
		panic(fmt.Sprintf("dp: RoundedL1Bound(%v, %d): want l2 ≥ 0, dim ≥ 1", l2, dim))
	}
	return l2 * math.Min(math.Sqrt(float64(dim)), l2)
}

// A SkellamPlan describes a federated fit with distributed Skellam noise
// before it runs, so its noise can be calibrated to a target (ε, δ):
// Rounds rounds, each releasing one integer sum of sensitivities L1 and L2
// (quantised units, after rounding), to which at least Survivors clients
// contribute their noise. The zero value is not a valid plan.
type SkellamPlan struct {
	// Epsilon and Delta are the target (ε, δ); required, ε > 0, 0 < δ < 1.
	Epsilon, Delta float64
	// Rounds is the number of rounds T ≥ 1.
	Rounds int
	// L1 and L2 are the sensitivities of one round's sum, > 0.
	L1, L2 float64
	// Survivors is the fewest clients whose noise is guaranteed to reach
	// the sum of a round (the dropout tolerance of the plan), at least 2
	// (SkellamShares); 0 means 2.
	Survivors int
}

func (p SkellamPlan) survivors() int {
	if p.Survivors == 0 {
		return 2
	}
	return p.Survivors
}

// SkellamShares returns the number of noise shares that protect one of s
// survivors of a round: s − 1, every share but its own (see "Shares"
// above). It panics for s < 2.
func SkellamShares(s int) int {
	if s < 2 {
		panic(fmt.Sprintf("dp: SkellamShares(%d): a sum needs 2 survivors for a share to protect either", s))
	}
	return s - 1
}

// Variance returns the smallest total variance μ (to the last bit) of the
// noise on each coordinate of a round's sum such that Rounds rounds of
// Skellam{μ, L1, L2} spend at most ε at δ (SkellamEpsilon).
func (p SkellamPlan) Variance() (float64, error) {
	if err := checkEpsilon(p.Epsilon); err != nil {
		return 0, err
	}
	if err := checkDelta(p.Delta); err != nil {
		return 0, err
	}
	if err := checkCount("rounds", p.Rounds); err != nil {
		return 0, err
	}
	if p.survivors() < 2 {
		return 0, invalidf("survivors = %d; at least 2 are needed for a noise share to protect either (SkellamShares)", p.survivors())
	}
	if err := (Skellam{Variance: 1, L1: p.L1, L2: p.L2}).validate(); err != nil {
		return 0, err
	}
	ok := func(mu float64) bool {
		e, _, err := SkellamEpsilon(Skellam{Variance: mu, L1: p.L1, L2: p.L2}, p.Rounds, p.Delta)
		return err == nil && e <= p.Epsilon
	}
	mu := boundary(p.L2*p.L2, true, ok)
	if math.IsInf(mu, 1) || mu == 0 || mu == math.MaxFloat64 {
		return 0, invalidf("no Skellam variance reaches epsilon %v at delta %v", p.Epsilon, p.Delta)
	}
	return mu, nil
}

// ClientVariance returns the variance v = μ/SkellamShares(Survivors)
// of the Skellam noise each client adds to every coordinate, so that the
// shares protecting any one of Survivors clients carry the planned μ.
func (p SkellamPlan) ClientVariance() (float64, error) {
	mu, err := p.Variance()
	if err != nil {
		return 0, err
	}
	return mu / float64(SkellamShares(p.survivors())), nil
}

// Round returns the mechanism of one round in which survivors ≥ 2
// clients, each adding per-client variance clientVariance, reached the
// sum: the Skellam of variance SkellamShares(survivors)·clientVariance
// with the plan's sensitivities. Record it in the ledger with the round's
// real survivors.
func (p SkellamPlan) Round(clientVariance float64, survivors int) Skellam {
	return Skellam{Variance: float64(SkellamShares(survivors)) * clientVariance, L1: p.L1, L2: p.L2}
}

// SamplePoisson returns a Poisson(mean) variate drawn with r, for a
// finite mean ≥ 0. The sampler is exact up to floating-point rounding:
//
//   - mean < 10: Knuth's multiplication method (multiply uniforms until
//     the product falls below e^(−mean)), mean + 1 uniforms on average;
//   - mean ≥ 10: Hörmann's PTRS, a transformed rejection with squeeze
//     ("The transformed rejection method for generating Poisson random
//     variables", 1993), about 1.2 pairs of uniforms per variate at any
//     mean. Its acceptance test compares log V with the Poisson log
//     probability, which for large k is evaluated as
//     k·log1p((mean−k)/k) + (k−mean) − ½·log(2πk) − stirlerr(k) so that
//     the O(mean·log mean) terms cancel exactly rather than in floating
//     point; it stays accurate for means up to 2^52.
//
// It panics for a negative, NaN or infinite mean, or a mean above 2^52.
func SamplePoisson(r *rand.Rand, mean float64) int64 {
	switch {
	case !(mean >= 0) || mean > 1<<52:
		panic(fmt.Sprintf("dp: Poisson mean %v is not in [0, 2^52]", mean))
	case mean == 0:
		return 0
	case mean < 10:
		limit := math.Exp(-mean)
		var k int64
		for p := r.Float64(); p > limit; p *= r.Float64() {
			k++
		}
		return k
	}
	return poissonPTRS(r, mean)
}

// poissonPTRS is Hörmann's PTRS for mean ≥ 10.
func poissonPTRS(r *rand.Rand, lam float64) int64 {
	slam := math.Sqrt(lam)
	loglam := math.Log(lam)
	b := 0.931 + 2.53*slam
	a := -0.059 + 0.02483*b
	invAlpha := 1.1239 + 1.1328/(b-3.4)
	vr := 0.9277 - 3.6224/(b-2)
	for {
		u := r.Float64() - 0.5
		v := r.Float64()
		us := 0.5 - math.Abs(u)
		k := math.Floor((2*a/us+b)*u + lam + 0.43)
		if us >= 0.07 && v <= vr {
			return int64(k)
		}
		if k < 0 || (us < 0.013 && v > us) {
			continue
		}
		if math.Log(v)+math.Log(invAlpha)-math.Log(a/(us*us)+b) <= poissonLogPMF(k, lam, loglam) {
			return int64(k)
		}
	}
}

// poissonLogPMF returns log P(X = k) for X ~ Poisson(lam), k ≥ 0 integral.
func poissonLogPMF(k, lam, loglam float64) float64 {
	if k < 30 {
		lg, _ := math.Lgamma(k + 1)
		return -lam + k*loglam - lg
	}
	return k*math.Log1p((lam-k)/k) + (k - lam) - 0.5*math.Log(2*math.Pi*k) - stirlerr(k)
}

// stirlerr returns log(k!) − ((k+½)·log k − k + ½·log 2π) for k ≥ 30 by
// its asymptotic series (error below 1/(1680·k⁷) < 1e-13).
func stirlerr(k float64) float64 {
	k2 := k * k
	return (1.0/12 - (1.0/360-(1.0/1260)/k2)/k2) / k
}

// SampleSkellam returns a Skellam variate of mean 0 and the given finite
// variance ≥ 0 drawn with r: the difference of two Poisson(variance/2)
// variates (SamplePoisson). It panics as SamplePoisson does.
func SampleSkellam(r *rand.Rand, variance float64) int64 {
	a := SamplePoisson(r, variance/2)
	b := SamplePoisson(r, variance/2)
	return a - b
}

// AddSkellam adds independent Skellam noise of the given variance, drawn
// with r, to every element of x, in place. A client of a secure
// aggregation adds its share v = SkellamPlan.ClientVariance; use a source
// from NewSecure for real data and NewSeeded only in simulation.
func AddSkellam(x []int64, variance float64, r *rand.Rand) {
	for i := range x {
		x[i] += SampleSkellam(r, variance)
	}
}
