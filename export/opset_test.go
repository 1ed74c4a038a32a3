package export

import (
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/onnx"
	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// oldModel returns a model of the given opset: x [batch, 4] →
// BatchNormalization (scale, bias, mean, var of 4 channels; attributes
// bn) → Dropout (attributes drop; its mask output when mask) → MatMul w
// [4, 3] → logits.
func oldModel(opset int64, bn, drop []*onnxpb.AttributeProto, mask bool) *onnxpb.ModelProto {
	dropOut := []string{"d"}
	if mask {
		dropOut = append(dropOut, "mask")
	}
	return &onnxpb.ModelProto{
		IrVersion:    proto.Int64(6),
		ProducerName: proto.String("fedcalib export tests"),
		OpsetImport:  []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(opset)}},
		Graph: &onnxpb.GraphProto{
			Name: proto.String("old"),
			Node: []*onnxpb.NodeProto{
				onnx.NewNode("BatchNormalization", []string{"x", "scale", "bias", "mean", "var"}, []string{"n"}, bn...),
				onnx.NewNode("Dropout", []string{"n"}, dropOut, drop...),
				onnx.NewNode("MatMul", []string{"d", "w"}, []string{"logits"}),
			},
			Initializer: []*onnxpb.TensorProto{
				onnx.NewTensorFloat("scale", []int64{4}, []float32{1, 2, 0.5, 1}),
				onnx.NewTensorFloat("bias", []int64{4}, []float32{0, 0.1, -0.1, 0.2}),
				onnx.NewTensorFloat("mean", []int64{4}, []float32{0.5, 0.5, 0.4, 0.6}),
				onnx.NewTensorFloat("var", []int64{4}, []float32{0.1, 0.2, 0.3, 0.4}),
				onnx.NewTensorFloat("w", []int64{4, 3}, weights(4, 3, 2)),
			},
			Input:  []*onnxpb.ValueInfoProto{onnx.NewValueInfo("x", onnx.Float, onnx.Shape{{Param: "batch"}, {Value: 4}})},
			Output: []*onnxpb.ValueInfoProto{onnx.NewValueInfo("logits", onnx.Float, onnx.Shape{{Param: "batch"}, {Value: 3}})},
		},
	}
}

// TestRaiseOpset checks the opset raise per operator: a model of opset 7
// or 11 with a Dropout and a BatchNormalization that opset 13 reads the
// same is raised and exports (ONNX Runtime verifies it against Go); a
// Dropout with a ratio attribute or using its mask, a BatchNormalization
// with a spatial attribute or training outputs (which used to fail with
// ONNX Runtime's own error), and opset 6 are refused with the operator
// named.
func TestRaiseOpset(t *testing.T) {
	needRuntime(t)
	ratio, spatial := onnx.AttrFloat("ratio", 0.5), onnx.AttrInt("spatial", 1)
	eps := onnx.AttrFloat("epsilon", 1e-5)
	bnTraining := oldModel(9, nil, nil, false)
	bnTraining.Graph.Node[0].Output = []string{"n", "rmean", "rvar"}
	for _, tc := range []struct {
		name string
		pb   *onnxpb.ModelProto
		want string // "" = exports
	}{
		{"opset 7", oldModel(7, []*onnxpb.AttributeProto{eps}, nil, false), ""},
		{"opset 11", oldModel(11, nil, nil, false), ""},
		{"dropout ratio", oldModel(7, nil, []*onnxpb.AttributeProto{ratio}, false), `node "" (Dropout) has a ratio attribute`},
		{"dropout mask", oldModel(11, nil, nil, true), `node "" (Dropout) uses its mask output`},
		{"spatial", oldModel(7, []*onnxpb.AttributeProto{spatial}, nil, false), `BatchNormalization "" has a spatial attribute`},
		{"training outputs", bnTraining, "training outputs"},
		{"opset 6", oldModel(6, nil, nil, false), "only from opset 7"},
	} {
		m, err := onnx.FromProto(tc.pb)
		if err != nil {
			t.Fatal(err)
		}
		c := calib.NewTemperature(3)
		c.T = 2
		if tc.want != "" { // refused before anything runs
			_, _, err := Append(m, c, nil, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "re-export the model with opset >= 13") {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
			}
			continue
		}
		dir := t.TempDir()
		src := filepath.Join(dir, "old.onnx")
		if err := m.WriteFile(src); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "out.onnx")
		if err := Export(src, out, c, nil, Options{}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		em, err := onnx.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if v := em.OpsetVersion(""); v != MinOpset {
			t.Errorf("%s: opset %d, want %d", tc.name, v, MinOpset)
		}
	}
}
