package export

import (
	"fmt"
	"math"

	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/onnx"
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
	// softmax is true when tensor is the logits input of the model's
	// final Softmax; the calibrator then reads
	// max(log softmax(tensor), log floor), the log of the output's
	// probabilities computed from the logits themselves.
	softmax bool
}

// calibratorSource decides what the calibrator appended to output reads.
// input is Options.Input: logits.InputLogits calibrates the output as
// logits, whatever produced it; logits.InputProbabilities and "" (detect)
// treat an output made by a Softmax over the last axis as probabilities,
// read through the Softmax's logits input; an explicit
// logits.InputProbabilities on an output made otherwise reads the log of
// the output itself.
func calibratorSource(m *onnx.Model, output, input string) (source, error) {
	switch input {
	case "", logits.InputLogits, logits.InputProbabilities:
	default:
		return source{}, fmt.Errorf("input kind %q: want %q or %q", input, logits.InputLogits, logits.InputProbabilities)
	}
	if input == logits.InputLogits {
		return source{tensor: output, kind: logits.InputLogits}, nil
	}
	if z, ok := softmaxInput(m, output); ok {
		return source{tensor: z, kind: logits.InputProbabilities, softmax: true}, nil
	}
	if input == logits.InputProbabilities {
		return source{tensor: output, kind: logits.InputProbabilities}, nil
	}
	return source{tensor: output, kind: logits.InputLogits}, nil
}

// softmaxInput returns the input of the node that makes output when it
// is a Softmax over the last axis of a rank-2 [batch, classes] tensor
// (opset ≥ 13: axis −1 or 1, the default −1; before 13, axis 1, the
// default, which flattens a rank-2 input to itself).
func softmaxInput(m *onnx.Model, output string) (string, bool) {
	for _, n := range m.Proto().GetGraph().GetNode() {
		if len(n.GetOutput()) != 1 || n.GetOutput()[0] != output {
			continue
		}
		if n.GetOpType() != "Softmax" || (n.GetDomain() != "" && n.GetDomain() != "ai.onnx") || len(n.GetInput()) != 1 {
			return "", false
		}
		axis := int64(-1)
		if m.OpsetVersion("") < 13 {
			axis = 1
		}
		for _, a := range n.GetAttribute() {
			if a.GetName() == "axis" {
				axis = a.GetI()
			}
		}
		if rank := outputRank(m, output); rank != 2 || (axis != -1 && axis != 1) {
			return "", false
		}
		return n.GetInput()[0], true
	}
	return "", false
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
	if src.softmax {
		return b.op("Max", []string{
			b.op("LogSoftmax", []string{z}, onnx.AttrInt("axis", -1)),
			b.scalar("logfloor", math.Log(logits.ProbabilityFloor)),
		})
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
