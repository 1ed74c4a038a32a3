// Package onnxpb holds the Go types generated from the official ONNX
// protobuf schema, onnx.proto at IR version 8 (as shipped by Debian's
// python3-onnx), by protoc-gen-go.
//
// The generated file is committed, so building needs no protoc. To
// regenerate it, install protoc and protoc-gen-go v1.36.12 and run
// go generate in this directory; gen.sh uses the proto file unmodified and
// assigns its Go package with an M option.
//
// Fields added to ONNX after IR version 8 decode as unknown fields and are
// kept by proto.Marshal. Most code should use package onnx, which reads,
// inspects and edits models without re-encoding them; these types are for
// building new graph pieces and for reading what package onnx does not
// summarise.
package onnxpb

//go:generate ./gen.sh
