package dp

import (
	"math"
	"testing"
)

// moments returns the mean, the standard deviation and the fractions within
// one and two standard deviations sigma of x.
func moments(x []float64, sigma float64) (mean, sd, in1, in2 float64) {
	n := float64(len(x))
	for _, v := range x {
		mean += v
	}
	mean /= n
	for _, v := range x {
		d := v - mean
		sd += d * d
		if math.Abs(v) <= sigma {
			in1++
		}
		if math.Abs(v) <= 2*sigma {
			in2++
		}
	}
	return mean, math.Sqrt(sd / (n - 1)), in1 / n, in2 / n
}

func TestGaussianMechanismStatistics(t *testing.T) {
	// 10⁶ draws of the mechanism's noise with a fixed seed: the empirical
	// standard deviation must be within 1% of σ (its own standard error is
	// σ/√(2n) ≈ 0.07%), the mean within 3 standard errors σ/√n of 0, and the
	// mass within ±σ and ±2σ that of a normal law, erf(1/√2) and erf(√2),
	// to within 5 binomial standard errors.
	const n = 1_000_000
	for _, sigma := range []float64{0.5 * math.Sqrt(12/(2*0.03)), 2.5, 1e-3} {
		const base = 7.25 // the mechanism adds noise to the true value
		x := make([]float64, n)
		for i := range x {
			x[i] = base
		}
		AddGaussian(x, sigma, NewSeeded(20261125))
		for i := range x {
			x[i] -= base
		}
		mean, sd, in1, in2 := moments(x, sigma)
		if math.Abs(sd/sigma-1) > 0.01 {
			t.Errorf("σ=%v: empirical sd %v, off by %.3g%%", sigma, sd, 100*math.Abs(sd/sigma-1))
		}
		if se := sigma / math.Sqrt(n); math.Abs(mean) > 3*se {
			t.Errorf("σ=%v: mean %v, more than 3 standard errors (%v) from 0", sigma, mean, se)
		}
		for _, tc := range []struct{ got, want float64 }{
			{in1, math.Erf(1 / math.Sqrt2)},
			{in2, math.Erf(math.Sqrt2)},
		} {
			if se := math.Sqrt(tc.want * (1 - tc.want) / n); math.Abs(tc.got-tc.want) > 5*se {
				t.Errorf("σ=%v: mass %v, want %v ± %v", sigma, tc.got, tc.want, 5*se)
			}
		}
	}
}

func TestSecureNoiseStatistics(t *testing.T) {
	// Unseeded, so looser bounds that fail with negligible probability:
	// sd within 2% (≈9 standard errors), mean within 6 standard errors.
	const n = 200_000
	x := make([]float64, n)
	AddGaussian(x, 3, NewSecure())
	mean, sd, _, _ := moments(x, 3)
	if math.Abs(sd/3-1) > 0.02 {
		t.Errorf("empirical sd %v, want 3 within 2%%", sd)
	}
	if se := 3 / math.Sqrt(n); math.Abs(mean) > 6*se {
		t.Errorf("mean %v, more than 6 standard errors from 0", mean)
	}
}

func TestSeededReproducible(t *testing.T) {
	draw := func(src Noise) []float64 {
		x := make([]float64, 100)
		AddGaussian(x, 1, src)
		return x
	}
	a, b, c := draw(NewSeeded(1)), draw(NewSeeded(1)), draw(NewSeeded(2))
	same := true
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 1 gave different noise on two runs at %d: %v vs %v", i, a[i], b[i])
		}
		same = same && a[i] == c[i]
	}
	if same {
		t.Error("seeds 1 and 2 gave identical noise")
	}
	s1, s2 := draw(NewSecure()), draw(NewSecure())
	if s1[0] == s2[0] && s1[1] == s2[1] {
		t.Error("two secure sources gave the same noise")
	}
}

func TestAddGaussianZeroAndPanics(t *testing.T) {
	x := []float64{1, 2}
	AddGaussian(x, 0, NewSeeded(1))
	if x[0] != 1 || x[1] != 2 {
		t.Errorf("σ = 0 changed the input: %v", x)
	}
	for _, sigma := range []float64{-1, math.NaN(), math.Inf(1)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("AddGaussian with σ = %v did not panic", sigma)
				}
			}()
			AddGaussian(x, sigma, NewSeeded(1))
		}()
	}
}
