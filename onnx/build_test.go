package onnx

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// TestBuildersMatchFixture compares what the builders make with the same
// pieces written by hand in testdata/tiny.txtpb and encoded by protoc.
func TestBuildersMatchFixture(t *testing.T) {
	fixture := decode(t, readTiny(t)).GetGraph()
	built := tinyLinear().GetGraph()
	for i, n := range built.Node {
		n.Name = proto.String([]string{"matmul", "add"}[i])
		if !proto.Equal(n, fixture.Node[i]) {
			t.Errorf("node %d = %v, want %v", i, n, fixture.Node[i])
		}
	}
	for i, init := range built.Initializer {
		if !proto.Equal(init, fixture.Initializer[i]) {
			t.Errorf("initializer %d = %v, want %v", i, init, fixture.Initializer[i])
		}
	}
	if !proto.Equal(built.Input[0], fixture.Input[0]) {
		t.Errorf("input = %v, want %v", built.Input[0], fixture.Input[0])
	}
	if !proto.Equal(built.Output[0], fixture.Output[0]) {
		t.Errorf("output = %v, want %v", built.Output[0], fixture.Output[0])
	}
}

// TestBuildersMatchProtoc compares builder output with protoc's encoding
// of the same messages written in text format.
func TestBuildersMatchProtoc(t *testing.T) {
	const protoRoot = "/usr/lib/python3/dist-packages"
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Skip("protoc not installed (apt-get install protobuf-compiler)")
	}
	if _, err := os.Stat(filepath.Join(protoRoot, "onnx/onnx.proto")); err != nil {
		t.Skip("onnx.proto not installed (apt-get install python3-onnx)")
	}
	encode := func(msg proto.Message, text string) {
		t.Helper()
		name := string(msg.ProtoReflect().Descriptor().FullName())
		cmd := exec.Command(protoc, "--proto_path="+protoRoot, "--encode="+name, "onnx/onnx.proto")
		cmd.Stdin = strings.NewReader(text)
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("protoc --encode=%s: %v", name, err)
		}
		if err := proto.Unmarshal(b, msg); err != nil {
			t.Fatal(err)
		}
	}
	scale := NewTensorFloat("s", []int64{2}, []float32{0.5, 2})
	for _, tc := range []struct {
		got  proto.Message
		text string
	}{
		{NewNode("Cast", []string{"x"}, []string{"y"}, AttrInt("to", 7)),
			`input: "x" output: "y" op_type: "Cast" attribute { name: "to" type: INT i: 7 }`},
		{NewNode("Clip", []string{"x", "", "hi"}, []string{"y"}),
			`input: "x" input: "" input: "hi" output: "y" op_type: "Clip"`},
		{NewNode("LeakyRelu", []string{"x"}, []string{"y"}, AttrFloat("alpha", 0.25), AttrString("mode", "m")),
			`input: "x" output: "y" op_type: "LeakyRelu" attribute { name: "alpha" type: FLOAT f: 0.25 } attribute { name: "mode" type: STRING s: "m" }`},
		{NewNode("Transpose", []string{"x"}, []string{"y"}, AttrInts("perm", 1, 0)),
			`input: "x" output: "y" op_type: "Transpose" attribute { name: "perm" type: INTS ints: [1, 0] }`},
		{NewNode("Constant", nil, []string{"c"}, AttrTensor("value", scale)),
			`output: "c" op_type: "Constant" attribute { name: "value" type: TENSOR t { name: "s" data_type: 1 dims: 2 float_data: [0.5, 2] } }`},
		{NewTensorInt64("idx", []int64{1, 3}, []int64{0, -1, 1 << 40}),
			`name: "idx" data_type: 7 dims: 1 dims: 3 int64_data: [0, -1, 1099511627776]`},
		{NewTensorFloat("T", nil, []float32{1.5}),
			`name: "T" data_type: 1 float_data: 1.5`},
		{NewValueInfo("p", Float, Shape{{Param: "n"}, {Value: -1}, {Value: 0}}),
			`name: "p" type { tensor_type { elem_type: 1 shape { dim { dim_param: "n" } dim { } dim { dim_value: 0 } } } }`},
		{NewValueInfo("s", Int64, Shape{}),
			`name: "s" type { tensor_type { elem_type: 7 shape { } } }`},
		{NewValueInfo("u", Double, nil),
			`name: "u" type { tensor_type { elem_type: 11 } }`},
	} {
		want := tc.got.ProtoReflect().New().Interface()
		encode(want, tc.text)
		if !proto.Equal(tc.got, want) {
			t.Errorf("builder made %v, want %v", tc.got, want)
		}
	}
}

