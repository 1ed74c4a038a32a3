package dp

import (
	"fmt"
	"math"
	"slices"
)

// DefaultOrders returns the Rényi orders an RDPAccountant tracks unless told
// otherwise: 1.1, 1.2, …, 10.9, then 11, 12, …, 63, then 128, 256, 512 and
// 1024 — the default orders of Google's dp_accounting, which cover the
// Gaussian mechanism well for ε between about 0.1 and 100.
func DefaultOrders() []float64 {
	orders := make([]float64, 0, 99+53+4)
	for x := 1; x < 100; x++ {
		orders = append(orders, 1+float64(x)/10)
	}
	for a := 11; a < 64; a++ {
		orders = append(orders, float64(a))
	}
	return append(orders, 128, 256, 512, 1024)
}

// PoissonGaussianRDP returns the Rényi differential privacy, at order α > 1,
// of one step of the Poisson-subsampled Gaussian mechanism: every client
// takes part independently with probability q ∈ (0, 1], and Gaussian noise
// with standard deviation z times the L2 sensitivity is added to the sum
// (Mironov, Talwar and Zhang 2019, "Rényi differential privacy of the
// sampled Gaussian mechanism"; add/remove-one-client neighbours).
//
// With q = 1 it is α/(2z²). Otherwise it is log(A_α)/(α−1), where A_α is
// the α-th moment of the privacy-loss ratio: at an integer α the binomial
// sum of MTZ19 §3.2, which is exact; at a fractional α the two-sided series
// of MTZ19 §3.3 with every term taken in absolute value, as Google's
// dp_accounting computes it — an upper bound on A_α (the exact series has
// sign changes), which reproduces dp_accounting's published values. If that
// series has not converged after 1000 terms the order is reported as +Inf
// (useless, but never optimistic), as dp_accounting does.
func PoissonGaussianRDP(q, z, alpha float64) (float64, error) {
	if err := checkRate(q); err != nil {
		return 0, err
	}
	if err := checkMultiplier(z); err != nil {
		return 0, err
	}
	if err := checkOrder(alpha); err != nil {
		return 0, err
	}
	return poissonGaussianRDP(q, z, alpha), nil
}

func checkOrder(alpha float64) error {
	if !(alpha > 1) || math.IsInf(alpha, 1) {
		return invalidf("Rényi order = %v; it must be finite and > 1", alpha)
	}
	return nil
}

func poissonGaussianRDP(q, z, alpha float64) float64 {
	if q == 1 {
		return alpha / (2 * z * z)
	}
	var logA float64
	if alpha == math.Trunc(alpha) {
		logA = logAInt(q, z, int(alpha))
	} else {
		logA = logAFrac(q, z, alpha)
	}
	// A_α ≥ 1 by Jensen; a rounding error below 0 would be optimistic.
	return math.Max(logA, 0) / (alpha - 1)
}

// logBinom returns log|C(n, k)| for real n and integer k ≥ 0.
func logBinom(n, k float64) float64 {
	a, _ := math.Lgamma(n + 1)
	b, _ := math.Lgamma(k + 1)
	c, _ := math.Lgamma(n - k + 1)
	return a - b - c
}

// logAInt returns log A_α for an integer α ≥ 2 and 0 < q < 1:
//
//	A_α = Σ_{i=0}^{α} C(α,i) q^i (1−q)^{α−i} exp((i²−i)/(2z²)).
func logAInt(q, z float64, alpha int) float64 {
	lq, l1q := math.Log(q), math.Log1p(-q)
	terms := make([]float64, alpha+1)
	for i := range terms {
		fi := float64(i)
		terms[i] = logBinom(float64(alpha), fi) + fi*lq + float64(alpha-i)*l1q + (fi*fi-fi)/(2*z*z)
	}
	return logSumExp(terms)
}

// maxFracTerms bounds the series of logAFrac.
const maxFracTerms = 1000

