// Package onnx reads, inspects, edits and writes ONNX models
// (onnx.ModelProto, the protobuf message in a .onnx file).
//
// ReadFile and Parse decode a model with the generated types of package
// onnxpb and keep the bytes they were given. A file that is truncated,
// corrupt or not ONNX at all gives a *FormatError that says what is wrong
// and at which byte, for example
//
//	model.onnx: not an ONNX model: truncated protobuf at byte 25 in graph: field needs 4096 bytes, 310 remain
//
// Inspection methods summarise what a user of the model needs: the IR
// version, operator set imports, producer, the graph inputs to feed (with
// initializers left out) and outputs with their element types and shapes,
// and the metadata_props entries in file order.
//
// # Editing without re-encoding
//
// Edits (SetMetadata, SetOpsetVersion, SetIRVersion, AddNodes,
// AddInitializers, AddOutputs) are spliced into the original protobuf wire
// format rather than re-encoding the decoded message: Bytes copies every
// top-level field byte for byte except the few records an edit rewrites.
// The graph is re-emitted as its original bytes followed by the appended
// nodes, initializers and outputs, which is valid protobuf because the
// records of a repeated field may appear anywhere in a message. So a model
// keeps fields that onnx.proto at IR version 8 does not know, tensors
// whose data live in external files keep their references untouched, and
// a model with no edits serialises to exactly the bytes it was read from.
// The decoded view returned by Proto follows the edits as they are made.
//
// # Building pieces
//
// NewNode, the Attr helpers, NewTensorFloat, NewTensorInt64 and
// NewValueInfo build the graph pieces an exporter appends; FromProto turns
// a ModelProto built from scratch into a Model, for tests and fixtures.
package onnx

// testdata/tiny.onnx is encoded by protoc from testdata/tiny.txtpb.
//go:generate testdata/gen.sh
