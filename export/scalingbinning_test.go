package export_test

import (
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/export"
)

// TestScalingBinningONNX exports scaling-binning at its defaults (15
// equal-mass bins from 2^10 fine bins) and at the extremes of one bin and
// of as many bins as fine bins, and compares ONNX Runtime with Predict on
// the probe set and the fit's own rows (checkONNX, 1e-5).
func TestScalingBinningONNX(t *testing.T) {
	if ortMissing(t) {
		t.Skip("ONNX Runtime not installed (run make setup)")
	}
	for _, tc := range []struct {
		name    string
		classes int
		c       *calib.ScalingBinning
	}{
		{"defaults", 10, &calib.ScalingBinning{}},
		{"one bin", 3, &calib.ScalingBinning{Bins: 1, Mexp: 4}},
		{"every fine bin", 3, &calib.ScalingBinning{Bins: 16, Mexp: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fedConformanceLike(2000, tc.classes)
			if err := tc.c.Fit(s); err != nil {
				t.Fatal(err)
			}
			logits := export.Probe(tc.c, 2)
			for _, v := range s.Logits[:500*tc.classes] {
				logits = append(logits, float32(v))
			}
			checkONNX(t, tc.c, logits, goPredict(tc.c, logits))
		})
	}
}

// fedConformanceLike returns n rows of c classes from an over-confident
// model (calib's conformance set at another size).
func fedConformanceLike(n, c int) *calib.Set {
	s := &calib.Set{Logits: make([]float64, n*c), Labels: make([]int, n), Classes: c}
	x := uint64(12345)
	next := func() float64 { // xorshift, uniform in [0, 1)
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return float64(x>>11) / (1 << 53)
	}
	for i := range n {
		z := s.Row(i)
		for j := range z {
			z[j] = 6 * (next() - 0.5)
		}
		top := int(next() * float64(c))
		z[top] += 5
		s.Labels[i] = top
		if next() < 0.3 {
			s.Labels[i] = int(next() * float64(c))
		}
	}
	return s
}
