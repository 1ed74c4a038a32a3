package onnx_test

import (
	"fmt"
	"log"

	"github.com/fedcalib/fedcalib/onnx"
)

func ExampleReadFile() {
	m, err := onnx.ReadFile("testdata/tiny.onnx")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("IR version", m.IRVersion(), "opset", m.OpsetVersion(""))
	for _, v := range m.Inputs() {
		fmt.Println("input ", v.Name, v.Type, v.Shape)
	}
	for _, v := range m.Outputs() {
		fmt.Println("output", v.Name, v.Type, v.Shape)
	}
	for _, p := range m.Metadata() {
		fmt.Printf("%s = %s\n", p.Key, p.Value)
	}
	// Output:
	// IR version 8 opset 13
	// input  input tensor(float) [batch,4]
	// output logits tensor(float) [batch,3]
	// fedcalib.preprocess.scale = 0.5
	// author = testdata
}

func ExampleParse_corrupt() {
	_, err := onnx.Parse([]byte{0x08, 0x08, 0x3a, 0x10, 0x0a})
	fmt.Println(err)
	// Output:
	// not an ONNX model: truncated protobuf at byte 2 in graph: field needs 16 bytes, 1 remain
}

// Append temperature scaling, probs = softmax(logits / T), to a model.
func ExampleModel_AddNodes() {
	m, err := onnx.ReadFile("testdata/tiny.onnx")
	if err != nil {
		log.Fatal(err)
	}
	m.AddInitializers(onnx.NewTensorFloat("fedcalib.T", nil, []float32{1.5}))
	m.AddNodes(
		onnx.NewNode("Div", []string{"logits", "fedcalib.T"}, []string{"fedcalib.scaled"}),
		onnx.NewNode("Softmax", []string{"fedcalib.scaled"}, []string{"probs"}, onnx.AttrInt("axis", -1)),
	)
	m.AddOutputs(onnx.NewValueInfo("probs", onnx.Float, onnx.Shape{{Param: "batch"}, {Value: 3}}))
	m.SetMetadata("fedcalib.method", "temperature")

	// m.WriteFile("calibrated.onnx") would write it atomically.
	again, err := onnx.Parse(m.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	for _, v := range again.Outputs() {
		fmt.Println(v.Name, v.Type, v.Shape)
	}
	fmt.Println(len(again.Proto().GetGraph().GetNode()), "nodes")
	// Output:
	// logits tensor(float) [batch,3]
	// probs tensor(float) [batch,3]
	// 4 nodes
}
