package export

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/onnx"
	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// MinOpset is the lowest default-domain opset the appended nodes need
// (Softmax over the last axis, ReduceSum with axes as an input).
const MinOpset = 13

// Subgraph is the calibrator as ONNX nodes: Nodes read the float32 logits
// tensor named Input and write float32 probabilities to Output, using the
// constant tensors Initializers. All names it creates start with the
// prefix given to Build, so it can be spliced into any graph that has no
// name with that prefix.
type Subgraph struct {
	Input, Output string
	Nodes         []*onnxpb.NodeProto
	Initializers  []*onnxpb.TensorProto
}

// Build returns the nodes computing c's calibrated probabilities from the
// logits tensor named input into a tensor named output, with standard ONNX
// operators of opset MinOpset (SPEC §9). The computation runs in float64,
// as calib does, and the result is cast to float32, so the exported model
// reproduces the Go calibrator to rounding — including the bin chosen at
// every bin edge — rather than approximating it. Every created name starts
// with prefix.
func Build(c calib.Calibrator, input, output, prefix string) (*Subgraph, error) {
	return build(c, source{tensor: input, kind: logits.InputLogits}, output, prefix)
}

// build is Build reading the input src describes: logits, or
// probabilities whose log the calibrator reads.
func build(c calib.Calibrator, src source, output, prefix string) (*Subgraph, error) {
	b := &builder{prefix: prefix}
	z := b.op("Cast", []string{src.tensor}, onnx.AttrInt("to", int64(onnx.Double)))
	if src.kind == logits.InputProbabilities {
		z = b.logProbabilities(z, src)
	}
	var probs string
	switch c := c.(type) {
	case *calib.Temperature:
		probs = b.softmax(b.op("Div", []string{z, b.scalar("t", c.T)}))
	case *calib.Vector:
		k := len(c.A)
		probs = b.softmax(b.op("Add", []string{
			b.op("Mul", []string{z, b.tensor("a", []int64{1, int64(k)}, c.A)}),
			b.tensor("b", []int64{1, int64(k)}, c.B),
		}))
	case *calib.Matrix:
		probs = b.softmax(b.affine(z, c.A, c.B))
	case *calib.Dirichlet:
		// Matrix scaling of the log-probabilities, clamped below at
		// log calib.DirichletProbabilityFloor as Predict clamps them.
		// LogSoftmax, unlike the Log of a Softmax, stays finite where a
		// probability underflows.
		lp := b.op("Max", []string{
			b.op("LogSoftmax", []string{z}, onnx.AttrInt("axis", -1)),
			b.scalar("dirichlet_logfloor", math.Log(calib.DirichletProbabilityFloor)),
		})
		probs = b.softmax(b.affine(lp, c.W, c.B))
	case *calib.OPVector:
		k := len(c.A)
		sorted, perm := b.topK(z, k)
		// m = softplus(a ⊙ y + b), weights indexed by rank.
		m := b.softplus(b.op("Add", []string{
			b.op("Mul", []string{sorted, b.tensor("a", []int64{1, int64(k)}, c.A)}),
			b.tensor("b", []int64{1, int64(k)}, c.B),
		}))
		probs = b.orderPreserving(z, sorted, perm, m, k)
	case *calib.FedCalMLP:
		k := len(c.B3)
		h := int64(calib.FedCalHidden)
		// m = softplus(W3·relu(W2·relu(W1·z + b1) + b2) + b3) on the logits
		// in class order; Gemm with transB as the weights are output×input.
		h1 := b.op("Relu", []string{b.op("Gemm", []string{z, b.tensor("w1", []int64{h, int64(k)}, c.W1), b.tensor("b1", []int64{h}, c.B1)}, onnx.AttrInt("transB", 1))})
		h2 := b.op("Relu", []string{b.op("Gemm", []string{h1, b.tensor("w2", []int64{h, h}, c.W2), b.tensor("b2", []int64{h}, c.B2)}, onnx.AttrInt("transB", 1))})
		u := b.op("Gemm", []string{h2, b.tensor("w3", []int64{int64(k), h}, c.W3), b.tensor("b3", []int64{int64(k)}, c.B3)}, onnx.AttrInt("transB", 1))
		sorted, perm := b.topK(z, k)
		probs = b.orderPreserving(z, sorted, perm, b.softplus(u), k)
	case *calib.Platt:
		// σ(a ⊙ z + b), normalised (softmax(z) where the sum is 0).
		k := int64(len(c.A))
		g := b.op("Sigmoid", []string{b.op("Add", []string{
			b.op("Mul", []string{z, b.tensor("a", []int64{1, k}, c.A)}),
			b.tensor("b", []int64{1, k}, c.B),
		})})
		probs = b.normaliseOr(g, b.softmax(z))
	case *calib.Beta:
		// σ(a ⊙ ln s − b ⊙ ln(1 − s) + c) with s = softmax(z) clipped to
		// [ε, 1 − ε] as Predict clips it, normalised (p where the sum
		// is 0).
		k := int64(len(c.A))
		p := b.softmax(z)
		s := b.op("Clip", []string{p, b.scalar("lo", calib.BetaEpsilon), b.scalar("hi", 1-calib.BetaEpsilon)})
		u := b.op("Add", []string{
			b.op("Sub", []string{
				b.op("Mul", []string{b.op("Log", []string{s}), b.tensor("a", []int64{1, k}, c.A)}),
				b.op("Mul", []string{b.op("Log", []string{b.op("Sub", []string{b.scalar("one", 1), s})}), b.tensor("b", []int64{1, k}, c.B)}),
			}),
			b.tensor("c", []int64{1, k}, c.C),
		})
		probs = b.normaliseOr(b.op("Sigmoid", []string{u}), p)
	case *calib.EqualMass:
		probs = b.binning(z, c.Table, c.Bins, &c.Weights)
	case *calib.Histogram:
		probs = b.binning(z, c.Table, c.Bins, &c.Weights)
	case *calib.BBQ:
		probs = b.binning(z, c.Table, 1<<c.Mexp, &c.Weights)
	case *calib.Isotonic:
		if c.Exact() {
			probs = b.piecewiseLinear(z, c)
			break
		}
		probs = b.binning(z, c.Table, c.Bins, &c.Weights)
	case *calib.ScalingBinning:
		probs = b.scalingBinning(z, c)
	default:
		return nil, fmt.Errorf("export: no ONNX form for calibrator method %q", c.Method())
	}
	b.nodes = append(b.nodes, onnx.NewNode("Cast", []string{probs}, []string{output}, onnx.AttrInt("to", int64(onnx.Float))))
	return &Subgraph{Input: src.tensor, Output: output, Nodes: b.nodes, Initializers: b.inits}, nil
}

