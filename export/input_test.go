package export

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/onnx"
	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// chainModel returns a model x [batch, 4] → z = x·w [batch, 3] → pre →
// Softmax (attrs) → post → "probs", the nodes of pre and post given as
// ops on a running tensor name; batch is the batch dimension of x and
// probs (a Param for a dynamic one).
func chainModel(batch onnx.Dim, pre, post []func(in, out string) *onnxpb.NodeProto, inits []*onnxpb.TensorProto, attrs ...*onnxpb.AttributeProto) *onnxpb.ModelProto {
	nodes := []*onnxpb.NodeProto{onnx.NewNode("MatMul", []string{"x", "w"}, []string{"z0"})}
	t, n := "z0", 0
	step := func(f func(in, out string) *onnxpb.NodeProto, last bool) {
		n++
		out := "t" + string(rune('0'+n))
		if last {
			out = "probs"
		}
		nodes = append(nodes, f(t, out))
		t = out
	}
	for _, f := range pre {
		step(f, false)
	}
	step(func(in, out string) *onnxpb.NodeProto {
		return onnx.NewNode("Softmax", []string{in}, []string{out}, attrs...)
	}, len(post) == 0)
	for i, f := range post {
		step(f, i == len(post)-1)
	}
	return &onnxpb.ModelProto{
		IrVersion:    proto.Int64(8),
		ProducerName: proto.String("fedcalib export tests"),
		OpsetImport:  []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(MinOpset)}},
		Graph: &onnxpb.GraphProto{
			Name:        proto.String("chain"),
			Node:        nodes,
			Initializer: append([]*onnxpb.TensorProto{onnx.NewTensorFloat("w", []int64{4, 3}, weights(4, 3, 1))}, inits...),
			Input:       []*onnxpb.ValueInfoProto{onnx.NewValueInfo("x", onnx.Float, onnx.Shape{batch, {Value: 4}})},
			Output:      []*onnxpb.ValueInfoProto{onnx.NewValueInfo("probs", onnx.Float, onnx.Shape{batch, {Value: 3}})},
		},
	}
}

// op returns a chain step applying op with extra inputs and attributes.
func op(name string, extra []string, attrs ...*onnxpb.AttributeProto) func(in, out string) *onnxpb.NodeProto {
	return func(in, out string) *onnxpb.NodeProto {
		return onnx.NewNode(name, append([]string{in}, extra...), []string{out}, attrs...)
	}
}

// chainCases are models whose output a Softmax makes through each
// value-preserving operator, and some it does not make.
var chainCases = []struct {
	name    string
	model   *onnxpb.ModelProto
	softmax bool
}{
	{"direct", chainModel(onnx.Dim{Param: "batch"}, nil, nil, nil), true},
	{"Identity", chainModel(onnx.Dim{Param: "batch"}, nil, []func(string, string) *onnxpb.NodeProto{op("Identity", nil)}, nil), true},
	{"Cast", chainModel(onnx.Dim{Param: "batch"},
		[]func(string, string) *onnxpb.NodeProto{op("Cast", nil, onnx.AttrInt("to", int64(onnx.Double)))},
		[]func(string, string) *onnxpb.NodeProto{op("Cast", nil, onnx.AttrInt("to", int64(onnx.Float)))}, nil), true},
	{"Reshape", chainModel(onnx.Dim{Param: "batch"}, nil,
		[]func(string, string) *onnxpb.NodeProto{op("Reshape", []string{"shape"})},
		[]*onnxpb.TensorProto{onnx.NewTensorInt64("shape", []int64{2}, []int64{-1, 3})}), true},
	// [N, 3, 1, 1], Softmax over axis 1, flattened back to [N, 3].
	{"Flatten", chainModel(onnx.Dim{Param: "batch"},
		[]func(string, string) *onnxpb.NodeProto{op("Reshape", []string{"shape"})},
		[]func(string, string) *onnxpb.NodeProto{op("Flatten", nil, onnx.AttrInt("axis", 1))},
		[]*onnxpb.TensorProto{onnx.NewTensorInt64("shape", []int64{4}, []int64{-1, 3, 1, 1})}, onnx.AttrInt("axis", 1)), true},
	// [N, 3, 1], Softmax over axis 1, squeezed back to [N, 3].
	{"Squeeze", chainModel(onnx.Dim{Param: "batch"},
		[]func(string, string) *onnxpb.NodeProto{op("Unsqueeze", []string{"axes"})},
		[]func(string, string) *onnxpb.NodeProto{op("Squeeze", []string{"axes"})},
		[]*onnxpb.TensorProto{onnx.NewTensorInt64("axes", []int64{1}, []int64{2})}, onnx.AttrInt("axis", 1)), true},
	// A batch-of-one model: [1, 3] → [3], Softmax, unsqueezed to [1, 3].
	{"Unsqueeze", chainModel(onnx.Dim{Value: 1},
		[]func(string, string) *onnxpb.NodeProto{op("Reshape", []string{"flat"})},
		[]func(string, string) *onnxpb.NodeProto{op("Unsqueeze", []string{"axes"})},
		[]*onnxpb.TensorProto{onnx.NewTensorInt64("flat", []int64{1}, []int64{-1}), onnx.NewTensorInt64("axes", []int64{1}, []int64{0})}), true},
	{"Identity, Reshape, Cast", chainModel(onnx.Dim{Param: "batch"}, nil,
		[]func(string, string) *onnxpb.NodeProto{op("Identity", nil), op("Reshape", []string{"shape"}), op("Cast", nil, onnx.AttrInt("to", int64(onnx.Float)))},
		[]*onnxpb.TensorProto{onnx.NewTensorInt64("shape", []int64{2}, []int64{-1, 3})}), true},
	// Not value-preserving: the output is not the Softmax's.
	{"Log", chainModel(onnx.Dim{Param: "batch"}, nil, []func(string, string) *onnxpb.NodeProto{op("Log", nil)}, nil), false},
}

