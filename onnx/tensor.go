package onnx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// ErrTensor is wrapped by every error of ParseTensor: the bytes are not a
// TensorProto that ParseTensor can read.
var ErrTensor = errors.New("not an ONNX tensor")

// A Tensor is a dense float32 or int64 tensor, as the test data files of
// ONNX's test runners hold it (a serialised TensorProto per file,
// test_data_set_0/input_0.pb, ...). Exactly one of Float and Int holds
// the values, row-major, as Elem says. The zero value is an unnamed
// float32 tensor of no elements with no dims, which is not valid: a
// scalar has one element.
type Tensor struct {
	// Name is the graph input or output the tensor feeds or holds.
	Name string
	// Elem is Float or Int64.
	Elem DataType
	// Dims is the shape; empty for a scalar.
	Dims []int64
	// Float holds the values of a float32 tensor.
	Float []float32
	// Int holds the values of an int64 tensor.
	Int []int64
}

// Len returns the number of elements the tensor's dims give: their
// product, 1 for a scalar.
func (t *Tensor) Len() int {
	n := 1
	for _, d := range t.Dims {
		n *= int(d)
	}
	return n
}

// Proto returns t as a TensorProto, its values in float_data or
// int64_data. It panics if the values do not fit the dims or Elem is
// neither Float nor Int64.
func (t *Tensor) Proto() *onnxpb.TensorProto {
	switch t.Elem {
	case Float:
		return NewTensorFloat(t.Name, t.Dims, t.Float)
	case Int64:
		return NewTensorInt64(t.Name, t.Dims, t.Int)
	}
	panic(fmt.Sprintf("onnx: Tensor.Proto of element type %s", t.Elem))
}

// Marshal returns the serialised TensorProto of t (see Proto), as
// ParseTensor reads it.
func (t *Tensor) Marshal() []byte { return marshal(t.Proto()) }

// ParseTensor decodes b, a serialised TensorProto, into a Tensor. The
// values may be in float_data or int64_data, or in raw_data as
// little-endian bytes, as ONNX's test data files hold them. It refuses,
// with an error wrapping ErrTensor: bytes that are not a TensorProto;
// element types other than float32 and int64; negative dims; external
// or segmented data; both typed and raw values; and a number of values
// that is not the product of the dims.
func ParseTensor(b []byte) (*Tensor, error) {
	var pb onnxpb.TensorProto
	if err := proto.Unmarshal(b, &pb); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTensor, err)
	}
	t := &Tensor{Name: pb.GetName(), Elem: DataType(pb.GetDataType()), Dims: pb.GetDims()}
	bad := func(format string, args ...any) (*Tensor, error) {
		return nil, fmt.Errorf("%w: tensor %q: %s", ErrTensor, t.Name, fmt.Sprintf(format, args...))
	}
	if pb.GetDataLocation() == onnxpb.TensorProto_EXTERNAL || len(pb.GetExternalData()) > 0 {
		return bad("its data is in an external file; fedcalib reads tensors that hold their data")
	}
	if pb.Segment != nil {
		return bad("it is a segment of a larger tensor")
	}
	size := int64(1)
	for _, d := range t.Dims {
		if d < 0 {
			return bad("dims %v: a dimension is negative", t.Dims)
		}
		if d == 0 {
			size = 0
		}
	}
	for _, d := range t.Dims {
		// Every element takes at least one byte of b, which bounds size
		// before it can overflow.
		if size == 0 {
			break
		}
		if size > int64(len(b))/d {
			return bad("dims %v give more elements than its %d bytes can hold", t.Dims, len(b))
		}
		size *= d
	}
	raw := pb.GetRawData()
	var typed int
	switch t.Elem {
	case Float:
		typed = len(pb.GetFloatData())
		t.Float = pb.GetFloatData()
	case Int64:
		typed = len(pb.GetInt64Data())
		t.Int = pb.GetInt64Data()
	default:
		return bad("element type %s: fedcalib reads float and int64 tensors", t.Elem)
	}
	if others := len(pb.GetInt32Data()) + len(pb.GetStringData()) + len(pb.GetDoubleData()) + len(pb.GetUint64Data()); others > 0 ||
		(t.Elem == Float && len(pb.GetInt64Data()) > 0) || (t.Elem == Int64 && len(pb.GetFloatData()) > 0) {
		return bad("it holds values of another element type than %s", t.Elem)
	}
	switch {
	case raw != nil && typed > 0:
		return bad("it holds both raw_data and typed values")
	case raw != nil:
		width := int64(4)
		if t.Elem == Int64 {
			width = 8
		}
		if int64(len(raw)) != size*width {
			return bad("raw_data has %d bytes for dims %v of %s", len(raw), t.Dims, t.Elem)
		}
		if t.Elem == Float {
			t.Float = make([]float32, size)
			for i := range t.Float {
				t.Float[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
		} else {
			t.Int = make([]int64, size)
			for i := range t.Int {
				t.Int[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
			}
		}
	case int64(typed) != size:
		return bad("%d values for dims %v (%d elements)", typed, t.Dims, size)
	}
	if t.Dims == nil {
		t.Dims = []int64{}
	}
	return t, nil
}
