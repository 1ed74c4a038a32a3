package calib

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"sort"
)

// Settings of scaling-binning.
const (
	// ScalingBinningBins is the least number of equal-mass bins per class
	// of a ScalingBinning fitted with Bins = 0 (and at least 2^7 fine
	// bins); DefaultScalingBinningBins raises it to the number of
	// classes. Kumar et al. (2019) use 10 to 100 bins. Few bins are coarse where
	// one-vs-all probabilities are rare: on MNIST (mnist-tiny, 10
	// classes) 15 bins cost 9 points of accuracy, because one bin spans
	// both the negatives' small and the positives' large probabilities
	// of a class; 100 keep the accuracy (docs/CALIBRATION.md). The bin
	// values are means of the scaled probabilities, not of labels, so
	// they stay stable with few examples a bin.
	ScalingBinningBins = 100
	// ScalingBinningMexp is the bin exponent of the fine equal-width
	// histograms scaling-binning forms its bins from when Settings.Mexp
	// (or ScalingBinning.Mexp) is zero: 2^10 = 1024 fine bins per class,
	// as for isotonic regression.
	ScalingBinningMexp = 10
)

// ScalingBinning is the scaling-binning calibrator of Kumar, Liang and Ma
// (2019, "Verified Uncertainty Calibration"), method MethodScalingBinning.
// It first scales, g(z) = softmax(z/T) (temperature scaling,
// Temperature), then bins: for each class j, the class-j scaled
// probability g_j falls into one of Bins equal-mass bins, and the
// calibrator returns the mean of g_j over the calibration examples in
// that bin — the mean of the scaled values, not of the labels, which is
// Kumar et al.'s lower-variance estimator. The C bin values of a row are
// normalised to sum to 1, as Histogram normalises its values (a row
// whose values sum to 0 keeps g).
//
// Fit splits the calibration rows in two, as Kumar et al. do: the even
// rows (0, 2, 4, …; see SplitScalingBinning) fit T, the odd rows form
// the bins. The bins are formed from the ValueHistograms of the scaled
// probabilities — count and sum of g_j in each of 2^Mexp fine
// equal-width bins per class, the statistic a federation sums — so a
// federated fit with one client, one round and no noise gives the
// central calibrator. This fixes the resolution of the bin boundaries at
// 2^−Mexp (see NewScalingBinning): they lie on fine-bin edges, so a bin
// holds n/B examples only to within the count of one fine bin. The bin
// values are the exact means of g_j over the examples each bin holds.
//
// The zero value is unfitted: Fit takes Bins and Mexp as settings (zero
// means DefaultScalingBinningBins, at least one bin per class, and
// ScalingBinningMexp) and sets every field.
type ScalingBinning struct {
	// T is the temperature of the scaling map softmax(z/T).
	T float64 `json:"t"`
	// Bins is the number B of equal-mass bins per class, 1 to 2^Mexp.
	Bins int `json:"bins"`
	// Mexp is the bin exponent of the fine histograms the bins were
	// formed from: every threshold is a multiple of 2^−Mexp.
	Mexp int `json:"mexp"`
	// Thresholds holds the B−1 lower bin boundaries of each class at
	// Thresholds[j*(Bins−1)+k−1] for bin k = 1, …, B−1, Classes×(B−1),
	// non-decreasing within a class, in [0, 1). The bin of g_j is the
	// number of class-j thresholds t with g_j ≥ t; a bin whose threshold
	// equals the next one is never used.
	Thresholds []float64 `json:"thresholds"`
	// Values holds the mean of g_j in bin k of class j at
	// Values[j*Bins+k], Classes×B, non-decreasing within a class.
	Values []float64 `json:"values"`
}

