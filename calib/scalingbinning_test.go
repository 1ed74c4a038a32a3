package calib

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// sortedScalingBinning forms the equal-mass bins of one class the way
// Kumar et al.'s verified_calibration does, from the examples' values g
// sorted rather than from cumulative counts: bin k starts at the example
// of rank floor(k·n/bins), its threshold rounded down to the lower edge
// of that example's fine bin (of fine); each bin's value is the mean of
// the values of the examples from its start to the next bin's start. It
// returns the thresholds and values.
func sortedScalingBinning(g []float64, fine, bins int) (thresholds, values []float64) {
	g = slices.Sorted(slices.Values(g))
	fineOf := make([]int, len(g)) // the fine bin of each example, in order
	for i, v := range g {
		fineOf[i] = Bin(v, fine)
	}
	n := len(fineOf)
	edges := []int{0}
	for k := 1; k < bins; k++ {
		e := fine - 1
		if r := k * n / bins; r < n {
			e = fineOf[r]
		}
		edges = append(edges, e)
		thresholds = append(thresholds, float64(e)/float64(fine))
	}
	edges = append(edges, fine)
	for k := range bins {
		var sum float64
		var cnt int
		for i, m := range fineOf {
			if m >= edges[k] && m < edges[k+1] {
				sum += g[i]
				cnt++
			}
		}
		v := float64(edges[k]+edges[k+1]) / 2 / float64(fine)
		if cnt > 0 {
			v = sum / float64(cnt)
		}
		values = append(values, v)
	}
	return thresholds, values
}

