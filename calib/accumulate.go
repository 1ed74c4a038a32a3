package calib

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
)

// An Accumulator gathers, one batch of examples at a time, the per-bin
// statistics from which every metric of Metrics and every reliability
// diagram is computed: for each class j and bin m the number of examples
// |B_jm|, the sum of their class-j probabilities and the number labelled
// j; the same over the top probability; and the counts and sums behind
// accuracy, NLL and Brier.
//
// The statistics of disjoint sets of examples add (Merge), exactly: sums
// of probabilities are kept as 128-bit fixed-point integers (resolution
// 2⁻⁶² per probability, 2⁻⁵⁸ per NLL term, 2⁻⁶¹ per Brier term), so the
// metrics do not depend on the order or the grouping of the examples.
// Metrics over many clients' test data computed from their merged
// statistics equal the metrics of the pooled data bit for bit, and never
// come from averaging per-client metrics (federated evaluation). A large
// file can be evaluated in chunks in bounded memory.
//
// Create one with NewAccumulator; the zero value has no bins and refuses
// every Add.
type Accumulator struct {
	classes, bins int
	n, correct    int64

	conf  []u128 // classes×bins: Σ p̂_ij (fixed point)
	freq  []int64
	count []int64

	topConf  []u128 // bins: Σ max_j p̂_ij (fixed point)
	topFreq  []int64
	topCount []int64

	nll, brier u128 // fixed point

	// keepTops makes Add record each example's packed top confidence
	// (packTop) in tops, for TopLabel's adaptive ECE, in segments as
	// classKeys.
	keepTops bool
	tops     [][]uint64

	// sorted is the buffer into which TopLabel sorted the top
	// confidences, which ClassErrors reuses and drops (Forget drops it
	// too): one buffer of sorted records, not two.
	sorted []uint64

	// classKeys[j−keepLo] records, for each class j in [keepLo, keepHi),
	// each example's packed class-j probability (packTop) for
	// ClassErrors, in segments: Add fills the last one or starts one as
	// large as the records so far, up to keySegment, Merge appends another accumulator's, uncopied
	// and capped so that Add never writes to them.
	keepLo, keepHi int
	expect         int // room for the first records (KeepClassConfidences)
	classKeys      [][][]uint64

	// Scratch of addRows: a row's probabilities and its label's
	// indicator (all 0 between calls), and the records being written.
	row, onehot []float64
	keys        [][]uint64
}

// KeepTopConfidences makes a record, from now on, each example's top
// confidence and whether it is right in 8 bytes (its only memory that
// grows with the examples), so that TopLabel also computes the adaptive
// ECE. Call it before the first Add; Merge appends another keeping
// accumulator's records. An accumulator that saw examples it did not
// record reports no adaptive ECE.
func (a *Accumulator) KeepTopConfidences() {
	a.keepTops = true
	a.tops = make([][]uint64, 1, 2) // a full segment: Add starts one
}

// KeepClassConfidences makes Add record, from now on, each example's
// class-j probability and whether its label is j in 8 bytes, for each
// class j in [lo, hi), so that ClassErrors computes their equal-mass
// errors (Classwise). expect is the number of examples the caller
// expects to add, the room reserved for each class when the first Add
// comes (0 when it does not know: the records then grow as Add needs
// them); with many classes, a close guess saves memory. Call it before
// the first Add; Merge appends another accumulator's records of the same
// classes. It panics when [lo, hi) is not a range of classes or expect
// is negative.
func (a *Accumulator) KeepClassConfidences(lo, hi, expect int) {
	if lo < 0 || hi < lo || hi > a.classes || expect < 0 {
		panic("calib: KeepClassConfidences outside the classes")
	}
	a.keepLo, a.keepHi, a.expect = lo, hi, expect
	a.classKeys = make([][][]uint64, hi-lo)
	for k := range a.classKeys {
		a.classKeys[k] = make([][]uint64, 1, 2) // a full segment: Add starts one
	}
}