// builder accumulates nodes and initializers with unique prefixed names.
type builder struct {
	prefix string
	n      int
	nodes  []*onnxpb.NodeProto
	inits  []*onnxpb.TensorProto
}

func (b *builder) fresh(s string) string {
	b.n++
	return fmt.Sprintf("%s%s_%d", b.prefix, s, b.n)
}

// op appends a node with one output and returns the output's name.
func (b *builder) op(op string, inputs []string, attrs ...*onnxpb.AttributeProto) string {
	out := b.fresh(op)
	n := onnx.NewNode(op, inputs, []string{out}, attrs...)
	n.Name = proto.String(out)
	b.nodes = append(b.nodes, n)
	return out
}

// opN appends a node with k outputs.
func (b *builder) opN(op string, k int, inputs []string, attrs ...*onnxpb.AttributeProto) []string {
	outs := make([]string, k)
	base := b.fresh(op)
	for i := range outs {
		outs[i] = fmt.Sprintf("%s_out%d", base, i)
	}
	n := onnx.NewNode(op, inputs, outs, attrs...)
	n.Name = proto.String(base)
	b.nodes = append(b.nodes, n)
	return outs
}

func (b *builder) tensor(name string, dims []int64, v []float64) string {
	t := &onnxpb.TensorProto{
		Name:       proto.String(b.fresh(name)),
		DataType:   proto.Int32(int32(onnx.Double)),
		Dims:       dims,
		DoubleData: append([]float64(nil), v...),
	}
	b.inits = append(b.inits, t)
	return t.GetName()
}

func (b *builder) scalar(name string, v float64) string { return b.tensor(name, nil, []float64{v}) }

func (b *builder) ints(name string, v ...int64) string {
	t := onnx.NewTensorInt64(b.fresh(name), []int64{int64(len(v))}, v)
	b.inits = append(b.inits, t)
	return t.GetName()
}

func (b *builder) softmax(x string) string {
	return b.op("Softmax", []string{x}, onnx.AttrInt("axis", -1))
}

// affine computes x·Aᵀ + b for row vectors x of k values, with A the k×k
// matrix a (row-major) and b the bias: the calibrated logits Ax + b of
// calib.Matrix and calib.Dirichlet.
func (b *builder) affine(x string, a, bias []float64) string {
	k := len(bias)
	at := make([]float64, k*k)
	for i := 0; i < k; i++ {
		for j := 0; j < k; j++ {
			at[j*k+i] = a[i*k+j]
		}
	}
	return b.op("Add", []string{
		b.op("MatMul", []string{x, b.tensor("at", []int64{int64(k), int64(k)}, at)}),
		b.tensor("b", []int64{1, int64(k)}, bias),
	})
}

