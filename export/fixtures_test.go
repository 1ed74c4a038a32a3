package export

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/onnx"
	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// update rewrites the committed fixtures: go test ./export -run TestFixtures -update.
var update = flag.Bool("update", false, "rewrite the ONNX fixtures under testdata")

// A fixture is a small ONNX model, built here in Go and committed under
// testdata, whose logits output misbehaves in one way.
type fixture struct {
	file string
	why  string
	make func() *onnxpb.ModelProto
}

// fixtures are the bad models of TestCheckModel. Each takes x, float32
// [batch, 4], and multiplies it by a weight matrix.
var fixtures = []fixture{
	{"liar.onnx", "declares [batch, 10] logits and gives [batch, 3]", func() *onnxpb.ModelProto {
		return linear(weights(4, 3, 0), onnx.Shape{{Param: "batch"}, {Value: 10}})
	}},
	{"nan.onnx", "gives NaN logits: a weight is NaN", func() *onnxpb.ModelProto {
		w := weights(4, 3, 0)
		w[5] = float32(math.NaN())
		return linear(w, onnx.Shape{{Param: "batch"}, {Value: 3}})
	}},
	{"rank3.onnx", "gives [batch, 2, 3] logits and declares no shape", func() *onnxpb.ModelProto {
		pb := linear(weights(4, 6, 0), nil)
		g := pb.Graph
		g.Node[0].Output[0] = "flat"
		g.Node = append(g.Node, onnx.NewNode("Reshape", []string{"flat", "shape"}, []string{"logits"}))
		g.Initializer = append(g.Initializer, onnx.NewTensorInt64("shape", []int64{3}, []int64{-1, 2, 3}))
		return pb
	}},
	{"rank3_declared.onnx", "gives and declares [batch, 2, 3] logits", func() *onnxpb.ModelProto {
		pb := linear(weights(4, 6, 0), onnx.Shape{{Param: "batch"}, {Value: 2}, {Value: 3}})
		g := pb.Graph
		g.Node[0].Output[0] = "flat"
		g.Node = append(g.Node, onnx.NewNode("Reshape", []string{"flat", "shape"}, []string{"logits"}))
		g.Initializer = append(g.Initializer, onnx.NewTensorInt64("shape", []int64{3}, []int64{-1, 2, 3}))
		return pb
	}},
}

// weights returns r×c weights, deterministic and well spread.
func weights(r, c int, seed float64) []float32 {
	w := make([]float32, r*c)
	for i := range w {
		w[i] = float32(math.Sin(float64(i)+seed) * 2)
	}
	return w
}

// linear returns a model computing logits = x·w for x float32 [batch, 4]
// and w [4, len(w)/4], with the output declared as out (nil: no shape).
func linear(w []float32, out onnx.Shape) *onnxpb.ModelProto {
	k := int64(len(w) / 4)
	return &onnxpb.ModelProto{
		IrVersion:    proto.Int64(8),
		ProducerName: proto.String("fedcalib export tests"),
		OpsetImport:  []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(MinOpset)}},
		Graph: &onnxpb.GraphProto{
			Name:        proto.String("linear"),
			Node:        []*onnxpb.NodeProto{onnx.NewNode("MatMul", []string{"x", "w"}, []string{"logits"})},
			Initializer: []*onnxpb.TensorProto{onnx.NewTensorFloat("w", []int64{4, k}, w)},
			Input:       []*onnxpb.ValueInfoProto{onnx.NewValueInfo("x", onnx.Float, onnx.Shape{{Param: "batch"}, {Value: 4}})},
			Output:      []*onnxpb.ValueInfoProto{onnx.NewValueInfo("logits", onnx.Float, out)},
		},
	}
}

// TestFixtures checks that the committed fixtures are what the code above
// builds, and rewrites them with -update.
func TestFixtures(t *testing.T) {
	for _, f := range fixtures {
		m, err := onnx.FromProto(f.make())
		if err != nil {
			t.Fatalf("%s: %v", f.file, err)
		}
		path := filepath.Join("testdata", f.file)
		if *update {
			if err := m.WriteFile(path); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test ./export -run TestFixtures -update writes it)", err)
		}
		if !bytes.Equal(got, m.Bytes()) {
			t.Errorf("%s is not the model fixtures builds (%s): rerun with -update", path, f.why)
		}
	}
}
