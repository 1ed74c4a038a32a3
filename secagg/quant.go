package secagg

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/fedcalib/fedcalib/dp"
)

// overflowLog is −ln of the probability, 2^−40, with which the noise of a
// sum may exceed the tail bound that CheckFederation allows for.
const overflowLog = 40 * math.Ln2

// maxConditionalTries bounds the re-roundings of conditional rounding; at
// β ≤ 1/2 the chance of reaching it is below 2^−1000.
const maxConditionalTries = 1000

// A Quantizer maps real update vectors to integers modulo 2^Bits and back.
// Quantize clips every coordinate to [−Range, Range], multiplies by Scale
// and rounds stochastically to one of the two neighbouring integers
// (unbiased: E[q] = x·Scale), then reduces modulo 2^Bits (two's
// complement). Dequantize reads a sum of such vectors as signed integers
// in [−2^(Bits−1), 2^(Bits−1)) and divides by Scale.
//
// The sum of n clients' vectors, each with Skellam noise, decodes exactly
// when no coordinate of the true sum leaves [−2^(Bits−1), 2^(Bits−1)):
// CheckFederation makes sure that n·⌈Range·Scale⌉ plus the noise's tail
// bound stays below 2^(Bits−1). Each rounding moves a coordinate by less
// than one unit, so a dequantised sum of n inputs is within n/Scale of the
// real sum of the clipped inputs on every coordinate.
//
// Norm and Beta set the L2 bound the privacy accounting uses
// (Sensitivity). Norm is the L2 bound of the real inputs (the clip norm;
// Quantize refuses a longer input); with Beta > 0 rounding is conditional
// (Kairouz, Liu and Steinke 2021): a rounding whose L2 norm exceeds
// dp.RoundedL2Bound(Norm·Scale, dim, Beta) is drawn again, so the bound
// always holds. Choosing Range ≥ Norm means no coordinate is ever clipped.
//
// The zero value is not usable: Bits, Range and Scale are required.
type Quantizer struct {
	// Bits is b ∈ [2, 64]: arithmetic is modulo 2^b.
	Bits int
	// Range r > 0 bounds every coordinate: inputs are clipped to [−r, r].
	Range float64
	// Scale γ > 0 is the number of integer units per unit of input.
	Scale float64
	// Norm is the L2 bound of an input (before scaling); 0 means no L2
	// bound (Sensitivity then uses √dim·Range).
	Norm float64
	// Beta ∈ [0, 1/2] turns on conditional rounding when positive.
	Beta float64
}

func (q *Quantizer) check() error {
	switch {
	case q.Bits < 2 || q.Bits > 64:
		return fmt.Errorf("%w: %d bits; need 2 to 64", ErrQuantizer, q.Bits)
	case !(q.Range > 0) || math.IsInf(q.Range, 1):
		return fmt.Errorf("%w: range %v; need a finite range > 0", ErrQuantizer, q.Range)
	case !(q.Scale > 0) || math.IsInf(q.Scale, 1):
		return fmt.Errorf("%w: scale %v; need a finite scale > 0", ErrQuantizer, q.Scale)
	case !(q.Norm >= 0) || math.IsInf(q.Norm, 1):
		return fmt.Errorf("%w: norm %v; need a finite norm ≥ 0", ErrQuantizer, q.Norm)
	case !(q.Beta >= 0 && q.Beta <= 0.5):
		return fmt.Errorf("%w: beta %v; need beta in [0, 1/2]", ErrQuantizer, q.Beta)
	case q.Beta > 0 && q.Norm == 0:
		return fmt.Errorf("%w: conditional rounding (beta %v) needs an L2 norm bound", ErrQuantizer, q.Beta)
	case q.Range*q.Scale >= 1<<62:
		return fmt.Errorf("%w: range × scale = %v; need below 2^62", ErrQuantizer, q.Range*q.Scale)
	}
	return nil
}

func (q *Quantizer) mask() uint64 { return mask(q.Bits) }

func mask(b int) uint64 {
	if b == 64 {
		return math.MaxUint64
	}
	return 1<<b - 1
}

// Unit returns ⌈Range·Scale⌉, the largest absolute quantised value of one
// coordinate of one client.
func (q *Quantizer) Unit() float64 { return math.Ceil(q.Range * q.Scale) }

// Sensitivity returns the L1 and L2 sensitivities, in quantised units, of
// a sum of dim-coordinate quantised inputs to one client's presence: the
// rounded-norm bounds dp.RoundedL2Bound(Norm·Scale, dim, Beta) and
// dp.RoundedL1Bound of it (with Norm = 0, the L2 norm bound √dim·Unit).
// These are what a dp.SkellamPlan takes.
func (q *Quantizer) Sensitivity(dim int) (l1, l2 float64, err error) {
	if err := q.check(); err != nil {
		return 0, 0, err
	}
	if dim < 1 {
		return 0, 0, fmt.Errorf("%w: dimension %d; need at least 1", ErrQuantizer, dim)
	}
	if q.Norm == 0 {
		l2 = math.Sqrt(float64(dim)) * q.Unit()
	} else {
		l2 = dp.RoundedL2Bound(q.Norm*q.Scale, dim, q.Beta)
	}
	return dp.RoundedL1Bound(l2, dim), l2, nil
}

