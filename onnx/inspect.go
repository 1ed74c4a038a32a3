package onnx

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// DataType is an ONNX tensor element type (TensorProto.DataType). Its
// values are those of onnx.proto; the zero value is Undefined.
type DataType int32

// ONNX tensor element types.
const (
	Undefined      DataType = 0
	Float          DataType = 1 // float32
	Uint8          DataType = 2
	Int8           DataType = 3
	Uint16         DataType = 4
	Int16          DataType = 5
	Int32          DataType = 6
	Int64          DataType = 7
	String         DataType = 8
	Bool           DataType = 9
	Float16        DataType = 10
	Double         DataType = 11 // float64
	Uint32         DataType = 12
	Uint64         DataType = 13
	Complex64      DataType = 14
	Complex128     DataType = 15
	BFloat16       DataType = 16
	Float8E4M3FN   DataType = 17 // IR version 9
	Float8E4M3FNUZ DataType = 18 // IR version 9
	Float8E5M2     DataType = 19 // IR version 9
	Float8E5M2FNUZ DataType = 20 // IR version 9
	Uint4          DataType = 21 // IR version 10
	Int4           DataType = 22 // IR version 10
	Float4E2M1     DataType = 23 // IR version 11
)

var dataTypeNames = [...]string{
	"undefined", "float", "uint8", "int8", "uint16", "int16", "int32", "int64",
	"string", "bool", "float16", "double", "uint32", "uint64", "complex64",
	"complex128", "bfloat16", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2",
	"float8e5m2fnuz", "uint4", "int4", "float4e2m1",
}

// String returns the type's name as ONNX writes it in type strings such as
// "tensor(float)", or "type(N)" for a value this package does not know.
func (t DataType) String() string {
	if t >= 0 && int(t) < len(dataTypeNames) {
		return dataTypeNames[t]
	}
	return "type(" + strconv.Itoa(int(t)) + ")"
}