// TestScalingBinningHand checks NewScalingBinning on value histograms
// worked by hand: 8 fine bins with counts 2, 0, 1, 1, 0, 0, 2, 2 (n = 8)
// and sums 0.1, 0, 0.3, 0.4, 0, 0, 1.6, 1.9, 4 equal-mass bins. The
// examples of ranks 2, 4, 6 lie in fine bins 2, 6 and 7, so the
// thresholds are 2/8, 6/8, 7/8; the bins hold fine bins {0, 1}, {2, 3,
// 4, 5}, {6}, {7}, whose means are 0.1/2, 0.7/2, 1.6/2 and 1.9/2. Class 1
// has counts 2, 2, 0, 0, 1, 1, 0, 2: ranks 2, 4, 6 in fine bins 1, 4, 7;
// bins {0}, {1, 2, 3}, {4, 5, 6}, {7}.
func TestScalingBinningHand(t *testing.T) {
	h := NewValueHistograms(2, 8)
	copy(h.Count, []float64{2, 0, 1, 1, 0, 0, 2, 2, 2, 2, 0, 0, 1, 1, 0, 2})
	copy(h.Sum, []float64{0.1, 0, 0.3, 0.4, 0, 0, 1.6, 1.9, 0.1, 0.5, 0, 0, 0.55, 0.7, 0, 1.95})
	b, err := NewScalingBinning(1.5, h, 4)
	if err != nil {
		t.Fatal(err)
	}
	want := &ScalingBinning{
		T: 1.5, Bins: 4, Mexp: 3,
		Thresholds: []float64{2.0 / 8, 6.0 / 8, 7.0 / 8, 1.0 / 8, 4.0 / 8, 7.0 / 8},
		Values:     []float64{0.1 / 2, 0.7 / 2, 1.6 / 2, 1.9 / 2, 0.1 / 2, 0.5 / 2, (0.55 + 0.7) / 2, 1.95 / 2},
	}
	if !slices.Equal(b.Thresholds, want.Thresholds) || b.T != want.T || b.Bins != 4 || b.Mexp != 3 {
		t.Errorf("got  %+v\nwant %+v", b, want)
	}
	for k, v := range want.Values {
		if math.Abs(b.Values[k]-v) > 1e-15 {
			t.Errorf("value %d: %v, want %v", k, b.Values[k], v)
		}
	}
	if err := b.validate(); err != nil {
		t.Error(err)
	}
	// An empty bin takes the middle of its range ([0, 0] for class 0's
	// bin 0, [0, 1/2] for class 1's), and a mean outside its bin's range
	// (class 1's 3.3/3, which noise could make) is kept inside it.
	h = NewValueHistograms(2, 2)
	copy(h.Count, []float64{3, 0, 0, 3})
	copy(h.Sum, []float64{1.5, 0, 0, 3.3})
	b, err = NewScalingBinning(1, h, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float64{0, 0.5, 0.25, 1}; !slices.Equal(b.Values, want) || !slices.Equal(b.Thresholds, []float64{0, 0.5}) {
		t.Errorf("thresholds %v, values %v, want [0 0.5] and %v", b.Thresholds, b.Values, want)
	}
}

// TestScalingBinningAgainstSorted compares NewScalingBinning with
// sortedScalingBinning on random values with empty fine bins, fine bins
// heavier than a bin's share, and more bins than examples.
func TestScalingBinningAgainstSorted(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		fine := 1 << (1 + rng.IntN(6))
		bins := 1 + rng.IntN(fine)
		h := NewValueHistograms(2, fine)
		values := make([][]float64, 2)
		for j := range 2 {
			for m := range fine {
				if rng.IntN(3) == 0 {
					continue
				}
				for range rng.IntN(1 + rng.IntN(20)) {
					v := (float64(m) + rng.Float64()) / float64(fine)
					values[j] = append(values[j], v)
					h.Count[j*fine+Bin(v, fine)]++
					h.Sum[j*fine+Bin(v, fine)] += v
				}
			}
		}
		b, err := NewScalingBinning(1, h, bins)
		if err != nil {
			t.Fatal(err)
		}
		for j := range 2 {
			th, vals := sortedScalingBinning(values[j], fine, bins)
			got := b.Thresholds[j*(bins-1) : (j+1)*(bins-1)]
			if !slices.Equal(got, th) && !(len(th) == 0 && len(got) == 0) {
				t.Fatalf("trial %d class %d (%d values, %d bins): thresholds %v, want %v", trial, j, len(values[j]), bins, got, th)
			}
			for k, v := range vals {
				if g := b.Values[j*bins+k]; math.Abs(g-v) > 1e-14 {
					t.Fatalf("trial %d class %d (%d values, %d bins): value %d is %v, want %v", trial, j, len(values[j]), bins, k, g, v)
				}
			}
			// Equal mass: each used bin holds n/bins examples to within
			// the count of one fine bin (plus one for the rounding of the
			// ranks floor(k·n/bins)).
			n, most := float64(len(values[j])), 0.0
			for _, c := range h.Count[j*fine : (j+1)*fine] {
				most = max(most, c)
			}
			for k := range bins {
				lo, hi := 0.0, 1.0
				if k > 0 {
					lo = got[k-1]
				}
				if k < bins-1 {
					hi = got[k]
				}
				c := 0.0
				for _, v := range values[j] {
					if v >= lo && (v < hi || k == bins-1) {
						c++
					}
				}
				if d := math.Abs(c - n/float64(bins)); lo < hi && d > most+1 {
					t.Fatalf("trial %d class %d: bin %d holds %v of %v examples, %v from its share, more than the largest fine count %v", trial, j, k, c, n, d, most)
				}
			}
		}
	}
}