// DefaultScalingBinningBins returns the number of equal-mass bins of a
// scaling-binning fit of classes classes with 2^mexp fine bins that does
// not set Bins: max(ScalingBinningBins, classes), or 2^mexp when there
// are fewer fine bins.
//
// At least one bin per class: an equal-mass bin holds a fraction 1/B of
// the rows, and with B < C the top bin of class j holds more rows than
// class j has (its prior is about 1/C), so it merges them with the rows
// where class j is only a runner-up; the true class and the runners-up
// of a row then take their top bins' similar means and the argmax is
// lost. At C = 1,000 and 2,000 rows, 100 bins take top-1 accuracy from
// 66% to 23% (Kumar et al.'s binning on exact values too, 24%); 1,000
// bins keep 61% (TestScalingBinningManyClassesAccuracy,
// docs/CALIBRATION.md). Many bins are cheap for scaling-binning: Kumar
// et al. show it needs O(B + 1/ε²) samples, where histogram binning
// needs O(B/ε²), as its bin values are means of the scaled
// probabilities rather than of labels.
func DefaultScalingBinningBins(mexp, classes int) int {
	bins := max(ScalingBinningBins, classes)
	if mexp < 0 || mexp >= bits.UintSize-1 {
		return bins
	}
	return min(bins, 1<<mexp)
}

// SplitScalingBinning splits the rows of s as scaling-binning's fit
// does: the even rows (0, 2, 4, …) into scale, which fits the
// temperature, and the odd rows into bin, which forms the bins. Both are
// copies. A federated client splits its own rows the same way.
func SplitScalingBinning(s *Set) (scale, bin *Set) {
	even, odd := splitRows(s.Len())
	return s.Subset(even), s.Subset(odd)
}

// splitRows returns the indices of the even and the odd rows of n rows,
// scaling-binning's split (SplitScalingBinning).
func splitRows(n int) (even, odd []int) {
	even, odd = make([]int, 0, (n+1)/2), make([]int, 0, n/2)
	for i := range n {
		if i%2 == 0 {
			even = append(even, i)
		} else {
			odd = append(odd, i)
		}
	}
	return even, odd
}

// TemperedSet returns a copy of s with every logit divided by t, so that
// its softmax probabilities are the temperature-scaled softmax(z/t) —
// bit for bit those Temperature and ScalingBinning compute. It panics
// unless t is positive and finite.
func TemperedSet(s *Set, t float64) *Set {
	if !(t > 0) || math.IsInf(t, 1) {
		panic(fmt.Sprintf("calib: TemperedSet with temperature %v", t))
	}
	out := &Set{Logits: make([]float64, len(s.Logits)), Labels: append([]int(nil), s.Labels...), Classes: s.Classes}
	for i, v := range s.Logits {
		out.Logits[i] = v / t
	}
	return out
}

