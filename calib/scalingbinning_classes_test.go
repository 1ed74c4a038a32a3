package calib

import (
	"math"
	"slices"
	"testing"
)

// accuracyOf returns the fraction of the rows of s whose largest
// calibrated probability (the first, on ties) is their label's.
func accuracyOf(c Calibrator, s *Set) float64 {
	out := make([]float64, len(s.Logits))
	c.Predict(out, s.Logits)
	right := 0
	for i := range s.Len() {
		row := out[i*s.Classes : (i+1)*s.Classes]
		best := 0
		for j, p := range row {
			if p > row[best] {
				best = j
			}
		}
		if best == s.Labels[i] {
			right++
		}
	}
	return float64(right) / float64(s.Len())
}

// kumarBins is scaling-binning's binning step of one class as Kumar et
// al.'s reference code (p-lambda/verified_calibration,
// calibration/utils.py: get_equal_bins, get_discrete_calibrator) does it
// on exact values, with no fine histograms: sort the scaled
// probabilities, split them into bins groups as np.array_split does, put
// a boundary halfway between consecutive groups, drop repeated
// boundaries, and map a value to the mean of the fitting values of its
// bin (bisect_left: bin i holds (b_{i−1}, b_i]).
type kumarBins struct {
	bounds []float64 // upper bounds, the last 1
	means  []float64
}

func newKumarBins(vals []float64, bins int) kumarBins {
	v := slices.Clone(vals)
	slices.Sort(v)
	n := len(v)
	bins = min(bins, n)
	var bounds []float64
	start := 0
	for i := range bins {
		end := start + n/bins
		if i < n%bins {
			end++
		}
		if i < bins-1 {
			bounds = append(bounds, (v[end-1]+v[end])/2)
		}
		start = end
	}
	bounds = append(bounds, 1)
	bounds = slices.Compact(bounds) // sorted already
	kb := kumarBins{bounds: bounds, means: make([]float64, len(bounds))}
	count := make([]float64, len(bounds))
	for _, x := range v {
		i := kb.bin(x)
		kb.means[i] += x
		count[i]++
	}
	for i := range kb.means {
		if count[i] > 0 {
			kb.means[i] /= count[i]
		}
	}
	return kb
}

func (kb kumarBins) bin(x float64) int {
	i, _ := slices.BinarySearch(kb.bounds, x)
	return min(i, len(kb.bounds)-1)
}

// kumarAccuracy returns the accuracy on s of marginal scaling-binning
// with temperature t and bins exact equal-mass bins per class (kumarBins)
// fitted on the scaled probabilities softmax(z/t) of the rows of bin.
func kumarAccuracy(s, bin *Set, t float64, bins int) float64 {
	c := s.Classes
	scaled := func(set *Set, i int) []float64 {
		row := make([]float64, c)
		for j, z := range set.Row(i) {
			row[j] = z / t
		}
		Softmax(row, row)
		return row
	}
	vals := make([][]float64, c)
	for i := range bin.Len() {
		for j, p := range scaled(bin, i) {
			vals[j] = append(vals[j], p)
		}
	}
	kb := make([]kumarBins, c)
	for j := range c {
		kb[j] = newKumarBins(vals[j], bins)
	}
	right := 0
	for i := range s.Len() {
		best, bv := 0, math.Inf(-1)
		for j, p := range scaled(s, i) {
			if v := kb[j].means[kb[j].bin(p)]; v > bv {
				best, bv = j, v
			}
		}
		if best == s.Labels[i] {
			right++
		}
	}
	return float64(right) / float64(s.Len())
}

// TestScalingBinningManyClassesAccuracy pins what scalbin does to top-1
// accuracy at C = 200 and 1,000 classes and 2,000 rows to an independent
// implementation of Kumar et al.'s binning on exact values (kumarBins):
// the loss with 100 bins (66% → 23% at C = 1,000) is the method's, not
// fedcalib's fine histograms or tied bin edges. With B = 100 equal-mass
// bins, fewer than C, the top bin of class j holds the 1% of rows with
// the largest g_j — about one class-j row and nine runner-ups — so the
// true class and the runners-up of a row all take their top bins'
// similar means; with B = C the top bins are as narrow as a class's
// prior and most of the accuracy stays. The default (bins 0) must be
// such: DefaultScalingBinningBins gives one bin per class.
func TestScalingBinningManyClassesAccuracy(t *testing.T) {
	for _, tc := range []struct {
		rows, classes, bins int     // bins 0: the default
		lo, hi              float64 // bounds on both accuracies
	}{
		{2000, 1000, 100, 0.15, 0.30},
		{2000, 1000, 1000, 0.55, 0.70},
		{2000, 1000, 0, 0.55, 0.70},
		{2000, 200, 100, 0.45, 0.60},
		{2000, 200, 0, 0.60, 0.70},
	} {
		s := imagenetSet(tc.rows, tc.classes)
		sb := &ScalingBinning{Bins: tc.bins}
		if err := sb.Fit(s); err != nil {
			t.Fatal(err)
		}
		if tc.bins == 0 && sb.Bins != tc.classes {
			t.Errorf("C = %d: the default fit has %d bins: want one per class", tc.classes, sb.Bins)
		}
		_, bin := SplitScalingBinning(s)
		got, want := accuracyOf(sb, s), kumarAccuracy(s, bin, sb.T, sb.Bins)
		base := accuracyOf(NewTemperature(tc.classes), s)
		t.Logf("C = %d, B = %d: accuracy %.4f uncalibrated, %.4f scalbin, %.4f Kumar et al. on exact values", tc.classes, tc.bins, base, got, want)
		if math.Abs(got-want) > 0.02 {
			t.Errorf("C = %d, B = %d: scalbin's accuracy %.4f, Kumar et al.'s binning on exact values %.4f: want them within 0.02", tc.classes, tc.bins, got, want)
		}
		for _, a := range []float64{got, want} {
			if a < tc.lo || a > tc.hi {
				t.Errorf("C = %d, B = %d: accuracy %.4f: want it in [%v, %v]", tc.classes, tc.bins, a, tc.lo, tc.hi)
			}
		}
	}
}

