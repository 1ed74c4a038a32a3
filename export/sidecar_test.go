package export

import (
	"bytes"
	"context"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/export/sidecar"
	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/onnx"
)

// rounds is a networked fit's per-round record, which every embedded and
// sidecar file must keep.
var rounds = []calib.RoundRecord{
	{Round: 1, Sampled: []int{0, 1, 2}, Participants: []int{0, 2}, Dropouts: []int{1}, Attempts: 1},
	{Round: 2, Sampled: []int{1, 2}, Participants: []int{1, 2}, Dropouts: []int{}, Attempts: 2},
}

// TestSidecarFileSoftmax writes the sidecar of a temperature-1
// calibrator (the identity on log-probabilities) for a model ending in a
// Softmax: the file says it reads probabilities, keeps the rounds
// record, and applied as docs/SIDECAR.md says to the model's own
// probabilities gives them back (the defect: applied to them as logits
// it flattened a 0.99 top probability to about 1/C).
func TestSidecarFileSoftmax(t *testing.T) {
	needRuntime(t)
	const src = "../infer/testdata/tiny_softmax.onnx"
	base, err := onnx.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	classes := int(base.Outputs()[0].Shape[1].Value)
	c := calib.NewTemperature(classes)
	c.T = 1
	sf, err := SidecarFile(context.Background(), src, c, &calib.File{Rounds: rounds}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sf.Provenance.Input != calib.InputProbabilities || len(sf.Provenance.ModelSHA256) != 64 || !reflect.DeepEqual(sf.Rounds, rounds) {
		t.Fatalf("input %q, sha256 %q, rounds %v", sf.Provenance.Input, sf.Provenance.ModelSHA256, sf.Rounds)
	}
	var buf bytes.Buffer
	if err := calib.EncodeFile(&buf, c, sf); err != nil {
		t.Fatal(err)
	}
	s, err := sidecar.Load(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.File().Rounds, rounds) {
		t.Errorf("the written sidecar's rounds are %v", s.File().Rounds)
	}
	g, err := infer.OpenGraphFile(src, graphOptions("", []string{"x"}, []string{"probs"}))
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 8*16)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)) * 6)
	}
	outs, err := g.Run(&infer.Batch{Shape: []int64{8, 1, 4, 4}, Float: x})
	g.Close()
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Apply(outs[0])
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range outs[0] {
		if math.Abs(float64(got[i]-p)) > 1e-6 {
			t.Fatalf("value %d: the sidecar gives %v for the model's probability %v", i, got[i], p)
		}
	}
}

// TestSidecarFileNonFinite checks that the sidecar is verified as ONNX
// export is: a calibrator giving NaN on its probe set (vector scaling
// with a = 1e308 overflows on the logits ±1e4) is refused, where it used
// to be written.
func TestSidecarFileNonFinite(t *testing.T) {
	needRuntime(t)
	v := calib.NewVector(3)
	v.A = []float64{1e308, 1e308, 1e308}
	v.B = []float64{0, 0, 0}
	_, err := SidecarFile(context.Background(), "../infer/testdata/tiny.onnx", v, nil, Options{})
	if err == nil || !strings.Contains(err.Error(), "NaN") {
		t.Errorf("error %v, want NaN refused", err)
	}
	if err := Verify(v, Probe(v, 0), Options{}); err == nil {
		t.Errorf("ONNX export verification accepts it too")
	}
}

// TestAppendKeepsRounds checks that the calibrator file embedded in an
// exported model keeps the rounds record and records the input kind.
func TestAppendKeepsRounds(t *testing.T) {
	m, err := onnx.ReadFile("../infer/testdata/tiny.onnx")
	if err != nil {
		t.Fatal(err)
	}
	c := calib.NewTemperature(3)
	c.T = 2
	if _, _, err := Append(m, c, &calib.File{Rounds: rounds}, Options{}); err != nil {
		t.Fatal(err)
	}
	v, _ := m.MetadataValue(KeySidecar)
	_, f, err := calib.Decode(strings.NewReader(v))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.Rounds, rounds) || f.Provenance.Input != calib.InputLogits {
		t.Errorf("embedded rounds %v, input %q", f.Rounds, f.Provenance.Input)
	}
	if r, _ := m.MetadataValue(KeyRounds); r != "2" {
		t.Errorf("%s = %q, want 2", KeyRounds, r)
	}
}
