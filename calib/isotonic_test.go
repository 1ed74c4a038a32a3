package calib

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// bruteIsotonic returns the weighted least-squares non-decreasing fit to
// y by enumeration: the optimum is constant on blocks of consecutive
// indices, each at its block's weighted mean, so it is the feasible (non-
// decreasing) candidate of least squared error among the 2^(n−1)
// partitions of 0…n−1 into consecutive blocks.
func bruteIsotonic(y, w []float64) []float64 {
	n := len(y)
	best, bestX := math.Inf(1), []float64(nil)
	for mask := 0; mask < 1<<(n-1); mask++ { // bit i: a block ends after i
		x := make([]float64, n)
		start := 0
		for i := range n {
			if i < n-1 && mask>>i&1 == 0 {
				continue
			}
			var sw, swy float64
			for k := start; k <= i; k++ {
				sw += w[k]
				swy += w[k] * y[k]
			}
			for k := start; k <= i; k++ {
				x[k] = swy / sw
			}
			start = i + 1
		}
		feasible := true
		for i := 1; i < n; i++ {
			if x[i] < x[i-1] {
				feasible = false
			}
		}
		if !feasible {
			continue
		}
		var sse float64
		for i := range n {
			sse += w[i] * (y[i] - x[i]) * (y[i] - x[i])
		}
		if sse < best {
			best, bestX = sse, x
		}
	}
	return bestX
}

// minMaxIsotonic returns the isotonic fit by its closed form
// x_i = max_{s ≤ i} min_{t ≥ i} mean_w(y_s, …, y_t) (Barlow et al. 1972).
func minMaxIsotonic(y, w []float64) []float64 {
	n := len(y)
	x := make([]float64, n)
	for i := range n {
		x[i] = math.Inf(-1)
		for s := 0; s <= i; s++ {
			lo := math.Inf(1)
			for t := i; t < n; t++ {
				var sw, swy float64
				for k := s; k <= t; k++ {
					sw += w[k]
					swy += w[k] * y[k]
				}
				lo = min(lo, swy/sw)
			}
			x[i] = max(x[i], lo)
		}
	}
	return x
}

func TestPAVHand(t *testing.T) {
	for _, tc := range []struct {
		name    string
		y, w, x []float64
	}{
		{"one", []float64{0.3}, []float64{2}, []float64{0.3}},
		{"increasing", []float64{0, 0.5, 1}, []float64{1, 1, 1}, []float64{0, 0.5, 1}},
		{"ties stay", []float64{0.5, 0.5, 0.5}, []float64{1, 2, 3}, []float64{0.5, 0.5, 0.5}},
		{"one violation", []float64{1, 3, 2}, []float64{1, 1, 1}, []float64{1, 2.5, 2.5}},
		{"weighted pair", []float64{3, 1}, []float64{1, 3}, []float64{1.5, 1.5}},
		{"decreasing pools all", []float64{4, 3, 2, 1}, []float64{1, 1, 1, 1}, []float64{2.5, 2.5, 2.5, 2.5}},
		// 0.5 and 0.25 pool to 1/3 (weights 2 and 4); the pooled block
		// then stays above 0.
		{"pool of two", []float64{0, 0.5, 0.25, 1}, []float64{2, 2, 4, 3}, []float64{0, 1.0 / 3, 1.0 / 3, 1}},
		// 0.1 pools with 0.9 to 1.1/3, which then pools with 0.8:
		// (0.8·1 + 0.9·1 + 0.1·2)/4 = 0.475.
		{"cascade", []float64{0.2, 0.8, 0.9, 0.1}, []float64{1, 1, 1, 2}, []float64{0.2, 0.475, 0.475, 0.475}},
	} {
		got := pav(tc.y, tc.w)
		if len(got) != len(tc.x) {
			t.Fatalf("%s: %d values, want %d", tc.name, len(got), len(tc.x))
		}
		for i := range got {
			if math.Abs(got[i]-tc.x[i]) > 1e-15 {
				t.Errorf("%s: pav(%v, %v) = %v, want %v", tc.name, tc.y, tc.w, got, tc.x)
				break
			}
		}
	}
}