// ClassErrors returns the errors over bins equal-mass bins (0: a's
// bins) of each class kept (KeepClassConfidences), lo to hi−1 in order, or
// nil when none was kept or not every example was. It drops each class's
// records once measured, as Forget does (so a second call returns nil),
// and must not run concurrently with another use of a.
func (a *Accumulator) ClassErrors(bins int) []ClassErrors {
	if len(a.classKeys) == 0 || a.n == 0 {
		return nil
	}
	if records(a.classKeys[0]) != a.n {
		return nil
	}
	out := make([]ClassErrors, len(a.classKeys))
	buf := a.sorted // TopLabel's, no longer needed
	a.sorted = nil
	for k, segs := range a.classKeys {
		// One class at a time, its segments sorted into one slice reused
		// by every class and then dropped, so that the records take at
		// most one class more than they did.
		buf = sortPackedInto(buf, segs...)
		a.classKeys[k] = nil
		out[k] = classErrors(buf, cmp.Or(bins, a.bins))
	}
	a.keepLo, a.keepHi, a.classKeys = 0, 0, nil
	return out
}

// Forget drops the records that KeepTopConfidences and
// KeepClassConfidences made, freeing their memory, and stops recording:
// TopLabel and ClassErrors then compute no equal-mass errors.
func (a *Accumulator) Forget() {
	a.keepTops, a.tops, a.sorted = false, nil, nil
	a.keepLo, a.keepHi, a.classKeys = 0, 0, nil
}

// records returns the number of records in the segments segs.
func records(segs [][]uint64) int64 {
	var n int64
	for _, seg := range segs {
		n += int64(len(seg))
	}
	return n
}

// keySegment is the number of records of a segment of
// Accumulator.classKeys: large enough that its header costs nothing,
// small enough that a segment not filled wastes little.
const keySegment = 1 << 16

// Fixed-point scales of the accumulated sums.
const (
	probScale  = 0x1p62 // probability ∈ [0, 1]
	nllScale   = 0x1p58 // −log max(p, 1e-12) ∈ [0, 27.7]
	brierScale = 0x1p61 // Σ_j (p̂_ij − 1{y=j})² ∈ [0, 2]
)

// NewAccumulator returns an empty accumulator for classes classes and
// bins equal-width bins (0 means DefaultMetricBins). It returns an error
// for fewer than 2 classes or bins outside [0, MaxMetricBins].
func NewAccumulator(classes, bins int) (*Accumulator, error) {
	switch {
	case classes < 2:
		return nil, fmt.Errorf("need at least 2 classes, have %d", classes)
	case bins < 0 || bins > MaxMetricBins:
		return nil, fmt.Errorf("number of bins is %d: want 1 to %d (or 0 for the default %d)", bins, MaxMetricBins, DefaultMetricBins)
	}
	if bins == 0 {
		bins = DefaultMetricBins
	}
	if float64(classes)*float64(bins) > MaxSize {
		return nil, fmt.Errorf("%d classes × %d bins is more than %d bins in all: use fewer bins", classes, bins, MaxSize)
	}
	return &Accumulator{
		classes: classes, bins: bins,
		conf:     make([]u128, classes*bins),
		freq:     make([]int64, classes*bins),
		count:    make([]int64, classes*bins),
		topConf:  make([]u128, bins),
		topFreq:  make([]int64, bins),
		topCount: make([]int64, bins),
		row:      make([]float64, classes),
		onehot:   make([]float64, classes),
	}, nil
}

// Classes returns the number of classes.
func (a *Accumulator) Classes() int { return a.classes }

// Bins returns the number of bins.
func (a *Accumulator) Bins() int { return a.bins }

// N returns the number of examples accumulated.
func (a *Accumulator) N() int { return int(a.n) }

// Add accumulates probs, an n×Classes() row-major matrix of class
// probabilities, against labels. It returns an error, leaving a
// unchanged, when the shapes do not match, a label is outside
// [0, classes), or a probability is not finite or lies outside [0, 1]
// (beyond rounding of 1e-6, which is clamped).
func (a *Accumulator) Add(probs []float64, labels []int) error {
	if err := a.checkShape(probs, labels, "probabilities"); err != nil {
		return err
	}
	c := a.classes
	for i, y := range labels {
		if y < 0 || y >= c {
			return labelError(i, y, c)
		}
		for j, p := range probs[i*c : (i+1)*c] {
			if math.IsNaN(p) || math.IsInf(p, 0) {
				return fmt.Errorf("probability of example %d, class %d is %v: probabilities must be finite", i, j, p)
			}
			if p < -probTolerance || p > 1+probTolerance {
				return fmt.Errorf("probability of example %d, class %d is %v: want a probability in [0, 1] (logits need a softmax first)", i, j, p)
			}
		}
	}
	a.addRows(probs, labels, false)
	return nil
}

