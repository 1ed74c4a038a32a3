package calib

import (
	"math"
	"math/bits"
	"slices"
)

// Equal-mass (adaptive) binning and the Kolmogorov–Smirnov error, over
// one sequence of examples at a time: the top probability of each example
// (TopLabel) or the class-j probability of each (Classwise). Each
// example is packed into 8 bytes by packTop: its probability v and
// whether it is right (for class j: whether the label is j). One rule for
// ties, everywhere: the examples are sorted by v, equal values not right
// before right, so the packed keys sort as unsigned integers and equal
// keys are identical examples.

// massErrors are the errors of one sorted sequence of packed examples
// over its equal-mass bins, as sums not yet divided by N.
type massErrors struct {
	// gap is Σ_m |Σ_{i∈B_m} a_i − Σ_{i∈B_m} v_i|, the adaptive ECE times N.
	gap float64
	// debiased is Σ_m (n_m/N)·[(acc_m − conf_m)² − acc_m(1 − acc_m)/(n_m − 1)]
	// over bins with n_m ≥ 2 (Kumar et al.'s debiased squared error).
	debiased float64
	// ks is max_t |Σ_{v_i ≤ t} (v_i − a_i)|, the KS error times N.
	ks float64
}

// equalMass returns the errors of the packed examples s, sorted (as
// slices.Sort sorts them), over min(bins, N) equal-mass bins: bin m
// holds the sorted positions ⌊mN/M⌋ to ⌊(m+1)N/M⌋ − 1. weight, when not
// nil, gives the multiplicity of each sorted example (a bootstrap
// resample); the positions then count each example weight(i) times, and
// N is the sum of the weights. It returns the zero massErrors for N = 0.
func equalMass(s []uint64, bins int, weight func(i int) int) massErrors {
	n := len(s)
	if weight != nil {
		n = 0
		for i := range s {
			n += weight(i)
		}
	}
	var e massErrors
	if n == 0 {
		return e
	}
	bins = min(bins, n)
	nf := float64(n)
	m, end := 0, n/bins // the bin being filled and its end position
	var conf, acc, cnt float64
	var d float64 // Σ (v_i − a_i) so far
	pos := 0
	closeBin := func() {
		e.gap += math.Abs(acc - conf)
		if cnt >= 2 {
			a, c := acc/cnt, conf/cnt
			e.debiased += cnt / nf * ((a-c)*(a-c) - a*(1-a)/(cnt-1))
		}
		conf, acc, cnt = 0, 0, 0
		m++
		end = (m + 1) * n / bins
	}
	for i, u := range s {
		w := 1
		if weight != nil {
			w = weight(i)
		}
		v, right := unpackTop(u)
		for range w {
			conf += v
			d += v
			if right {
				acc++
				d--
			}
			cnt++
			pos++
			if pos == end && m < bins {
				closeBin()
			}
		}
		// The KS sum is read where the value changes (or at the end), so
		// that it does not depend on the order of tied values.
		if i == len(s)-1 || s[i+1]>>1 != u>>1 {
			e.ks = max(e.ks, math.Abs(d))
		}
	}
	return e
}

// Classwise holds the classwise calibration errors over equal-mass bins:
// for each class j, the examples are sorted by their class-j probability
// p̂_ij (equal probabilities not labelled j before labelled j) and cut
// into M = min(bins, N) bins of sorted positions ⌊mN/M⌋ to
// ⌊(m+1)N/M⌋ − 1, each with n_jm examples, mean probability conf_jm and
// fraction labelled j acc_jm. All are fractions. The zero value is a
// perfectly calibrated report on no data.
type Classwise struct {
	// AdaptiveCWECE is the classwise ECE over these equal-mass bins,
	// (1/C) Σ_j Σ_m (n_jm/N)·|acc_jm − conf_jm|.
	AdaptiveCWECE float64 `json:"adaptive_cwece"`
	// DebiasedCWCE is the debiased estimator of the classwise (marginal)
	// ℓ2 calibration error of Kumar, Liang and Ma (2019) on these
	// equal-mass bins, their default: √((1/C) Σ_j max(0, d_j)) with
	// d_j = Σ_m (n_jm/N)·[(acc_jm − conf_jm)² − acc_jm(1 − acc_jm)/(n_jm − 1)]
	// over the bins with n_jm ≥ 2.
	DebiasedCWCE float64 `json:"debiased_cwce"`
	// KS is the mean over classes of the Kolmogorov–Smirnov calibration
	// error of the class-j probabilities (TopLabel.KS with p̂_ij for the
	// top probability and 1{y_i = j} for whether it is right).
	KS float64 `json:"cw_ks"`
}

