package export

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/onnx"
)

// BenchmarkBatch1Latency measures the batch-1 latency of an image model
// with and without an appended calibrator, in the same run, one intra-op
// thread. The calibrated runs also fetch the probabilities output. The
// model is $FEDCALIB_BENCH_MODEL (e.g. models/mnist-cnn/model.onnx, the
// paper's CNN, or models/resnet18-cifar10/model.onnx), by default
// infer/testdata/cnn.onnx (3.8M multiply-adds); its one float input must
// have a dynamic batch axis and fixed other dimensions (e.g. [N, 3, 32, 32]).
func BenchmarkBatch1Latency(b *testing.B) {
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
	cals := []calib.Calibrator{calib.NewTemperature(classes), &calib.BBQ{Mexp: 7}, calib.NewOPVector(classes)}
	for _, c := range cals {
		if err := c.Fit(s); err != nil {
			b.Fatal(err)
		}
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
	bench := func(b *testing.B, model []byte, outputs []string) {
		g, err := infer.OpenGraph(model, infer.GraphOptions{Threads: 1, Inputs: []string{input}, Outputs: outputs})
		if err != nil {
			b.Fatal(err)
		}
		defer g.Close()
		in := &infer.Batch{Shape: shape, Float: x}
		b.ResetTimer()
		for range b.N {
			if _, err := g.Run(in); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("plain", func(b *testing.B) { bench(b, base.Bytes(), []string{logitsOut}) })
	for _, c := range cals {
		m, err := onnx.ReadFile(src)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := Append(m, c, nil, Options{}); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("calibrated-%s", c.Method()), func(b *testing.B) { bench(b, m.Bytes(), []string{logitsOut, DefaultOutput}) })
	}
}
