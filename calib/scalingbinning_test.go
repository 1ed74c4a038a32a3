package calib

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// sortedScalingBinning forms the equal-mass bins of one class the way
// Kumar et al.'s verified_calibration does, from the sorted examples
// rather than from cumulative counts: each example stands at the midpoint
// of its fine bin, sorted; bin k starts at the example of rank
// floor(k·n/bins), rounded down to its fine bin's lower edge; each bin's
// value is the mean of the midpoints of the examples from its start to
// the next bin's start. It returns the thresholds and values.
func sortedScalingBinning(count []int, bins int) (thresholds, values []float64) {
	fine := len(count)
	var fineOf []int // the fine bin of each example, in order
	for m, c := range count {
		for range c {
			fineOf = append(fineOf, m)
		}
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
		for _, m := range fineOf {
			if m >= edges[k] && m < edges[k+1] {
				sum += (float64(m) + 0.5) / float64(fine)
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

// TestScalingBinningHand checks NewScalingBinning on a histogram worked
// by hand: 8 fine bins with counts 2, 0, 1, 1, 0, 0, 2, 2 (n = 8), 4
// equal-mass bins. The examples of ranks 2, 4, 6 lie in fine bins 2, 6
// and 7, so the thresholds are 2/8, 6/8, 7/8; the bins hold fine bins
// {0, 1}, {2, 3, 4, 5}, {6}, {7}, whose midpoint means are 0.5/8,
// (2.5 + 3.5)/2/8, 6.5/8 and 7.5/8. Class 1 is the mirror image.
func TestScalingBinningHand(t *testing.T) {
	h := NewHistograms(2, 8)
	// Class 0: the counts split between positives and negatives, so
	// that only their sum can give the result.
	copy(h.Pos[:8], []float64{1, 0, 1, 0, 0, 0, 2, 0})
	copy(h.Neg[:8], []float64{1, 0, 0, 1, 0, 0, 0, 2})
	copy(h.Neg[8:], []float64{2, 2, 0, 0, 1, 1, 0, 2})
	b, err := NewScalingBinning(1.5, h, 4)
	if err != nil {
		t.Fatal(err)
	}
	want := &ScalingBinning{
		T: 1.5, Bins: 4, Mexp: 3,
		// Class 1: counts 2, 2, 0, 0, 1, 1, 0, 2: ranks 2, 4, 6 in fine
		// bins 1, 4, 7; bins {0}, {1, 2, 3}, {4, 5, 6}, {7}.
		Thresholds: []float64{2.0 / 8, 6.0 / 8, 7.0 / 8, 1.0 / 8, 4.0 / 8, 7.0 / 8},
		Values:     []float64{0.5 / 8, 3.0 / 8, 6.5 / 8, 7.5 / 8, 0.5 / 8, 1.5 / 8, 5.0 / 8, 7.5 / 8},
	}
	if !slices.Equal(b.Thresholds, want.Thresholds) || !slices.Equal(b.Values, want.Values) || b.T != want.T || b.Bins != 4 || b.Mexp != 3 {
		t.Errorf("got  %+v\nwant %+v", b, want)
	}
	if err := b.validate(); err != nil {
		t.Error(err)
	}
}

// TestScalingBinningAgainstSorted compares NewScalingBinning with
// sortedScalingBinning on random histograms with empty fine bins, bins
// heavier than a bin's share, and more bins than examples.
func TestScalingBinningAgainstSorted(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		fine := 1 << (1 + rng.IntN(6))
		bins := 1 + rng.IntN(fine)
		h := NewHistograms(2, fine)
		counts := make([][]int, 2)
		for j := range 2 {
			counts[j] = make([]int, fine)
			for m := range fine {
				if rng.IntN(3) > 0 {
					counts[j][m] = rng.IntN(1 + rng.IntN(20))
				}
				p := rng.IntN(counts[j][m] + 1)
				h.Pos[j*fine+m], h.Neg[j*fine+m] = float64(p), float64(counts[j][m]-p)
			}
		}
		b, err := NewScalingBinning(1, h, bins)
		if err != nil {
			t.Fatal(err)
		}
		for j := range 2 {
			th, vals := sortedScalingBinning(counts[j], bins)
			got := b.Thresholds[j*(bins-1) : (j+1)*(bins-1)]
			if !slices.Equal(got, th) && !(len(th) == 0 && len(got) == 0) {
				t.Fatalf("trial %d class %d (counts %v, %d bins): thresholds %v, want %v", trial, j, counts[j], bins, got, th)
			}
			for k, v := range vals {
				if g := b.Values[j*bins+k]; math.Abs(g-v) > 1e-15 {
					t.Fatalf("trial %d class %d (counts %v, %d bins): value %d is %v, want %v", trial, j, counts[j], bins, k, g, v)
				}
			}
			// Equal mass: each used bin holds n/bins examples to within
			// the count of one fine bin (plus one for the rounding of the
			// ranks floor(k·n/bins)).
			n, most := 0, 0
			for _, c := range counts[j] {
				n, most = n+c, max(most, c)
			}
			for k := range bins {
				lo, hi := 0, fine
				if k > 0 {
					lo = int(got[k-1] * float64(fine))
				}
				if k < bins-1 {
					hi = int(got[k] * float64(fine))
				}
				c := 0
				for m := lo; m < hi; m++ {
					c += counts[j][m]
				}
				if d := math.Abs(float64(c) - float64(n)/float64(bins)); lo < hi && d > float64(most+1) {
					t.Fatalf("trial %d class %d: bin %d holds %d of %d examples, %v from its share, more than the largest fine count %d", trial, j, k, c, n, d, most)
				}
			}
		}
	}
}

// TestScalingBinningMeans: with T = 1 and examples whose scaled
// probabilities are known, each bin's value is the mean of its
// examples' probabilities to within half a fine bin, and exactly the
// mean of their fine-bin midpoints.
func TestScalingBinningMeans(t *testing.T) {
	probs := []float64{0.03, 0.11, 0.12, 0.2, 0.31, 0.33, 0.5, 0.52, 0.7, 0.74, 0.9, 0.97}
	s := &Set{Classes: 2}
	for i, p := range probs {
		s.Logits = append(s.Logits, 0, math.Log(p/(1-p))) // softmax = (1−p, p)
		s.Labels = append(s.Labels, i%2)
	}
	const mexp, bins = 10, 4
	h := NewHistograms(2, 1<<mexp)
	if err := h.Accumulate(TemperedSet(s, 1)); err != nil {
		t.Fatal(err)
	}
	b, err := NewScalingBinning(1, h, bins)
	if err != nil {
		t.Fatal(err)
	}
	// Class 1 holds p: 12 examples, 3 a bin, in order.
	for k := range bins {
		var mean, mid float64
		for _, p := range probs[3*k : 3*k+3] {
			mean += p / 3
			mid += (math.Floor(p*(1<<mexp)) + 0.5) / (1 << mexp) / 3
		}
		got := b.Values[bins+k]
		if math.Abs(got-mid) > 1e-15 || math.Abs(got-mean) > 1.0/(1<<(mexp+1)) {
			t.Errorf("bin %d: value %v, mean of midpoints %v, mean %v", k, got, mid, mean)
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
	s := synthSet(3000, 2, 7)
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
	h := NewHistograms(2, 1<<8)
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

// synthSet returns n rows of c classes from an over-confident model.
func synthSet(n, c int, seed uint64) *Set {
	rng := rand.New(rand.NewPCG(seed, 11))
	s := &Set{Logits: make([]float64, n*c), Labels: make([]int, n), Classes: c}
	p := make([]float64, c)
	for i := range n {
		z := s.Row(i)
		for j := range z {
			z[j] = 2 * rng.NormFloat64()
		}
		z[rng.IntN(c)] += 4
		for j := range p {
			p[j] = z[j] / 3
		}
		Softmax(p, p)
		u, acc := rng.Float64(), 0.0
		s.Labels[i] = c - 1
		for j, v := range p {
			if acc += v; u < acc {
				s.Labels[i] = j
				break
			}
		}
	}
	return s
}

func TestScalingBinningErrors(t *testing.T) {
	one := &Set{Logits: []float64{1, 2}, Labels: []int{0}, Classes: 2}
	h := NewHistograms(2, 8)
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"one row", func() error { return new(ScalingBinning).Fit(one) }, "need at least 2"},
		{"bins above fine", func() error { return (&ScalingBinning{Bins: 9, Mexp: 3}).Fit(synthSet(20, 2, 1)) }, "9 bins: want 1 to 8"},
		{"mexp", func() error { return (&ScalingBinning{Mexp: 17}).Fit(synthSet(20, 2, 1)) }, "bin exponent 17"},
		{"temperature", func() error { _, err := NewScalingBinning(0, h, 2); return err }, "temperature 0"},
		{"not a power of two", func() error { _, err := NewScalingBinning(1, NewHistograms(2, 6), 2); return err }, "power of two"},
		{"weighting", func() error { return new(ScalingBinning).SetWeighting(WeightAll, []float64{1, 1}) }, "takes no weighting"},
		{"decreasing values", func() error {
			return (&ScalingBinning{T: 1, Bins: 2, Mexp: 1, Thresholds: []float64{0.5, 0.5}, Values: []float64{0.5, 0.2, 0.1, 0.7}}).validate()
		}, "values of class 0 decrease"},
		{"threshold of 1", func() error {
			return (&ScalingBinning{T: 1, Bins: 2, Mexp: 1, Thresholds: []float64{0.5, 1}, Values: []float64{0.2, 0.5, 0.1, 0.7}}).validate()
		}, "threshold 1 of class 1 is 1"},
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
