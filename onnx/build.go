package onnx

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// FromProto serialises pb and parses the result, giving a Model built from
// scratch (with NewNode, NewTensorFloat, NewValueInfo...). It returns a
// *FormatError if pb has no IR version or no graph.
func FromProto(pb *onnxpb.ModelProto) (*Model, error) {
	return parse(marshal(pb))
}

// NewTensorFloat returns a float32 tensor with the given name, dims and
// data in row-major order; nil or empty dims make a scalar. It panics if
// a dim is negative or len(data) is not the product of dims.
func NewTensorFloat(name string, dims []int64, data []float32) *onnxpb.TensorProto {
	checkLen("NewTensorFloat", dims, len(data))
	return &onnxpb.TensorProto{
		Name:      proto.String(name),
		DataType:  proto.Int32(int32(Float)),
		Dims:      append([]int64(nil), dims...),
		FloatData: append([]float32(nil), data...),
	}
}

// NewTensorInt64 is NewTensorFloat for int64 tensors.
func NewTensorInt64(name string, dims []int64, data []int64) *onnxpb.TensorProto {
	checkLen("NewTensorInt64", dims, len(data))
	return &onnxpb.TensorProto{
		Name:      proto.String(name),
		DataType:  proto.Int32(int32(Int64)),
		Dims:      append([]int64(nil), dims...),
		Int64Data: append([]int64(nil), data...),
	}
}

func checkLen(fn string, dims []int64, n int) {
	size := int64(1)
	for _, d := range dims {
		if d < 0 {
			panic(fmt.Sprintf("onnx: %s: negative dimension %d", fn, d))
		}
		size *= d
	}
	if size != int64(n) {
		panic(fmt.Sprintf("onnx: %s: %d values for dims %v", fn, n, dims))
	}
}

// NewNode returns a node in the default domain applying operator op to the
// named inputs, producing the named outputs. An empty input name marks an
// omitted optional input, as in ONNX. The node is unnamed; set its Name
// field to name it.
func NewNode(op string, inputs, outputs []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{
		OpType:    proto.String(op),
		Input:     append([]string(nil), inputs...),
		Output:    append([]string(nil), outputs...),
		Attribute: attrs,
	}
}

// AttrInt returns an INT attribute.
func AttrInt(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

// AttrFloat returns a FLOAT attribute.
func AttrFloat(name string, v float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(v)}
}

// AttrInts returns an INTS attribute.
func AttrInts(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: append([]int64(nil), v...)}
}

// AttrString returns a STRING attribute.
func AttrString(name, v string) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte(v)}
}

// AttrTensor returns a TENSOR attribute holding t (as the Constant
// operator's value).
func AttrTensor(name string, t *onnxpb.TensorProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t}
}

// NewValueInfo returns the description of a tensor value for a graph input
// or output. A nil shape records no shape (unknown rank); a Dim with Param
// set is symbolic and one with a negative Value unknown.
func NewValueInfo(name string, elem DataType, shape Shape) *onnxpb.ValueInfoProto {
	t := &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(elem))}
	if shape != nil {
		t.Shape = &onnxpb.TensorShapeProto{Dim: make([]*onnxpb.TensorShapeProto_Dimension, len(shape))}
		for i, d := range shape {
			dim := new(onnxpb.TensorShapeProto_Dimension)
			switch {
			case d.Param != "":
				dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: d.Param}
			case d.Value >= 0:
				dim.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d.Value}
			}
			t.Shape.Dim[i] = dim
		}
	}
	return &onnxpb.ValueInfoProto{
		Name: proto.String(name),
		Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: t}},
	}
}
