// Package export turns a fitted calibrator into something a serving stack
// can run: nodes appended to the model's ONNX graph, or the JSON sidecar
// file of package calib applied by Go code (see package export/sidecar).
//
// Build expresses every calibrator of package calib with standard ONNX
// operators (SPEC §9): temperature as Div and Softmax; vector and matrix
// scaling as Mul/MatMul, Add and Softmax; Dirichlet calibration as
// LogSoftmax, MatMul, Add and Softmax; the order-preserving scalers
// (OPVector, FedCalMLP) as TopK, Slice, Sub, Pad, Mul, CumSum, Softmax and
// ScatterElements; histogram binning and BBQ as Softmax, a bin index (Mul,
// Floor, Clip, Cast), a Gather from the flattened classes×bins table, the
// weighting (ArgMax and Where for "changed") and the normalisation
// (ReduceSum, Div). The arithmetic runs in float64, as package calib
// computes, so the exported model agrees with the Go calibrator to
// rounding.
//
// CheckModel runs the model alone in ONNX Runtime on random inputs and
// checks that its logits output really is [batch, classes], with the
// calibrator's classes and the declared ones, and finite (a model giving
// NaN is at fault, not the calibrator). SidecarFile adds to it what an
// ONNX export verifies without writing ONNX (finite distributions on the
// probe set and the model's outputs) and records the input kind the
// serving stack must feed. InputKind decides that kind: what the
// calibrator file records it was fitted on (provenance.input), else a
// Softmax that makes the output, found through value-preserving nodes;
// a mismatch is refused.
// Append splices the nodes into a model, keeping its logits output and
// adding a probabilities output, and records the calibrator in the model's
// metadata_props. Verify runs the result with ONNX Runtime against the Go
// calibrator on a probe set covering every bin and extreme logits (and on
// the model's own outputs), through package infer's Graph (infer owns
// ONNX Runtime), and ExportContext does all of these, reporting its stages
// through Options.Progress and stopping when its context is cancelled,
// and writes the file atomically only when verification passes.
//
// For serving stacks (docs/SERVING.md): CalibrateContext returns the
// verified model in memory; WriteTriton (PrepareTriton, then
// TritonEntry.Write) lays it out as an entry of a Triton model repository
// (config.pbtxt for the ONNX Runtime backend, N/model.onnx, labels.txt
// for the classification extension), or as a new version of one; and
// WriteTestVectors writes it with a TestSet of inputs and the outputs
// ONNX Runtime gave (ModelTestSet, ProbeTestSet) in the layout of ONNX's
// test runners, which CheckTestVectors replays within VectorTolerance.
// Append's metadata_props also carry a serving record: the parameters'
// SHA-256 (ParamsSHA256), whether the top class is kept (measured on
// the probe set, KeepsTopClass), and the
// fit's protocol, clients, rounds and privacy accounting (the Key*
// constants).
package export
