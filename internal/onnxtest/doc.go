// Package onnxtest holds helpers for the tests of packages that write
// ONNX files, such as corrupting a TensorProto file in a controlled way
// to check that a replay notices. Only tests import it.
package onnxtest
