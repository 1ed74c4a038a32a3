package dp

import (
	"errors"
	"math"
	"testing"
)

// relErr returns |got − want| / |want|.
func relErr(got, want float64) float64 {
	return math.Abs(got-want) / math.Abs(want)
}

// Poisson-subsampled Gaussian, q = 0.01, z = 2.5, 50 steps: the published
// values of dp_accounting's rdp_privacy_accountant_test.py
// (test_compute_rdp_poisson_sampled_gaussian), and the same series evaluated
// independently with 40-digit arithmetic (mpmath) for more digits.
var rdpReference = []struct {
	order, published, mp float64
}{
	{1.5, 6.70579741e-4, 6.70579740803001e-4},
	{2.5, 1.08548710e-3, 1.08548710441308e-3},
	{5, 2.18075656e-3, 2.18075656230788e-3},
	{50, 2.38460375e-2, 2.38460375387062e-2},
	{100, 1.67416308e2, 1.67416307548418e2},
}

func TestPoissonGaussianRDPReference(t *testing.T) {
	acc, err := NewRDPAccountant([]float64{1.5, 2.5, 5, 50, 100})
	if err != nil {
		t.Fatal(err)
	}
	if err := acc.ComposePoissonGaussian(0.01, 2.5, 50); err != nil {
		t.Fatal(err)
	}
	got := acc.RDP()
	for i, ref := range rdpReference {
		if e := relErr(got[i], ref.published); e > 1e-6 {
			t.Errorf("order %v: RDP = %.10e, dp_accounting publishes %.8e (rel. err %.2g)", ref.order, got[i], ref.published, e)
		}
		if e := relErr(got[i], ref.mp); e > 1e-9 {
			t.Errorf("order %v: RDP = %.15e, 40-digit series gives %.15e (rel. err %.2g)", ref.order, got[i], ref.mp, e)
		}
	}
}

// logAIntegral computes log A_α = log E[((1−q) + q·exp((2x−1)/(2z²)))^α]
// for x ~ N(0, z²) by the trapezoid rule in log space — a method independent
// of the series in rdp.go. The integrand is smooth and decays like a
// Gaussian on both sides of its peaks (near 0 and near α), so the rule
// converges geometrically.
func logAIntegral(q, z, alpha float64) float64 {
	lo, hi := -40*z, alpha+40*z
	n := int((hi-lo)/(z/200)) + 1
	h := (hi - lo) / float64(n)
	f := make([]float64, n+1)
	for i := range f {
		x := lo + float64(i)*h
		logPhi := -x*x/(2*z*z) - math.Log(z*math.Sqrt(2*math.Pi))
		f[i] = logPhi + alpha*logAdd(math.Log1p(-q), math.Log(q)+(2*x-1)/(2*z*z))
	}
	f[0] -= math.Ln2
	f[n] -= math.Ln2
	return logSumExp(f) + math.Log(h)
}

func TestRDPAgainstIntegral(t *testing.T) {
	// Exact RDP of 50 steps, q = 0.01, z = 2.5, by 40-digit quadrature
	// (mpmath) of the same integral: at fractional orders the true value is
	// below dp_accounting's absolute-value series.
	exact := map[float64]float64{1.5: 6.5007089718804e-4, 2.5: 1.08541805691812e-3}
	for _, tc := range []struct{ q, z, alpha float64 }{
		{0.01, 2.5, 1.5}, {0.01, 2.5, 2.5}, {0.01, 2.5, 5}, {0.01, 2.5, 50},
		{0.01, 2.5, 100}, {0.1, 1, 3}, {0.3, 4, 12}, {0.5, 0.8, 7},
		{0.1, 1, 3.7}, {0.3, 4, 12.5}, {0.001, 0.7, 1.1},
	} {
		got := poissonGaussianRDP(tc.q, tc.z, tc.alpha)
		integral := logAIntegral(tc.q, tc.z, tc.alpha) / (tc.alpha - 1)
		if tc.alpha == math.Trunc(tc.alpha) {
			if e := relErr(got, integral); e > 1e-9 {
				t.Errorf("q=%v z=%v α=%v: series %.15e, integral %.15e (rel. err %.2g)", tc.q, tc.z, tc.alpha, got, integral, e)
			}
			continue
		}
		if got < integral*(1-1e-12) {
			t.Errorf("q=%v z=%v α=%v: bound %.15e below the exact RDP %.15e", tc.q, tc.z, tc.alpha, got, integral)
		}
		if want, ok := exact[tc.alpha]; ok && tc.q == 0.01 {
			if e := relErr(50*integral, want); e > 1e-9 {
				t.Errorf("α=%v: test integrator gives %.15e, mpmath %.15e", tc.alpha, 50*integral, want)
			}
		}
	}
}

func TestRDPSampleRateOne(t *testing.T) {
	// q = 1 is the plain Gaussian mechanism: α/(2z²) (dp_accounting's
	// test_compute_rdp_gaussian).
	got, err := PoissonGaussianRDP(1, 2.71828, 3.14159)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3.14159 / (2 * 2.71828 * 2.71828); relErr(got, want) > 1e-15 {
		t.Errorf("RDP = %v, want %v", got, want)
	}
}

