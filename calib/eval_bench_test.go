package calib

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Benchmarks of eval's work per row (docs/BENCHMARKS.md, "Cheaper work
// per row"), on 2^16 rows of 10 classes shaped as bench/eval.sh's file:
// normal logits, the label's raised by about 4, all times 1.5.

// evalBenchRows returns the rows' logits and labels.
func evalBenchRows() ([]float64, []int) {
	const n, c = 1 << 16, 10
	rng := rand.New(rand.NewPCG(1, 1))
	z, y := make([]float64, n*c), make([]int, n)
	for i := range y {
		y[i] = rng.IntN(c)
		for j := range c {
			v := rng.NormFloat64()
			if j == y[i] {
				v += 4 + 1.5*rng.NormFloat64()
			}
			z[i*c+j] = float64(float32(1.5 * v))
		}
	}
	return z, y
}

// BenchmarkEvalFloor is the floor: one exp a logit.
func BenchmarkEvalFloor(b *testing.B) {
	z, _ := evalBenchRows()
	var sum float64
	for b.Loop() {
		for _, v := range z {
			sum += math.Exp(v)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(z)), "ns/logit")
	_ = sum
}

// BenchmarkAddSoftmax is the softmax and every equal-width statistic,
// with the records of the equal-mass errors (keep) or without, 4096
// rows a call as eval takes them.
func BenchmarkAddSoftmax(b *testing.B) {
	z, y := evalBenchRows()
	for _, keep := range []bool{false, true} {
		b.Run(map[bool]string{false: "stats", true: "stats+records"}[keep], func(b *testing.B) {
			for b.Loop() {
				a, err := NewAccumulator(10, 15)
				if err != nil {
					b.Fatal(err)
				}
				if keep {
					a.KeepTopConfidences()
					a.KeepClassConfidences(0, 10, len(y))
				}
				for lo := 0; lo < len(y); lo += 4096 {
					if err := a.AddSoftmax(z[lo*10:(lo+4096)*10], y[lo:lo+4096]); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(z)), "ns/logit")
		})
	}
}

// BenchmarkSortPacked sorts one class's records into a reused buffer.
func BenchmarkSortPacked(b *testing.B) {
	z, y := evalBenchRows()
	keys := make([]uint64, len(y))
	p := make([]float64, 10)
	for i, label := range y {
		Softmax(p, z[i*10:(i+1)*10])
		keys[i] = packTop(p[0], label == 0)
	}
	buf := make([]uint64, len(keys))
	for b.Loop() {
		buf = sortPackedInto(buf, keys)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(keys)), "ns/key")
}
