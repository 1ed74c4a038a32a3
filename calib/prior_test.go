package calib

import (
	"math"
	"testing"
)

// separable returns a few examples that every scaler can fit perfectly:
// the label is always the top logit, by a wide margin.
func separable() *Set {
	return &Set{
		Logits:  []float64{9, 1, 0, 8, 2, -1, 7, 0, 1, 10, 3, 3, 6, -2, 0},
		Labels:  []int{0, 0, 0, 0, 0},
		Classes: 3,
	}
}

func maxAbs(x []float64) float64 {
	m := 0.0
	for _, v := range x {
		m = math.Max(m, math.Abs(v))
	}
	return m
}

// TestPriorKeepsSmallFitsFinite checks that the default prior keeps the
// parameters of fits on a handful of separable examples near the
// identity, where maximum likelihood runs away.
func TestPriorKeepsSmallFitsFinite(t *testing.T) {
	for _, tc := range []struct {
		name string
		fit  func(o FitOptions) []float64
	}{
		{"vector", func(o FitOptions) []float64 { v := NewVector(3); v.Options = o; v.Fit(separable()); return v.Params() }},
		{"matrix", func(o FitOptions) []float64 { m := NewMatrix(3); m.Options = o; m.Fit(separable()); return m.Params() }},
		{"opvector", func(o FitOptions) []float64 {
			p := NewOPVector(3)
			p.Options = o
			p.Fit(separable())
			return p.Params()
		}},
	} {
		ml := maxAbs(tc.fit(FitOptions{Prior: -1, MaxIterations: 200}))
		mapFit := maxAbs(tc.fit(FitOptions{MaxIterations: 200}))
		if !(mapFit < 5) || !(ml > mapFit) {
			t.Errorf("%s: largest |θ| %.3g with the prior, %.3g without; want the prior's under 5 and smaller", tc.name, mapFit, ml)
		}
	}
}

// TestPriorGradient checks the prior's gradient by finite differences.
func TestPriorGradient(t *testing.T) {
	s := separable()
	f := withPrior(func(g, x []float64) float64 { return vectorNLL(g, x, s, newRowSums(s.Len())) }, NewVector(3).Params(), s.Len(), FitOptions{Prior: 3})
	x := []float64{0.5, 2, 1.5, -1, 0.3, 0.2}
	g := make([]float64, len(x))
	f(g, x)
	const h = 1e-6
	for i := range x {
		xp := append([]float64(nil), x...)
		xm := append([]float64(nil), x...)
		xp[i] += h
		xm[i] -= h
		num := (f(make([]float64, len(x)), xp) - f(make([]float64, len(x)), xm)) / (2 * h)
		if math.Abs(num-g[i]) > 1e-6 {
			t.Errorf("∂/∂x[%d] = %v, finite difference %v", i, g[i], num)
		}
	}
}