func TestRDPComposition(t *testing.T) {
	one, two := new(RDPAccountant), new(RDPAccountant)
	for _, err := range []error{
		one.ComposePoissonGaussian(0.05, 1.3, 50),
		two.ComposePoissonGaussian(0.05, 1.3, 20),
		two.ComposePoissonGaussian(0.05, 1.3, 30),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	a, b := one.RDP(), two.RDP()
	orders := one.Orders()
	if len(a) != len(DefaultOrders()) {
		t.Fatalf("zero accountant tracks %d orders, want %d", len(a), len(DefaultOrders()))
	}
	for i := range a {
		if relErr(b[i], a[i]) > 1e-14 {
			t.Errorf("order %v: 20+30 steps give %v, 50 steps %v", orders[i], b[i], a[i])
		}
	}
}

func TestRDPEpsilonGaussian(t *testing.T) {
	// dp_accounting's test_compute_epsilon_delta_gaussian: z = 4.530877117,
	// q = 1, one step is (1, 1e-6)-DP over orders 1.001, 1.002, …, 99.999.
	var orders []float64
	for i := 1001; i < 100000; i++ {
		orders = append(orders, float64(i)/1000)
	}
	acc, err := NewRDPAccountant(orders)
	if err != nil {
		t.Fatal(err)
	}
	if err := acc.ComposePoissonGaussian(1, 4.530877117, 1); err != nil {
		t.Fatal(err)
	}
	eps, _, err := acc.Epsilon(1e-6)
	if err != nil {
		t.Fatal(err)
	}
	if relErr(eps, 1) > 1e-6 {
		t.Errorf("epsilon = %.12g, want 1", eps)
	}
	delta, _, err := acc.Delta(1)
	if err != nil {
		t.Fatal(err)
	}
	if relErr(delta, 1e-6) > 1e-6 {
		t.Errorf("delta = %.12g, want 1e-6", delta)
	}
	z, err := RDPNoiseMultiplier(1, 1e-6, 1, 1, orders)
	if err != nil {
		t.Fatal(err)
	}
	if relErr(z, 4.530877117) > 1e-6 {
		t.Errorf("noise multiplier for (1, 1e-6) = %.12g, want 4.530877117", z)
	}
}

func TestRDPEpsilonPureDP(t *testing.T) {
	// dp_accounting's test_compute_epsilon_delta_pure_dp: a constant RDP
	// curve of 1.1 over orders 2..32, δ = 1e-5, by hand:
	// 1.1 + log(31/32) − (log(1e-5) + log 32)/31.
	var orders, rdp []float64
	for a := 2; a <= 32; a++ {
		orders = append(orders, float64(a))
		rdp = append(rdp, 1.1)
	}
	want := 1.1 + math.Log(31.0/32) - (math.Log(1e-5)+math.Log(32))/31
	if math.Abs(want-1.32783806176) > 1e-10 {
		t.Fatalf("hand value %v disagrees with dp_accounting's 1.32783806176", want)
	}
	eps, order, err := RDPEpsilon(orders, rdp, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	if relErr(eps, want) > 1e-14 || order != 32 {
		t.Errorf("epsilon = %v at order %v, want %v at 32", eps, order, want)
	}
	delta, order, err := RDPDelta(orders, rdp, want)
	if err != nil {
		t.Fatal(err)
	}
	if relErr(delta, 1e-5) > 1e-12 || order != 32 {
		t.Errorf("delta = %v at order %v, want 1e-5 at 32", delta, order)
	}
}

func TestRDPDeltaAboveOptimalGaussian(t *testing.T) {
	// No RDP bound can beat the exact privacy profile of the Gaussian
	// mechanism with z = 1 (Balle and Wang 2018, Thm. 8):
	// δ(ε) = Φ(½ − ε) − e^ε Φ(−½ − ε); and it must be at most the
	// classical bound exp(−(ε−½)²/2) for ε ≥ ½.
	var orders []float64
	for x := 10; x < 505; x++ {
		orders = append(orders, float64(x)/10)
	}
	acc, err := NewRDPAccountant(orders[1:]) // orders must exceed 1
	if err != nil {
		t.Fatal(err)
	}
	if err := acc.ComposePoissonGaussian(1, 1, 1); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 500; i++ {
		eps := float64(i) / 10
		delta, _, err := acc.Delta(eps)
		if err != nil {
			t.Fatal(err)
		}
		opt := math.Erfc((eps-0.5)/math.Sqrt2)/2 - math.Exp(eps)*math.Erfc((eps+0.5)/math.Sqrt2)/2
		if delta+1e-300 < opt {
			t.Errorf("ε=%v: RDP δ %v below the optimal %v", eps, delta, opt)
		}
		if eps >= 0.5 {
			if classic := math.Exp(-0.5 * (eps - 0.5) * (eps - 0.5)); delta > classic+1e-300 {
				t.Errorf("ε=%v: RDP δ %v above the classical bound %v", eps, delta, classic)
			}
		}
	}
}

func TestRDPEpsilonDeltaConsistency(t *testing.T) {
	for _, q := range []float64{0.01, 0.1, 0.8, 1} {
		for _, z := range []float64{0.5, 1, 10, 100} {
			acc := new(RDPAccountant)
			if err := acc.ComposePoissonGaussian(q, z, 1); err != nil {
				t.Fatal(err)
			}
			for _, delta := range []float64{0.9, 0.1, 1e-3, 1e-5, 1e-9, 1e-12} {
				eps, _, err := acc.Epsilon(delta)
				if err != nil {
					t.Fatal(err)
				}
				if eps == 0 || math.IsInf(eps, 1) {
					continue
				}
				back, _, err := acc.Delta(eps)
				if err != nil {
					t.Fatal(err)
				}
				if relErr(back, delta) > 1e-9 {
					t.Errorf("q=%v z=%v: ε(δ=%v) = %v but δ(ε) = %v", q, z, delta, eps, back)
				}
			}
		}
	}
}

func TestRDPNoiseMultiplier(t *testing.T) {
	for _, tc := range []struct {
		eps, delta, q float64
		steps         int
	}{
		{1, 1e-5, 0.01, 1000},
		{3, 1e-6, 0.1, 30},
		{0.5, 1e-5, 1, 12},
		{8, 1e-5, 0.3, 100},
	} {
		z, err := RDPNoiseMultiplier(tc.eps, tc.delta, tc.q, tc.steps, nil)
		if err != nil {
			t.Fatal(err)
		}
		epsAt := func(z float64) float64 {
			acc := new(RDPAccountant)
			if err := acc.ComposePoissonGaussian(tc.q, z, tc.steps); err != nil {
				t.Fatal(err)
			}
			e, _, err := acc.Epsilon(tc.delta)
			if err != nil {
				t.Fatal(err)
			}
			return e
		}
		got := epsAt(z)
		if got > tc.eps {
			t.Errorf("%+v: z = %v spends ε = %v, above the target", tc, z, got)
		}
		if relErr(got, tc.eps) > 1e-9 {
			t.Errorf("%+v: z = %v spends ε = %v, want %v to 1e-9", tc, z, got, tc.eps)
		}
		if less := epsAt(z * (1 - 1e-9)); less <= tc.eps {
			t.Errorf("%+v: a smaller z %v also meets the target (ε = %v): search not tight", tc, z*(1-1e-9), less)
		}
	}
}

func TestRDPAmplification(t *testing.T) {
	// Sampling only helps: fewer clients per round, less noise for the same ε.
	prev := math.Inf(1)
	for _, q := range []float64{1, 0.5, 0.1, 0.01} {
		z, err := RDPNoiseMultiplier(1, 1e-5, q, 100, nil)
		if err != nil {
			t.Fatal(err)
		}
		if z >= prev {
			t.Errorf("q=%v needs z=%v, not below %v at a larger q", q, z, prev)
		}
		prev = z
	}
}

func TestLogErfc(t *testing.T) {
	// 40-digit values of log(erfc(x)) (mpmath).
	for _, tc := range []struct{ x, want float64 }{
		{-3, 0.69313613525044681032},
		{1, -1.8496055099332482486},
		{10, -102.87988902484488857},
		{24.9, -623.79803756557444263},
		{25.1, -633.80602485873514879},
		{30, -903.97411711064387808},
		{100, -10005.177585122664333},
	} {
		if got := logErfc(tc.x); relErr(got, tc.want) > 1e-14 {
			t.Errorf("logErfc(%v) = %.17g, want %.17g", tc.x, got, tc.want)
		}
	}
	if got := logErfc(0); got != 0 {
		t.Errorf("logErfc(0) = %v, want 0", got)
	}
}

func TestRDPBadInput(t *testing.T) {
	acc := new(RDPAccountant)
	for name, err := range map[string]error{
		"q=0":       acc.ComposePoissonGaussian(0, 1, 1),
		"q>1":       acc.ComposePoissonGaussian(1.5, 1, 1),
		"q=NaN":     acc.ComposePoissonGaussian(math.NaN(), 1, 1),
		"z=0":       acc.ComposePoissonGaussian(0.1, 0, 1),
		"steps=0":   acc.ComposePoissonGaussian(0.1, 1, 0),
		"order=1":   func() error { _, err := PoissonGaussianRDP(0.1, 1, 1); return err }(),
		"orders":    func() error { _, err := NewRDPAccountant([]float64{2, 0.5}); return err }(),
		"eps=0":     func() error { _, err := RDPNoiseMultiplier(0, 1e-5, 0.1, 10, nil); return err }(),
		"delta=1":   func() error { _, _, err := acc.Epsilon(1); return err }(),
		"delta=0":   func() error { _, _, err := acc.Epsilon(0); return err }(),
		"eps<0":     func() error { _, _, err := acc.Delta(-1); return err }(),
		"curve len": func() error { _, _, err := RDPEpsilon([]float64{2}, nil, 1e-5); return err }(),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: error %v, want ErrInvalid", name, err)
		}
	}
	if rdp := acc.RDP(); rdp[0] != 0 {
		t.Errorf("failed compositions changed the accountant: %v", rdp[0])
	}
}
