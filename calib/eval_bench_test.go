package calib

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// Benchmarks of eval's work per row (docs/BENCHMARKS.md, "Single-thread
// cost per logit"), on 2^16 rows of 10 classes shaped as bench/eval.sh's
// file: normal logits, the label's raised by about 4, all times 1.5.
// Each reports its wall time and its thread's CPU time (cpu-ns, on
// Linux) per logit or key: on a loaded machine the second is the one to
// read.

// perItem runs body b.N times on one locked thread and reports its wall
// and CPU time per item, items being what one run handles.
func perItem(b *testing.B, items int, unit string, body func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0 := threadCPU()
	for b.Loop() {
		body()
	}
	cpu := threadCPU() - cpu0
	n := float64(b.N * items)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/"+unit)
	b.ReportMetric(float64(cpu/time.Nanosecond)/n, "cpu-ns/"+unit)
}

// evalBenchRows returns the logits and labels of 2^16 rows.
func evalBenchRows() ([]float64, []int) { return evalBenchRowsN(1 << 16) }

// evalBenchRowsN returns the logits and labels of n rows.
func evalBenchRowsN(n int) ([]float64, []int) {
	const c = 10
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
	perItem(b, len(z), "logit", func() {
		for _, v := range z {
			sum += math.Exp(v)
		}
	})
	_ = sum
}

// BenchmarkAddSoftmax is the softmax and every equal-width statistic,
// with the records of the equal-mass errors (keep) or without, 4096
// rows a call as eval takes them.
func BenchmarkAddSoftmax(b *testing.B) {
	z, y := evalBenchRows()
	for _, keep := range []bool{false, true} {
		b.Run(map[bool]string{false: "stats", true: "stats+records"}[keep], func(b *testing.B) {
			perItem(b, len(z), "logit", func() {
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
			})
		})
	}
}

// BenchmarkSortPacked sorts one class's records (class 0: most of them
// small probabilities) into a reused buffer, 2^16 of them (in cache) and
// 2^20 (eval's 10^6 rows).
func BenchmarkSortPacked(b *testing.B) {
	for _, n := range []int{1 << 16, 1 << 20} {
		z, y := evalBenchRowsN(n)
		keys := make([]uint64, len(y))
		p := make([]float64, 10)
		for i, label := range y {
			Softmax(p, z[i*10:(i+1)*10])
			keys[i] = packTop(p[0], label == 0)
		}
		buf := make([]uint64, len(keys))
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			perItem(b, len(keys), "key", func() { buf = sortPackedInto(buf, keys) })
		})
	}
}
