package export

import (
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/onnx"
)

// batch1Models returns the batch-1 benchmarks' models: the plain model
// ($FEDCALIB_BENCH_MODEL, by default infer/testdata/cnn.onnx; its one
// float input must have a dynamic batch axis and fixed other dimensions)
// and the same model with temp, bbq (M = 7) and opvector appended, fitted
// on random logits; the outputs each run fetches; and one random input.
func batch1Models(b *testing.B) (names []string, models [][]byte, outputs [][]string, input string, in *infer.Batch) {
	b.Helper()
	if _, err := infer.InitRuntime(""); err != nil {
		b.Skipf("ONNX Runtime not installed (run make setup): %v", err)
	}
	src := "../infer/testdata/cnn.onnx"
	if p := os.Getenv("FEDCALIB_BENCH_MODEL"); p != "" {
		src = p
	}
	base, err := onnx.ReadFile(src)
	if err != nil {
		b.Fatal(err)
	}
	classes := int(base.Outputs()[0].Shape[1].Value)
	input, logitsOut := base.Inputs()[0].Name, base.Outputs()[0].Name
	rng := rand.New(rand.NewPCG(1, 2))
	s := &calib.Set{Logits: make([]float64, 500*classes), Labels: make([]int, 500), Classes: classes}
	for i := range s.Logits {
		s.Logits[i] = rng.NormFloat64() * 3
	}
	for i := range s.Labels {
		s.Labels[i] = rng.IntN(classes)
	}
	shape := []int64{1}
	for _, d := range base.Inputs()[0].Shape[1:] {
		if d.Value <= 0 {
			b.Fatalf("%s: input dimension %q is not fixed", src, d.Param)
		}
		shape = append(shape, d.Value)
	}
	size := int64(1)
	for _, d := range shape {
		size *= d
	}
	x := make([]float32, size)
	for i := range x {
		x[i] = float32(rng.Float64())
	}
	names, models, outputs = []string{"plain"}, [][]byte{base.Bytes()}, [][]string{{logitsOut}}
	for _, c := range []calib.Calibrator{calib.NewTemperature(classes), &calib.BBQ{Mexp: 7}, calib.NewOPVector(classes)} {
		if err := c.Fit(s); err != nil {
			b.Fatal(err)
		}
		m, err := onnx.ReadFile(src)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := Append(m, c, nil, Options{}); err != nil {
			b.Fatal(err)
		}
		names = append(names, "calibrated-"+c.Method())
		models = append(models, m.Bytes())
		outputs = append(outputs, []string{logitsOut, DefaultOutput})
	}
	return names, models, outputs, input, &infer.Batch{Shape: shape, Float: x}
}

// BenchmarkBatch1Latency measures the batch-1 latency of an image model
// with and without an appended calibrator (batch1Models), one after the
// other, one intra-op thread. The calibrated runs also fetch the
// probabilities output. BenchmarkBatch1Overhead pairs them.
func BenchmarkBatch1Latency(b *testing.B) {
	names, models, outputs, input, in := batch1Models(b)
	for k, name := range names {
		b.Run(name, func(b *testing.B) {
			g, err := infer.OpenGraph(models[k], infer.GraphOptions{Threads: 1, Inputs: []string{input}, Outputs: outputs[k]})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			b.ResetTimer()
			for range b.N {
				if _, err := g.Run(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBatch1Overhead runs, in every iteration and in rotating order,
// one batch-1 run of the plain model and of each calibrated one
// (batch1Models), one intra-op thread, and reports the median plain
// latency and, for each calibrated model, the median over iterations of
// its latency over the plain model's in the same iteration minus 1: the
// share of latency the calibrator adds (goal ≤ 1 %). Paired, it holds on a
// machine whose load changes from second to second.
func BenchmarkBatch1Overhead(b *testing.B) {
	names, models, outputs, input, in := batch1Models(b)
	graphs := make([]*infer.Graph, len(models))
	for k := range models {
		g, err := infer.OpenGraph(models[k], infer.GraphOptions{Threads: 1, Inputs: []string{input}, Outputs: outputs[k]})
		if err != nil {
			b.Fatal(err)
		}
		defer g.Close()
		graphs[k] = g
		if _, err := g.Run(in); err != nil { // warm up
			b.Fatal(err)
		}
	}
	took := make([][]time.Duration, len(graphs))
	rotate := 0
	for b.Loop() {
		for j := range graphs {
			k := (rotate + j) % len(graphs)
			t0 := time.Now()
			if _, err := graphs[k].Run(in); err != nil {
				b.Fatal(err)
			}
			took[k] = append(took[k], time.Since(t0))
		}
		rotate++
	}
	median := func(x []float64) float64 {
		slices.Sort(x)
		return x[len(x)/2]
	}
	plain := make([]float64, len(took[0]))
	for i, d := range took[0] {
		plain[i] = float64(d.Microseconds())
	}
	b.ReportMetric(median(plain), "plain-µs")
	for k := 1; k < len(graphs); k++ {
		r := make([]float64, len(took[k]))
		for i := range r {
			r[i] = took[k][i].Seconds()/took[0][i].Seconds() - 1
		}
		b.ReportMetric(100*median(r), names[k]+"-added-%")
	}
}
