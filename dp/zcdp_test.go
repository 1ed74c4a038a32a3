package dp

import (
	"errors"
	"math"
	"testing"
)

// bruteLogDelta minimises the Canonne–Kamath–Steinke objective
// log[exp((α−1)(αρ−ε))/(α−1)·(1−1/α)^α] by brute force: a dense logarithmic
// grid of α−1 over [1e-9, 1e9], then a dense grid over the two coarse cells
// around the best point. It writes log(1−1/α) as log(α−1) − log(α), which
// is exact near α = 1 where log1p(−1/α) loses digits.
func bruteLogDelta(rho, eps float64) float64 {
	obj := func(am1 float64) float64 {
		a := 1 + am1
		return am1*(a*rho-eps) - math.Log(am1) + a*(math.Log(am1)-math.Log1p(am1))
	}
	const n = 50000
	const lo, hi = -9.0, 9.0
	best, at := math.Inf(1), 0.0
	for i := 0; i <= n; i++ {
		x := lo + (hi-lo)*float64(i)/n
		if v := obj(math.Pow(10, x)); v < best {
			best, at = v, x
		}
	}
	step := (hi - lo) / n
	for i := 0; i <= n; i++ {
		x := at - step + 2*step*float64(i)/n
		best = math.Min(best, obj(math.Pow(10, x)))
	}
	return best
}

func TestZCDPDeltaBruteForce(t *testing.T) {
	for _, rho := range []float64{1e-4, 0.01, 0.0305, 0.5, 3, 50} {
		for _, eps := range []float64{0.05, 0.5, 1, 3, 10, 40} {
			got, err := ZCDPDelta(rho, eps)
			if err != nil {
				t.Fatal(err)
			}
			lb := bruteLogDelta(rho, eps)
			brute := math.Min(1, math.Exp(lb))
			// The bisection may only do better than the grids, up to the
			// rounding of log δ (which can reach hundreds), and not by much.
			if math.Log(got) > math.Min(0, lb+1e-14*math.Max(1, math.Abs(lb))) {
				t.Errorf("ρ=%v ε=%v: δ = %v above the brute-force minimum %v", rho, eps, got, brute)
			}
			if got < brute*(1-1e-6) {
				t.Errorf("ρ=%v ε=%v: δ = %v well below the brute-force minimum %v", rho, eps, got, brute)
			}
		}
	}
}

func TestZCDPReference(t *testing.T) {
	// Values computed independently with 40-digit arithmetic (mpmath),
	// bisecting the derivative of the objective and then ρ or ε.
	for _, tc := range []struct{ eps, delta, rho float64 }{
		{1, 1e-5, 0.030556595197639565613},
		{0.1, 1e-6, 0.00032104769034574009704},
		{8, 1e-9, 0.732833287382453486},
		{3, 1e-5, 0.22424916824634534107},
	} {
		rho, err := ZCDPRho(tc.eps, tc.delta)
		if err != nil {
			t.Fatal(err)
		}
		if relErr(rho, tc.rho) > 1e-12 {
			t.Errorf("ZCDPRho(%v, %v) = %.17g, want %.17g", tc.eps, tc.delta, rho, tc.rho)
		}
	}
	for _, tc := range []struct{ rho, delta, eps float64 }{
		{0.5, 1e-5, 4.7283869849433139},
		{0.01, 1e-6, 0.62169265455960249502},
	} {
		eps, err := ZCDPEpsilon(tc.rho, tc.delta)
		if err != nil {
			t.Fatal(err)
		}
		if relErr(eps, tc.eps) > 1e-12 {
			t.Errorf("ZCDPEpsilon(%v, %v) = %.17g, want %.17g", tc.rho, tc.delta, eps, tc.eps)
		}
	}
	for _, tc := range []struct{ rho, eps, delta float64 }{
		{0.5, 2, 0.05429299664026248396},
		{0.03, 1, 8.4404929044314682862e-6},
	} {
		delta, err := ZCDPDelta(tc.rho, tc.eps)
		if err != nil {
			t.Fatal(err)
		}
		if relErr(delta, tc.delta) > 1e-12 {
			t.Errorf("ZCDPDelta(%v, %v) = %.17g, want %.17g", tc.rho, tc.eps, delta, tc.delta)
		}
	}
}

func TestZCDPInverse(t *testing.T) {
	for _, eps := range []float64{0.01, 0.1, 0.5, 1, 3, 8, 30} {
		for _, delta := range []float64{0.1, 1e-3, 1e-5, 1e-6, 1e-9, 1e-15} {
			rho, err := ZCDPRho(eps, delta)
			if err != nil {
				t.Fatal(err)
			}
			back, err := ZCDPEpsilon(rho, delta)
			if err != nil {
				t.Fatal(err)
			}
			if relErr(back, eps) > 1e-9 {
				t.Errorf("ε=%v δ=%v: ρ = %v, back to ε = %.15g", eps, delta, rho, back)
			}
			d, err := ZCDPDelta(rho, eps)
			if err != nil {
				t.Fatal(err)
			}
			if d > delta*(1+1e-15) || relErr(d, delta) > 1e-9 {
				t.Errorf("ε=%v δ=%v: ρ = %v has δ = %.15g", eps, delta, rho, d)
			}
			again, err := ZCDPRho(back, delta)
			if err != nil {
				t.Fatal(err)
			}
			if relErr(again, rho) > 1e-9 {
				t.Errorf("ε=%v δ=%v: ρ = %v, round trip gives %v", eps, delta, rho, again)
			}
		}
	}
}

