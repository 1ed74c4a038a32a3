package calib

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestFedCalInitialisation(t *testing.T) {
	a, b, other := NewFedCalMLP(4, 1), NewFedCalMLP(4, 1), NewFedCalMLP(4, 2)
	if !equalFloats(a.Params(), b.Params()) {
		t.Error("two networks from the same seed differ")
	}
	if equalFloats(a.W1, other.W1) || equalFloats(a.W2, other.W2) {
		t.Error("networks from different seeds share hidden weights")
	}
	for _, v := range a.W3 {
		if v != 0 {
			t.Fatal("W3 is not zero at initialisation")
		}
	}
	for _, v := range append(append([]float64(nil), a.B1...), a.B2...) {
		if v != 0 {
			t.Fatal("hidden biases are not zero at initialisation")
		}
	}
	for _, v := range a.B3 {
		if v != softplusOne {
			t.Fatalf("b3 = %v at initialisation, want log(e−1)", v)
		}
	}
	bound := math.Sqrt(6.0 / 4)
	for _, v := range a.W1 {
		if math.Abs(v) > bound {
			t.Fatalf("W1 weight %v outside ±√(6/C) = ±%v", v, bound)
		}
	}
	// The zero value initialises from Seed the way NewFedCalMLP does.
	s := scOverconfident(rand.New(rand.NewPCG(15, 15)), 50, 4, 4, 2)
	z := &FedCalMLP{Seed: 1}
	if err := z.Fit(s); err != nil {
		t.Fatal(err)
	}
	if err := a.Fit(s); err != nil {
		t.Fatal(err)
	}
	if !equalFloats(z.Params(), a.Params()) {
		t.Error("Fit of the zero value with Seed 1 differs from Fit of NewFedCalMLP(4, 1)")
	}
}

// TestFedCalPredictMatchesDirect checks Predict against a direct, naive
// evaluation of the network and the order-preserving map.
func TestFedCalPredictMatchesDirect(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 16))
	const c, h = 3, FedCalHidden
	f := NewFedCalMLP(c, 9)
	w := f.Params()
	for k := range w {
		w[k] += 0.2 * rng.NormFloat64()
	}
	if err := f.SetParams(w); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		z := []float64{3 * rng.NormFloat64(), 3 * rng.NormFloat64(), 3 * rng.NormFloat64()}
		h1, h2, m := make([]float64, h), make([]float64, h), make([]float64, c)
		for i := range h {
			v := f.B1[i]
			for k := range c {
				v += f.W1[i*c+k] * z[k]
			}
			h1[i] = math.Max(v, 0)
		}
		for i := range h {
			v := f.B2[i]
			for k := range h {
				v += f.W2[i*h+k] * h1[k]
			}
			h2[i] = math.Max(v, 0)
		}
		for i := range c {
			v := f.B3[i]
			for k := range h {
				v += f.W3[i*h+k] * h2[k]
			}
			m[i] = math.Log1p(math.Exp(v))
		}
		// Ranks of z by hand (no ties with continuous draws).
		r := []int{0, 1, 2}
		for a := range r {
			for b := a + 1; b < 3; b++ {
				if z[r[b]] > z[r[a]] {
					r[a], r[b] = r[b], r[a]
				}
			}
		}
		zh := make([]float64, c)
		zh[r[1]] = (z[r[1]] - z[r[2]]) * m[1]
		zh[r[0]] = zh[r[1]] + (z[r[0]]-z[r[1]])*m[0]
		want := make([]float64, c)
		Softmax(want, zh)
		got := make([]float64, c)
		f.Predict(got, z)
		for j := range got {
			if math.Abs(got[j]-want[j]) > 1e-13 {
				t.Fatalf("z = %v: p = %v, direct %v", z, got, want)
			}
		}
	}
}

// TestFedCalStepsAreClipped checks that each SGD step moves the weights by
// at most LearningRate·MaxGradNorm.
func TestFedCalStepsAreClipped(t *testing.T) {
	s := scOverconfident(rand.New(rand.NewPCG(17, 17)), 70, 5, 1e4, 5e3) // confident mistakes: huge gradients
	for _, tc := range []struct {
		lr, clip float64
		batch    int
	}{{0.01, 1, 16}, {0.1, 0.5, 70}, {0.05, 2, 1}} {
		f := NewFedCalMLP(5, 4)
		f.LearningRate, f.MaxGradNorm, f.BatchSize = tc.lr, tc.clip, tc.batch
		w0 := f.Params()
		if err := f.Fit(s); err != nil {
			t.Fatal(err)
		}
		var d2 float64
		for k, v := range f.Params() {
			d2 += (v - w0[k]) * (v - w0[k])
		}
		steps := DefaultFedCalEpochs * ((70 + tc.batch - 1) / tc.batch)
		if limit := tc.lr * tc.clip * float64(steps); math.Sqrt(d2) > limit*(1+1e-12) {
			t.Errorf("%+v: weights moved %v in %d steps, limit %v", tc, math.Sqrt(d2), steps, limit)
		}
		if d2 == 0 {
			t.Errorf("%+v: Fit did not move the weights", tc)
		}
	}
}

func TestFedCalLowersNLLOnOneClient(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 18))
	local := scOverconfident(rng, 70, 10, 4, 2.5)
	test := scOverconfident(rng, 5000, 10, 4, 2.5)
	f := NewFedCalMLP(10, 1)
	before := scNLL(t, f, test)
	if err := f.Fit(local); err != nil {
		t.Fatal(err)
	}
	if after := scNLL(t, f, test); !(after < before) {
		t.Errorf("one local fit on 70 examples: test NLL %v, before %v", after, before)
	}
}
