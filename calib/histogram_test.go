package calib

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// logitsOf returns logits whose softmax is p (row-wise): their logarithms.
func logitsOf(p ...float64) []float64 {
	z := make([]float64, len(p))
	for i, v := range p {
		z[i] = math.Log(v)
	}
	return z
}

// tinySet is tiny as logits.
func tinySet() *Set {
	return &Set{Logits: logitsOf(tiny.probs...), Labels: tiny.labels, Classes: 2}
}

func TestHistogramsAccumulateByHand(t *testing.T) {
	// tiny with 2 bins. Class 0: bin 0 holds 0.3 (y=1); bin 1 holds 0.9
	// (y=0), 0.8 (y=1), 0.5 (y=0). Class 1: bin 0 holds 0.1 (y=0), 0.2
	// (y=1); bin 1 holds 0.7 (y=1), 0.5 (y=0).
	wantPos := []float64{0, 2, 1, 1}
	wantNeg := []float64{1, 1, 1, 1}

	fromProbs := NewHistograms(2, 2)
	if err := fromProbs.AccumulateProbs(tiny.probs, tiny.labels); err != nil {
		t.Fatal(err)
	}
	fromSet := NewHistograms(2, 2)
	if err := fromSet.Accumulate(tinySet()); err != nil {
		t.Fatal(err)
	}
	for name, h := range map[string]*Histograms{"AccumulateProbs": fromProbs, "Accumulate": fromSet} {
		if !slices.Equal(h.Pos, wantPos) || !slices.Equal(h.Neg, wantNeg) {
			t.Errorf("%s: Pos %v Neg %v, want %v %v", name, h.Pos, h.Neg, wantPos, wantNeg)
		}
	}
	if got := fromSet.Positives(); !slices.Equal(got, []float64{2, 2}) {
		t.Errorf("Positives = %v, want [2 2]", got)
	}
}

func TestHistogramsAddIsServerSum(t *testing.T) {
	// Clients' histograms summed equal the histograms of the pooled data.
	rng := rand.New(rand.NewPCG(5, 6))
	s := randomSet(rng, 300, 7, 3)
	whole := NewHistograms(7, 16)
	if err := whole.Accumulate(s); err != nil {
		t.Fatal(err)
	}
	sum := NewHistograms(7, 16)
	for k := 0; k < 3; k++ {
		idx := make([]int, 0, 100)
		for i := k * 100; i < (k+1)*100; i++ {
			idx = append(idx, i)
		}
		client := NewHistograms(7, 16)
		if err := client.Accumulate(s.Subset(idx)); err != nil {
			t.Fatal(err)
		}
		if err := sum.Add(client); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(sum.Pos, whole.Pos) || !slices.Equal(sum.Neg, whole.Neg) {
		t.Error("sum of client histograms differs from the pooled histograms")
	}
	// Each class's histograms count every example once.
	for j := 0; j < 7; j++ {
		var n float64
		for m := 0; m < 16; m++ {
			n += whole.Pos[j*16+m] + whole.Neg[j*16+m]
		}
		if n != 300 {
			t.Errorf("class %d: histograms count %v examples, want 300", j, n)
		}
	}
	labels := make([]float64, 7)
	for _, y := range s.Labels {
		labels[y]++
	}
	if got := whole.Positives(); !slices.Equal(got, labels) {
		t.Errorf("Positives = %v, want label counts %v", got, labels)
	}
	clone := whole.Clone()
	clone.Reset()
	if whole.Positives()[0] != labels[0] || slices.Max(clone.Pos) != 0 {
		t.Error("Clone shares storage or Reset left counts")
	}
}

func TestHistogramsErrors(t *testing.T) {
	h := NewHistograms(2, 4)
	if err := h.Add(NewHistograms(2, 8)); err == nil {
		t.Error("Add accepted histograms of another shape")
	}
	if err := h.Accumulate(&Set{Logits: []float64{0, 0, 0}, Labels: []int{0}, Classes: 3}); err == nil {
		t.Error("Accumulate accepted a set of another class count")
	}
	if err := h.AccumulateProbs([]float64{0.5, 0.5}, []int{2}); err == nil {
		t.Error("AccumulateProbs accepted label 2 of 2 classes")
	}
	if err := h.AccumulateProbs([]float64{math.NaN(), 0.5}, []int{0}); err == nil {
		t.Error("AccumulateProbs accepted NaN")
	}
	if slices.Max(h.Pos) != 0 || slices.Max(h.Neg) != 0 {
		t.Error("a failed accumulation changed the counts")
	}
	bad := []struct {
		h    Histograms
		want string
	}{
		{Histograms{Classes: 1, Bins: 1, Pos: []float64{0}, Neg: []float64{0}}, "at least 2 classes"},
		{Histograms{Classes: 2, Bins: 0}, "0 bins"},
		{Histograms{Classes: 2, Bins: MaxBins + 1}, "want 1 to 65536"},
		{Histograms{Classes: 2, Bins: 1, Pos: []float64{0, 0}, Neg: []float64{0}}, "want 2 classes × 1 bins"},
		{Histograms{Classes: 2, Bins: 1, Pos: []float64{0, math.Inf(1)}, Neg: []float64{0, 0}}, "class 1, bin 0 is +Inf"},
	}
	for _, tt := range bad {
		if _, err := NewHistogramBinning(&tt.h); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: error %v, want one containing %q", tt.h, err, tt.want)
		}
	}
}

