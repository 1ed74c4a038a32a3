#!/bin/sh
# gen.sh encodes tiny.txtpb into tiny.onnx with protoc (protobuf-compiler),
# using the same onnx.proto as ../onnxpb/gen.sh. Set ONNX_PROTO_DIR to use a
# different copy of onnx/onnx.proto.
set -eu
cd "$(dirname "$0")"
proto_root=${ONNX_PROTO_DIR:-/usr/lib/python3/dist-packages}
protoc --proto_path="$proto_root" --encode=onnx.ModelProto onnx/onnx.proto <tiny.txtpb >tiny.onnx.tmp
mv tiny.onnx.tmp tiny.onnx