// ClassErrors is one class's part of Classwise, as sums over its
// examples; CombineClasswise turns the parts of every class into a
// Classwise. The zero value is the part of a class on no data.
type ClassErrors struct {
	// N is the number of examples.
	N int
	// Gap is Σ_m |Σ_{i∈B_jm} 1{y_i = j} − Σ_{i∈B_jm} p̂_ij|.
	Gap float64
	// Debiased is d_j (see Classwise.DebiasedCWCE).
	Debiased float64
	// KS is max_t |Σ_{p̂_ij ≤ t} (p̂_ij − 1{y_i = j})|.
	KS float64
}

// classErrors returns the part of the class whose packed examples are
// s, sorted.
func classErrors(s []uint64, bins int) ClassErrors {
	e := equalMass(s, bins, nil)
	return ClassErrors{N: len(s), Gap: e.gap, Debiased: e.debiased, KS: e.ks}
}

// sortPacked returns the packed keys of the segments segs, together, in
// increasing order, as slices.Sort would sort them (sortPackedInto, into
// a new slice). It reads segs without changing them.
func sortPacked(segs ...[]uint64) []uint64 {
	return sortPackedInto(nil, segs...)
}

// sortPackedInto is sortPacked into buf, which it uses when it has room
// for the keys (else it allocates): a most-significant-digit radix sort,
// whose first pass distributes the keys by the topBits bits below those
// that every key shares, and whose buckets, small enough to sit in cache,
// are sorted in place by a packedSorter.
func sortPackedInto(buf []uint64, segs ...[]uint64) []uint64 {
	// 1,024 buckets: few enough that the scattered writes stay in the
	// translation buffer and L2 (at 10⁶ keys ≈ 5 ns a key against ≈ 9 for
	// 4,096), at the price of larger buckets for packedSorter.
	const topBits = 10
	n := 0
	for _, seg := range segs {
		n += len(seg)
	}
	if n < 1024 {
		s := buf[:0]
		if cap(s) < n {
			s = make([]uint64, 0, n)
		}
		for _, seg := range segs {
			s = append(s, seg...)
		}
		slices.Sort(s)
		return s
	}
	lo, hi := ^uint64(0), uint64(0)
	for _, seg := range segs {
		for _, u := range seg {
			lo, hi = min(lo, u), max(hi, u)
		}
	}
	shift := uint(max(0, bits.Len64(lo^hi)-topBits))
	var count [1<<topBits + 1]int
	for _, seg := range segs {
		for _, u := range seg {
			count[1+int(u>>shift)&(1<<topBits-1)]++
		}
	}
	largest := 0
	for b := 1; b < len(count); b++ {
		largest = max(largest, count[b])
		count[b] += count[b-1]
	}
	var next [1 << topBits]int
	copy(next[:], count[:1<<topBits])
	dst := buf
	if cap(dst) < n {
		dst = make([]uint64, n)
	}
	dst = dst[:n]
	for _, seg := range segs {
		for _, u := range seg {
			b := int(u>>shift) & (1<<topBits - 1)
			dst[next[b]] = u
			next[b]++
		}
	}
	if lo == hi {
		return dst
	}
	ps := packedSorter{scratch: make([]uint64, largest)}
	for b := range 1 << topBits {
		if s := dst[count[b]:count[b+1]]; len(s) > 1 {
			ps.sort(s)
		}
	}
	return dst
}

// insertionMax is the most keys that packedSorter sorts by insertion.
const insertionMax = 16

// maxDigit is the most bits of one packedSorter pass: 2,048 sub-buckets.
const maxDigit = 11