// TestScalingBinningMeans: with T = 1 and examples whose scaled
// probabilities are known, each bin's value is the mean of its
// examples' probabilities, computed by hand.
func TestScalingBinningMeans(t *testing.T) {
	probs := []float64{0.03, 0.11, 0.12, 0.2, 0.31, 0.33, 0.5, 0.52, 0.7, 0.74, 0.9, 0.97}
	s := &Set{Classes: 2}
	for i, p := range probs {
		s.Logits = append(s.Logits, 0, math.Log(p/(1-p))) // softmax = (1−p, p)
		s.Labels = append(s.Labels, i%2)
	}
	const mexp, bins = 10, 4
	h := NewValueHistograms(2, 1<<mexp)
	if err := h.Accumulate(TemperedSet(s, 1)); err != nil {
		t.Fatal(err)
	}
	b, err := NewScalingBinning(1, h, bins)
	if err != nil {
		t.Fatal(err)
	}
	// Class 1 holds p: 12 examples, 3 a bin, in order.
	for k := range bins {
		mean := (probs[3*k] + probs[3*k+1] + probs[3*k+2]) / 3
		got := b.Values[bins+k]
		if math.Abs(got-mean) > 1e-15 {
			t.Errorf("bin %d: value %v, mean %v", k, got, mean)
		}
		if k > 0 {
			if th := b.Thresholds[bins-1+k-1]; th > probs[3*k] || th <= probs[3*k-1] {
				t.Errorf("threshold %d is %v: want it in (%v, %v]", k, th, probs[3*k-1], probs[3*k])
			}
		}
	}
}

// TestScalingBinningFit checks that Fit fits T on the even rows exactly as
// Temperature does and bins the odd rows, that its binary predictions are
// non-decreasing in the class-1 logit, and that it takes only a few
// discrete values.
func TestScalingBinningFit(t *testing.T) {
	s := scOverconfident(rand.New(rand.NewPCG(7, 11)), 3000, 2, 2, 3)
	b := &ScalingBinning{Bins: 10, Mexp: 8}
	if err := b.Fit(s); err != nil {
		t.Fatal(err)
	}
	even, odd := SplitScalingBinning(s)
	if even.Len() != 1500 || odd.Len() != 1500 || !slices.Equal(even.Row(1), s.Row(2)) || !slices.Equal(odd.Row(1), s.Row(3)) {
		t.Fatalf("split into %d and %d rows, not alternating", even.Len(), odd.Len())
	}
	temp := NewTemperature(2)
	if err := temp.Fit(even); err != nil {
		t.Fatal(err)
	}
	h := NewValueHistograms(2, 1<<8)
	if err := h.Accumulate(TemperedSet(odd, temp.T)); err != nil {
		t.Fatal(err)
	}
	want, err := NewScalingBinning(temp.T, h, 10)
	if err != nil {
		t.Fatal(err)
	}
	if b.T != temp.T || !slices.Equal(b.Thresholds, want.Thresholds) || !slices.Equal(b.Values, want.Values) {
		t.Fatalf("Fit gives %+v, want %+v", b, want)
	}
	if b.T < 1.5 {
		t.Errorf("T = %v on over-confident data: want well above 1", b.T)
	}
	var prev float64
	seen := map[float64]bool{}
	dst := make([]float64, 2)
	for z := -30.0; z <= 30; z += 0.01 {
		b.Predict(dst, []float64{0, z})
		if dst[1] < prev {
			t.Fatalf("p_1 decreases from %v to %v at z = %v", prev, dst[1], z)
		}
		prev = dst[1]
		seen[dst[1]] = true
	}
	if len(seen) > 10*10 {
		t.Errorf("%d distinct predictions: want at most 10·10 (one per pair of bins)", len(seen))
	}
}

