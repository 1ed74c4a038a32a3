package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/onnx"
	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// writeInspectModel writes a small classifier with a symbolic batch
// dimension, an initializer listed as an input, and metadata.
func writeInspectModel(t *testing.T) string {
	t.Helper()
	batch := onnx.Dim{Param: "batch"}
	pb := &onnxpb.ModelProto{
		IrVersion:       proto.Int64(7),
		ProducerName:    proto.String("pytorch"),
		ProducerVersion: proto.String("2.1.0"),
		OpsetImport: []*onnxpb.OperatorSetIdProto{
			{Domain: proto.String(""), Version: proto.Int64(13)},
			{Domain: proto.String("com.microsoft"), Version: proto.Int64(1)},
		},
		Graph: &onnxpb.GraphProto{
			Name: proto.String("net"),
			Node: []*onnxpb.NodeProto{onnx.NewNode("MatMul", []string{"image", "W"}, []string{"logits"})},
			Initializer: []*onnxpb.TensorProto{
				onnx.NewTensorFloat("W", []int64{784, 10}, make([]float32, 7840)),
			},
			Input: []*onnxpb.ValueInfoProto{
				onnx.NewValueInfo("image", onnx.Float, onnx.Shape{batch, {Value: 784}}),
				onnx.NewValueInfo("W", onnx.Float, onnx.Shape{{Value: 784}, {Value: 10}}),
			},
			Output: []*onnxpb.ValueInfoProto{
				onnx.NewValueInfo("logits", onnx.Float, onnx.Shape{batch, {Value: -1}}),
			},
		},
		MetadataProps: []*onnxpb.StringStringEntryProto{
			{Key: proto.String("zeta"), Value: proto.String("first")},
			{Key: proto.String("alpha"), Value: proto.String("two\nlines")},
		},
	}
	m, err := onnx.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "net.onnx")
	if err := m.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestInspectText(t *testing.T) {
	path := writeInspectModel(t)
	code, out, errOut := fedcalib("inspect", path)
	if code != ExitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	want := "file:        " + path + `
IR version:  7
opsets:      ai.onnx 13, com.microsoft 1
producer:    pytorch 2.1.0
graph:       "net" (1 nodes, 1 initializers)
inputs:
  image  tensor(float)  [batch,784]
outputs:
  logits  tensor(float)  [batch,?]
metadata_props:
  zeta   first
  alpha  "two\nlines"
`
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
}

func TestInspectJSON(t *testing.T) {
	path := writeInspectModel(t)
	code, out, errOut := fedcalib("inspect", "--json", path)
	if code != ExitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	want := map[string]any{
		"file":             path,
		"ir_version":       7.0,
		"opsets":           []any{map[string]any{"domain": "ai.onnx", "version": 13.0}, map[string]any{"domain": "com.microsoft", "version": 1.0}},
		"producer":         "pytorch",
		"producer_version": "2.1.0",
		"graph":            "net",
		"nodes":            1.0,
		"initializers":     1.0,
		"inputs":           []any{map[string]any{"name": "image", "type": "tensor(float)", "elem_type": "float", "shape": []any{"batch", 784.0}}},
		"outputs":          []any{map[string]any{"name": "logits", "type": "tensor(float)", "elem_type": "float", "shape": []any{"batch", nil}}},
		"metadata_props":   []any{map[string]any{"key": "zeta", "value": "first"}, map[string]any{"key": "alpha", "value": "two\nlines"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("JSON:\n%v\nwant:\n%v", got, want)
	}
}

func TestInspectErrors(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile(writeInspectModel(t))
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated.onnx")
	if err := os.WriteFile(truncated, good[:len(good)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string // substring of the one stderr line
	}{
		{[]string{"inspect", truncated}, truncated + ": not an ONNX model: truncated protobuf at byte "},
		{[]string{"inspect", filepath.Join(dir, "missing.onnx")}, "missing.onnx: no such file or directory"},
		{[]string{"inspect", dir}, dir + ": is a directory"},
		{[]string{"inspect"}, "inspect takes one MODEL.onnx argument, got 0"},
		{[]string{"inspect", "a.onnx", "b.onnx"}, "got 2"},
	} {
		code, out, errOut := fedcalib(tc.args...)
		if code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", tc.args, code, ExitUsage)
		}
		if out != "" {
			t.Errorf("%v: printed %q on stdout", tc.args, out)
		}
		if strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: stderr %q, want one line containing %q", tc.args, errOut, tc.want)
		}
	}
}

func TestShownValue(t *testing.T) {
	long := strings.Repeat("é", 50) // 100 bytes
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"tab\there", `"tab\there"`},
		{long, strings.Repeat("é", 40) + "... (100 bytes; --json prints all)"},
	} {
		if got := shownValue(tc.in); got != tc.want {
			t.Errorf("shownValue(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