// packedSorter sorts buckets of keys that fit in cache: by insertion
// when a bucket has few keys, else by one counting pass on the d bits
// below those its keys share, d = ⌊log₂ n⌋ + 2 (at most maxDigit), so
// that most sub-buckets hold one key or none, the sub-buckets of more
// than insertionMax keys sorted the same way, and then one insertion
// pass over the whole bucket, which sorts the small sub-buckets as it
// copies the keys back. Against passes of a fixed 8 bits, it spends
// little on the counts of small buckets and less on insertion sorts
// (docs/BENCHMARKS.md, "Single-thread cost per logit").
type packedSorter struct {
	scratch []uint64 // room for the largest bucket
	counts  [][]int  // one for each depth of recursion
}

// sort sorts s in place; len(s) must not exceed len(ps.scratch).
func (ps *packedSorter) sort(s []uint64) {
	if len(s) <= insertionMax {
		insertionSort(s)
		return
	}
	ps.radix(s, ps.scratch[:len(s)], 0)
}

// radix sorts s, of more than insertionMax keys, in place, using t (as
// long as s) for scratch; depth is the depth of recursion.
func (ps *packedSorter) radix(s, t []uint64, depth int) {
	lo, hi := s[0], s[0]
	for _, u := range s[1:] {
		lo, hi = min(lo, u), max(hi, u)
	}
	if lo == hi {
		return
	}
	d := min(maxDigit, bits.Len(uint(len(s)))+1)
	shift := uint(max(0, bits.Len64(lo^hi)-d))
	mask := uint64(1)<<d - 1
	if depth == len(ps.counts) {
		ps.counts = append(ps.counts, make([]int, 1<<maxDigit+1))
	}
	count := ps.counts[depth][:1<<d+1]
	clear(count)
	for _, u := range s {
		count[1+(u>>shift)&mask]++
	}
	for b := 1; b < len(count); b++ {
		count[b] += count[b-1]
	}
	// Into t; count[b] then ends sub-bucket b.
	for _, u := range s {
		b := (u >> shift) & mask
		t[count[b]] = u
		count[b]++
	}
	start := 0
	for _, end := range count[:1<<d] {
		if end-start > insertionMax {
			ps.radix(t[start:end], s[start:end], depth+1)
		}
		start = end
	}
	// Back into s, sorting the small sub-buckets on the way: no key is
	// more than insertionMax − 1 places from where it belongs.
	s[0] = t[0]
	for i := 1; i < len(t); i++ {
		u := t[i]
		j := i
		for ; j > 0 && s[j-1] > u; j-- {
			s[j] = s[j-1]
		}
		s[j] = u
	}
}

// insertionSort sorts s in place by insertion.
func insertionSort(s []uint64) {
	for i := 1; i < len(s); i++ {
		u := s[i]
		j := i
		for ; j > 0 && s[j-1] > u; j-- {
			s[j] = s[j-1]
		}
		s[j] = u
	}
}

// CombineClasswise returns the Classwise errors of the parts of every
// class, one each, in any order. The parts must count the same examples;
// it returns the zero Classwise for no parts or no examples.
func CombineClasswise(parts []ClassErrors) Classwise {
	if len(parts) == 0 || parts[0].N == 0 {
		return Classwise{}
	}
	var gap, deb, ks float64
	for _, p := range parts {
		gap += p.Gap
		deb += max(0, p.Debiased)
		ks += p.KS
	}
	n, c := float64(parts[0].N), float64(len(parts))
	return Classwise{AdaptiveCWECE: gap / n / c, DebiasedCWCE: math.Sqrt(deb / c), KS: ks / n / c}
}

// ClasswiseErrors computes the classwise equal-mass errors of probs (an
// n×classes row-major matrix of class probabilities) against labels, with
// bins bins (0 means DefaultMetricBins). Its errors are those of
// Evaluate. It holds one class's probabilities, 8 bytes an example, at a
// time.
func ClasswiseErrors(probs []float64, labels []int, classes, bins int) (Classwise, error) {
	if _, err := Evaluate(probs, labels, classes, bins); err != nil {
		return Classwise{}, err
	}
	if bins == 0 {
		bins = DefaultMetricBins
	}
	parts := make([]ClassErrors, classes)
	s := make([]uint64, len(labels))
	var buf []uint64
	for j := range classes {
		for i, y := range labels {
			s[i] = packTop(probs[i*classes+j], y == j)
		}
		buf = sortPackedInto(buf, s)
		parts[j] = classErrors(buf, bins)
	}
	return CombineClasswise(parts), nil
}
