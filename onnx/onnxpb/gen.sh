#!/bin/sh
# gen.sh regenerates onnx.pb.go from the official onnx.proto (IR version 8)
# shipped by Debian's python3-onnx package. It needs protoc
# (protobuf-compiler) and protoc-gen-go v1.36.12 on PATH:
#
#	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#
# The proto file is used unmodified; its Go package is assigned with an M
# option. Set ONNX_PROTO_DIR to use a different copy of onnx/onnx.proto.
set -eu
cd "$(dirname "$0")"
proto_root=${ONNX_PROTO_DIR:-/usr/lib/python3/dist-packages}
module=github.com/fedcalib/fedcalib
protoc \
	--proto_path="$proto_root" \
	--go_out=../.. \
	--go_opt=module="$module" \
	--go_opt=Monnx/onnx.proto="$module/onnx/onnxpb;onnxpb" \
	onnx/onnx.proto