// AddSoftmax accumulates the softmax probabilities (Softmax) of logits,
// an n×Classes() row-major matrix of logits, against labels: what Add
// accumulates of SoftmaxRows(logits), bit for bit, in one pass that holds
// one row's probabilities at a time. It returns Add's errors, leaving a
// unchanged; a logit that is not finite gives Add's error of the
// probabilities it makes.
func (a *Accumulator) AddSoftmax(logits []float64, labels []int) error {
	if err := a.checkShape(logits, labels, "logits"); err != nil {
		return err
	}
	for i, y := range labels {
		if y < 0 || y >= a.classes {
			return labelError(i, y, a.classes)
		}
	}
	const exponent = 0x7ff << 52 // all ones in a NaN or an infinity
	var e uint64
	for _, v := range logits {
		e = max(e, math.Float64bits(v)&exponent) // branch-free
	}
	if e == exponent {
		// Not finite: Add says which probability that makes wrong.
		p := make([]float64, len(logits))
		SoftmaxRows(p, logits, a.classes)
		return a.Add(p, labels)
	}
	// Finite logits: Softmax gives probabilities in [0, 1] (its largest
	// term is exp(0) = 1, so the sum is at least 1).
	a.addRows(logits, labels, true)
	return nil
}

// checkShape returns an error when a was not made by NewAccumulator or
// x (what: probabilities or logits) is not len(labels) rows of a's
// classes.
func (a *Accumulator) checkShape(x []float64, labels []int, what string) error {
	c := a.classes
	if c < 2 {
		return fmt.Errorf("calib: Add on an Accumulator not made by NewAccumulator")
	}
	if len(x) != len(labels)*c {
		return fmt.Errorf("have %d %s for %d labels and %d classes: lengths do not match", len(x), what, len(labels), c)
	}
	return nil
}

// labelError is the error of example i's label y outside [0, c).
func labelError(i, y, c int) error {
	return fmt.Errorf("label of example %d is %d, outside [0, %d)", i, y, c)
}

// addRows accumulates the validated rows x against labels: x holds
// probabilities, or logits whose softmax is taken a row at a time when
// softmax is set.
//
// It is eval's inner loop (docs/BENCHMARKS.md, "Single-thread cost per
// logit"), so its per-class work has no branch that depends on the
// data: the label's terms come from a one-hot row (subtracting 0 leaves
// a probability as it is), the top probability from max and its class
// from a second look at the row.
func (a *Accumulator) addRows(x []float64, labels []int, softmax bool) {
	c, n := a.classes, len(labels)
	p, onehot := a.row[:c], a.onehot[:c]
	tops := a.topRecords(n)
	keys := a.classRecords(n)
	st := &classStats{conf: a.conf[:c*a.bins], count: a.count[:c*a.bins], bins: a.bins}
	for i, y := range labels {
		xi := x[i*c : (i+1)*c : (i+1)*c]
		if softmax {
			Softmax(p, xi)
		} else {
			for j, v := range xi {
				p[j] = min(max(v, 0), 1)
			}
		}
		onehot[y] = 1
		top, sq := st.add(p, onehot)
		onehot[y] = 0
		a.freq[y*a.bins+st.bin(p[y])]++
		right := b2u(firstIndex(p, top) == y)
		if tops != nil {
			tops[i] = packTop(top, right == 1)
		}
		for k, rec := range keys {
			j := a.keepLo + k // packTop, whose clamp leaves p[j] as it is
			rec[i] = math.Float64bits(p[j])<<1 | b2u(j == y)
		}
		m := Bin(top, a.bins)
		a.topConf[m].add(uint64(top * probScale))
		a.topCount[m]++
		a.topFreq[m] += int64(right)
		a.correct += int64(right)
		a.nll.add(uint64(-math.Log(max(min(max(p[y], 0), 1), nllFloor)) * nllScale))
		a.brier.add(uint64(min(sq, 2) * brierScale))
	}
	clear(p) // as NewAccumulator left it: equal statistics, equal accumulators
	a.n += int64(n)
}