func TestFromProto(t *testing.T) {
	m, err := FromProto(tinyLinear())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Bytes(), marshal(tinyLinear())) {
		t.Error("Bytes differ from the marshalled proto")
	}
	if _, err := FromProto(&onnxpb.ModelProto{IrVersion: proto.Int64(8)}); err == nil {
		t.Error("FromProto accepted a model without a graph")
	}
}

func TestDataTypeString(t *testing.T) {
	// The names of the enum values in onnx.proto, lower-cased, are the
	// names ONNX uses in type strings.
	for v, name := range onnxpb.TensorProto_DataType_name {
		if got, want := DataType(v).String(), strings.ToLower(name); got != want {
			t.Errorf("DataType(%d) = %q, want %q", v, got, want)
		}
	}
	for dt, want := range map[DataType]string{Float8E4M3FN: "float8e4m3fn", Float4E2M1: "float4e2m1", 99: "type(99)", -1: "type(-1)"} {
		if got := dt.String(); got != want {
			t.Errorf("DataType(%d) = %q, want %q", int32(dt), got, want)
		}
	}
}

func TestValueOf(t *testing.T) {
	tensor := func(elem int32, shape *onnxpb.TensorShapeProto) *onnxpb.TypeProto {
		return &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(elem), Shape: shape}}}
	}
	dims := func(ds ...*onnxpb.TensorShapeProto_Dimension) *onnxpb.TensorShapeProto {
		return &onnxpb.TensorShapeProto{Dim: ds}
	}
	val := func(v int64) *onnxpb.TensorShapeProto_Dimension {
		return &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: v}}
	}
	param := func(p string) *onnxpb.TensorShapeProto_Dimension {
		return &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: p}}
	}
	for _, tc := range []struct {
		typ       *onnxpb.TypeProto
		wantType  string
		wantElem  DataType
		wantShape string
		wantJSON  string
	}{
		{tensor(1, dims(param("batch"), val(3))), "tensor(float)", Float, "[batch,3]", `["batch",3]`},
		{tensor(7, dims()), "tensor(int64)", Int64, "[]", `[]`},
		{tensor(10, nil), "tensor(float16)", Float16, "?", `null`},
		{tensor(1, dims(&onnxpb.TensorShapeProto_Dimension{}, val(-5))), "tensor(float)", Float, "[?,?]", `[null,null]`},
		{&onnxpb.TypeProto{Value: &onnxpb.TypeProto_SequenceType{SequenceType: &onnxpb.TypeProto_Sequence{ElemType: tensor(6, nil)}}},
			"seq(tensor(int32))", Undefined, "?", `null`},
		{&onnxpb.TypeProto{Value: &onnxpb.TypeProto_MapType{MapType: &onnxpb.TypeProto_Map{KeyType: proto.Int32(8), ValueType: tensor(1, nil)}}},
			"map(string,tensor(float))", Undefined, "?", `null`},
		{&onnxpb.TypeProto{Value: &onnxpb.TypeProto_OptionalType{OptionalType: &onnxpb.TypeProto_Optional{ElemType: tensor(9, nil)}}},
			"optional(tensor(bool))", Undefined, "?", `null`},
		{&onnxpb.TypeProto{Value: &onnxpb.TypeProto_SparseTensorType{SparseTensorType: &onnxpb.TypeProto_SparseTensor{ElemType: proto.Int32(11), Shape: dims(val(5))}}},
			"sparse_tensor(double)", Double, "[5]", `[5]`},
		{nil, "", Undefined, "?", `null`},
	} {
		v := valueOf(&onnxpb.ValueInfoProto{Name: proto.String("v"), Type: tc.typ})
		js, err := json.Marshal(v.Shape)
		if err != nil {
			t.Fatal(err)
		}
		if v.Type != tc.wantType || v.Elem != tc.wantElem || v.Shape.String() != tc.wantShape || string(js) != tc.wantJSON {
			t.Errorf("valueOf(%v) = %q %v %v %s; want %q %v %v %s", tc.typ, v.Type, v.Elem, v.Shape, js, tc.wantType, tc.wantElem, tc.wantShape, tc.wantJSON)
		}
	}
}

func TestValueJSON(t *testing.T) {
	v := Value{Name: "x", Type: "tensor(float)", Elem: Float, Shape: Shape{{Param: "n"}, {Value: 2}}}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"name":"x","type":"tensor(float)","elem_type":"float","shape":["n",2]}`
	if string(b) != want {
		t.Errorf("JSON = %s, want %s", b, want)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back["shape"], []any{"n", 2.0}) {
		t.Errorf("JSON does not decode as expected: %v %v", back, err)
	}
}