// softplus computes log(1 + eˣ) stably as relu(x) + log(1 + e^−|x|), which
// stays finite for any finite x (ONNX's Softplus overflows for large x).
func (b *builder) softplus(x string) string {
	one := b.scalar("one", 1)
	tail := b.op("Log", []string{b.op("Add", []string{one, b.op("Exp", []string{b.op("Neg", []string{b.op("Abs", []string{x})})})})})
	return b.op("Add", []string{b.op("Relu", []string{x}), tail})
}

// topK sorts each row of z in descending order, returning the sorted
// values and the permutation (int64 class indices).
func (b *builder) topK(z string, k int) (sorted, perm string) {
	outs := b.opN("TopK", 2, []string{z, b.ints("k", int64(k))}, onnx.AttrInt("axis", -1), onnx.AttrInt("largest", 1), onnx.AttrInt("sorted", 1))
	return outs[0], outs[1]
}

// orderPreserving finishes the order-preserving map of calib.OPVector:
// gaps d_k = y_k − y_{k+1}, weights w_k = d_k·m_k (the last rank scales
// no gap), calibrated sorted logits o_k = −Σ_{i<k} w_i, softmax, and the
// permutation undone.
func (b *builder) orderPreserving(z, sorted, perm, m string, k int) string {
	hi := b.op("Slice", []string{sorted, b.ints("start", 0), b.ints("end", int64(k-1)), b.ints("axis", 1)})
	lo := b.op("Slice", []string{sorted, b.ints("start", 1), b.ints("end", int64(k)), b.ints("axis", 1)})
	gap := b.op("Sub", []string{hi, lo})
	// Pad the C−1 gaps with a zero so the exclusive cumulative sum has C
	// terms: o_k = −Σ_{i<k} w_i with o_0 = 0.
	gapC := b.op("Pad", []string{gap, b.ints("pads", 0, 0, 0, 1), b.scalar("zero", 0)})
	w := b.op("Mul", []string{gapC, m})
	o := b.op("Neg", []string{b.op("CumSum", []string{w, b.ints("axis", 1)}, onnx.AttrInt("exclusive", 1))})
	ps := b.softmax(o)
	zero := b.op("Mul", []string{z, b.scalar("zero", 0)})
	return b.op("ScatterElements", []string{zero, perm, ps}, onnx.AttrInt("axis", 1))
}

// binning computes a binning calibrator with a per-class lookup table of
// bins entries per class (calib.EmptyBin where empty), weighting and
// normalisation, as calib's predictTable does.
func (b *builder) binning(z string, table []float64, bins int, wt *calib.Weights) string {
	c := len(table) / bins
	p := b.softmax(z)
	// Bin index min(floor(p·B), B−1), clipped below at 0 as calib.Bin.
	fl := b.op("Floor", []string{b.op("Mul", []string{p, b.scalar("bins", float64(bins))})})
	idx := b.op("Cast", []string{b.op("Clip", []string{fl, b.scalar("lo", 0), b.scalar("hi", float64(bins-1))})}, onnx.AttrInt("to", int64(onnx.Int64)))
	offs := make([]int64, c)
	for j := range offs {
		offs[j] = int64(j * bins)
	}
	offT := onnx.NewTensorInt64(b.fresh("offsets"), []int64{1, int64(c)}, offs)
	b.inits = append(b.inits, offT)
	flat := b.op("Add", []string{idx, offT.GetName()})
	t := b.op("Gather", []string{b.tensor("table", []int64{int64(len(table))}, table), flat}, onnx.AttrInt("axis", 0))
	// Empty bins (EmptyBin < 0) keep the probability.
	g := b.op("Where", []string{b.op("Less", []string{t, b.scalar("zero", 0)}), p, t})
	return b.weighted(g, p, wt)
}

// weighted finishes the one-vs-all calibrators (binning, exact
// isotonic): the class values g of the probabilities p, weighted by wt
// and normalised as calib does.
func (b *builder) weighted(g, p string, wt *calib.Weights) string {
	c := len(wt.Alpha)
	active := (wt.Weighting == calib.WeightAll || wt.Weighting == calib.WeightChanged) && wt.Alpha != nil
	if !active {
		return b.normaliseOr(g, p)
	}
	oneMinus := make([]float64, c)
	for j, a := range wt.Alpha {
		oneMinus[j] = 1 - a
	}
	blend := b.op("Add", []string{
		b.op("Mul", []string{b.tensor("alpha", []int64{1, int64(c)}, wt.Alpha), g}),
		b.op("Mul", []string{b.tensor("one_minus_alpha", []int64{1, int64(c)}, oneMinus), p}),
	})
	weighted := b.normaliseOr(blend, p)
	if wt.Weighting == calib.WeightAll {
		return weighted
	}
	// WeightChanged: weighted only where the unweighted calibrator moves
	// the argmax (first maximum, as calib does).
	u := b.normaliseOr(g, p)
	am := func(x string) string {
		return b.op("ArgMax", []string{x}, onnx.AttrInt("axis", 1), onnx.AttrInt("keepdims", 1))
	}
	same := b.op("Equal", []string{am(u), am(p)})
	return b.op("Where", []string{same, u, weighted})
}

