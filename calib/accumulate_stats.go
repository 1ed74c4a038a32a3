package calib

import (
	"fmt"
	"math"
)

// An Accumulator's statistics travel between machines (federated
// evaluation) in two flat []float64 forms:
//
//   - the exact encoding (AppendEncoded, MergeEncoded): every count as an
//     integer-valued float64 and every fixed-point sum as four 32-bit
//     limbs, so a server that merges its clients' encodings holds the
//     pooled statistics bit for bit;
//   - the statistics vector (AppendStats, MetricsFromStats): the per-bin
//     statistics as real numbers, which a private federation clips, sums
//     and adds noise to before computing metrics from them.

// EncodedLen returns the length of the exact encoding of an accumulator
// of classes classes and bins bins: 10 + 6·(classes+1)·bins.
func EncodedLen(classes, bins int) int { return 10 + 6*(classes+1)*bins }

// Limits of the exact encoding: a limb is an integer in [0, 2³²), a count
// an integer in [0, 2⁵³).
const (
	limb     = 0x1p32
	maxCount = 0x1p53
)

// AppendEncoded appends the exact encoding of a's statistics to dst and
// returns the extended slice, of EncodedLen(a.Classes(), a.Bins()) more
// values. The layout, which MergeEncoded reads: N, the number correct,
// the NLL and Brier sums (four limbs each, least significant first); then
// for each class j and bin m, row-major by class, the confidence sum
// (four limbs), the number labelled j and the count; then the same for
// each bin of the top probability.
func (a *Accumulator) AppendEncoded(dst []float64) []float64 {
	dst = append(dst, float64(a.n), float64(a.correct))
	dst = appendLimbs(dst, a.nll)
	dst = appendLimbs(dst, a.brier)
	for k := range a.conf {
		dst = appendLimbs(dst, a.conf[k])
		dst = append(dst, float64(a.freq[k]), float64(a.count[k]))
	}
	for m := range a.topConf {
		dst = appendLimbs(dst, a.topConf[m])
		dst = append(dst, float64(a.topFreq[m]), float64(a.topCount[m]))
	}
	return dst
}

func appendLimbs(dst []float64, x u128) []float64 {
	return append(dst, float64(x.lo&0xffffffff), float64(x.lo>>32), float64(x.hi&0xffffffff), float64(x.hi>>32))
}

// CheckEncoded returns an error when u is not the exact encoding of
// statistics of a's classes and bins: a wrong length, or a value that is
// not an integer in its range (a limb in [0, 2³²), a count in [0, 2⁵³)).
func (a *Accumulator) CheckEncoded(u []float64) error {
	if want := EncodedLen(a.classes, a.bins); len(u) != want {
		return fmt.Errorf("encoded statistics have %d values, want %d for %d classes × %d bins", len(u), want, a.classes, a.bins)
	}
	// Limbs sit at offsets 2 to 9, then 4 of every 6 per bin.
	isLimb := func(i int) bool { return i >= 2 && (i < 10 || (i-10)%6 < 4) }
	for i, v := range u {
		hi := maxCount
		if isLimb(i) {
			hi = limb
		}
		if !(v >= 0 && v < hi) || v != math.Trunc(v) {
			return fmt.Errorf("encoded statistic %d is %v: want an integer in [0, %v)", i, v, hi)
		}
	}
	return nil
}

// MergeEncoded adds the statistics encoded in u (by AppendEncoded, over
// other examples) to a, exactly as Merge adds an accumulator. It returns
// an error, leaving a unchanged, when CheckEncoded refuses u.
func (a *Accumulator) MergeEncoded(u []float64) error {
	if err := a.CheckEncoded(u); err != nil {
		return err
	}
	a.n += int64(u[0])
	a.correct += int64(u[1])
	a.nll.addU(limbs(u[2:6]))
	a.brier.addU(limbs(u[6:10]))
	u = u[10:]
	for k := range a.conf {
		a.conf[k].addU(limbs(u[:4]))
		a.freq[k] += int64(u[4])
		a.count[k] += int64(u[5])
		u = u[6:]
	}
	for m := range a.topConf {
		a.topConf[m].addU(limbs(u[:4]))
		a.topFreq[m] += int64(u[4])
		a.topCount[m] += int64(u[5])
		u = u[6:]
	}
	return nil
}

func limbs(l []float64) u128 {
	return u128{lo: uint64(l[0]) | uint64(l[1])<<32, hi: uint64(l[2]) | uint64(l[3])<<32}
}

// StatsLen returns the length of the statistics vector of classes classes
// and bins bins: 3·(classes+1)·bins + 2.
func StatsLen(classes, bins int) int { return 3*(classes+1)*bins + 2 }