// NewScalingBinning returns the scaling-binning calibrator with
// temperature t and bins equal-mass bins per class, formed from h, the
// value histograms of the scaled probabilities softmax(z/t) of the
// binning rows (negative counts and sums, which noise could make, are
// taken as 0). h.Bins must be a power of two 2^M, the fine resolution.
//
// For class j, with c_m and s_m the count and the sum of g_j of fine bin
// m and n = Σ_m c_m, the boundary of equal-mass bin k = 1, …, bins−1 is
// the lower edge e_k/2^M of the fine bin holding the example of rank
// k·n/bins (0-based; e_k is the largest e ≤ 2^M − 1 with
// Σ_{m<e} c_m ≤ k·n/bins), as Kumar et al. start bin k at that example.
// Bin k then covers the fine bins e_k to e_{k+1} − 1 (e_0 = 0,
// e_bins = 2^M), so its count differs from n/bins by less than the count
// of one fine bin (plus one for the rounding of the rank). Its value is
// Σ s_m / Σ c_m over its fine bins, the mean of g_j over its examples,
// kept within the bin's range [e_k/2^M, e_{k+1}/2^M] against rounding; a
// bin without examples takes the middle of its range.
//
// It returns an error when h is invalid, h.Bins is not a power of two, t
// is not positive and finite, or bins is outside [1, h.Bins].
func NewScalingBinning(t float64, h *ValueHistograms, bins int) (*ScalingBinning, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	switch {
	case !(t > 0) || math.IsInf(t, 1):
		return nil, fmt.Errorf("scaling-binning: temperature %v: want a finite T > 0", t)
	case bits.OnesCount(uint(h.Bins)) != 1:
		return nil, fmt.Errorf("scaling-binning: fine histograms of %d bins: want a power of two 2^M", h.Bins)
	case bins < 1 || bins > h.Bins:
		return nil, fmt.Errorf("scaling-binning: %d bins: want 1 to %d, the fine bins", bins, h.Bins)
	}
	fine := h.Bins
	b := &ScalingBinning{
		T:          t,
		Bins:       bins,
		Mexp:       bits.TrailingZeros(uint(fine)),
		Thresholds: make([]float64, h.Classes*(bins-1)),
		Values:     make([]float64, h.Classes*bins),
	}
	count, sum := make([]float64, fine), make([]float64, fine)
	cum := make([]float64, fine+1) // cum[e] = Σ_{m<e} count[m]
	edges := make([]int, bins+1)
	width := float64(fine)
	for j := range h.Classes {
		for m := range count {
			k := j*fine + m
			count[m], sum[m] = max(h.Count[k], 0), max(h.Sum[k], 0)
			cum[m+1] = cum[m] + count[m]
		}
		equalMassEdges(edges, cum)
		for k := 1; k < bins; k++ {
			b.Thresholds[j*(bins-1)+k-1] = float64(edges[k]) / width
		}
		for k := range bins {
			lo, hi := edges[k], edges[k+1]
			var n, s float64
			for m := lo; m < hi; m++ {
				n += count[m]
				s += sum[m]
			}
			v := float64(lo+hi) / 2 / width // empty: the middle of the range
			if n > 0 {
				v = min(max(s/n, float64(lo)/width), float64(hi)/width)
			}
			b.Values[j*bins+k] = v
		}
	}
	return b, nil
}

// Fit fits b to the labelled logits of s: T on the even rows with
// Temperature's fit, then Bins equal-mass bins (DefaultScalingBinningBins
// of s.Classes if zero) from the 2^Mexp-bin histograms (ScalingBinningMexp
// if zero) of the odd rows' scaled probabilities (see ScalingBinning and
// NewScalingBinning). It returns an error, leaving b unchanged, for an
// invalid set, one of fewer than 2 rows, a bin exponent outside
// [1, MaxMexp] or a number of bins outside [1, 2^Mexp].
func (b *ScalingBinning) Fit(s *Set) error {
	if err := b.checkMexp(); err != nil {
		return err
	}
	if err := checkFit(s); err != nil {
		return err
	}
	return fitScalingBinning(b, setRows(s))
}

// FitFloat32 is Fit on float32 rows read in place (Float32Fitter): the
// calibrator Fit gives on the rows converted to a Set, bit for bit,
// without the copy.
func (b *ScalingBinning) FitFloat32(r *Float32Rows) error {
	if err := b.checkMexp(); err != nil {
		return err
	}
	if err := r.Validate(); err != nil {
		return err
	}
	if r.Len() == 0 {
		return fmt.Errorf("cannot fit: %w", ErrEmpty)
	}
	return fitScalingBinning(b, tempRows[float32, int32]{logits: r.Logits, labels: r.Labels, rows: r.Rows, c: r.Classes})
}

// checkMexp checks the bin exponent a fit will use.
func (b *ScalingBinning) checkMexp() error {
	if mexp := cmp.Or(b.Mexp, ScalingBinningMexp); mexp < 1 || mexp > MaxMexp {
		return fmt.Errorf("scaling-binning: bin exponent %d: want M in [1, %d] (2^M fine bins)", mexp, MaxMexp)
	}
	return nil
}

