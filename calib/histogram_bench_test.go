package calib

import (
	"math/rand/v2"
	"testing"
)

// benchClient is one client's calibration split in the paper's Table 4
// setting: 70 examples, C = 10.
func benchClient() *Set {
	return randomSet(rand.New(rand.NewPCG(1, 1)), 70, 10, 3)
}

// BenchmarkSoftmax70x10 is the in-run baseline: only the softmax of the
// client's logits, a floor under every binning client's work.
func BenchmarkSoftmax70x10(b *testing.B) {
	s := benchClient()
	p := make([]float64, len(s.Logits))
	for b.Loop() {
		SoftmaxRows(p, s.Logits, s.Classes)
	}
}

// BenchmarkClientHistograms measures one client's local work in a round
// of FedBin (15 bins) and FedBBQ (2^7 bins; the weighted variants differ
// only on the server): validate its logits, take the softmax, and fill
// its 2C histograms.
func BenchmarkClientHistograms(b *testing.B) {
	for _, bc := range []struct {
		name string
		bins int
	}{{"FedBin", 15}, {"FedBBQ", 1 << DefaultMexp}} {
		b.Run(bc.name, func(b *testing.B) {
			s := benchClient()
			for b.Loop() {
				h := NewHistograms(s.Classes, bc.bins)
				if err := h.Accumulate(s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkServerBBQ measures the server building FedBBQ (Mexp = 7) from
// aggregated histograms, weighting included.
func BenchmarkServerBBQ(b *testing.B) {
	for _, c := range []int{10, 100} {
		b.Run(map[int]string{10: "C=10", 100: "C=100"}[c], func(b *testing.B) {
			h := NewHistograms(c, 1<<DefaultMexp)
			if err := h.Accumulate(randomSet(rand.New(rand.NewPCG(2, 2)), 5000, c, 3)); err != nil {
				b.Fatal(err)
			}
			total := h.Positives()
			for b.Loop() {
				q, err := NewBBQ(h)
				if err != nil {
					b.Fatal(err)
				}
				if err := q.SetWeighting(WeightAll, Alpha(h.Positives(), total)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
