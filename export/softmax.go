package export

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/onnx"
	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// KeyInput is the metadata key recording what the appended calibrator
// reads: logits.InputLogits, or logits.InputProbabilities when the
// calibrated output holds probabilities (a model ending in a softmax) and
// the calibrator reads their log, log max(p, logits.ProbabilityFloor), as
// `calibrate --input probabilities` fits it. `fedcalib check` reads it to
// turn the model's own output into logits before judging.
const KeyInput = "fedcalib.calibration.input"

// source says where the appended calibrator takes its input from.
type source struct {
	// tensor is the tensor the calibrator's nodes read.
	tensor string
	// kind is logits.InputLogits or logits.InputProbabilities: what the
	// calibrated output holds.
	kind string
	// softmax, when not nil, is the Softmax node that makes the
	// calibrated output (through chain), and tensor is its logits input;
	// the calibrator then reads max(log softmax(tensor), log floor), the
	// log of the output's probabilities computed from the logits
	// themselves.
	softmax *onnxpb.NodeProto
	// chain lists the value-preserving nodes between the Softmax and the
	// output, in graph order (see passThrough).
	chain []*onnxpb.NodeProto
}

// InputKind decides what the calibrated output holds, given what was
// asked (requested: Options.Input, "" to detect) and what the calibrator
// was fitted on (fitted: the calibrator file's provenance.input, "" when
// unrecorded). A fitted kind is honoured; a requested kind that
// contradicts it is refused. Without either, an output made by a Softmax
// (see Options.Input) holds probabilities and any other output logits.
// An output made by a Softmax is refused for a calibrator fitted on
// logits, unless logits were asked for explicitly (the calibrator was
// fitted on that output's raw values).
//
// output "" names the model's first float32 output.
func InputKind(m *onnx.Model, output, requested, fitted string) (string, error) {
	output, err := logitsOutput(m, output)
	if err != nil {
		return "", err
	}
	src, err := calibratorSource(m, output, requested, fitted)
	return src.kind, err
}

// calibratorSource decides what the calibrator appended to output reads;
// see InputKind. An output holding probabilities is read through its
// Softmax's logits input when a Softmax makes it, else as the log of its
// own values.
func calibratorSource(m *onnx.Model, output, requested, fitted string) (source, error) {
	for _, k := range []string{requested, fitted} {
		switch k {
		case "", logits.InputLogits, logits.InputProbabilities:
		default:
			return source{}, fmt.Errorf("input kind %q: want %q or %q", k, logits.InputLogits, logits.InputProbabilities)
		}
	}
	if requested != "" && fitted != "" && requested != fitted {
		return source{}, fmt.Errorf("--input %s, but the calibrator was fitted on %s (its provenance.input): drop --input, or refit the calibrator on %s", requested, fitted, requested)
	}
	kind := cmp.Or(requested, fitted)
	sm, z, chain := softmaxInput(m, output)
	switch {
	case kind == logits.InputLogits && sm != nil && requested == "":
		return source{}, fmt.Errorf("output %q is made by a Softmax (%s), so it holds probabilities, but the calibrator was fitted on logits: name the model's logits output with --logits-output, refit with `calibrate --input probabilities`, or pass --input logits if it was fitted on this output's raw values", output, sm.GetName())
	case kind == logits.InputLogits:
		return source{tensor: output, kind: logits.InputLogits}, nil
	case sm != nil:
		return source{tensor: z, kind: logits.InputProbabilities, softmax: sm, chain: chain}, nil
	case kind == logits.InputProbabilities:
		return source{tensor: output, kind: logits.InputProbabilities}, nil
	}
	return source{tensor: output, kind: logits.InputLogits}, nil
}