// fitScalingBinning fits b to the valid, non-empty rows r as Fit
// describes, without copying them: T is fitted on the even rows in place
// (SplitScalingBinning's split), and the odd rows are converted to
// float64, divided by T (as TemperedSet) and accumulated a few hundred at
// a time, in order, so the result equals Fit on the Subsets bit for bit.
// At 50,000 × 1,000 the halves and a tempered copy held 600 MB.
func fitScalingBinning[F float32 | float64, L int | int32](b *ScalingBinning, r tempRows[F, L]) error {
	mexp, c, n := cmp.Or(b.Mexp, ScalingBinningMexp), r.c, r.len()
	bins := cmp.Or(b.Bins, DefaultScalingBinningBins(mexp, c))
	if bins < 1 || bins > 1<<mexp {
		return fmt.Errorf("scaling-binning: %d bins: want 1 to %d, the fine bins 2^%d", bins, 1<<mexp, mexp)
	}
	if n < 2 {
		return fmt.Errorf("scaling-binning: %d calibration row: need at least 2, one to fit the scaling and one to form the bins", n)
	}
	even, odd := splitRows(n)
	if r.rows != nil { // positions in the selection to rows of the block
		for _, idx := range [][]int{even, odd} {
			for k, i := range idx {
				idx[k] = r.rows[i]
			}
		}
	}
	t := NewTemperature(c)
	fitTemperatureRows(t, tempRows[F, L]{logits: r.logits, labels: r.labels, rows: even, c: c})
	h := NewValueHistograms(c, 1<<mexp)
	const chunk = 256
	buf := &Set{Logits: make([]float64, 0, chunk*c), Labels: make([]int, 0, chunk), Classes: c}
	for start := 0; start < len(odd); start += chunk {
		buf.Logits, buf.Labels = buf.Logits[:0], buf.Labels[:0]
		for _, i := range odd[start:min(start+chunk, len(odd))] {
			for _, v := range r.logits[i*c : (i+1)*c] {
				buf.Logits = append(buf.Logits, float64(v)/t.T)
			}
			buf.Labels = append(buf.Labels, int(r.labels[i]))
		}
		if err := h.Accumulate(buf); err != nil {
			return err
		}
	}
	nb, err := NewScalingBinning(t.T, h, bins)
	if err != nil {
		return err
	}
	*b = *nb
	return nil
}

// Predict writes the calibrated probabilities of the rows of logits into
// dst; see ScalingBinning. It panics if b is not fitted or the lengths do
// not match.
func (b *ScalingBinning) Predict(dst, logits []float64) {
	c := b.Classes()
	checkPredict(b.Method(), c, dst, logits)
	if !(b.T > 0) {
		panic("calib: Predict on a scalbin calibrator with T ≤ 0")
	}
	nb := b.Bins
	buf := make([]float64, 2*c)
	g, v := buf[:c], buf[c:]
	for i := 0; i < len(logits); i += c {
		for j, z := range logits[i : i+c] {
			g[j] = z / b.T
		}
		Softmax(g, g)
		for j, p := range g {
			// The number of thresholds t ≤ p: they are non-decreasing,
			// so the first t that p is not ≥ (0 for a NaN p).
			th := b.Thresholds[j*(nb-1) : (j+1)*(nb-1)]
			k := sort.Search(len(th), func(i int) bool { return !(p >= th[i]) })
			v[j] = b.Values[j*nb+k]
		}
		normaliseOr(dst[i:i+c], v, g)
	}
}

