package onnx

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// TestParseTensor decodes hand-built TensorProtos, the values written out
// by hand (1.0 is 0x3f800000, little-endian 00 00 80 3f).
func TestParseTensor(t *testing.T) {
	ext := onnxpb.TensorProto_EXTERNAL
	for _, tc := range []struct {
		name string
		pb   *onnxpb.TensorProto
		want *Tensor // nil: refused
	}{
		{"float_data", &onnxpb.TensorProto{Name: proto.String("x"), DataType: proto.Int32(1), Dims: []int64{2, 1}, FloatData: []float32{1.5, -2}},
			&Tensor{Name: "x", Elem: Float, Dims: []int64{2, 1}, Float: []float32{1.5, -2}}},
		{"raw float", &onnxpb.TensorProto{Name: proto.String("y"), DataType: proto.Int32(1), Dims: []int64{2}, RawData: []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0}},
			&Tensor{Name: "y", Elem: Float, Dims: []int64{2}, Float: []float32{1, -2}}},
		{"raw int64", &onnxpb.TensorProto{Name: proto.String("t"), DataType: proto.Int32(7), Dims: []int64{1}, RawData: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
			&Tensor{Name: "t", Elem: Int64, Dims: []int64{1}, Int: []int64{-1}}},
		{"int64_data scalar", &onnxpb.TensorProto{DataType: proto.Int32(7), Int64Data: []int64{42}},
			&Tensor{Elem: Int64, Dims: []int64{}, Int: []int64{42}}},
		{"empty", &onnxpb.TensorProto{DataType: proto.Int32(1), Dims: []int64{1 << 40, 0}},
			&Tensor{Elem: Float, Dims: []int64{1 << 40, 0}}},
		{"negative dim", &onnxpb.TensorProto{DataType: proto.Int32(1), Dims: []int64{-1}, FloatData: []float32{1}}, nil},
		{"too few", &onnxpb.TensorProto{DataType: proto.Int32(1), Dims: []int64{3}, FloatData: []float32{1, 2}}, nil},
		{"raw too short", &onnxpb.TensorProto{DataType: proto.Int32(1), Dims: []int64{2}, RawData: []byte{0, 0, 0x80, 0x3f}}, nil},
		{"both", &onnxpb.TensorProto{DataType: proto.Int32(1), Dims: []int64{1}, FloatData: []float32{1}, RawData: []byte{0, 0, 0x80, 0x3f}}, nil},
		{"string", &onnxpb.TensorProto{DataType: proto.Int32(8), Dims: []int64{1}, StringData: [][]byte{[]byte("a")}}, nil},
		{"double", &onnxpb.TensorProto{DataType: proto.Int32(11), Dims: []int64{1}, DoubleData: []float64{1}}, nil},
		{"mixed", &onnxpb.TensorProto{DataType: proto.Int32(1), Dims: []int64{1}, FloatData: []float32{1}, Int64Data: []int64{1}}, nil},
		{"external", &onnxpb.TensorProto{DataType: proto.Int32(1), Dims: []int64{1}, DataLocation: &ext}, nil},
		{"huge", &onnxpb.TensorProto{DataType: proto.Int32(1), Dims: []int64{1 << 40, 1 << 40}}, nil},
	} {
		got, err := ParseTensor(marshal(tc.pb))
		switch {
		case tc.want == nil && err == nil:
			t.Errorf("%s: accepted %+v", tc.name, got)
		case tc.want == nil && !errors.Is(err, ErrTensor):
			t.Errorf("%s: error %v does not wrap ErrTensor", tc.name, err)
		case tc.want != nil && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != nil && !reflect.DeepEqual(got, tc.want):
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if _, err := ParseTensor([]byte{0xff, 0xff}); !errors.Is(err, ErrTensor) {
		t.Errorf("garbage: %v", err)
	}
}

// FuzzParseTensor checks that ParseTensor never panics, that its errors
// wrap ErrTensor, and that a tensor it accepts has as many values as its
// dims say and survives Marshal and ParseTensor unchanged.
func FuzzParseTensor(f *testing.F) {
	f.Add((&Tensor{Name: "input", Elem: Float, Dims: []int64{1, 2}, Float: []float32{0.5, math.MaxFloat32}}).Marshal())
	f.Add((&Tensor{Name: "ids", Elem: Int64, Dims: []int64{3}, Int: []int64{-1, 0, 1 << 62}}).Marshal())
	f.Add(marshal(&onnxpb.TensorProto{DataType: proto.Int32(1), Dims: []int64{2}, RawData: []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0}}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		tt, err := ParseTensor(b)
		if err != nil {
			if !errors.Is(err, ErrTensor) {
				t.Fatalf("error %v does not wrap ErrTensor", err)
			}
			return
		}
		n := len(tt.Float) + len(tt.Int)
		if n != tt.Len() || (tt.Elem == Float && len(tt.Int) > 0) || (tt.Elem == Int64 && len(tt.Float) > 0) {
			t.Fatalf("%s tensor of dims %v holds %d float and %d int values", tt.Elem, tt.Dims, len(tt.Float), len(tt.Int))
		}
		again, err := ParseTensor(tt.Marshal())
		if err != nil {
			t.Fatalf("marshalled tensor does not parse: %v", err)
		}
		if again.Name != tt.Name || again.Elem != tt.Elem || !reflect.DeepEqual(again.Dims, tt.Dims) ||
			!sameBits(again.Float, tt.Float) || !reflect.DeepEqual(again.Int, tt.Int) {
			t.Fatalf("round trip changed %+v into %+v", tt, again)
		}
	})
}

// sameBits reports whether a and b hold the same float32 bit patterns
// (NaN included), with nil equal to empty.
func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
