package export

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/onnx"
)

// logProbSet returns skewed's examples with their logits replaced by
// log-probabilities log softmax(z): what `calibrate --input
// probabilities` fits on for a model ending in a softmax.
func logProbSet(n, c int) *calib.Set {
	s := skewed(n, c, 7)
	for i := range n {
		z := s.Row(i)
		calib.LogSoftmax(z, z)
	}
	return s
}

// TestExportSoftmaxModel appends every method of the registry to a model
// that ends in a Softmax (infer/testdata/tiny_softmax.onnx: probs =
// Softmax(logits)). Export detects it and feeds the calibrator the log of
// the model's probabilities; ONNX Runtime's calibrated output must equal
// the Go calibrator applied to log max(p, 1e-12) of the model's own
// probabilities output, computed here, to 1e-5.
func TestExportSoftmaxModel(t *testing.T) {
	needRuntime(t)
	const src = "../infer/testdata/tiny_softmax.onnx"
	base, err := onnx.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	classes := int(base.Outputs()[0].Shape[1].Value)
	s := logProbSet(600, classes)
	dir := t.TempDir()
	// 512 random images, spread so that some rows are confident.
	rng := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, 512*16)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 3)
	}
	for _, m := range calib.Methods() {
		c, err := calib.New(m.Name, calib.Settings{Mexp: 5, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Fit(s); err != nil {
			t.Fatalf("%s: fit: %v", m.Name, err)
		}
		out := filepath.Join(dir, m.Name+".onnx")
		if err := Export(src, out, c, nil, Options{}); err != nil {
			t.Fatalf("%s: export: %v", m.Name, err)
		}
		em, err := onnx.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := em.MetadataValue(KeyInput); v != logits.InputProbabilities {
			t.Errorf("%s: %s = %q, want %q", m.Name, KeyInput, v, logits.InputProbabilities)
		}
		if v, _ := em.MetadataValue(KeyLogits); v != "probs" {
			t.Errorf("%s: %s = %q, want the model's output probs", m.Name, KeyLogits, v)
		}
		g, err := infer.OpenGraphFile(out, graphOptions("", []string{"x"}, []string{"probs", DefaultOutput}))
		if err != nil {
			t.Fatal(err)
		}
		outs, err := g.Run(&infer.Batch{Shape: []int64{int64(len(x) / 16), 1, 4, 4}, Float: x})
		g.Close()
		if err != nil {
			t.Fatal(err)
		}
		p, got := outs[0], outs[1]
		z := make([]float64, len(p))
		for i, v := range p {
			z[i] = math.Log(math.Max(float64(v), 1e-12))
		}
		want := make([]float64, len(z))
		c.Predict(want, z)
		worst := 0.0
		for i := range got {
			worst = math.Max(worst, math.Abs(float64(got[i])-want[i]))
		}
		t.Logf("%s: %d rows, ONNX Runtime vs Go: %.3g", m.Name, len(got)/classes, worst)
		if worst > 1e-5 {
			t.Errorf("%s: ONNX Runtime and Go differ by %g", m.Name, worst)
		}
	}
}

// TestExportInputKinds checks the explicit input kinds: logits on a
// softmax model calibrates its probabilities output as if it held logits
// (what an old calibrator fitted on the raw outputs expects);
// probabilities on a model ending in logits is refused at verification,
// since its output rows are not distributions; an unknown kind is an
// error.
func TestExportInputKinds(t *testing.T) {
	needRuntime(t)
	dir := t.TempDir()
	c := calib.NewTemperature(3)
	c.T = 2
	out := filepath.Join(dir, "raw.onnx")
	if err := Export("../infer/testdata/tiny_softmax.onnx", out, c, nil, Options{Input: logits.InputLogits}); err != nil {
		t.Fatal(err)
	}
	m, err := onnx.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := m.MetadataValue(KeyInput); v != logits.InputLogits {
		t.Errorf("%s = %q, want %q", KeyInput, v, logits.InputLogits)
	}
	for _, tc := range []struct {
		model, input, want string
	}{
		{"../infer/testdata/tiny.onnx", logits.InputProbabilities, "does not hold probabilities"},
		{"../infer/testdata/tiny.onnx", "odds", `input kind "odds"`},
	} {
		err := Export(tc.model, filepath.Join(dir, "x.onnx"), c, nil, Options{Input: tc.input})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s --input %s: error %v, want %q", tc.model, tc.input, err, tc.want)
		}
	}
}
