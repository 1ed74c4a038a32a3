package export

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/internal/onnxtest"
	"github.com/fedcalib/fedcalib/onnx"
)

// TestTestVectors writes the test vectors of the tiny model calibrated by
// temperature 2 and checks them by hand: input_0.pb is x [4, 1, 4, 4] in
// [0, 1), output_0.pb the logits [4, 3] and output_1.pb their softmax at
// temperature 2, computed here. They replay with no error; a flipped
// byte in output_0.pb is caught; a truncated file is an error of its own.
func TestTestVectors(t *testing.T) {
	needRuntime(t)
	c := calib.NewTemperature(3)
	c.T = 2
	m, err := CalibrateContext(context.Background(), "../infer/testdata/tiny.onnx", c, nil, Options{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	set, err := ModelTestSet(m, Options{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "vectors")
	if err := WriteTestVectors(context.Background(), dir, m, set); err != nil {
		t.Fatal(err)
	}
	sets, err := ReadTestVectors(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(sets) != 1 || len(sets[0].Inputs) != 1 || len(sets[0].Outputs) != 2 {
		t.Fatalf("read back %d sets", len(sets))
	}
	in, logits, probs := sets[0].Inputs[0], sets[0].Outputs[0], sets[0].Outputs[1]
	if in.Name != "x" || !slices.Equal(in.Dims, []int64{4, 1, 4, 4}) || slices.ContainsFunc(in.Float, func(v float32) bool { return !(v >= 0 && v < 1) }) {
		t.Errorf("input_0.pb: %q %v", in.Name, in.Dims)
	}
	if logits.Name != "logits" || probs.Name != "probabilities" || !slices.Equal(logits.Dims, []int64{4, 3}) || !slices.Equal(probs.Dims, []int64{4, 3}) {
		t.Fatalf("outputs %q %v, %q %v", logits.Name, logits.Dims, probs.Name, probs.Dims)
	}
	for i := 0; i < 4; i++ {
		z := logits.Float[3*i : 3*i+3]
		top := float64(slices.Max(z))
		var e [3]float64
		sum := 0.0
		for j, v := range z {
			e[j] = math.Exp((float64(v) - top) / 2)
			sum += e[j]
		}
		for j := range e {
			if d := math.Abs(e[j]/sum - float64(probs.Float[3*i+j])); d > Tolerance {
				t.Errorf("row %d class %d: probabilities %v, softmax(z/2) %v", i, j, probs.Float[3*i+j], e[j]/sum)
			}
		}
	}
	rep, err := CheckTestVectors(context.Background(), dir, "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sets != 1 || rep.Values != 24 || rep.MaxError != 0 || rep.Failures != 0 {
		t.Errorf("replay report %+v, want 1 set, 24 values, no error", rep)
	}
	t.Logf("replay: max error %g (tolerance %g·(1+|want|))", rep.MaxError, VectorTolerance)

	before, after := onnxtest.FlipFloat(t, filepath.Join(dir, "test_data_set_0", "output_0.pb"))
	rep, err = CheckTestVectors(context.Background(), dir, "", Options{})
	if !errors.Is(err, ErrVectorsDiffer) || rep.Failures != 1 {
		t.Errorf("flipped %v to %v: report %+v, error %v", before, after, rep, err)
	}

	p := filepath.Join(dir, "test_data_set_0", "output_1.pb")
	b, _ := os.ReadFile(p)
	if err := os.WriteFile(p, b[:len(b)-3], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckTestVectors(context.Background(), dir, "", Options{}); !errors.Is(err, onnx.ErrTensor) || errors.Is(err, ErrVectorsDiffer) {
		t.Errorf("truncated output_1.pb: %v", err)
	}
	if _, err := CheckTestVectors(context.Background(), t.TempDir(), "../infer/testdata/tiny.onnx", Options{}); err == nil || errors.Is(err, ErrVectorsDiffer) {
		t.Errorf("no test data sets: %v", err)
	}
	if err := WriteTestVectors(context.Background(), dir, m, set); err == nil {
		t.Error("wrote over test vectors")
	}
}

// TestProbeTestSet checks the standalone calibrator's test set against
// the Go calibrator on its probe set, for every method.
func TestProbeTestSet(t *testing.T) {
	needRuntime(t)
	for name, c := range fitted(t, 4) {
		set, err := ProbeTestSet(c, Options{Seed: 2})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		probe := Probe(c, 2)
		if in := set.Inputs[0]; in.Name != "logits" || !slices.Equal(in.Float, probe) || !slices.Equal(in.Dims, []int64{int64(len(probe) / 4), 4}) {
			t.Errorf("%s: input %q %v", name, in.Name, in.Dims)
		}
		if err := compare(c, probe, set.Outputs[0].Float); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