// TestScalingBinningFineTable checks FineTable against Predict: the table
// entry of the fine bin min(⌊g_j·2^M⌋, 2^M − 1), normalised, is Predict's
// output bit for bit, on fitted rows and on rows whose g_j sits exactly
// at a threshold (export.Probe's rows, built here the same way).
func TestScalingBinningFineTable(t *testing.T) {
	for _, sb := range []*ScalingBinning{{}, {Bins: 1, Mexp: 4}, {Bins: 16, Mexp: 4}, {Bins: 7, Mexp: 5}} {
		s := imagenetSet(600, 20)
		if err := sb.Fit(s); err != nil {
			t.Fatal(err)
		}
		c, fine := s.Classes, 1<<sb.Mexp
		logits := slices.Clone(s.Logits)
		for j := range c { // g_j = t exactly (as near as float64 reaches)
			for _, th := range sb.Thresholds[j*(sb.Bins-1) : (j+1)*(sb.Bins-1)] {
				if th <= 0 {
					continue
				}
				row := make([]float64, c)
				for i := range row {
					row[i] = sb.T * math.Log((1-th)/float64(c-1))
				}
				row[j] = sb.T * math.Log(th)
				logits = append(logits, row...)
			}
		}
		table := sb.FineTable()
		if len(table) != c*fine {
			t.Fatalf("%d bins of 2^%d: FineTable has %d values: want %d", sb.Bins, sb.Mexp, len(table), c*fine)
		}
		got := make([]float64, len(logits))
		sb.Predict(got, logits)
		g, v, want := make([]float64, c), make([]float64, c), make([]float64, c)
		for i := 0; i < len(logits); i += c {
			for j, z := range logits[i : i+c] {
				g[j] = z / sb.T
			}
			Softmax(g, g)
			for j, p := range g {
				m := min(int(math.Floor(p*float64(fine))), fine-1)
				v[j] = table[j*fine+m]
			}
			normaliseOr(want, v, g)
			if !slices.Equal(got[i:i+c], want) {
				t.Fatalf("%d bins of 2^%d, row %d: Predict %v, FineTable's lookup %v", sb.Bins, sb.Mexp, i/c, got[i:i+c], want)
			}
		}
	}
}

// TestScalingBinningFitFloat32 checks that FitFloat32 on a selection of
// float32 rows gives the calibrator Fit gives on those rows converted to
// a Set, field for field.
func TestScalingBinningFitFloat32(t *testing.T) {
	src := imagenetSet(900, 30)
	r := &Float32Rows{Logits: make([]float32, len(src.Logits)), Labels: make([]int32, src.Len()), Classes: src.Classes}
	for i, v := range src.Logits {
		r.Logits[i] = float32(v)
	}
	for i, y := range src.Labels {
		r.Labels[i] = int32(y)
	}
	var idx []int
	for i := range src.Len() {
		if i%3 != 1 {
			idx = append(idx, i)
		}
	}
	for _, rows := range [][]int{nil, idx} {
		r.Rows = rows
		conv := &Set{Classes: src.Classes}
		for k := range r.Len() {
			i := k
			if rows != nil {
				i = rows[k]
			}
			for _, v := range r.Logits[i*src.Classes : (i+1)*src.Classes] {
				conv.Logits = append(conv.Logits, float64(v))
			}
			conv.Labels = append(conv.Labels, int(r.Labels[i]))
		}
		want, got := &ScalingBinning{Bins: 20}, &ScalingBinning{Bins: 20}
		if err := want.Fit(conv); err != nil {
			t.Fatal(err)
		}
		if err := got.FitFloat32(r); err != nil {
			t.Fatal(err)
		}
		if got.T != want.T || got.Bins != want.Bins || got.Mexp != want.Mexp || !slices.Equal(got.Thresholds, want.Thresholds) || !slices.Equal(got.Values, want.Values) {
			t.Errorf("%d rows selected: FitFloat32 gives T = %v, %d bins; Fit T = %v, %d bins, or other thresholds or values", r.Len(), got.T, got.Bins, want.T, want.Bins)
		}
		// And Fit equals its definition: T fitted on the even rows, the
		// bins from the tempered odd rows.
		scale, bin := SplitScalingBinning(conv)
		tt := NewTemperature(conv.Classes)
		if err := tt.Fit(scale); err != nil {
			t.Fatal(err)
		}
		h := NewValueHistograms(conv.Classes, 1<<ScalingBinningMexp)
		if err := h.Accumulate(TemperedSet(bin, tt.T)); err != nil {
			t.Fatal(err)
		}
		def, err := NewScalingBinning(tt.T, h, 20)
		if err != nil {
			t.Fatal(err)
		}
		if def.T != want.T || !slices.Equal(def.Thresholds, want.Thresholds) || !slices.Equal(def.Values, want.Values) {
			t.Errorf("%d rows: Fit differs from temperature on the even rows and bins of the tempered odd rows (T %v, %v)", r.Len(), want.T, def.T)
		}
	}
}
