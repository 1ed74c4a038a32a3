package onnx

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// benchModel returns a serialised model shaped like a small CNN export:
// 64 layers, each a Conv node with a 64 KiB raw_data weight (4 MiB in all).
func benchModel(b *testing.B) []byte {
	b.Helper()
	pb := tinyLinear()
	g := pb.Graph
	prev := "input"
	for i := range 64 {
		w := &onnxpb.TensorProto{
			Name:     proto.String(fmt.Sprint("w", i)),
			DataType: proto.Int32(int32(Float)),
			Dims:     []int64{64, 64, 2, 2},
			RawData:  make([]byte, 64*64*2*2*4),
		}
		out := fmt.Sprint("c", i)
		g.Initializer = append(g.Initializer, w)
		g.Node = append(g.Node, NewNode("Conv", []string{prev, w.GetName()}, []string{out}, AttrInts("pads", 0, 0, 1, 1)))
		prev = out
	}
	return marshal(pb)
}

// exportEditsBench makes the edits a temperature-scaling export makes.
func exportEditsBench(m *Model) {
	m.SetMetadata("fedcalib.method", "temperature")
	m.SetOpsetVersion("", 13)
	m.AddInitializers(NewTensorFloat("fedcalib.T", nil, []float32{1.5}))
	m.AddNodes(
		NewNode("Div", []string{"logits", "fedcalib.T"}, []string{"fedcalib.scaled"}),
		NewNode("Softmax", []string{"fedcalib.scaled"}, []string{"probs"}, AttrInt("axis", -1)),
	)
	m.AddOutputs(NewValueInfo("probs", Float, Shape{{Param: "batch"}, {Value: 3}}))
}

// BenchmarkParse is Parse; its baseline is BenchmarkUnmarshal.
func BenchmarkParse(b *testing.B) {
	src := benchModel(b)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := Parse(src); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUnmarshal is the baseline: proto.Unmarshal into the generated types.
func BenchmarkUnmarshal(b *testing.B) {
	src := benchModel(b)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if err := proto.Unmarshal(src, new(onnxpb.ModelProto)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEditBytes is the splice: edits then Bytes on a parsed model;
// its baseline is BenchmarkEditMarshal.
func BenchmarkEditBytes(b *testing.B) {
	src := benchModel(b)
	m, err := Parse(src)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		m.graphTail, m.meta, m.opsets = nil, nil, nil
		exportEditsBench(m)
		_ = m.Bytes()
	}
}

// BenchmarkEditMarshal is the baseline: the same edits on the decoded
// message, then a full proto.Marshal.
func BenchmarkEditMarshal(b *testing.B) {
	src := benchModel(b)
	pb := new(onnxpb.ModelProto)
	if err := proto.Unmarshal(src, pb); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(src)))
	g := pb.Graph
	nodes, inits, outs := len(g.Node), len(g.Initializer), len(g.Output)
	for b.Loop() {
		g.Node, g.Initializer, g.Output = g.Node[:nodes], g.Initializer[:inits], g.Output[:outs]
		pb.MetadataProps = append(pb.MetadataProps[:1], newPropProto("fedcalib.method", "temperature"))
		g.Initializer = append(g.Initializer, NewTensorFloat("fedcalib.T", nil, []float32{1.5}))
		g.Node = append(g.Node,
			NewNode("Div", []string{"logits", "fedcalib.T"}, []string{"fedcalib.scaled"}),
			NewNode("Softmax", []string{"fedcalib.scaled"}, []string{"probs"}, AttrInt("axis", -1)))
		g.Output = append(g.Output, NewValueInfo("probs", Float, Shape{{Param: "batch"}, {Value: 3}}))
		if _, err := proto.Marshal(pb); err != nil {
			b.Fatal(err)
		}
	}
}