func TestScalingBinningErrors(t *testing.T) {
	one := &Set{Logits: []float64{1, 2}, Labels: []int{0}, Classes: 2}
	small := scOverconfident(rand.New(rand.NewPCG(1, 11)), 20, 2, 2, 3)
	h := NewValueHistograms(2, 8)
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"one row", func() error { return new(ScalingBinning).Fit(one) }, "need at least 2"},
		{"bins above fine", func() error { return (&ScalingBinning{Bins: 9, Mexp: 3}).Fit(small) }, "9 bins: want 1 to 8"},
		{"mexp", func() error { return (&ScalingBinning{Mexp: 17}).Fit(small) }, "bin exponent 17"},
		{"temperature", func() error { _, err := NewScalingBinning(0, h, 2); return err }, "temperature 0"},
		{"not a power of two", func() error { _, err := NewScalingBinning(1, NewValueHistograms(2, 6), 2); return err }, "power of two"},
		{"weighting", func() error { return new(ScalingBinning).SetWeighting(WeightAll, []float64{1, 1}) }, "takes no weighting"},
		{"decreasing values", func() error {
			return (&ScalingBinning{T: 1, Bins: 2, Mexp: 1, Thresholds: []float64{0.5, 0.5}, Values: []float64{0.5, 0.2, 0.1, 0.7}}).validate()
		}, "values of class 0 decrease"},
		{"threshold of 1", func() error {
			return (&ScalingBinning{T: 1, Bins: 2, Mexp: 1, Thresholds: []float64{0.5, 1}, Values: []float64{0.2, 0.5, 0.1, 0.7}}).validate()
		}, "threshold 1 of class 1 is 1"},
		{"threshold off the fine grid", func() error {
			return (&ScalingBinning{T: 1, Bins: 2, Mexp: 1, Thresholds: []float64{0.5, 0.25}, Values: []float64{0.2, 0.5, 0.1, 0.7}}).validate()
		}, "threshold 1 of class 1 is 0.25: want a multiple of 2^-mexp"},
		{"thresholds", func() error {
			return (&ScalingBinning{T: 1, Bins: 2, Mexp: 1, Thresholds: []float64{0.5}, Values: []float64{0.2, 0.5, 0.1, 0.7}}).validate()
		}, "have 1 thresholds"},
	} {
		err := tc.err()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestValueHistograms checks Accumulate against counts and sums made by
// hand, Add, and the errors of Validate, Accumulate and Add.
func TestValueHistograms(t *testing.T) {
	// Softmax of (0, log 4) is (1/5, 4/5); of (log 4, 0) the reverse.
	s := &Set{Logits: []float64{0, math.Log(4), math.Log(4), 0, 0, math.Log(4)}, Labels: []int{0, 1, 1}, Classes: 2}
	h := NewValueHistograms(2, 4)
	if err := h.Accumulate(s); err != nil {
		t.Fatal(err)
	}
	// Class 0: 1/5 twice (bin 0), 4/5 once (bin 3); class 1 the mirror.
	wantCount := []float64{2, 0, 0, 1, 1, 0, 0, 2}
	wantSum := []float64{0.4, 0, 0, 0.8, 0.2, 0, 0, 1.6}
	for k := range wantCount {
		if h.Count[k] != wantCount[k] || math.Abs(h.Sum[k]-wantSum[k]) > 1e-15 {
			t.Fatalf("counts %v, sums %v: want %v, %v", h.Count, h.Sum, wantCount, wantSum)
		}
	}
	if err := h.Add(h); err != nil || h.Count[0] != 4 || math.Abs(h.Sum[7]-3.2) > 1e-15 {
		t.Errorf("Add: %v, counts %v, sums %v", err, h.Count, h.Sum)
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"classes", h.Accumulate(&Set{Logits: []float64{1, 2, 3}, Labels: []int{0}, Classes: 3}), "for 2 classes but the set has 3"},
		{"shape", h.Add(NewValueHistograms(2, 8)), "cannot add value histograms of 2 classes × 8 bins"},
		{"length", (&ValueHistograms{Classes: 2, Bins: 2, Count: make([]float64, 4), Sum: make([]float64, 3)}).Validate(), "have 4 counts and 3 sums"},
		{"finite", (&ValueHistograms{Classes: 2, Bins: 1, Count: []float64{1, math.NaN()}, Sum: []float64{0, 0}}).Validate(), "class 1, bin 0 holds NaN"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, tc.err, tc.want)
		}
	}
}