// piecewiseLinear computes exact calib.Isotonic: each class's probability
// p_j clipped to its first and last breakpoint, then NumPy's linear
// interpolation s·(p_j − x_k) + y_k, s = (y_(k+1) − y_k)/(x_(k+1) − x_k),
// with k the last breakpoint at or below p_j; then weighting and
// normalisation as the binning calibrators. The breakpoints of the C
// classes are padded to one length K = max_j K_j + 1, each class with at
// least one point (x_last + 1, y_last) past its last, so that k + 1 always
// exists and, at p_j = x_last, s = 0 and the value is y_last exactly, as
// calib gives it. k is the number of class-j breakpoints ≤ p_j, less one:
// a LessOrEqual of [batch, C, 1] against [C, K] summed over K, so the
// graph compares batch·C·K values (breakpoints are at most twice the
// pooled blocks of each class, docs/CALIBRATION.md).
func (b *builder) piecewiseLinear(z string, c *calib.Isotonic) string {
	k := 0
	for _, x := range c.X {
		k = max(k, len(x)+1)
	}
	classes := len(c.X)
	xs, ys := make([]float64, classes*k), make([]float64, classes*k)
	lo, hi := make([]float64, classes), make([]float64, classes)
	offs := make([]int64, classes)
	for j, x := range c.X {
		y := c.Y[j]
		last := len(x) - 1
		for m := range k {
			xs[j*k+m], ys[j*k+m] = x[last]+1, y[last]
			if m <= last {
				xs[j*k+m], ys[j*k+m] = x[m], y[m]
			}
		}
		lo[j], hi[j] = x[0], x[last]
		offs[j] = int64(j * k)
	}
	p := b.softmax(z)
	shape := []int64{1, int64(classes)}
	v := b.op("Max", []string{b.op("Min", []string{p, b.tensor("x_last", shape, hi)}), b.tensor("x_first", shape, lo)})
	le := b.op("LessOrEqual", []string{
		b.tensor("x", []int64{int64(classes), int64(k)}, xs),
		b.op("Unsqueeze", []string{v, b.ints("axes", 2)}),
	})
	count := b.op("ReduceSum", []string{b.op("Cast", []string{le}, onnx.AttrInt("to", int64(onnx.Int64))), b.ints("axes", 2)}, onnx.AttrInt("keepdims", 0))
	offT := onnx.NewTensorInt64(b.fresh("offsets"), shape, offs)
	b.inits = append(b.inits, offT)
	// Flat index of breakpoint k of class j: j·K + count − 1.
	at := b.op("Add", []string{b.op("Sub", []string{count, b.ints("one", 1)}), offT.GetName()})
	next := b.op("Add", []string{at, b.ints("one", 1)})
	xt := b.tensor("x_flat", []int64{int64(len(xs))}, xs)
	yt := b.tensor("y_flat", []int64{int64(len(ys))}, ys)
	gather := func(t, idx string) string { return b.op("Gather", []string{t, idx}, onnx.AttrInt("axis", 0)) }
	x0, x1, y0, y1 := gather(xt, at), gather(xt, next), gather(yt, at), gather(yt, next)
	slope := b.op("Div", []string{b.op("Sub", []string{y1, y0}), b.op("Sub", []string{x1, x0})})
	g := b.op("Add", []string{b.op("Mul", []string{slope, b.op("Sub", []string{v, x0})}), y0})
	return b.weighted(g, p, &c.Weights)
}

// scalingBinning computes calib.ScalingBinning: binning's lookup of
// g = softmax(z/T) in the calibrator's fine table (calib's FineTable:
// the value of each of the 2^Mexp fine bins of each class, equal to
// comparing g_j with the thresholds, exactly as calib does) and
// normalisation as the binning calibrators. The graph holds C·2^Mexp
// values, as bin's, whatever the number of equal-mass bins.
func (b *builder) scalingBinning(z string, c *calib.ScalingBinning) string {
	return b.binning(b.op("Div", []string{z, b.scalar("t", c.T)}), c.FineTable(), 1<<c.Mexp, &calib.Weights{})
}

// normaliseOr returns g / Σg per row, or p where Σg is not positive.
func (b *builder) normaliseOr(g, p string) string {
	s := b.op("ReduceSum", []string{g, b.ints("axes", 1)}, onnx.AttrInt("keepdims", 1))
	pos := b.op("Greater", []string{s, b.scalar("zero", 0)})
	return b.op("Where", []string{pos, b.op("Div", []string{g, s}), p})
}
