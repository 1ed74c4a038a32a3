package export

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/onnx"
	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// largeModel returns a two-layer perceptron of ResNet18's size — x
// [batch, 256] → MatMul (256 × 43,690) → Relu → MatMul (43,690 × 10) →
// logits: 11.6 M float32 weights, 46 MB — with its weights as raw data, or
// in the external file weights.bin of dir when external.
func largeModel(t *testing.T, dir string, external bool) string {
	t.Helper()
	const in, hidden, classes = 256, 43690, 10
	raw := func(n int, scale float64, seed float64) []byte {
		b := make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(math.Sin(float64(i)*0.7+seed)*scale)))
		}
		return b
	}
	w1 := &onnxpb.TensorProto{Name: proto.String("w1"), Dims: []int64{in, hidden}, DataType: proto.Int32(int32(onnx.Float)), RawData: raw(in*hidden, 0.05, 1)}
	w2 := &onnxpb.TensorProto{Name: proto.String("w2"), Dims: []int64{hidden, classes}, DataType: proto.Int32(int32(onnx.Float)), RawData: raw(hidden*classes, 0.01, 2)}
	if external {
		var off int
		var all []byte
		for _, w := range []*onnxpb.TensorProto{w1, w2} {
			all = append(all, w.RawData...)
			w.ExternalData = []*onnxpb.StringStringEntryProto{
				{Key: proto.String("location"), Value: proto.String("weights.bin")},
				{Key: proto.String("offset"), Value: proto.String(fmt.Sprint(off))},
				{Key: proto.String("length"), Value: proto.String(fmt.Sprint(len(w.RawData)))},
			}
			off += len(w.RawData)
			w.RawData = nil
			w.DataLocation = onnxpb.TensorProto_EXTERNAL.Enum()
		}
		if err := os.WriteFile(filepath.Join(dir, "weights.bin"), all, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pb := &onnxpb.ModelProto{
		IrVersion:    proto.Int64(8),
		ProducerName: proto.String("fedcalib export tests"),
		OpsetImport:  []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		Graph: &onnxpb.GraphProto{
			Name: proto.String("large"),
			Node: []*onnxpb.NodeProto{
				onnx.NewNode("MatMul", []string{"x", "w1"}, []string{"h"}),
				onnx.NewNode("Relu", []string{"h"}, []string{"r"}),
				onnx.NewNode("MatMul", []string{"r", "w2"}, []string{"logits"}),
			},
			Initializer: []*onnxpb.TensorProto{w1, w2},
			Input:       []*onnxpb.ValueInfoProto{onnx.NewValueInfo("x", onnx.Float, onnx.Shape{{Param: "batch"}, {Value: in}})},
			Output:      []*onnxpb.ValueInfoProto{onnx.NewValueInfo("logits", onnx.Float, onnx.Shape{{Param: "batch"}, {Value: classes}})},
		},
	}
	m, err := onnx.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "large.onnx")
	if err := m.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestExportLargeModel: every calibrator of the registry exports onto a
// model of ResNet18's size, with its weights inside the file and in an
// external file beside it, and each export verifies in ONNX Runtime (the
// whole model's probabilities against the Go calibrator applied to its
// logits) before it is written.
func TestExportLargeModel(t *testing.T) {
	if testing.Short() {
		t.Skip("46 MB models")
	}
	needRuntime(t)
	fit := skewed(600, 10, 5)
	for _, external := range []bool{false, true} {
		dir := t.TempDir()
		model := largeModel(t, dir, external)
		if fi, err := os.Stat(model); err != nil || (!external && fi.Size() < 45e6) {
			t.Fatalf("large model: %v, %d bytes", err, fi.Size())
		}
		for _, m := range calib.Methods() {
			c, err := calib.New(m.Name, calib.Settings{Mexp: 5, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Fit(fit); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, m.Name+".calibrated.onnx")
			if err := Export(model, out, c, &calib.File{}, Options{Seed: 3}); err != nil {
				t.Errorf("external=%v %s: %v", external, m.Name, err)
				continue
			}
			fi, err := os.Stat(out)
			if err != nil {
				t.Fatal(err)
			}
			if !external && fi.Size() < 45e6 {
				t.Errorf("%s: the calibrated model has %d bytes: the weights were lost", m.Name, fi.Size())
			}
			if external && fi.Size() > 1e6 {
				t.Errorf("%s: the calibrated model has %d bytes: the external weights were copied in", m.Name, fi.Size())
			}
		}
	}
}
