// Command resnetshaped writes a ResNet-shaped ONNX classifier with
// deterministic pseudo-random weights, for bench/infer.sh: torchvision's
// ResNet-18 or ResNet-50 topology (batch norm folded into the
// convolutions, as an exported model in eval mode has it), float32 input
// "input" [batch, 3, 224, 224], output "logits" [batch, 1000]. No Python
// and no download: the same file for a seed on every machine.
//
//	go run ./bench/resnetshaped -out /tmp/resnet50.onnx           # ResNet-50 (98 MiB)
//	go run ./bench/resnetshaped -out /tmp/resnet18.onnx -depth 18 # ResNet-18 (45 MiB)
//
// Weights are He-scaled (std √(2/fan-in)) uniform values from a PCG
// seeded with -seed; the last convolution of each residual block is
// scaled by 1/4 so that activations stay finite over the 16 blocks.
package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"

	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/onnx"
	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

func main() {
	out := flag.String("out", "", "the .onnx file to write (required)")
	depth := flag.Int("depth", 50, "18 or 50: ResNet-18 (basic blocks) or ResNet-50 (bottlenecks)")
	seed := flag.Uint64("seed", 0, "seed of the weights")
	flag.Parse()
	if *out == "" || (*depth != 18 && *depth != 50) {
		fmt.Fprintln(os.Stderr, "usage: resnetshaped -out FILE [-depth 18|50] [-seed N]")
		os.Exit(2)
	}
	m, err := build(*depth, *seed)
	if err == nil {
		err = m.WriteFile(*out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "resnetshaped:", err)
		os.Exit(1)
	}
}

// builder accumulates the graph.
type builder struct {
	rng   *rand.Rand
	nodes []*onnxpb.NodeProto
	init  []*onnxpb.TensorProto
	n     int // names made so far
}

func (b *builder) name(p string) string { b.n++; return fmt.Sprintf("%s_%d", p, b.n) }

// param adds a weight of the given dims, uniform with standard deviation
// std, and returns its name.
func (b *builder) param(std float64, dims ...int64) string {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	v := make([]float32, n)
	a := std * math.Sqrt(3) // uniform on [-a, a] has standard deviation std
	for i := range v {
		v[i] = float32((2*b.rng.Float64() - 1) * a)
	}
	name := b.name("w")
	b.init = append(b.init, onnx.NewTensorFloat(name, dims, v))
	return name
}

// conv adds Conv(x) with a bias (the folded batch norm), k×k, stride s,
// padding k/2, from cin to cout channels, and a Relu when relu.
func (b *builder) conv(x string, cin, cout, k, s int64, relu bool, gain float64) string {
	w := b.param(gain*math.Sqrt(2/float64(cin*k*k)), cout, cin, k, k)
	bias := b.param(0.01, cout)
	y := b.name("conv")
	p := k / 2
	b.nodes = append(b.nodes, onnx.NewNode("Conv", []string{x, w, bias}, []string{y},
		onnx.AttrInts("kernel_shape", k, k), onnx.AttrInts("strides", s, s), onnx.AttrInts("pads", p, p, p, p)))
	if relu {
		return b.relu(y)
	}
	return y
}

func (b *builder) relu(x string) string {
	y := b.name("relu")
	b.nodes = append(b.nodes, onnx.NewNode("Relu", []string{x}, []string{y}))
	return y
}

// block adds one residual block: basic (two 3×3) for ResNet-18,
// bottleneck (1×1, 3×3, 1×1 ×4) for ResNet-50.
func (b *builder) block(x string, cin, width, stride int64, bottleneck bool) (string, int64) {
	cout := width
	var y string
	if bottleneck {
		cout = 4 * width
		y = b.conv(x, cin, width, 1, 1, true, 1)
		y = b.conv(y, width, width, 3, stride, true, 1)
		y = b.conv(y, width, cout, 1, 1, false, 0.25)
	} else {
		y = b.conv(x, cin, width, 3, stride, true, 1)
		y = b.conv(y, width, cout, 3, 1, false, 0.25)
	}
	short := x
	if stride != 1 || cin != cout {
		short = b.conv(x, cin, cout, 1, stride, false, 1)
	}
	sum := b.name("add")
	b.nodes = append(b.nodes, onnx.NewNode("Add", []string{y, short}, []string{sum}))
	return b.relu(sum), cout
}

func build(depth int, seed uint64) (*onnx.Model, error) {
	b := &builder{rng: rand.New(rand.NewPCG(seed, 0x5eed))}
	blocks, bottleneck := []int{2, 2, 2, 2}, false
	if depth == 50 {
		blocks, bottleneck = []int{3, 4, 6, 3}, true
	}
	x := b.conv("input", 3, 64, 7, 2, true, 1)
	pool := b.name("pool")
	b.nodes = append(b.nodes, onnx.NewNode("MaxPool", []string{x}, []string{pool},
		onnx.AttrInts("kernel_shape", 3, 3), onnx.AttrInts("strides", 2, 2), onnx.AttrInts("pads", 1, 1, 1, 1)))
	x, c := pool, int64(64)
	for stage, n := range blocks {
		width := int64(64) << stage
		for i := range n {
			stride := int64(1)
			if stage > 0 && i == 0 {
				stride = 2
			}
			x, c = b.block(x, c, width, stride, bottleneck)
		}
	}
	b.nodes = append(b.nodes,
		onnx.NewNode("GlobalAveragePool", []string{x}, []string{"gap"}),
		onnx.NewNode("Flatten", []string{"gap"}, []string{"flat"}),
		onnx.NewNode("Gemm", []string{"flat", b.param(math.Sqrt(1/float64(c)), 1000, c), b.param(0.01, 1000)}, []string{"logits"}, onnx.AttrInt("transB", 1)),
	)
	return onnx.FromProto(&onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		Graph: &onnxpb.GraphProto{
			Name:        proto.String(fmt.Sprintf("resnet%d_shaped", depth)),
			Node:        b.nodes,
			Initializer: b.init,
			Input:       []*onnxpb.ValueInfoProto{onnx.NewValueInfo("input", onnx.Float, onnx.Shape{{Param: "batch"}, {Value: 3}, {Value: 224}, {Value: 224}})},
			Output:      []*onnxpb.ValueInfoProto{onnx.NewValueInfo("logits", onnx.Float, onnx.Shape{{Param: "batch"}, {Value: 1000}})},
		},
	})
}