func TestZCDPAgainstOtherBounds(t *testing.T) {
	for _, rho := range []float64{1e-3, 0.03, 0.3, 2} {
		for _, delta := range []float64{1e-3, 1e-5, 1e-9} {
			eps, err := ZCDPEpsilon(rho, delta)
			if err != nil {
				t.Fatal(err)
			}
			// Bun and Steinke's classical conversion is looser.
			if classic := rho + 2*math.Sqrt(rho*math.Log(1/delta)); eps > classic {
				t.Errorf("ρ=%v δ=%v: ε = %v above the classical bound %v", rho, delta, eps, classic)
			}
			// ρ-zCDP is RDP with curve αρ; the RDP conversion of the same
			// bound, minimised over a dense grid of orders, agrees.
			var orders, rdp []float64
			for a := 1.0 + 1e-3; a < 5000; a *= 1 + 1e-4 {
				orders = append(orders, a)
				rdp = append(rdp, a*rho)
			}
			viaRDP, _, err := RDPEpsilon(orders, rdp, delta)
			if err != nil {
				t.Fatal(err)
			}
			if relErr(eps, viaRDP) > 1e-6 || eps > viaRDP*(1+1e-12) {
				t.Errorf("ρ=%v δ=%v: ε = %.12g, RDP conversion over a grid %.12g", rho, delta, eps, viaRDP)
			}
		}
	}
}

func TestZCDPEdges(t *testing.T) {
	if d, err := ZCDPDelta(0, 1); err != nil || d != 0 {
		t.Errorf("ZCDPDelta(0, 1) = %v, %v; want 0", d, err)
	}
	if e, err := ZCDPEpsilon(0, 1e-5); err != nil || e != 0 {
		t.Errorf("ZCDPEpsilon(0, δ) = %v, %v; want 0", e, err)
	}
	if e, err := ZCDPEpsilon(math.Inf(1), 1e-5); err != nil || !math.IsInf(e, 1) {
		t.Errorf("ZCDPEpsilon(+Inf, δ) = %v, %v; want +Inf", e, err)
	}
	if d, err := ZCDPDelta(1e6, 1); err != nil || d != 1 {
		t.Errorf("ZCDPDelta(1e6, 1) = %v, %v; want 1", d, err)
	}
	// ρ so small that ε = 0 already meets a large δ: the KL-free CKS bound
	// at ε = 0 is below δ.
	if e, err := ZCDPEpsilon(1e-12, 0.5); err != nil || e != 0 {
		t.Errorf("ZCDPEpsilon(1e-12, 0.5) = %v, %v; want 0", e, err)
	}
	if d, err := ZCDPDelta(1e300, 1); err != nil || d != 1 {
		t.Errorf("ZCDPDelta(1e300, 1) = %v, %v; want 1", d, err)
	}
	if e, err := ZCDPEpsilon(1e6, 1e-5); err != nil || !(e >= 1e6 && e < 1.1e6) {
		t.Errorf("ZCDPEpsilon(1e6, 1e-5) = %v, %v; want a little above 1e6", e, err)
	}
	if got, want := GaussianRho(2), 1.0/8; got != want {
		t.Errorf("GaussianRho(2) = %v, want %v", got, want)
	}
}

func TestZCDPBadInput(t *testing.T) {
	for name, err := range map[string]error{
		"eps=0":     func() error { _, err := ZCDPRho(0, 1e-5); return err }(),
		"eps<0":     func() error { _, err := ZCDPRho(-1, 1e-5); return err }(),
		"eps=NaN":   func() error { _, err := ZCDPRho(math.NaN(), 1e-5); return err }(),
		"eps=Inf":   func() error { _, err := ZCDPRho(math.Inf(1), 1e-5); return err }(),
		"delta=0":   func() error { _, err := ZCDPRho(1, 0); return err }(),
		"delta=1":   func() error { _, err := ZCDPRho(1, 1); return err }(),
		"delta<0":   func() error { _, err := ZCDPEpsilon(0.1, -1e-5); return err }(),
		"rho<0":     func() error { _, err := ZCDPEpsilon(-0.1, 1e-5); return err }(),
		"rho=NaN":   func() error { _, err := ZCDPDelta(math.NaN(), 1); return err }(),
		"delta eps": func() error { _, err := ZCDPDelta(0.1, 0); return err }(),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: error %v, want ErrInvalid", name, err)
		}
	}
}
