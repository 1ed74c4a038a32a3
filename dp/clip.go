package dp

import (
	"fmt"
	"math"
)

// Defaults of the paper's experiments (SPEC §7).
const (
	// DefaultDelta is the δ of a private fit when none is given.
	DefaultDelta = 1e-5
	// DefaultClip is the L2 clip norm C of a scaling update Δ_k.
	DefaultClip = 0.5
	// DefaultClipPos is the L2 clip norm C₊ of a class-positive histogram.
	DefaultClipPos = 10.0
	// DefaultClipNeg is the L2 clip norm C₋ of a class-negative histogram.
	DefaultClipNeg = 50.0
)

// Norm returns the Euclidean (L2) norm of x. It scales by the largest
// magnitude first, so it neither overflows nor underflows for finite x.
// It returns +Inf if x holds an infinity and NaN if it holds a NaN.
func Norm(x []float64) float64 {
	m := 0.0
	for _, v := range x {
		a := math.Abs(v)
		if math.IsNaN(a) {
			return math.NaN()
		}
		m = max(m, a)
	}
	if m == 0 || math.IsInf(m, 1) {
		return m
	}
	var s float64
	for _, v := range x {
		r := v / m
		s += r * r
	}
	return m * math.Sqrt(s)
}

// ClipL2 scales x in place so that Norm(x) ≤ c, and returns the norm x had
// before (so x was clipped exactly when the result exceeds c). A vector
// already within the ball is left untouched; a longer one becomes
// c·x/Norm(x), rounded down where needed so that its norm never exceeds c.
// A vector holding a NaN or an infinity has no direction to keep: ClipL2
// sets it to zero (and returns NaN or +Inf), so a client whose update cannot
// be clipped contributes nothing, which keeps the sensitivity bound.
//
// ClipL2 panics if c is not a finite positive number; validate user-supplied
// clip norms with CheckClip.
func ClipL2(x []float64, c float64) float64 {
	if !(c > 0) || math.IsInf(c, 1) {
		panic(fmt.Sprintf("dp: clip norm %v is not finite and positive", c))
	}
	n := Norm(x)
	if n <= c {
		return n
	}
	if math.IsNaN(n) || math.IsInf(n, 1) {
		clear(x)
		return n
	}
	// Divide by n first: x/n is a unit vector whatever the magnitudes, so
	// neither c/n nor the product underflows before it has to.
	unit := make([]float64, len(x))
	for i, v := range x {
		unit[i] = v / n
	}
	r := c
	for range 1000 {
		for i, u := range unit {
			x[i] = u * r
		}
		if Norm(x) <= c {
			return n
		}
		// Rounding left the norm a few ulps above c: shrink (by at least
		// one ulp, for subnormal c) and retry.
		r = math.Min(r*(1-0x1p-50), math.Nextafter(r, 0))
	}
	// Unreachable in practice; the zero vector is always within the ball.
	clear(x)
	return n
}

// ClipHistograms clips, in place, every class-positive histogram in pos to
// L2 norm cPos and every class-negative histogram in neg to cNeg (the
// separate norms C₊ and C₋ of SPEC §7). It panics if a clip norm is not
// finite and positive.
func ClipHistograms(pos, neg [][]float64, cPos, cNeg float64) {
	for _, h := range pos {
		ClipL2(h, cPos)
	}
	for _, h := range neg {
		ClipL2(h, cNeg)
	}
}

// CheckClip returns an error wrapping ErrInvalid unless c is a finite
// positive clip norm; name says which norm it is (e.g. "clip norm C₊").
func CheckClip(name string, c float64) error {
	if !(c > 0) || math.IsInf(c, 1) {
		return invalidf("%s = %v; it must be finite and > 0", name, c)
	}
	return nil
}