// passThrough reports whether node n hands its first input on with the
// same values in the same order: Identity, Cast to float32, and the
// shape operators Reshape, Flatten, Squeeze and Unsqueeze. Verification
// checks that the output they make is [batch, classes] and that its rows
// are distributions.
func passThrough(n *onnxpb.NodeProto) bool {
	if d := n.GetDomain(); (d != "" && d != "ai.onnx") || len(n.GetInput()) == 0 || len(n.GetOutput()) != 1 {
		return false
	}
	switch n.GetOpType() {
	case "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze":
		return true
	case "Cast":
		for _, a := range n.GetAttribute() {
			if a.GetName() == "to" {
				return a.GetI() == int64(onnx.Float)
			}
		}
	}
	return false
}

// softmaxInput finds the Softmax node that makes output, directly or
// through value-preserving nodes (passThrough), and returns it, its
// input, and those nodes in graph order; a nil node when output is made
// otherwise. An output declared with a rank other than 2 has no Softmax.
func softmaxInput(m *onnx.Model, output string) (*onnxpb.NodeProto, string, []*onnxpb.NodeProto) {
	if rank := outputRank(m, output); rank != 0 && rank != 2 {
		return nil, "", nil
	}
	maker := map[string]*onnxpb.NodeProto{}
	for _, n := range m.Proto().GetGraph().GetNode() {
		for _, o := range n.GetOutput() {
			maker[o] = n
		}
	}
	var chain []*onnxpb.NodeProto
	for t := output; len(chain) <= len(maker); {
		n := maker[t]
		switch {
		case n == nil:
			return nil, "", nil
		case n.GetOpType() == "Softmax" && (n.GetDomain() == "" || n.GetDomain() == "ai.onnx") && len(n.GetInput()) == 1:
			slices.Reverse(chain)
			return n, n.GetInput()[0], chain
		case !passThrough(n):
			return nil, "", nil
		}
		chain = append(chain, n)
		t = n.GetInput()[0]
	}
	return nil, "", nil
}

// outputRank returns the rank of the named graph output, or 0 when its
// shape is not recorded.
func outputRank(m *onnx.Model, name string) int {
	for _, o := range m.Outputs() {
		if o.Name == name {
			return len(o.Shape)
		}
	}
	return 0
}

// logProbabilities appends to b the nodes turning the float64 tensor z
// read from src into the log-probabilities a calibrator fitted with
// `--input probabilities` reads, log max(p, floor), and returns their
// name: from the Softmax's logits, max(LogSoftmax(z), log floor); from
// probabilities, Log(Max(p, floor)).
func (b *builder) logProbabilities(z string, src source) string {
	if src.softmax != nil {
		// LogSoftmax over the Softmax's own axis (the same attributes,
		// the same opset), then the shape operators of the chain with
		// their own shape inputs, so the result has the output's layout.
		lp := b.op("LogSoftmax", []string{z}, src.softmax.GetAttribute()...)
		for _, n := range src.chain {
			switch n.GetOpType() {
			case "Identity", "Cast": // the values are already float64
				continue
			}
			lp = b.op(n.GetOpType(), append([]string{lp}, n.GetInput()[1:]...), n.GetAttribute()...)
		}
		return b.op("Max", []string{lp, b.scalar("logfloor", math.Log(logits.ProbabilityFloor))})
	}
	return b.op("Log", []string{b.op("Max", []string{z, b.scalar("floor", logits.ProbabilityFloor)})})
}

// toLogits turns the calibrated output's values, read back from ONNX
// Runtime, into the logits the Go calibrator reads: unchanged for
// logits, log max(p, floor) for probabilities (rows that are not
// distributions are an error).
func toLogits(values []float32, classes int, kind string) ([]float32, error) {
	if kind != logits.InputProbabilities {
		return values, nil
	}
	f := &logits.File{Classes: classes, Logits: append([]float32(nil), values...), Labels: make([]int32, len(values)/classes)}
	if err := f.FromProbabilities(); err != nil {
		return nil, fmt.Errorf("the calibrated output does not hold probabilities: %w", err)
	}
	return f.Logits, nil
}