// NoiseTail returns the bound t that the Skellam noise of a sum, total
// variance noiseVariance per coordinate, exceeds in absolute value on some
// of dim coordinates with probability at most 2^−40:
//
//	t = L/3 + √(L²/9 + 2·L·σ²),  L = ln(2·dim) + 40·ln 2,
//
// from Bernstein's inequality P(|X| ≥ t) ≤ 2·exp(−t²/(2(σ² + t/3))), which
// holds for a sum of centred Poisson variables and their negatives (their
// cumulant generating functions are dominated by Bennett's with bound 1),
// and a union bound over the coordinates. It is 0 without noise.
func NoiseTail(noiseVariance float64, dim int) float64 {
	if noiseVariance <= 0 {
		return 0
	}
	l := math.Log(2*float64(max(dim, 1))) + overflowLog
	return l/3 + math.Sqrt(l*l/9+2*l*noiseVariance)
}

// CheckFederation returns nil if the sum of clients quantised inputs of
// dim coordinates, with Skellam noise of total variance noiseVariance per
// coordinate, cannot wrap modulo 2^Bits (except with probability 2^−40
// from the noise): clients·Unit + NoiseTail(noiseVariance, dim) <
// 2^(Bits−1). Otherwise it returns an error wrapping ErrBitsTooSmall that
// gives the bits needed. noiseVariance is the per-client variance times
// the most clients that may add noise.
func (q *Quantizer) CheckFederation(clients, dim int, noiseVariance float64) error {
	if err := q.check(); err != nil {
		return err
	}
	if clients < 1 || dim < 1 || !(noiseVariance >= 0) || math.IsInf(noiseVariance, 1) {
		return fmt.Errorf("%w: %d clients, dimension %d, noise variance %v", ErrQuantizer, clients, dim, noiseVariance)
	}
	tail := NoiseTail(noiseVariance, dim)
	bound := float64(clients)*q.Unit() + tail
	limit := math.Ldexp(1, q.Bits-1)
	if bound < limit {
		return nil
	}
	need := int(math.Floor(math.Log2(bound))) + 2 // 2^(need−1) > bound
	return fmt.Errorf("%w: %d clients × %v (range %v × scale %v, rounded up) + noise tail %.6g = %.6g does not fit below 2^%d at b = %d bits; need b ≥ %d or a smaller scale",
		ErrBitsTooSmall, clients, q.Unit(), q.Range, q.Scale, tail, bound, q.Bits-1, q.Bits, need)
}

// Quantize appends to dst the quantisation of x drawn with r (clip to
// ±Range, scale, stochastic rounding, conditionally if Beta > 0, reduce
// modulo 2^Bits) and returns the extended slice. It returns an error
// wrapping ErrQuantizer for a non-finite input or one whose L2 norm
// exceeds Norm (when set). Use a source from dp.NewSecure for real data.
func (q *Quantizer) Quantize(dst []uint64, x []float64, r *rand.Rand) ([]uint64, error) {
	if err := q.check(); err != nil {
		return dst, err
	}
	var ss float64
	for i, v := range x {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return dst, fmt.Errorf("%w: input %d is %v", ErrQuantizer, i, v)
		}
		ss += v * v
	}
	bound := math.Inf(1)
	if q.Norm > 0 {
		if n := math.Sqrt(ss); n > q.Norm*(1+1e-9) {
			return dst, fmt.Errorf("%w: input L2 norm %v exceeds the bound %v; clip it first", ErrQuantizer, n, q.Norm)
		}
		if q.Beta > 0 && len(x) > 0 {
			bound = dp.RoundedL2Bound(q.Norm*q.Scale, len(x), q.Beta)
		}
	}
	start := len(dst)
	dst = append(dst, make([]uint64, len(x))...)
	out := dst[start:]
	m := q.mask()
	for try := 0; ; try++ {
		var norm2 float64
		for i, v := range x {
			y := math.Max(-q.Range, math.Min(q.Range, v)) * q.Scale
			f := math.Floor(y)
			if r.Float64() < y-f {
				f++
			}
			norm2 += f * f
			out[i] = uint64(int64(f)) & m
		}
		if math.Sqrt(norm2) <= bound {
			return dst, nil
		}
		if try == maxConditionalTries {
			return dst[:start], fmt.Errorf("%w: conditional rounding missed the bound %v %d times", ErrQuantizer, bound, maxConditionalTries)
		}
	}
}

// AddNoise adds to every element of v (quantised, modulo 2^Bits)
// independent Skellam noise of the given variance drawn with r
// (dp.SampleSkellam): a client's share of the distributed noise,
// variance = dp.SkellamPlan.ClientVariance. Use a source from
// dp.NewSecure for real data. It panics as dp.SampleSkellam does.
func (q *Quantizer) AddNoise(v []uint64, variance float64, r *rand.Rand) {
	if variance == 0 {
		return
	}
	m := q.mask()
	for i := range v {
		v[i] = (v[i] + uint64(dp.SampleSkellam(r, variance))) & m
	}
}

// Signed returns v modulo 2^Bits read as a two's-complement integer in
// [−2^(Bits−1), 2^(Bits−1)).
func (q *Quantizer) Signed(v uint64) int64 {
	s := uint(64 - q.Bits)
	return int64(v<<s) >> s
}

// Dequantize appends to dst the real values of the quantised sum (each
// element read by Signed, divided by Scale) and returns the extended
// slice.
func (q *Quantizer) Dequantize(dst []float64, sum []uint64) []float64 {
	for _, v := range sum {
		dst = append(dst, float64(q.Signed(v))/q.Scale)
	}
	return dst
}