// classStats is where addRows adds a row's per-class statistics: the
// fixed-point sums and counts of each class's bins, class j's bins at
// j·bins to (j+1)·bins − 1.
type classStats struct {
	conf  []u128
	count []int64
	bins  int
}

// bin is Bin(v, s.bins) for v ∈ [0, 1]: int(v·bins) is 0 for v = 0 and
// bins for v = 1.
func (s *classStats) bin(v float64) int { return min(int(v*float64(s.bins)), s.bins-1) }

// add adds the probabilities p ∈ [0, 1] of one row, whose label's
// indicator is onehot, to their classes' bins, and returns their
// largest and the row's Brier term Σ_j (p_j − onehot_j)², summed in
// the order of the classes.
func (s *classStats) add(p, onehot []float64) (top, sq float64) {
	conf, count, bins := s.conf, s.count, s.bins
	fb, last := float64(bins), bins-1
	onehot = onehot[:len(p)]
	top = math.Inf(-1)
	base := 0 // j·bins
	for j, v := range p {
		k := base + min(int(v*fb), last)          // bin(v)
		conf[k].add(uint64(int64(v * probScale))) // < 2⁶³: as uint64(…)
		count[k]++
		d := v - onehot[j]
		sq += d * d
		top = max(top, v)
		base += bins
	}
	return top, sq
}

// firstIndex returns the first index of v in p, or 0 when p lacks it.
func firstIndex(p []float64, v float64) int {
	i := 0
	for j := len(p) - 1; j >= 0; j-- {
		if p[j] == v {
			i = j
		}
	}
	return i
}

// b2u returns 1 for true, 0 for false.
func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// topRecords returns room for n more records of top confidences at the
// end of a.tops, or nil when a does not keep them.
func (a *Accumulator) topRecords(n int) []uint64 {
	if !a.keepTops {
		return nil
	}
	var room []uint64
	a.tops, room = a.appendRoom(a.tops, n)
	return room
}

// classRecords returns, for each class kept (KeepClassConfidences), room
// for n more records at the end of its last segment, in a slice that a
// reuses.
func (a *Accumulator) classRecords(n int) [][]uint64 {
	a.keys = a.keys[:0]
	for k, segs := range a.classKeys {
		var room []uint64
		a.classKeys[k], room = a.appendRoom(segs, n)
		a.keys = append(a.keys, room)
	}
	return a.keys
}

// appendRoom returns segs, not empty, with n more records at the end of
// its last segment, and those records. When the last segment lacks room
// it starts a new one, never a copy of the old ones, as large as the
// records so far (up to keySegment; the first, a.expect): geometric
// growth, so that few examples of many classes take little.
func (a *Accumulator) appendRoom(segs [][]uint64, n int) ([][]uint64, []uint64) {
	if last := segs[len(segs)-1]; cap(last)-len(last) < n {
		held := int(records(segs))
		room := min(held, keySegment)
		if held == 0 {
			room = a.expect
		}
		segs = append(segs, make([]uint64, 0, max(n, room)))
	}
	last := segs[len(segs)-1]
	segs[len(segs)-1] = last[:len(last)+n]
	return segs, last[len(last) : len(last)+n]
}

// Merge adds the statistics of o, accumulated over other examples, to a.
// It returns an error, leaving a unchanged, when the two have different
// classes or bins, or keep the records of different classes.
func (a *Accumulator) Merge(o *Accumulator) error {
	if a.classes != o.classes || a.bins != o.bins {
		return fmt.Errorf("cannot merge statistics of %d classes × %d bins into %d classes × %d bins", o.classes, o.bins, a.classes, a.bins)
	}
	if len(a.classKeys) > 0 && (o.keepLo != a.keepLo || o.keepHi != a.keepHi) {
		return fmt.Errorf("cannot merge the records of classes [%d, %d) into those of [%d, %d)", o.keepLo, o.keepHi, a.keepLo, a.keepHi)
	}
	for k := range a.conf {
		a.conf[k].addU(o.conf[k])
		a.freq[k] += o.freq[k]
		a.count[k] += o.count[k]
	}
	for m := range a.topConf {
		a.topConf[m].addU(o.topConf[m])
		a.topFreq[m] += o.topFreq[m]
		a.topCount[m] += o.topCount[m]
	}
	if a.keepTops {
		a.tops = appendSegments(a.tops, o.tops)
	}
	if len(a.classKeys) > 0 {
		for k := range a.classKeys {
			a.classKeys[k] = appendSegments(a.classKeys[k], o.classKeys[k])
		}
	}
	a.n += o.n
	a.correct += o.correct
	a.nll.addU(o.nll)
	a.brier.addU(o.brier)
	return nil
}