// MarshalText encodes t as its name.
func (t DataType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// Dim is one dimension of a tensor shape: a fixed size, a symbolic name
// such as "batch", or unknown. The zero value is a fixed dimension of size 0.
type Dim struct {
	// Value is the size of a fixed dimension, or -1 for an unknown one. It
	// is ignored when Param is set; Shape reports -1 for symbolic ones.
	Value int64
	// Param is the name of a symbolic dimension; it is empty for a fixed or
	// unknown dimension.
	Param string
}

// Known reports whether d is a fixed size.
func (d Dim) Known() bool { return d.Param == "" && d.Value >= 0 }

// String returns the size, the symbolic name, or "?" for an unknown dimension.
func (d Dim) String() string {
	switch {
	case d.Param != "":
		return d.Param
	case d.Value >= 0:
		return strconv.FormatInt(d.Value, 10)
	}
	return "?"
}

// MarshalJSON encodes d as a number, a string (symbolic) or null (unknown).
func (d Dim) MarshalJSON() ([]byte, error) {
	switch {
	case d.Param != "":
		return json.Marshal(d.Param)
	case d.Value >= 0:
		return strconv.AppendInt(nil, d.Value, 10), nil
	}
	return []byte("null"), nil
}

// Shape is a tensor shape. A nil Shape means the rank is unknown; an empty
// non-nil Shape is a scalar.
type Shape []Dim

// String formats s as "[batch,1,28,28]", "[]" for a scalar or "?" for an
// unknown rank.
func (s Shape) String() string {
	if s == nil {
		return "?"
	}
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = d.String()
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Value describes a graph input or output.
type Value struct {
	// Name is the value's name in the graph.
	Name string `json:"name"`
	// Type is the value's ONNX type, as ONNX spells it: "tensor(float)",
	// "seq(tensor(int64))", "map(string,tensor(float))"... It is empty when
	// the model does not record the type.
	Type string `json:"type"`
	// Elem is the element type of a tensor or sparse tensor; Undefined for
	// other types.
	Elem DataType `json:"elem_type"`
	// Shape is the shape of a tensor or sparse tensor; nil when the model
	// records none or the value is not a tensor.
	Shape Shape `json:"shape"`
}

// Opset is an operator set import: a domain and the version of its
// operators the model uses. The default ONNX domain is "" (also spelt
// "ai.onnx").
type Opset struct {
	// Domain names the operator set; "" is the default ONNX domain.
	Domain string `json:"domain"`
	// Version is the operator set version, such as 13.
	Version int64 `json:"version"`
}

// Prop is one metadata_props entry, a key and its value.
type Prop struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// IRVersion returns the model's IR version (ModelProto.ir_version).
func (m *Model) IRVersion() int64 { return m.pb.GetIrVersion() }

// Producer returns the name and version of the tool that wrote the model;
// either may be empty.
func (m *Model) Producer() (name, version string) {
	return m.pb.GetProducerName(), m.pb.GetProducerVersion()
}

// Opsets returns the model's operator set imports in file order, domains
// as written.
func (m *Model) Opsets() []Opset {
	s := make([]Opset, len(m.pb.OpsetImport))
	for i, o := range m.pb.OpsetImport {
		s[i] = Opset{Domain: o.GetDomain(), Version: o.GetVersion()}
	}
	return s
}

// OpsetVersion returns the version of the operator set imported for
// domain ("" or "ai.onnx" for the default domain), or 0 if the model does
// not import it.
func (m *Model) OpsetVersion(domain string) int64 {
	d := canonicalDomain(domain)
	for _, o := range m.pb.OpsetImport {
		if canonicalDomain(o.GetDomain()) == d {
			return o.GetVersion()
		}
	}
	return 0
}

// Metadata returns the model's metadata_props entries in file order.
func (m *Model) Metadata() []Prop {
	s := make([]Prop, len(m.pb.MetadataProps))
	for i, p := range m.pb.MetadataProps {
		s[i] = Prop{Key: p.GetKey(), Value: p.GetValue()}
	}
	return s
}

// MetadataValue returns the value of the first metadata_props entry with
// the key, and whether there is one.
func (m *Model) MetadataValue(key string) (string, bool) {
	for _, p := range m.pb.MetadataProps {
		if p.GetKey() == key {
			return p.GetValue(), true
		}
	}
	return "", false
}

// Inputs returns the graph inputs a caller must feed: the graph's inputs
// less those that name an initializer (models of IR version < 4 list their
// weights as inputs too).
func (m *Model) Inputs() []Value {
	g := m.pb.GetGraph()
	inits := make(map[string]bool, len(g.GetInitializer())+len(g.GetSparseInitializer()))
	for _, t := range g.GetInitializer() {
		inits[t.GetName()] = true
	}
	for _, t := range g.GetSparseInitializer() {
		inits[t.GetValues().GetName()] = true
	}
	var vs []Value
	for _, vi := range g.GetInput() {
		if !inits[vi.GetName()] {
			vs = append(vs, valueOf(vi))
		}
	}
	return vs
}

// Outputs returns the graph outputs in order.
func (m *Model) Outputs() []Value {
	g := m.pb.GetGraph()
	vs := make([]Value, len(g.GetOutput()))
	for i, vi := range g.GetOutput() {
		vs[i] = valueOf(vi)
	}
	return vs
}

// usesName reports whether name is already the name of a graph input,
// output, initializer, node input or output, or value_info entry; a name
// for a new value must not be.
func (m *Model) usesName(name string) bool {
	g := m.pb.GetGraph()
	for _, vs := range [][]*onnxpb.ValueInfoProto{g.GetInput(), g.GetOutput(), g.GetValueInfo()} {
		for _, v := range vs {
			if v.GetName() == name {
				return true
			}
		}
	}
	for _, t := range g.GetInitializer() {
		if t.GetName() == name {
			return true
		}
	}
	for _, t := range g.GetSparseInitializer() {
		if t.GetValues().GetName() == name {
			return true
		}
	}
	for _, n := range g.GetNode() {
		for _, s := range [][]string{n.GetInput(), n.GetOutput()} {
			for _, v := range s {
				if v == name {
					return true
				}
			}
		}
	}
	return false
}

func valueOf(vi *onnxpb.ValueInfoProto) Value {
	v := Value{Name: vi.GetName(), Type: typeString(vi.GetType())}
	switch {
	case vi.GetType().GetTensorType() != nil:
		t := vi.GetType().GetTensorType()
		v.Elem, v.Shape = DataType(t.GetElemType()), shapeOf(t.GetShape())
	case vi.GetType().GetSparseTensorType() != nil:
		t := vi.GetType().GetSparseTensorType()
		v.Elem, v.Shape = DataType(t.GetElemType()), shapeOf(t.GetShape())
	}
	return v
}

func shapeOf(s *onnxpb.TensorShapeProto) Shape {
	if s == nil {
		return nil
	}
	sh := make(Shape, len(s.GetDim()))
	for i, d := range s.GetDim() {
		switch v := d.GetValue().(type) {
		case *onnxpb.TensorShapeProto_Dimension_DimValue:
			sh[i] = Dim{Value: v.DimValue}
		case *onnxpb.TensorShapeProto_Dimension_DimParam:
			sh[i] = Dim{Value: -1, Param: v.DimParam}
		default:
			sh[i] = Dim{Value: -1}
		}
		if sh[i].Value < -1 {
			sh[i].Value = -1 // a negative dim_value means unknown
		}
	}
	return sh
}

// typeString spells t the way ONNX does in operator schemas.
func typeString(t *onnxpb.TypeProto) string {
	switch {
	case t == nil:
		return ""
	case t.GetTensorType() != nil:
		return "tensor(" + DataType(t.GetTensorType().GetElemType()).String() + ")"
	case t.GetSparseTensorType() != nil:
		return "sparse_tensor(" + DataType(t.GetSparseTensorType().GetElemType()).String() + ")"
	case t.GetSequenceType() != nil:
		return "seq(" + typeString(t.GetSequenceType().GetElemType()) + ")"
	case t.GetMapType() != nil:
		mt := t.GetMapType()
		return "map(" + DataType(mt.GetKeyType()).String() + "," + typeString(mt.GetValueType()) + ")"
	case t.GetOptionalType() != nil:
		return "optional(" + typeString(t.GetOptionalType().GetElemType()) + ")"
	}
	return ""
}
