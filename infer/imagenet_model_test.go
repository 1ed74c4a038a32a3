package infer

import (
	"bytes"
	"flag"
	"math"
	"os"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/infer/data"
	"github.com/fedcalib/fedcalib/onnx"
	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

var update = flag.Bool("update", false, "rewrite testdata/imagenet_shaped.onnx")

// imagenetShapedPath is a random-weight classifier of ImageNet's shapes,
// for the README's ImageNet section and the tests: its input and output
// are a torchvision ImageNet model's (float32 [batch, 3, 224, 224] in,
// 1,000 logits out), its network a small stand-in, with no preprocessing
// metadata (like a model exported from torchvision).
const imagenetShapedPath = "testdata/imagenet_shaped.onnx"

// imagenetShaped builds the model at imagenetShapedPath:
// x → Conv(3→16, 8×8, stride 8) → Relu → GlobalAveragePool → Flatten →
// Gemm(16→1000) → logits. Parameter k's element i is sin(i·0.7 + k)·s,
// s = 0.05 for the convolution and 1 for the rest.
func imagenetShaped() *onnx.Model {
	param := func(name string, k int, s float64, dims ...int64) *onnxpb.TensorProto {
		n := int64(1)
		for _, d := range dims {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(math.Sin(float64(i)*0.7+float64(k)) * s)
		}
		return onnx.NewTensorFloat(name, dims, v)
	}
	m, err := onnx.FromProto(&onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		Graph: &onnxpb.GraphProto{
			Name: proto.String("imagenet_shaped"),
			Node: []*onnxpb.NodeProto{
				onnx.NewNode("Conv", []string{"x", "conv_w", "conv_b"}, []string{"c"}, onnx.AttrInts("kernel_shape", 8, 8), onnx.AttrInts("strides", 8, 8)),
				onnx.NewNode("Relu", []string{"c"}, []string{"r"}),
				onnx.NewNode("GlobalAveragePool", []string{"r"}, []string{"p"}),
				onnx.NewNode("Flatten", []string{"p"}, []string{"f"}),
				onnx.NewNode("Gemm", []string{"f", "fc_w", "fc_b"}, []string{"logits"}, onnx.AttrInt("transB", 1)),
			},
			Initializer: []*onnxpb.TensorProto{
				param("conv_w", 0, 0.05, 16, 3, 8, 8), param("conv_b", 1, 1, 16),
				param("fc_w", 2, 1, 1000, 16), param("fc_b", 3, 1, 1000),
			},
			Input:  []*onnxpb.ValueInfoProto{onnx.NewValueInfo("x", onnx.Float, onnx.Shape{{Param: "batch"}, {Value: 3}, {Value: 224}, {Value: 224}})},
			Output: []*onnxpb.ValueInfoProto{onnx.NewValueInfo("logits", onnx.Float, onnx.Shape{{Param: "batch"}, {Value: 1000}})},
		},
	})
	if err != nil {
		panic(err)
	}
	return m
}

// TestImageNetShapedModel checks that the committed model is the one
// imagenetShaped builds (go test ./infer -run ImageNetShaped -update
// rewrites it), and runs it with the imagenet preset over the parity
// sample: 25 images of sizes 17×9 to 1600×1200 become 1,000 logits each.
func TestImageNetShapedModel(t *testing.T) {
	path := t.TempDir() + "/m.onnx"
	if err := imagenetShaped().WriteFile(path); err != nil {
		t.Fatal(err)
	}
	built, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(imagenetShapedPath, built, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	committed, err := os.ReadFile(imagenetShapedPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, built) {
		t.Fatalf("%s differs from what imagenetShaped builds: rerun with -update", imagenetShapedPath)
	}
	requireRuntime(t)
	pre, err := Preset("imagenet")
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenSession(imagenetShapedPath, Options{Threads: 2, Batch: 8, Preprocess: pre})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rd, err := data.Open("imagefolder:testdata/parity/images")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	res, err := s.Infer(t.Context(), rd)
	if err != nil {
		t.Fatal(err)
	}
	if res.Len() != 25 || res.Classes != 1000 {
		t.Errorf("%d rows of %d classes, want 25 of 1000", res.Len(), res.Classes)
	}
}