// appendSegments appends the segments of records o that have records to
// segs, uncopied and capped, so that Add never writes to them.
func appendSegments(segs, o [][]uint64) [][]uint64 {
	for _, seg := range o {
		if len(seg) > 0 {
			segs = append(segs, seg[:len(seg):len(seg)])
		}
	}
	return segs
}

// Metrics returns the metrics of the examples accumulated so far. It
// returns an error wrapping ErrEmpty when there are none.
func (a *Accumulator) Metrics() (Metrics, error) {
	if a.n == 0 {
		return Metrics{}, fmt.Errorf("cannot evaluate: %w", ErrEmpty)
	}
	n := float64(a.n)
	var cw float64
	for k, c := range a.count {
		if c > 0 { // (|B|/N)·|mean conf − mean freq| = |Σ conf − Σ freq| / N
			cw += absDiff(a.conf[k], a.freq[k])
		}
	}
	var top float64
	for m, c := range a.topCount {
		if c > 0 {
			top += absDiff(a.topConf[m], a.topFreq[m])
		}
	}
	return Metrics{
		N:        int(a.n),
		Classes:  a.classes,
		Accuracy: float64(a.correct) / n,
		CWECE:    cw / n / float64(a.classes),
		ECE:      top / n,
		NLL:      a.nll.float() / nllScale / n,
		Brier:    a.brier.float() / brierScale / n,
	}, nil
}

// Reliability returns the reliability diagrams of the examples
// accumulated so far.
func (a *Accumulator) Reliability() *Reliability {
	r := &Reliability{N: int(a.n), Bins: a.bins, Class: make([][]ReliabilityBin, a.classes)}
	for j := range r.Class {
		k := j * a.bins
		r.Class[j] = reliabilityBins(a.conf[k:k+a.bins], a.freq[k:k+a.bins], a.count[k:k+a.bins])
	}
	r.Top = reliabilityBins(a.topConf, a.topFreq, a.topCount)
	return r
}

func reliabilityBins(conf []u128, freq, count []int64) []ReliabilityBin {
	out := make([]ReliabilityBin, len(count))
	for m, c := range count {
		out[m].Count = int(c)
		if c > 0 {
			out[m].Confidence = conf[m].float() / probScale / float64(c)
			out[m].Frequency = float64(freq[m]) / float64(c)
		}
	}
	return out
}

// absDiff returns |sum/probScale − freq| computed exactly in integers,
// then rounded once.
func absDiff(sum u128, freq int64) float64 {
	f := u128{hi: uint64(freq) >> 2, lo: uint64(freq) << 62} // freq·2⁶²
	if sum.less(f) {
		return f.minus(sum).float() / probScale
	}
	return sum.minus(f).float() / probScale
}

// u128 is an unsigned 128-bit integer.
type u128 struct{ hi, lo uint64 }

func (x *u128) add(v uint64) {
	var c uint64
	x.lo, c = bits.Add64(x.lo, v, 0)
	x.hi += c
}

func (x *u128) addU(y u128) {
	var c uint64
	x.lo, c = bits.Add64(x.lo, y.lo, 0)
	x.hi, _ = bits.Add64(x.hi, y.hi, c)
}

func (x u128) less(y u128) bool { return x.hi < y.hi || x.hi == y.hi && x.lo < y.lo }

func (x u128) minus(y u128) u128 {
	lo, b := bits.Sub64(x.lo, y.lo, 0)
	hi, _ := bits.Sub64(x.hi, y.hi, b)
	return u128{hi, lo}
}

func (x u128) float() float64 { return float64(x.hi)*0x1p64 + float64(x.lo) }