func TestHistogramByHand(t *testing.T) {
	// From TestHistogramsAccumulateByHand: class 0 has P = (0, 2),
	// N = (1, 1), so g_0 = (0, 2/3); class 1 has P = (1, 1), N = (1, 1),
	// so g_1 = (1/2, 1/2).
	var b Histogram
	b.Bins = 2
	if err := b.Fit(tinySet()); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "table", b.Table, []float64{0, 2.0 / 3, 0.5, 0.5}, 1e-15)
	if b.Classes() != 2 || b.Method() != "bin" {
		t.Errorf("Classes, Method = %d, %q", b.Classes(), b.Method())
	}
	tests := []struct {
		p    []float64
		want []float64
	}{
		{[]float64{0.9, 0.1}, []float64{4.0 / 7, 3.0 / 7}}, // (2/3, 1/2) normalised
		{[]float64{0.3, 0.7}, []float64{0, 1}},             // (0, 1/2)
		{[]float64{0.2, 0.8}, []float64{0, 1}},
	}
	for _, tt := range tests {
		got := make([]float64, 2)
		b.Predict(got, logitsOf(tt.p...))
		assertClose(t, "prediction", got, tt.want, 1e-15)
	}
}

func TestHistogramEmptyAndZeroBins(t *testing.T) {
	tests := []struct {
		name     string
		pos, neg []float64
		p, want  []float64
	}{{
		// Bin 0 of both classes is empty: class 0 keeps p = 0.3, class 1
		// (bin 1) gets 1/2; (0.3, 0.5) normalised is (0.375, 0.625).
		name: "empty bin keeps p",
		pos:  []float64{0, 1, 0, 1}, neg: []float64{0, 1, 0, 1},
		p: []float64{0.3, 0.7}, want: []float64{0.375, 0.625},
	}, {
		// Every bin has only negatives: g sums to 0, so p̂ is returned.
		name: "zero sum returns p",
		pos:  []float64{0, 0, 0, 0}, neg: []float64{1, 1, 1, 1},
		p: []float64{0.3, 0.7}, want: []float64{0.3, 0.7},
	}, {
		// Noisy counts: negative ones count as 0. Class 0 bin 0: P = 2,
		// N = −3 → 0 so g = 1; class 1 bin 1: P = −1 → 0, N = 0 → empty,
		// keeps 0.7. (1, 0.7) normalised.
		name: "noisy counts clamped",
		pos:  []float64{2, 0, 0, -1}, neg: []float64{-3, 0, 0, 0},
		p: []float64{0.3, 0.7}, want: []float64{1 / 1.7, 0.7 / 1.7},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewHistogramBinning(&Histograms{Classes: 2, Bins: 2, Pos: tt.pos, Neg: tt.neg})
			if err != nil {
				t.Fatal(err)
			}
			got := make([]float64, 2)
			b.Predict(got, logitsOf(tt.p...))
			assertClose(t, "prediction", got, tt.want, 1e-12)
		})
	}
}

func TestHistogramFitErrors(t *testing.T) {
	for _, b := range []*Histogram{{Bins: -1}, {Bins: MaxBins + 1}} {
		if err := b.Fit(tinySet()); err == nil {
			t.Errorf("Fit with %d bins accepted", b.Bins)
		}
	}
	var b Histogram
	if err := b.Fit(&Set{Classes: 2}); err == nil || !strings.Contains(err.Error(), "no examples") {
		t.Errorf("empty set: error %v", err)
	}
	if err := b.Fit(&Set{Logits: []float64{0, math.NaN()}, Labels: []int{0}, Classes: 2}); err == nil {
		t.Error("NaN logit accepted")
	}
	if b.Table != nil {
		t.Error("a failed Fit changed the calibrator")
	}
	if err := b.Fit(tinySet()); err != nil || b.Bins != DefaultBins || len(b.Table) != 2*DefaultBins {
		t.Errorf("zero value fit: err %v, bins %d, table %d", err, b.Bins, len(b.Table))
	}
}

func assertClose(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: have %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !(math.Abs(got[i]-want[i]) <= tol) {
			t.Errorf("%s[%d] = %.17g, want %.17g", what, i, got[i], want[i])
		}
	}
}