// TestSoftmaxChain checks that a Softmax making the output through each
// value-preserving operator is found (InputKind says probabilities) and
// that the exported model computes the calibrator on log max(p, 1e-12)
// of the model's own output, computed here from that output; a chain
// through another operator is not a Softmax output.
func TestSoftmaxChain(t *testing.T) {
	needRuntime(t)
	dir := t.TempDir()
	c := calib.NewVector(3)
	c.A = []float64{0.5, 1.5, 0.8}
	c.B = []float64{0.1, -0.2, 0.3}
	for _, tc := range chainCases {
		m, err := onnx.FromProto(tc.model)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := logits.InputLogits
		if tc.softmax {
			want = logits.InputProbabilities
		}
		if got, err := InputKind(m, "probs", "", ""); err != nil || got != want {
			t.Errorf("%s: InputKind = %q, %v; want %q", tc.name, got, err, want)
		}
		if !tc.softmax {
			continue
		}
		src := filepath.Join(dir, strings.ReplaceAll(tc.name, ", ", "_")+".onnx")
		if err := m.WriteFile(src); err != nil {
			t.Fatal(err)
		}
		out := src + ".calibrated.onnx"
		file := &calib.File{Provenance: calib.Provenance{Input: calib.InputProbabilities}}
		if err := Export(src, out, c, file, Options{}); err != nil {
			t.Fatalf("%s: export: %v", tc.name, err)
		}
		batch := int64(5)
		if tc.name == "Unsqueeze" {
			batch = 1
		}
		x := make([]float32, batch*4)
		for i := range x {
			x[i] = float32(math.Sin(float64(i)) * 4)
		}
		g, err := infer.OpenGraphFile(out, graphOptions("", []string{"x"}, []string{"probs", DefaultOutput}))
		if err != nil {
			t.Fatal(err)
		}
		outs, err := g.Run(&infer.Batch{Shape: []int64{batch, 4}, Float: x})
		g.Close()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		z := make([]float64, len(outs[0]))
		for i, p := range outs[0] {
			z[i] = math.Log(math.Max(float64(p), 1e-12))
		}
		p := make([]float64, len(z))
		c.Predict(p, z)
		for i := range p {
			if d := math.Abs(float64(outs[1][i]) - p[i]); d > 1e-5 {
				t.Errorf("%s: probability %d: ONNX Runtime %v, Go on the log of the model's output %v", tc.name, i, outs[1][i], p[i])
				break
			}
		}
	}
}

// TestInputKindFitted checks that the input kind a calibrator file
// records is honoured and a mismatch refused: a calibrator fitted on
// logits is not fed a Softmax's probabilities (the defect: it was, and
// export said verified), a requested kind that contradicts the fitted
// one is refused, and an old file (no kind) detects as before.
func TestInputKindFitted(t *testing.T) {
	soft, err := onnx.FromProto(chainCases[0].model)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := onnx.FromProto(linear(weights(4, 3, 0), onnx.Shape{{Param: "batch"}, {Value: 3}}))
	if err != nil {
		t.Fatal(err)
	}
	const L, P = logits.InputLogits, logits.InputProbabilities
	for _, tc := range []struct {
		name              string
		m                 *onnx.Model
		output            string
		requested, fitted string
		want, err         string
	}{
		{"softmax, unrecorded", soft, "probs", "", "", P, ""},
		{"softmax, fitted on probabilities", soft, "probs", "", P, P, ""},
		{"softmax, fitted on logits", soft, "probs", "", L, "", "made by a Softmax"},
		{"softmax, fitted on logits, --input logits", soft, "probs", L, L, L, ""},
		{"softmax, fitted on probabilities, --input logits", soft, "probs", L, P, "", "fitted on probabilities"},
		{"logits, fitted on logits", plain, "logits", "", L, L, ""},
		{"logits, fitted on logits, --input probabilities", plain, "logits", P, L, "", "fitted on logits"},
		{"logits, fitted on probabilities", plain, "logits", "", P, P, ""},
		{"bad kind", plain, "logits", "", "odds", "", `input kind "odds"`},
	} {
		got, err := InputKind(tc.m, tc.output, tc.requested, tc.fitted)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: the refusal is not one line: %q", tc.name, err)
		}
	}
}