// TestPAVBruteForce checks pav against the enumeration of every block
// partition and against the min–max closed form on random inputs of up to
// 8 values: continuous values, values on a coarse grid (ties), and 0/1
// values with integer weights (the bins of a one-vs-all histogram).
func TestPAVBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 1))
	var worst float64
	for trial := range 3000 {
		n := 1 + rng.IntN(8)
		y, w := make([]float64, n), make([]float64, n)
		for i := range n {
			switch trial % 3 {
			case 0:
				y[i], w[i] = rng.NormFloat64(), 0.1+3*rng.Float64()
			case 1:
				y[i], w[i] = float64(rng.IntN(5))/4, 0.1+3*rng.Float64()
			default:
				pos, neg := rng.IntN(4), rng.IntN(4)
				if pos+neg == 0 {
					neg = 1
				}
				y[i], w[i] = float64(pos)/float64(pos+neg), float64(pos+neg)
			}
		}
		got := pav(y, w)
		brute, closed := bruteIsotonic(y, w), minMaxIsotonic(y, w)
		for i := range n {
			if i > 0 && got[i] < got[i-1] {
				t.Fatalf("pav(%v, %v) = %v decreases at %d", y, w, got, i)
			}
			d := max(math.Abs(got[i]-brute[i]), math.Abs(got[i]-closed[i]))
			worst = max(worst, d)
			if d > 1e-12 {
				t.Fatalf("pav(%v, %v) = %v: brute force %v, closed form %v", y, w, got, brute, closed)
			}
		}
	}
	t.Logf("largest difference from brute force or closed form: %.3g", worst)
}

func TestPAVPanics(t *testing.T) {
	for _, tc := range []struct {
		name string
		y, w []float64
	}{
		{"lengths", []float64{1, 2}, []float64{1}},
		{"zero weight", []float64{1, 2}, []float64{1, 0}},
		{"negative weight", []float64{1}, []float64{-1}},
		{"NaN value", []float64{math.NaN()}, []float64{1}},
		{"infinite weight", []float64{1}, []float64{math.Inf(1)}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: pav(%v, %v) did not panic", tc.name, tc.y, tc.w)
				}
			}()
			pav(tc.y, tc.w)
		}()
	}
}

// TestNewIsotonicHand checks the table of hand-made histograms of 3
// classes × 8 bins: the PAV fit at the non-empty bins, and each rule for
// the empty ones.
func TestNewIsotonicHand(t *testing.T) {
	h := NewHistograms(3, 8)
	// Class 0: bin 1 (0 of 2 positive), bin 3 (1 of 2), bin 5 (1 of 4),
	// bin 6 (3 of 3). PAV pools bins 3 and 5 to 2/6 = 1/3.
	copy(h.Pos[0:8], []float64{0, 0, 0, 1, 0, 1, 3, 0})
	copy(h.Neg[0:8], []float64{0, 2, 0, 1, 0, 3, 0, 0})
	// Class 1: bin 7 alone (2 of 2.5), with noise that clamps to 0
	// elsewhere.
	copy(h.Pos[8:16], []float64{-1, 0, 0, 0, -0.5, 0, 0, 2})
	copy(h.Neg[8:16], []float64{0, -2, 0, 0, 0, 0, 0, 0.5})
	// Class 2: no example at all (negative noise only).
	copy(h.Neg[16:24], []float64{-1, 0, 0, 0, 0, 0, 0, -3})
	b, err := NewIsotonic(h)
	if err != nil {
		t.Fatal(err)
	}
	const e = EmptyBin
	want := []float64{
		// before the first non-empty bin: its value; bin 2 interpolates
		// 0 and 1/3 halfway; bin 4 lies inside the pooled block; bin 7
		// after the last takes its value.
		0, 0, 1.0 / 6, 1.0 / 3, 1.0 / 3, 1.0 / 3, 1, 1,
		0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8,
		e, e, e, e, e, e, e, e,
	}
	if b.Bins != 8 || len(b.Table) != len(want) || b.Classes() != 3 {
		t.Fatalf("%d bins, %d entries, %d classes: want 8, %d, 3", b.Bins, len(b.Table), b.Classes(), len(want))
	}
	for k, v := range want {
		if math.Abs(b.Table[k]-v) > 1e-15 {
			t.Errorf("class %d, bin %d: %v, want %v", k/8, k%8, b.Table[k], v)
		}
	}
	if err := b.validate(); err != nil {
		t.Errorf("validate: %v", err)
	}
	// Predict takes the table through Histogram's path: the class-j
	// probability p_j = 0.55 of a two-class row is bin 4.
	p := []float64{0.55, 0.45}
	two := &Isotonic{Bins: 8, Table: []float64{0, 0, 0, 0, 0.3, 0.3, 1, 1, 0, 0.2, 0.2, 0.6, 0.6, 0.6, 0.9, 1}}
	got := make([]float64, 2)
	two.Predict(got, []float64{math.Log(p[0]), math.Log(p[1])})
	// Class 0 in bin 4 → 0.3; class 1 (0.45) in bin 3 → 0.6; normalised.
	if math.Abs(got[0]-0.3/0.9) > 1e-15 || math.Abs(got[1]-0.6/0.9) > 1e-15 {
		t.Errorf("Predict = %v, want [1/3 2/3]", got)
	}
}