// logAFrac returns the log of the absolute-value series bounding A_α for a
// fractional α > 1 and 0 < q < 1 (MTZ19 §3.3): with z₀ = z²·log(1/q − 1) + ½
// splitting the integral, and j = α − i,
//
//	Σ_i |C(α,i)| [ q^i (1−q)^j e^{(i²−i)/(2z²)} ½erfc((i−z₀)/(√2 z))
//	             + q^j (1−q)^i e^{(j²−j)/(2z²)} ½erfc((z₀−j)/(√2 z)) ],
//
// stopped once both terms fall and are e^−30 below the running total.
func logAFrac(q, z, alpha float64) float64 {
	lq, l1q := math.Log(q), math.Log1p(-q)
	z0 := z*z*math.Log(1/q-1) + 0.5
	s2 := math.Sqrt2 * z
	a0, a1 := math.Inf(-1), math.Inf(-1)
	last0, last1 := math.Inf(-1), math.Inf(-1)
	for i := range maxFracTerms {
		fi := float64(i)
		j := alpha - fi
		lc := logBinom(alpha, fi)
		s0 := lc + fi*lq + j*l1q + (fi*fi-fi)/(2*z*z) - math.Ln2 + logErfc((fi-z0)/s2)
		s1 := lc + j*lq + fi*l1q + (j*j-j)/(2*z*z) - math.Ln2 + logErfc((z0-j)/s2)
		a0, a1 = logAdd(a0, s0), logAdd(a1, s1)
		total := logAdd(a0, a1)
		if s0 < last0 && s1 < last1 && math.Max(s0, s1) < total-30 {
			return total
		}
		last0, last1 = s0, s1
	}
	return math.Inf(1)
}

// logAdd returns log(e^a + e^b).
func logAdd(a, b float64) float64 {
	if a < b {
		a, b = b, a
	}
	if math.IsInf(b, -1) {
		return a
	}
	return a + math.Log1p(math.Exp(b-a))
}

// logSumExp returns log Σ e^x.
func logSumExp(x []float64) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v)
	}
	if math.IsInf(m, 0) {
		return m
	}
	var s float64
	for _, v := range x {
		s += math.Exp(v - m)
	}
	return m + math.Log(s)
}

// logErfc returns log(erfc(x)), accurate where erfc(x) underflows.
func logErfc(x float64) float64 {
	if x < 25 {
		return math.Log(math.Erfc(x))
	}
	// Asymptotic series erfc(x) = e^{−x²}/(x√π) · Σ_k (−1)^k (2k−1)!!/(2x²)^k;
	// at x ≥ 25 the seventh term is below 1e-15.
	t, s := 1.0, 1.0
	u := 1 / (2 * x * x)
	for k := 1; k <= 7; k++ {
		t *= -float64(2*k-1) * u
		s += t
	}
	return -x*x - math.Log(x) - 0.5*math.Log(math.Pi) + math.Log(s)
}

// RDPEpsilon converts Rényi DP to (ε, δ)-DP: given the RDP values rdp at
// orders, it returns the smallest ε over the orders, and the order that
// gives it, of the bound of Canonne, Kamath and Steinke (2020, Prop. 12) and
// Balle et al. (2020, Thm. 21), as dp_accounting computes it:
//
//	ε(α) = rdp(α) + log1p(−1/α) − (log δ + log α)/(α−1),   for α > 1.01,
//
// and ε = 0 where the KL bound δ ≥ √(1 − e^{−rdp}) already holds. Orders at
// or below 1.01, where the bound is numerically unstable, only take part in
// the KL bound. The returned ε is never negative.
func RDPEpsilon(orders, rdp []float64, delta float64) (eps, order float64, err error) {
	if err := checkDelta(delta); err != nil {
		return 0, 0, err
	}
	if err := checkCurve(orders, rdp); err != nil {
		return 0, 0, err
	}
	logDelta := math.Log(delta)
	eps, order = math.Inf(1), orders[0]
	for i, a := range orders {
		r := math.Max(rdp[i], 0)
		var e float64
		switch {
		case delta*delta+math.Expm1(-r) > 0:
			e = 0
		case a > 1.01:
			e = r + math.Log1p(-1/a) - (logDelta+math.Log(a))/(a-1)
		default:
			e = math.Inf(1)
		}
		if e < eps {
			eps, order = e, a
		}
	}
	return math.Max(eps, 0), order, nil
}

// RDPDelta converts Rényi DP to (ε, δ)-DP the other way: it returns the
// smallest δ over the orders, and the order that gives it, of the same bound
// as RDPEpsilon together with the KL bound δ ≤ √(1 − e^{−rdp}), capped at 1.
func RDPDelta(orders, rdp []float64, eps float64) (delta, order float64, err error) {
	if err := checkEpsilon(eps); err != nil {
		return 0, 0, err
	}
	if err := checkCurve(orders, rdp); err != nil {
		return 0, 0, err
	}
	logDelta, order := math.Inf(1), orders[0]
	for i, a := range orders {
		r := math.Max(rdp[i], 0)
		ld := math.Inf(-1)
		if r > 0 {
			ld = 0.5 * math.Log1p(-math.Exp(-r))
		}
		if a > 1.01 {
			ld = math.Min(ld, (a-1)*(r-eps+math.Log1p(-1/a))-math.Log(a))
		}
		if ld < logDelta {
			logDelta, order = ld, a
		}
	}
	return math.Min(math.Exp(logDelta), 1), order, nil
}

