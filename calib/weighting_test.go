package calib

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func TestAlpha(t *testing.T) {
	seen := []float64{5, 10, 0, 3, -1}
	total := []float64{10, 5, 0, 0, 4}
	// 5/10; 10/5 capped at 1; no class examples anywhere: 1; likewise;
	// a negative count: 0.
	want := []float64{0.5, 1, 1, 1, 0}
	if got := Alpha(seen, total); !slices.Equal(got, want) {
		t.Errorf("Alpha = %v, want %v", got, want)
	}
}

func TestDPAlpha(t *testing.T) {
	// Three classes, 4 bins each; noisy positive sums 10, 3 and −2.
	h := &Histograms{Classes: 3, Bins: 4,
		Pos: []float64{4, 4, 1, 1, 0.5, 0.5, 1, 1, -1, -1, 0, 0},
		Neg: make([]float64, 12),
	}
	// σ = 2: expected |noise| per bin √(2/π)·2, times 4 bins = 6.3831…;
	// 10/6.38 caps at 1, 3/6.3831 = 0.46999…, a negative sum gives 0.
	assertClose(t, "DPAlpha", DPAlpha(h, 2), []float64{1, 0.4699928014933126, 0}, 1e-15)
	// No noise: the histogram is exact, weight 1.
	if got := DPAlpha(h, 0); !slices.Equal(got, []float64{1, 1, 1}) {
		t.Errorf("DPAlpha(σ = 0) = %v, want all 1", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("DPAlpha with negative σ did not panic")
		}
	}()
	DPAlpha(h, -1)
}

func TestWeightingByHand(t *testing.T) {
	// Table: class 0 bins (0.2, 0.9), class 1 bins (0.8, 0.1); α = 1/2.
	// p = (0.7, 0.3): g = (0.9, 0.8), argmax unchanged;
	//   unweighted (9/17, 8/17);
	//   weighted ((.9+.7)/2, (.8+.3)/2) = (0.8, 0.55) → (16/27, 11/27).
	// p = (0.4, 0.6): g = (0.2, 0.1), argmax changes from 1 to 0;
	//   unweighted (2/3, 1/3);
	//   weighted ((.2+.4)/2, (.1+.6)/2) = (0.3, 0.35) → (6/13, 7/13).
	stay, flip := logitsOf(0.7, 0.3), logitsOf(0.4, 0.6)
	tests := []struct {
		mode       Weighting
		stay, flip []float64
	}{
		{WeightNone, []float64{9.0 / 17, 8.0 / 17}, []float64{2.0 / 3, 1.0 / 3}},
		{"", []float64{9.0 / 17, 8.0 / 17}, []float64{2.0 / 3, 1.0 / 3}},
		{WeightAll, []float64{16.0 / 27, 11.0 / 27}, []float64{6.0 / 13, 7.0 / 13}},
		{WeightChanged, []float64{9.0 / 17, 8.0 / 17}, []float64{6.0 / 13, 7.0 / 13}},
	}
	for _, tt := range tests {
		b := &Histogram{Bins: 2, Table: []float64{0.2, 0.9, 0.8, 0.1}}
		if err := b.SetWeighting(tt.mode, []float64{0.5, 0.5}); err != nil {
			t.Fatal(err)
		}
		got := make([]float64, 4)
		b.Predict(got, slices.Concat(stay, flip))
		assertClose(t, "weighting "+string(tt.mode), got, slices.Concat(tt.stay, tt.flip), 1e-15)
	}
}

func TestWeightingExtremes(t *testing.T) {
	// α = 0 gives back the softmax probabilities; α = 1 the unweighted
	// calibrator.
	b := &BBQ{Mexp: 1, Table: []float64{0.3125, 0.9375, 0.25, 0.75}}
	z := slices.Concat(logitsOf(0.2, 0.8), logitsOf(0.6, 0.4))
	unweighted := make([]float64, 4)
	b.Predict(unweighted, z)
	if err := b.SetWeighting(WeightAll, []float64{0, 0}); err != nil {
		t.Fatal(err)
	}
	got := make([]float64, 4)
	b.Predict(got, z)
	assertClose(t, "α = 0", got, []float64{0.2, 0.8, 0.6, 0.4}, 1e-15)
	if err := b.SetWeighting(WeightAll, []float64{1, 1}); err != nil {
		t.Fatal(err)
	}
	b.Predict(got, z)
	assertClose(t, "α = 1", got, unweighted, 0)
}

func TestSetWeightingErrors(t *testing.T) {
	b := &Histogram{Bins: 2, Table: []float64{0.2, 0.9, 0.8, 0.1}}
	tests := []struct {
		mode  Weighting
		alpha []float64
		want  string
	}{
		{"some", []float64{1, 1}, `unknown weighting "some"`},
		{WeightAll, nil, "needs alpha"},
		{WeightChanged, []float64{1}, "1 weights for 2 classes"},
		{WeightAll, []float64{1, 1.5}, "class 1 is 1.5"},
		{WeightAll, []float64{math.NaN(), 1}, "class 0 is NaN"},
	}
	for _, tt := range tests {
		if err := b.SetWeighting(tt.mode, tt.alpha); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("SetWeighting(%q, %v): error %v, want one containing %q", tt.mode, tt.alpha, err, tt.want)
		}
	}
	if b.Weighting != "" || b.Alpha != nil {
		t.Error("a failed SetWeighting changed the calibrator")
	}
	alpha := []float64{0.5, 0.5}
	if err := b.SetWeighting(WeightAll, alpha); err != nil {
		t.Fatal(err)
	}
	alpha[0] = 0
	if b.Alpha[0] != 0.5 {
		t.Error("SetWeighting kept the caller's slice")
	}
}

func TestParseWeighting(t *testing.T) {
	for _, s := range []string{"none", "all", "changed"} {
		if w, err := ParseWeighting(s); err != nil || string(w) != s {
			t.Errorf("ParseWeighting(%q) = %q, %v", s, w, err)
		}
	}
	for _, s := range []string{"", "All", "x"} {
		if _, err := ParseWeighting(s); err == nil {
			t.Errorf("ParseWeighting(%q) accepted", s)
		}
	}
}

// TestDPAlphaLower checks the lower-bound weights by hand: 4 bins, σ = 2,
// so the margin is z·σ·√4 = 4z and the scale √(2/π)·σ·4 = 8√(2/π).
func TestDPAlphaLower(t *testing.T) {
	h := NewHistograms(3, 4)
	copy(h.Pos, []float64{10, 10, 10, 10, 1, 2, 0, 1, -5, 1, 0, 0})
	scale := 8 * math.Sqrt(2/math.Pi)
	tests := []struct {
		z    float64
		want []float64
	}{
		{0, []float64{1, 4 / scale, 0}},
		{2, []float64{1, 0, 0}},
		{0.5, []float64{1, 2 / scale, 0}},
	}
	for _, tt := range tests {
		got := DPAlphaLower(h, 2, tt.z)
		for j := range got {
			if math.Abs(got[j]-tt.want[j]) > 1e-15 {
				t.Errorf("z = %v: α̃ = %v, want %v", tt.z, got, tt.want)
				break
			}
		}
	}
	// z = 0 is the paper's rule, and no noise trusts the counts fully.
	if a, b := DPAlphaLower(h, 2, 0), DPAlpha(h, 2); a[1] != b[1] {
		t.Errorf("z = 0 gives %v, DPAlpha %v", a, b)
	}
	if a := DPAlphaLower(h, 0, 3); a[0] != 1 || a[2] != 1 {
		t.Errorf("σ = 0 gives %v, want all 1", a)
	}
}