// TestIsotonicFitSettings checks the bins of a fit and of the registry's
// method: none (exact) by default, 2^M for a bin exponent M.
func TestIsotonicFitSettings(t *testing.T) {
	m, err := LookupMethod(MethodIsotonic)
	if err != nil {
		t.Fatal(err)
	}
	if m.Family != Binning || m.BinExponent() || m.DefaultMexp() != IsotonicMexp || IsotonicBins != 1024 {
		t.Errorf("isotonic: family %v, exponent %v, default M %d, bins %d", m.Family, m.BinExponent(), m.DefaultMexp(), IsotonicBins)
	}
	for _, tc := range []struct {
		mexp, bins int
	}{{0, 0}, {3, 8}, {MaxMexp, MaxBins}} {
		c, err := New(MethodIsotonic, Settings{Mexp: tc.mexp})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.(*Isotonic).Bins; got != tc.bins {
			t.Errorf("New with Mexp %d: %d bins, want %d", tc.mexp, got, tc.bins)
		}
	}
	if _, err := New(MethodIsotonic, Settings{Mexp: MaxMexp + 1}); err == nil {
		t.Errorf("New with Mexp %d: no error", MaxMexp+1)
	}
	s := &Set{Classes: 2, Logits: []float64{0, 1, 2, 0}, Labels: []int{1, 0}}
	var b Isotonic
	if err := b.Fit(s); err != nil {
		t.Fatal(err)
	}
	if !b.Exact() || b.Classes() != 2 || b.Breakpoints() == 0 {
		t.Errorf("zero Isotonic fits %d bins, %d breakpoints, %d classes: want exact, 2 classes", b.Bins, b.Breakpoints(), b.Classes())
	}
	bad := Isotonic{Bins: MaxBins + 1}
	if err := bad.Fit(s); err == nil {
		t.Error("fit with too many bins: no error")
	}
}

func TestIsotonicValidate(t *testing.T) {
	const e = EmptyBin
	for _, tc := range []struct {
		name  string
		table []float64
		want  string // "" for valid
	}{
		{"valid", []float64{0, 0.5, 0.5, 1, 0.1, 0.1, 0.2, 0.3}, ""},
		{"empty class", []float64{0, 0.5, 0.5, 1, e, e, e, e}, ""},
		{"decreasing", []float64{0, 0.5, 0.4, 1, 0.1, 0.1, 0.2, 0.3}, "decreases from 0.5 in bin 1 to 0.4 in bin 2"},
		{"mixed", []float64{0, 0.5, 0.5, 1, e, 0.1, 0.2, 0.3}, "mixes empty"},
		{"mixed later", []float64{0, 0.5, 0.5, e, 0.1, 0.1, 0.2, 0.3}, "table of class 0 mixes empty"},
		{"above 1", []float64{0, 0.5, 0.5, 1.5, 0.1, 0.1, 0.2, 0.3}, "is 1.5"},
		{"one class", []float64{0, 0.5, 0.5, 1}, "at least 2 classes"},
	} {
		err := (&Isotonic{Bins: 4, Table: tc.table}).validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}
