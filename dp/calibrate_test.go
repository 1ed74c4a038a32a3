package dp

import (
	"errors"
	"math"
	"testing"
)

func TestPlanZCDP(t *testing.T) {
	// SPEC §7 by hand: scaling σ/C = √(T/(2ρ)), binning σ/C = √(2cT/(2ρ)),
	// with ρ(ε=1, δ=1e-5) = 0.030556595197639566 (mpmath).
	const rho = 0.030556595197639566
	for _, tc := range []struct {
		name       string
		rounds, pr int
		want       float64
	}{
		{"scaling T=1", 1, 0, math.Sqrt(1 / (2 * rho))},
		{"scaling T=12", 12, 1, math.Sqrt(12 / (2 * rho))},
		{"binning c=10 T=30", 30, 20, math.Sqrt(2 * 10 * 30 / (2 * rho))},
		{"binning c=100 T=1", 1, 200, math.Sqrt(2 * 100 * 1 / (2 * rho))},
	} {
		p := Plan{Epsilon: 1, Delta: 1e-5, Rounds: tc.rounds, PerRound: tc.pr}
		z, err := p.NoiseMultiplier()
		if err != nil {
			t.Fatal(err)
		}
		if relErr(z, tc.want) > 1e-12 {
			t.Errorf("%s: z = %.15g, want %.15g", tc.name, z, tc.want)
		}
		// Composing T·m Gaussian mechanisms with this z spends the budget,
		// and not more.
		m := max(tc.pr, 1)
		spent := float64(tc.rounds*m) * GaussianRho(z)
		if eps, _ := ZCDPEpsilon(spent, 1e-5); eps > 1 || relErr(eps, 1) > 1e-9 {
			t.Errorf("%s: composing spends ε = %.15g, want 1", tc.name, eps)
		}
	}
}

func TestPlanZCDPIgnoresSampling(t *testing.T) {
	full := Plan{Epsilon: 2, Delta: 1e-6, Rounds: 10}
	sampled := full
	sampled.SampleRate = 0.1
	a, err := full.NoiseMultiplier()
	if err != nil {
		t.Fatal(err)
	}
	b, err := sampled.NoiseMultiplier()
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("zCDP noise depends on the sample rate: %v vs %v", a, b)
	}
}

func TestPlanRDP(t *testing.T) {
	// With m mechanisms per round on one sample, the round is a single
	// Gaussian mechanism with multiplier z/√m: the noise for binning is √m
	// times that of one mechanism.
	one := Plan{Epsilon: 3, Delta: 1e-5, Rounds: 30, SampleRate: 0.1, Accountant: RDP}
	bin := one
	bin.PerRound = 20
	z1, err := one.NoiseMultiplier()
	if err != nil {
		t.Fatal(err)
	}
	zb, err := bin.NoiseMultiplier()
	if err != nil {
		t.Fatal(err)
	}
	if relErr(zb, z1*math.Sqrt(20)) > 1e-15 {
		t.Errorf("binning z = %v, want √20·%v", zb, z1)
	}
	acc := new(RDPAccountant)
	if err := acc.ComposePoissonGaussian(0.1, zb/math.Sqrt(20), 30); err != nil {
		t.Fatal(err)
	}
	if eps, _, _ := acc.Epsilon(1e-5); relErr(eps, 3) > 1e-9 {
		t.Errorf("binning plan spends ε = %v, want 3", eps)
	}
	// Amplification by sampling: RDP with q = 0.1 needs less noise than the
	// paper's zCDP accounting, which takes no credit for sampling.
	zc := one
	zc.Accountant = ZCDP
	z0, err := zc.NoiseMultiplier()
	if err != nil {
		t.Fatal(err)
	}
	if !(z1 < z0) {
		t.Errorf("RDP with q = 0.1 needs z = %v, zCDP %v; want less", z1, z0)
	}
}

func TestPlanBadInput(t *testing.T) {
	good := Plan{Epsilon: 1, Delta: 1e-5, Rounds: 10}
	for name, p := range map[string]Plan{
		"eps=0":      {Epsilon: 0, Delta: 1e-5, Rounds: 10},
		"eps<0":      {Epsilon: -1, Delta: 1e-5, Rounds: 10},
		"delta=0":    {Epsilon: 1, Delta: 0, Rounds: 10},
		"delta=1":    {Epsilon: 1, Delta: 1, Rounds: 10},
		"rounds=0":   {Epsilon: 1, Delta: 1e-5},
		"q>1":        {Epsilon: 1, Delta: 1e-5, Rounds: 10, SampleRate: 1.5},
		"q<0":        {Epsilon: 1, Delta: 1e-5, Rounds: 10, SampleRate: -0.1},
		"perround<0": {Epsilon: 1, Delta: 1e-5, Rounds: 10, PerRound: -2},
		"accountant": {Epsilon: 1, Delta: 1e-5, Rounds: 10, Accountant: 7},
	} {
		if _, err := p.NoiseMultiplier(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: error %v, want ErrInvalid", name, err)
		}
	}
	if _, err := good.NoiseMultiplier(); err != nil {
		t.Errorf("valid plan: %v", err)
	}
}

func TestParseAccountant(t *testing.T) {
	for _, a := range []Accountant{ZCDP, RDP} {
		got, err := ParseAccountant(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAccountant(%q) = %v, %v", a.String(), got, err)
		}
	}
	if _, err := ParseAccountant("pld"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseAccountant(pld) error %v, want ErrInvalid", err)
	}
	if s := Accountant(9).String(); s != "Accountant(9)" {
		t.Errorf("String of an unknown accountant = %q", s)
	}
}

func TestSpentBy(t *testing.T) {
	// zCDP: ρ = T/(2z²) exactly; ε by the CKS conversion.
	s, err := SpentBy(ZCDP, 2, 8, 0.5, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	wantEps, _ := ZCDPEpsilon(1, 1e-5) // 8/(2·4) = 1
	if s.Rho != 1 || s.Epsilon != wantEps || s.Order != 0 {
		t.Errorf("zcdp: %+v, want ρ = 1, ε = %v", s, wantEps)
	}
	// RDP credits sampling: less ε than without it, and equal to the
	// accountant composed directly.
	r, err := SpentBy(RDP, 1.1, 1000, 0.01, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	var a RDPAccountant
	if err := a.ComposePoissonGaussian(0.01, 1.1, 1000); err != nil {
		t.Fatal(err)
	}
	eps, order, _ := a.Epsilon(1e-5)
	if r.Epsilon != eps || r.Order != order || r.Rho != 0 {
		t.Errorf("rdp: %+v, want ε = %v at order %v", r, eps, order)
	}
	for _, tc := range []struct {
		z     float64
		steps int
	}{{0, 1}, {-1, 1}, {math.Inf(1), 1}, {math.NaN(), 1}, {1, 0}} {
		if _, err := SpentBy(ZCDP, tc.z, tc.steps, 1, 1e-5); err == nil {
			t.Errorf("SpentBy(z = %v, steps = %d) has no error", tc.z, tc.steps)
		}
	}
}