// FineTable returns b as a lookup table over its 2^Mexp fine bins, as
// Histogram's Table: at j·2^Mexp + m the value of the bin of class j that
// holds fine bin m, Classes × 2^Mexp. Since every threshold is a multiple
// t = e/2^Mexp, a probability g_j lies in the same bin as its fine bin
// min(⌊g_j·2^Mexp⌋, 2^Mexp − 1) (g_j ≥ t exactly when ⌊g_j·2^Mexp⌋ ≥ e),
// so Predict equals that lookup; export forms the ONNX graph from it,
// whose size then does not grow with Bins. It panics if b is not fitted.
func (b *ScalingBinning) FineTable() []float64 {
	c, nb, fine := b.Classes(), b.Bins, 1<<b.Mexp
	if c == 0 {
		panic("calib: FineTable of an unfitted scalbin calibrator")
	}
	table := make([]float64, c*fine)
	for j := range c {
		th := b.Thresholds[j*(nb-1) : (j+1)*(nb-1)]
		k := 0
		for m := range fine {
			for k < len(th) && th[k]*float64(fine) <= float64(m) {
				k++
			}
			table[j*fine+m] = b.Values[j*nb+k]
		}
	}
	return table
}

// Method returns MethodScalingBinning.
func (b *ScalingBinning) Method() string { return MethodScalingBinning }

// Classes returns the number of classes of the fitted calibrator, 0 before
// fitting.
func (b *ScalingBinning) Classes() int {
	if b.Bins < 1 {
		return 0
	}
	return len(b.Values) / b.Bins
}

// SetWeighting accepts only WeightNone (or "") with nil alpha:
// scaling-binning is not blended with the base model. It returns an error
// for any other weighting. It lets a federation's binning round form the
// calibrator as it forms the other binning calibrators (calib.Binner).
func (b *ScalingBinning) SetWeighting(mode Weighting, alpha []float64) error {
	if (mode == "" || mode == WeightNone) && alpha == nil {
		return nil
	}
	return fmt.Errorf("scaling-binning takes no weighting (have %q): use weighting none", mode)
}

// validate checks decoded parameters.
func (b *ScalingBinning) validate() error {
	switch {
	case !(b.T > 0) || math.IsInf(b.T, 1):
		return fmt.Errorf("t is %v: want a finite temperature > 0", b.T)
	case b.Mexp < 1 || b.Mexp > MaxMexp:
		return fmt.Errorf("mexp is %d: want the fine bin exponent in [1, %d]", b.Mexp, MaxMexp)
	case b.Bins < 1 || b.Bins > 1<<b.Mexp:
		return fmt.Errorf("bins is %d: want 1 to 2^mexp = %d", b.Bins, 1<<b.Mexp)
	}
	if err := checkTable(b.Values, b.Bins, false); err != nil {
		return fmt.Errorf("values: %w", err)
	}
	c := b.Classes()
	if len(b.Thresholds) != c*(b.Bins-1) {
		return fmt.Errorf("have %d thresholds: want %d classes × %d (bins − 1) = %d", len(b.Thresholds), c, b.Bins-1, c*(b.Bins-1))
	}
	for j := range c {
		th := b.Thresholds[j*(b.Bins-1) : (j+1)*(b.Bins-1)]
		for k, t := range th {
			switch {
			case !(t >= 0 && t < 1):
				return fmt.Errorf("threshold %d of class %d is %v: want a value in [0, 1)", k+1, j, t)
			case t*float64(int(1)<<b.Mexp) != math.Trunc(t*float64(int(1)<<b.Mexp)):
				return fmt.Errorf("threshold %d of class %d is %v: want a multiple of 2^-mexp = 2^-%d, a fine-bin edge", k+1, j, t, b.Mexp)
			case k > 0 && t < th[k-1]:
				return fmt.Errorf("thresholds of class %d decrease from %v to %v at bin %d: want them non-decreasing", j, th[k-1], t, k+1)
			}
		}
		vals := b.Values[j*b.Bins : (j+1)*b.Bins]
		for k := 1; k < len(vals); k++ {
			if vals[k] < vals[k-1] {
				return fmt.Errorf("values of class %d decrease from %v in bin %d to %v in bin %d: want them non-decreasing", j, vals[k-1], k-1, vals[k], k)
			}
		}
	}
	return nil
}