// binningCalibrators returns fitted Histogram and BBQ calibrators of s,
// unweighted and with both weightings, named.
func binningCalibrators(t *testing.T, s *Set) map[string]Calibrator {
	t.Helper()
	out := map[string]Calibrator{}
	alpha := make([]float64, s.Classes)
	for j := range alpha {
		alpha[j] = float64(j%4) / 3
	}
	for _, mode := range []Weighting{WeightNone, WeightAll, WeightChanged} {
		b := &Histogram{Bins: 15}
		q := &BBQ{Mexp: 5}
		if err := b.Fit(s); err != nil {
			t.Fatal(err)
		}
		if err := q.Fit(s); err != nil {
			t.Fatal(err)
		}
		a := alpha
		if mode == WeightNone {
			a = nil
		}
		if err := b.SetWeighting(mode, a); err != nil {
			t.Fatal(err)
		}
		if err := q.SetWeighting(mode, a); err != nil {
			t.Fatal(err)
		}
		out["bin/"+string(mode)] = b
		out["bbq/"+string(mode)] = q
	}
	return out
}

// TestBinningProperties checks that predictions are finite rows summing
// to 1, for extreme logits, single examples, missing classes, C = 2 and
// C = 200, and that fitting is deterministic.
func TestBinningProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	extreme := func(n, c int) *Set {
		s := randomSet(rng, n, c, 1e4)
		for i := range s.Logits {
			s.Logits[i] = math.Copysign(1e4, s.Logits[i])
		}
		return s
	}
	sets := map[string]*Set{
		"C=2":             randomSet(rng, 200, 2, 3),
		"C=10":            randomSet(rng, 70, 10, 3),
		"C=200":           randomSet(rng, 400, 200, 5),
		"single example":  randomSet(rng, 1, 5, 3),
		"extreme C=2":     extreme(50, 2),
		"extreme C=200":   extreme(50, 200),
		"missing classes": {Logits: randomSet(rng, 20, 6, 2).Logits, Labels: make([]int, 20), Classes: 6},
	}
	for name, s := range sets {
		probe := randomSet(rng, 30, s.Classes, 4)
		probe.Logits = append(probe.Logits, extreme(10, s.Classes).Logits...)
		for cname, c := range binningCalibrators(t, s) {
			got := make([]float64, len(probe.Logits))
			c.Predict(got, probe.Logits)
			for i := 0; i < len(got); i += s.Classes {
				var sum float64
				for _, v := range got[i : i+s.Classes] {
					if !(v >= 0 && v <= 1) {
						t.Fatalf("%s, %s: probability %v", name, cname, v)
					}
					sum += v
				}
				if math.Abs(sum-1) > 1e-12 {
					t.Fatalf("%s, %s: row %d sums to %v", name, cname, i/s.Classes, sum)
				}
			}
			// Predict may write over its input.
			inPlace := slices.Clone(probe.Logits)
			c.Predict(inPlace, inPlace)
			if !slices.Equal(inPlace, got) {
				t.Errorf("%s, %s: in-place prediction differs", name, cname)
			}
		}
		again := binningCalibrators(t, s)
		for cname, c := range binningCalibrators(t, s) {
			if !equalCalibrators(c, again[cname]) {
				t.Errorf("%s, %s: fitting twice gave different calibrators", name, cname)
			}
		}
	}
}

func equalCalibrators(a, b Calibrator) bool {
	switch a := a.(type) {
	case *Histogram:
		b := b.(*Histogram)
		return a.Bins == b.Bins && slices.Equal(a.Table, b.Table) && a.Weighting == b.Weighting && slices.Equal(a.Alpha, b.Alpha)
	case *BBQ:
		b := b.(*BBQ)
		return a.Mexp == b.Mexp && slices.Equal(a.Table, b.Table) && a.Weighting == b.Weighting && slices.Equal(a.Alpha, b.Alpha)
	}
	return false
}

func TestBinningLowersCWECE(t *testing.T) {
	// An over-confident model (logits twice the true ones): both binning
	// calibrators, fitted on one half, lower cwECE on the other.
	rng := rand.New(rand.NewPCG(9, 10))
	cal, test := randomSet(rng, 20000, 5, 4), randomSet(rng, 20000, 5, 4)
	before, err := EvaluateSet(test, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Calibrator{&Histogram{Bins: 32}, &BBQ{}} {
		if err := c.Fit(cal); err != nil {
			t.Fatal(err)
		}
		after, err := EvaluateSet(test, c, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !(after.CWECE < before.CWECE/2) {
			t.Errorf("%s: cwECE %v → %v, want at least halved", c.Method(), before.CWECE, after.CWECE)
		}
	}
}