// AppendStats appends a's statistics vector to dst and returns the
// extended slice, of StatsLen(a.Classes(), a.Bins()) more values: for each
// class j and bin m, row-major by class, the count |B_jm|, the sum of the
// class-j probabilities in the bin and the number labelled j; then the
// same three for each bin of the top probability (count, confidence sum,
// number correct); then the sums of the NLL and Brier terms, each term
// divided by its largest value (−log 1e-12 and 2), so that every
// statistic of an example lies in [0, 1] and a client's vector has L2
// norm at most n·√(classes+7) for n examples (in squares, an example adds
// 1 to the count of each class, at most 1 to the confidence sums, 1 to a
// number labelled, at most 3 to its top-probability bin and 2 to the last
// two). N and the number correct are the sums of the top-probability
// counts and numbers correct.
func (a *Accumulator) AppendStats(dst []float64) []float64 {
	for k := range a.conf {
		dst = append(dst, float64(a.count[k]), a.conf[k].float()/probScale, float64(a.freq[k]))
	}
	for m := range a.topConf {
		dst = append(dst, float64(a.topCount[m]), a.topConf[m].float()/probScale, float64(a.topFreq[m]))
	}
	return append(dst, a.nll.float()/nllScale/maxNLL, a.brier.float()/brierScale/maxBrier)
}

// The largest NLL and Brier terms of one example, by which AppendStats
// divides their sums.
var (
	maxNLL   = -math.Log(nllFloor)
	maxBrier = 2.0
)

// MetricsFromStats returns the metrics of a statistics vector (the layout
// of AppendStats) of classes classes and bins bins that may carry noise,
// as a private federated evaluation releases it. It first makes each
// bin's statistics valid, in this order:
//
//   - a count below 0 becomes 0;
//   - a confidence sum is clamped to [count·m/bins, count·(m+1)/bins], since
//     the mean probability of bin m lies in the bin;
//   - a number labelled (or correct) is clamped to [0, count];
//
// and estimates N by N̂, the mean over the classes+1 histograms of the sum
// of their counts before clamping (each histogram counts every example
// once), floored at 1. Then, as Accumulator.Metrics does,
// cwECE = Σ_jm |conf_jm − freq_jm| / (classes·N̂), ECE = Σ_m |conf_m −
// correct_m| / N̂, accuracy = Σ_m correct_m / N̂, NLL and Brier their sums
// (times −log 1e-12 and 2, undoing AppendStats' scaling) over N̂; each is
// clamped to its range (the ECEs and accuracy to [0, 1],
// NLL to [0, −log 1e-12], Brier to [0, 2]) and N is N̂ rounded. Without
// noise N̂ = N and the result equals Metrics up to the rounding of the
// vector's float64 sums.
//
// It returns an error when stats has the wrong length or a value that is
// not finite, and one wrapping ErrEmpty when the counts sum to 0 (no
// examples, without noise).
func MetricsFromStats(stats []float64, classes, bins int) (Metrics, error) {
	if want := StatsLen(classes, bins); classes < 2 || bins < 1 || len(stats) != want {
		return Metrics{}, fmt.Errorf("statistics vector of %d values does not fit %d classes × %d bins (want %d)", len(stats), classes, bins, want)
	}
	for i, v := range stats {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return Metrics{}, fmt.Errorf("statistic %d is %v: statistics must be finite", i, v)
		}
	}
	var total float64 // Σ of every count, classes+1 times N without noise
	var cw, top, correct float64
	for h := range classes + 1 {
		var gap float64
		for m := range bins {
			s := stats[3*(h*bins+m):]
			total += s[0]
			count := max(s[0], 0)
			conf := clamp(s[1], count*float64(m)/float64(bins), count*float64(m+1)/float64(bins))
			freq := clamp(s[2], 0, count)
			gap += math.Abs(conf - freq)
			if h == classes {
				correct += freq
			}
		}
		if h < classes {
			cw += gap
		} else {
			top = gap
		}
	}
	if total == 0 {
		return Metrics{}, fmt.Errorf("cannot evaluate: %w", ErrEmpty)
	}
	n := max(total/float64(classes+1), 1)
	tail := stats[len(stats)-2:]
	return Metrics{
		N:        int(math.Round(n)),
		Classes:  classes,
		Accuracy: clamp(correct/n, 0, 1),
		CWECE:    clamp(cw/n/float64(classes), 0, 1),
		ECE:      clamp(top/n, 0, 1),
		NLL:      clamp(tail[0]*maxNLL/n, 0, maxNLL),
		Brier:    clamp(tail[1]*maxBrier/n, 0, maxBrier),
	}, nil
}

// clamp returns x limited to [lo, hi].
func clamp(x, lo, hi float64) float64 { return min(max(x, lo), hi) }