func checkCurve(orders, rdp []float64) error {
	if len(orders) == 0 || len(orders) != len(rdp) {
		return invalidf("RDP curve has %d orders and %d values; want the same number, at least one", len(orders), len(rdp))
	}
	for i, a := range orders {
		if !(a >= 1) || math.IsInf(a, 1) {
			return invalidf("Rényi order = %v; it must be finite and ≥ 1", a)
		}
		if math.IsNaN(rdp[i]) {
			return invalidf("RDP at order %v is NaN", a)
		}
	}
	return nil
}

// RDPAccountant accounts Rényi differential privacy at a fixed set of
// orders: composing mechanisms adds their RDP curves, and Epsilon and Delta
// convert the total to (ε, δ)-DP. The zero value is an accountant over
// DefaultOrders that has spent nothing. An RDPAccountant is not safe for
// concurrent use.
type RDPAccountant struct {
	orders []float64
	rdp    []float64
}

// NewRDPAccountant returns an accountant over the given Rényi orders (each
// finite and > 1); nil or empty means DefaultOrders. It keeps its own copy.
func NewRDPAccountant(orders []float64) (*RDPAccountant, error) {
	if len(orders) == 0 {
		return new(RDPAccountant), nil
	}
	for _, a := range orders {
		if err := checkOrder(a); err != nil {
			return nil, err
		}
	}
	return &RDPAccountant{orders: slices.Clone(orders), rdp: make([]float64, len(orders))}, nil
}

func (a *RDPAccountant) init() {
	if a.orders == nil {
		a.orders = DefaultOrders()
		a.rdp = make([]float64, len(a.orders))
	}
}

// ComposePoissonGaussian adds steps ≥ 1 steps of the Poisson-subsampled
// Gaussian mechanism with sampling rate q ∈ (0, 1] and noise multiplier
// z > 0 (noise standard deviation over L2 sensitivity); see
// PoissonGaussianRDP. Steps compose additively.
func (a *RDPAccountant) ComposePoissonGaussian(q, z float64, steps int) error {
	if err := checkRate(q); err != nil {
		return err
	}
	if err := checkMultiplier(z); err != nil {
		return err
	}
	if err := checkCount("steps", steps); err != nil {
		return err
	}
	a.init()
	for i, alpha := range a.orders {
		a.rdp[i] += float64(steps) * poissonGaussianRDP(q, z, alpha)
	}
	return nil
}

// Orders returns a copy of the orders a tracks.
func (a *RDPAccountant) Orders() []float64 {
	a.init()
	return slices.Clone(a.orders)
}

// RDP returns a copy of the RDP spent so far at each of a's orders.
func (a *RDPAccountant) RDP() []float64 {
	a.init()
	return slices.Clone(a.rdp)
}

// Epsilon returns the ε spent at the given δ and the order that gives it;
// see RDPEpsilon.
func (a *RDPAccountant) Epsilon(delta float64) (eps, order float64, err error) {
	a.init()
	return RDPEpsilon(a.orders, a.rdp, delta)
}

// Delta returns the δ spent at the given ε and the order that gives it; see
// RDPDelta.
func (a *RDPAccountant) Delta(eps float64) (delta, order float64, err error) {
	a.init()
	return RDPDelta(a.orders, a.rdp, eps)
}

func (a *RDPAccountant) clone() *RDPAccountant {
	a.init()
	return &RDPAccountant{orders: a.orders, rdp: slices.Clone(a.rdp)}
}

// RDPNoiseMultiplier returns the smallest noise multiplier z (to the last
// bit) such that steps steps of the Poisson-subsampled Gaussian mechanism
// with sampling rate q spend at most ε at δ under RDP accounting over the
// given orders (nil means DefaultOrders). ε falls as z grows, so it brackets
// z and bisects; the z it returns meets the target, never exceeds it.
func RDPNoiseMultiplier(eps, delta, q float64, steps int, orders []float64) (float64, error) {
	if err := checkEpsilon(eps); err != nil {
		return 0, err
	}
	if err := checkDelta(delta); err != nil {
		return 0, err
	}
	if err := checkRate(q); err != nil {
		return 0, err
	}
	if err := checkCount("steps", steps); err != nil {
		return 0, err
	}
	base, err := NewRDPAccountant(orders)
	if err != nil {
		return 0, err
	}
	ok := func(z float64) bool {
		acc := base.clone()
		if acc.ComposePoissonGaussian(q, z, steps) != nil {
			return false
		}
		e, _, _ := acc.Epsilon(delta)
		return e <= eps
	}
	z := boundary(1, true, ok)
	if math.IsInf(z, 1) || z == 0 {
		return 0, fmt.Errorf("no noise multiplier reaches epsilon %v at delta %v: %w", eps, delta, ErrInvalid)
	}
	return z, nil
}
