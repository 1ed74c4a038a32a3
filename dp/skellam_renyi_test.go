package dp_test

import (
	"math"
	"testing"

	"github.com/fedcalib/fedcalib/dp"
)

// skellamLogPMF returns log P(K = k) for k = −m … m of K = X − Y, X and Y
// independent Poisson(μ/2), by summing the product of the two Poisson
// probabilities over X (in log space): a computation independent of the
// RDP bound under test.
func skellamLogPMF(mu float64, m int) []float64 {
	lam := mu / 2
	J := int(lam+40*math.Sqrt(lam)) + 2*m + 100
	lp := make([]float64, J+m+1)
	for j := range lp {
		lg, _ := math.Lgamma(float64(j + 1))
		lp[j] = float64(j)*math.Log(lam) - lam - lg
	}
	out := make([]float64, 2*m+1)
	for k := -m; k <= m; k++ {
		a := k
		if a < 0 {
			a = -a
		}
		mx := math.Inf(-1)
		for j := 0; j+a < len(lp); j++ {
			mx = math.Max(mx, lp[j+a]+lp[j])
		}
		s := 0.0
		for j := 0; j+a < len(lp); j++ {
			s += math.Exp(lp[j+a] + lp[j] - mx)
		}
		out[k+m] = mx + math.Log(s)
	}
	return out
}

// exactSkellamRDP returns D_α(Sk(μ) + Δ ‖ Sk(μ)) = 1/(α−1)·log Σ_k
// P(k−Δ)^α·P(k)^(1−α), summed over |k| ≤ m, from lp =
// skellamLogPMF(μ, m).
func exactSkellamRDP(alpha float64, lp []float64, delta int) float64 {
	m := len(lp) / 2
	var terms []float64
	for k := -m + delta; k <= m; k++ {
		terms = append(terms, alpha*lp[k-delta+m]+(1-alpha)*lp[k+m])
	}
	mx := math.Inf(-1)
	for _, x := range terms {
		mx = math.Max(mx, x)
	}
	s := 0.0
	for _, x := range terms {
		s += math.Exp(x - mx)
	}
	return (mx + math.Log(s)) / (alpha - 1)
}

// TestSkellamRDPAgainstExactDivergence checks the Skellam RDP bound the
// accountant composes (dp.SkellamRDP, Agarwal et al. 2021) against the
// exact Rényi divergence of two shifted Skellam distributions, computed
// by summation from the Poisson probabilities, for a one-coordinate sum
// of sensitivity Δ (L1 = L2 = Δ): the bound is never below the exact
// value and within 30% above it; and, composed over rounds and converted
// to ε, the accountant's ε of a plan of (s − 1) shares is at least the ε
// of the exact divergences, and within 10% of it.
func TestSkellamRDPAgainstExactDivergence(t *testing.T) {
	for _, c := range []struct {
		mu    float64
		delta int
	}{{50, 1}, {200, 3}, {1000, 10}} {
		lp := skellamLogPMF(c.mu, int(c.mu/2+12*math.Sqrt(c.mu)+40*float64(c.delta)))
		for _, alpha := range []float64{2, 3, 5, 8, 16, 32} {
			exact := exactSkellamRDP(alpha, lp, c.delta)
			bound, err := dp.SkellamRDP(alpha, c.mu, float64(c.delta), float64(c.delta))
			if err != nil {
				t.Fatal(err)
			}
			if bound < exact*(1-1e-9) || bound > 1.3*exact {
				t.Errorf("μ = %v, Δ = %d, α = %v: bound %.6g, exact %.6g (ratio %.4f); want 1 ≤ ratio ≤ 1.3", c.mu, c.delta, alpha, bound, exact, bound/exact)
			}
		}
	}
	// A plan: 10 rounds, one coordinate of sensitivity 4, ε = 2 at
	// δ = 1e-5, 6 planned survivors, so each round is charged with the
	// 5 shares of the others.
	const T, delta, s = 10, 4, 6
	p := dp.SkellamPlan{Epsilon: 2, Delta: 1e-5, Rounds: T, L1: delta, L2: delta, Survivors: s}
	v, err := p.ClientVariance()
	if err != nil {
		t.Fatal(err)
	}
	mu := float64(s-1) * v
	if got := p.Round(v, s).Variance; math.Abs(got-mu) > 1e-9*mu {
		t.Fatalf("Round charges variance %v, want (s − 1)·v = %v", got, mu)
	}
	charged, _, err := dp.SkellamEpsilon(p.Round(v, s), T, p.Delta)
	if err != nil {
		t.Fatal(err)
	}
	lp := skellamLogPMF(mu, int(mu/2+12*math.Sqrt(mu)+40*delta))
	orders := []float64{2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64}
	rdp := make([]float64, len(orders))
	for i, a := range orders {
		rdp[i] = T * exactSkellamRDP(a, lp, delta)
	}
	// ε(δ) = min_α RDP(α) + log((α−1)/α) − (log δ + log α)/(α−1)
	// (Balle et al. 2020, the conversion dp.RDPEpsilon uses), written
	// out here.
	exact := math.Inf(1)
	for i, a := range orders {
		exact = math.Min(exact, rdp[i]+math.Log((a-1)/a)-(math.Log(p.Delta)+math.Log(a))/(a-1))
	}
	if charged < exact*(1-1e-9) || charged > 1.1*exact || charged > p.Epsilon*(1+1e-9) {
		t.Errorf("charged ε %.6g, exact-divergence ε %.6g; want exact ≤ charged ≤ min(1.1·exact, %v)", charged, exact, p.Epsilon)
	}
	t.Logf("plan ε %v: charged %.6g, from exact divergences %.6g (μ = %.4g)", p.Epsilon, charged, exact, mu)
}
