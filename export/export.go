package export

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/internal/fileio"
	"github.com/fedcalib/fedcalib/onnx"
	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// Metadata keys written into the calibrated model's metadata_props.
const (
	KeyMethod  = "fedcalib.calibration.method"  // the calibrator's method
	KeyLogits  = "fedcalib.calibration.logits"  // name of the logits output
	KeyOutput  = "fedcalib.calibration.output"  // name of the probabilities output
	KeySidecar = "fedcalib.calibration.sidecar" // the whole calibrator file (JSON)
	KeyEpsilon = "fedcalib.calibration.epsilon" // ε of a private fit
	KeyDelta   = "fedcalib.calibration.delta"   // δ of a private fit
)

// Tolerance is the largest absolute difference between the exported
// model's probabilities and the Go calibrator's that Verify accepts.
const Tolerance = 1e-5

// DefaultOutput is the name of the added probabilities output when
// Options.Output is empty.
const DefaultOutput = "probabilities"

// Options configures Append, Verify, CheckModel and ExportContext. The
// zero value calibrates the model's first float32 output into a new
// output named DefaultOutput, reporting no progress.
type Options struct {
	// Logits names the model output holding the logits. Empty means the
	// first float32 output.
	Logits string
	// Input says what that output holds: logits.InputLogits, or
	// logits.InputProbabilities (a model ending in a softmax), whose log
	// max(p, logits.ProbabilityFloor) the calibrator then reads, as
	// `calibrate --input probabilities` fitted it. Empty means what the
	// calibrator file records (provenance.input), else detect: an output
	// made by a Softmax (through value-preserving nodes) is
	// probabilities, read through the Softmax's logits input; any other
	// output is logits. See InputKind for the mismatches refused.
	Input string
	// Output names the added probabilities output. Empty means
	// DefaultOutput.
	Output string
	// Runtime is the ONNX Runtime library for verification; empty means
	// infer.ResolveRuntime's search.
	Runtime string
	// Seed seeds the probe set and the random model inputs of Verify.
	Seed uint64
	// Preprocess holds metadata_props to write into the calibrated model:
	// the fedcalib.input.* keys (infer.IsInputKey) that say how records
	// become its input, as infer's flags gave them when the logits the
	// calibrator was fitted on were made (e.g. infer.Preset("imagenet")),
	// so that infer runs the exported model the same way with no flags.
	// They replace the model's own values key by key, and the result must
	// parse (infer.ParsePreprocessing). Nil writes none.
	Preprocess map[string]string
	// Progress, when not nil, is called as each stage of ExportContext
	// or CheckModel begins, and once more when all are done. Nil reports
	// nothing.
	Progress func(Progress)
}

const prefix = "fedcalib_"

// Append splices calibrator c (described by file, which may be nil) into
// m: the nodes computing calibrated probabilities from the logits output
// are appended to the graph, a float32 [batch, classes] output is added,
// the metadata_props record the calibrator (the Key* constants) and
// Options.Preprocess, and the default-domain opset is raised to MinOpset when that is safe. The
// calibrator file's class names must agree with the model's
// fedcalib.classes (an error wrapping calib.ErrClassNames), and are
// written there when the model has none. It returns the names of the
// logits and probabilities outputs. Untouched parts of m keep their
// bytes.
func Append(m *onnx.Model, c calib.Calibrator, file *calib.File, opt Options) (logitsName, outName string, err error) {
	logitsName, err = logitsOutput(m, opt.Logits)
	if err != nil {
		return "", "", err
	}
	if k := outputClasses(m, logitsName); k > 0 && k != c.Classes() {
		return "", "", fmt.Errorf("output %q has %d classes but the calibrator has %d: was it fitted on this model's logits?", logitsName, k, c.Classes())
	}
	names, err := classNamesMetadata(m, file)
	if err != nil {
		return "", "", err
	}
	pre, err := preprocessMetadata(m, opt.Preprocess)
	if err != nil {
		return "", "", err
	}
	outName = opt.Output
	if outName == "" {
		outName = DefaultOutput
	}
	if err := checkNames(m, outName); err != nil {
		return "", "", err
	}
	if err := raiseOpset(m); err != nil {
		return "", "", err
	}
	src, err := calibratorSource(m, logitsName, opt.Input, fittedInput(file))
	if err != nil {
		return "", "", err
	}
	sg, err := build(c, src, outName, prefix)
	if err != nil {
		return "", "", err
	}
	m.AddInitializers(sg.Initializers...)
	m.AddNodes(sg.Nodes...)
	m.AddOutputs(onnx.NewValueInfo(outName, onnx.Float, onnx.Shape{{Param: "batch"}, {Value: int64(c.Classes())}}))
	m.SetMetadata(KeyMethod, c.Method())
	m.SetMetadata(KeyLogits, logitsName)
	m.SetMetadata(KeyOutput, outName)
	m.SetMetadata(KeyInput, src.kind)
	props, err := servingMetadata(c, file, opt.Seed)
	if err != nil {
		return "", "", err
	}
	for _, p := range slices.Concat(props, names, pre) {
		m.SetMetadata(p.Key, p.Value)
	}
	if file != nil {
		var buf bytes.Buffer
		f := *file
		f.Provenance.Input = src.kind // what the output holds, now known
		if err := calib.EncodeFile(&buf, c, &f); err != nil {
			return "", "", err
		}
		m.SetMetadata(KeySidecar, strings.TrimSpace(buf.String()))
		if p := file.Privacy; p != nil {
			m.SetMetadata(KeyEpsilon, fmt.Sprint(p.Epsilon))
			m.SetMetadata(KeyDelta, fmt.Sprint(p.Delta))
		}
	}
	return logitsName, outName, nil
}

// preprocessMetadata checks the preprocessing keys to write into m
// (Options.Preprocess) and returns them in key order: each must be an
// infer input key, and m's own preprocessing with them in place of its
// values must parse.
func preprocessMetadata(m *onnx.Model, set map[string]string) ([]onnx.Prop, error) {
	if len(set) == 0 {
		return nil, nil
	}
	merged := make(map[string]string)
	for _, p := range m.Metadata() {
		if infer.IsInputKey(p.Key) {
			merged[p.Key] = p.Value
		}
	}
	var props []onnx.Prop
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if !infer.IsInputKey(k) {
			return nil, fmt.Errorf("preprocessing key %q: not one of the fedcalib.input.* keys infer reads", k)
		}
		merged[k] = set[k]
		props = append(props, onnx.Prop{Key: k, Value: set[k]})
	}
	if _, err := infer.ParsePreprocessing(merged); err != nil {
		return nil, fmt.Errorf("the preprocessing to record: %w", err)
	}
	return props, nil
}

// fittedInput returns the input kind file records, "" for a nil file.
func fittedInput(file *calib.File) string {
	if file == nil {
		return ""
	}
	return file.Provenance.Input
}

// logitsOutput returns the named output, or the first float32 one.
func logitsOutput(m *onnx.Model, name string) (string, error) {
	outs := m.Outputs()
	for _, o := range outs {
		if (name == "" && o.Elem == onnx.Float) || (name != "" && o.Name == name) {
			if o.Elem != onnx.Float {
				return "", fmt.Errorf("output %q is %s: the logits must be float32", o.Name, o.Type)
			}
			return o.Name, nil
		}
	}
	if name != "" {
		names := make([]string, len(outs))
		for i, o := range outs {
			names[i] = o.Name
		}
		return "", fmt.Errorf("model has no output %q (outputs: %s)", name, strings.Join(names, ", "))
	}
	return "", fmt.Errorf("model has no float32 output to calibrate")
}

// outputClasses returns the last dimension of the named output when it
// is known, else 0.
func outputClasses(m *onnx.Model, name string) int {
	for _, o := range m.Outputs() {
		if o.Name == name && len(o.Shape) > 0 && o.Shape[len(o.Shape)-1].Known() {
			return int(o.Shape[len(o.Shape)-1].Value)
		}
	}
	return 0
}

// checkNames refuses an output name or the node prefix already in use.
func checkNames(m *onnx.Model, out string) error {
	g := m.Proto().GetGraph()
	for _, n := range g.GetNode() {
		for _, o := range n.GetOutput() {
			if o == out {
				return fmt.Errorf("the model already has a tensor named %q: choose another output name", out)
			}
			if strings.HasPrefix(o, prefix) {
				return fmt.Errorf("the model already has tensors named %s*: is it calibrated already?", prefix)
			}
		}
	}
	for _, v := range slices.Concat(g.GetInput(), g.GetOutput()) {
		if v.GetName() == out {
			return fmt.Errorf("the model already has a tensor named %q: choose another output name", out)
		}
	}
	return nil
}

// opsetRaise lists the operators a model of opset 7 to 12 may use for
// its opset to be raised to MinOpset, each with nil when its meaning does
// not change for the tensors a classifier uses (later versions only add
// element types or attributes with the old default), else a function
// saying why a node of it cannot be raised (nil error: it can). Nodes
// are never rewritten: every byte of the model outside the appended
// calibrator is kept.
var opsetRaise = map[string]func(n *onnxpb.NodeProto) error{
	"Abs": nil, "Add": nil, "AveragePool": nil, "BatchNormalization": raiseBatchNorm,
	"Cast": nil, "Concat": nil, "Constant": nil, "Conv": nil, "Div": nil,
	"Dropout": raiseDropout, "Exp": nil, "Flatten": nil, "Gemm": nil,
	"GlobalAveragePool": nil, "Identity": nil, "LeakyRelu": nil,
	"Log": nil, "MatMul": nil, "MaxPool": nil, "Mul": nil, "Neg": nil,
	"Relu": nil, "Reshape": nil, "Sigmoid": nil, "Sqrt": nil, "Sub": nil,
	"Tanh": nil, "Transpose": nil,
}

// raiseDropout refuses a Dropout that opset 13 reads differently: one
// with a ratio attribute (an input from opset 12, the attribute unknown)
// or that uses its mask output (whose type changed at opset 10).
func raiseDropout(n *onnxpb.NodeProto) error {
	if len(n.GetOutput()) > 1 && n.GetOutput()[1] != "" {
		return fmt.Errorf("node %q (Dropout) uses its mask output, whose type changed at opset 10", n.GetName())
	}
	for _, a := range n.GetAttribute() {
		if a.GetName() == "ratio" {
			return fmt.Errorf("node %q (Dropout) has a ratio attribute, which opset 12 made an input", n.GetName())
		}
	}
	return nil
}

// raiseBatchNorm refuses a BatchNormalization that opset 13 reads
// differently: one with a spatial attribute (removed at opset 9) or with
// training outputs (running mean and variance, changed at opset 9).
func raiseBatchNorm(n *onnxpb.NodeProto) error {
	if len(n.GetOutput()) > 1 {
		return fmt.Errorf("BatchNormalization %q has training outputs, which opset 9 changed", n.GetName())
	}
	for _, a := range n.GetAttribute() {
		if a.GetName() == "spatial" {
			return fmt.Errorf("BatchNormalization %q has a spatial attribute, which opset 9 removed", n.GetName())
		}
	}
	return nil
}

// raiseOpset makes the default-domain opset at least MinOpset, refusing
// when the opset is below 7 or an operator might change meaning
// (opsetRaise), naming it.
func raiseOpset(m *onnx.Model) error {
	v := m.OpsetVersion("")
	if v >= MinOpset {
		return nil
	}
	if v < 7 {
		return fmt.Errorf("the model uses opset %d and the calibrator needs %d, which fedcalib raises only from opset 7: re-export the model with opset >= %d", v, MinOpset, MinOpset)
	}
	var unsafe, why []string
	for _, n := range m.Proto().GetGraph().GetNode() {
		d, op := n.GetDomain(), n.GetOpType()
		if d != "" && d != "ai.onnx" {
			continue
		}
		raise, ok := opsetRaise[op]
		switch {
		case !ok && !slices.Contains(unsafe, op):
			unsafe = append(unsafe, op)
		case raise != nil:
			if err := raise(n); err != nil {
				why = append(why, err.Error())
			}
		}
	}
	if len(unsafe) > 0 {
		return fmt.Errorf("the model uses opset %d and the calibrator needs %d, but raising it could change the meaning of %s: re-export the model with opset >= %d", v, MinOpset, strings.Join(unsafe, ", "), MinOpset)
	}
	if len(why) > 0 {
		return fmt.Errorf("the model uses opset %d and the calibrator needs %d, but %s: re-export the model with opset >= %d", v, MinOpset, strings.Join(why, "; "), MinOpset)
	}
	m.SetOpsetVersion("", MinOpset)
	if m.IRVersion() < 7 { // opset 13 needs IR version 7
		m.SetIRVersion(7)
	}
	return nil
}

// Standalone returns a model with one float32 input "logits"
// [batch, classes] and one float32 output "probabilities": calibrator c
// alone, for serving stacks that run the classifier separately and for
// verification.
func Standalone(c calib.Calibrator) (*onnx.Model, error) {
	sg, err := Build(c, "logits", DefaultOutput, prefix)
	if err != nil {
		return nil, err
	}
	shape := onnx.Shape{{Param: "batch"}, {Value: int64(c.Classes())}}
	pb := &onnxpb.ModelProto{
		IrVersion:    proto.Int64(8),
		ProducerName: proto.String("fedcalib"),
		OpsetImport:  []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(MinOpset)}},
		Graph: &onnxpb.GraphProto{
			Name:        proto.String("fedcalib_" + c.Method()),
			Node:        sg.Nodes,
			Initializer: sg.Initializers,
			Input:       []*onnxpb.ValueInfoProto{onnx.NewValueInfo("logits", onnx.Float, shape)},
			Output:      []*onnxpb.ValueInfoProto{onnx.NewValueInfo(DefaultOutput, onnx.Float, shape)},
		},
	}
	return onnx.FromProto(pb)
}

// ProbeBreakpoints is the most breakpoints of each class of an exact
// isotonic calibrator that Probe puts a row at (and as many rows between
// breakpoints), so that the probe set stays C·2·ProbeBreakpoints rows at
// most however many breakpoints a fit keeps; with many classes, fewer
// (probeBreakpoints).
const ProbeBreakpoints = 64

// probeBreakpoints returns the breakpoints of each of c classes that
// Probe puts a row at: ProbeBreakpoints, fewer beyond 128 classes so that
// they make at most 2·8,192 rows in all, and at least 2 (the ends).
func probeBreakpoints(c int) int { return min(ProbeBreakpoints, max(2, 8192/c)) }

// Probe returns a probe set of logits (n×classes, float32, row-major) for
// verifying calibrator c: random logits at several scales, extreme logits
// (±1e4), ties, and, for binning calibrators, for every class and bin a
// row whose softmax probability of that class falls in the middle of
// that bin; for scaling-binning, for every class and positive threshold
// a row whose scaled probability of that class lies at the threshold;
// for exact isotonic regression, for every class, rows whose probability
// of that class lies at its breakpoints and halfway between them (at
// most ProbeBreakpoints of each, evenly spaced, and fewer beyond 128
// classes).
func Probe(c calib.Calibrator, seed uint64) []float32 {
	k := c.Classes()
	rng := rand.New(rand.NewPCG(seed, 0x70726f6265)) // "probe"
	var out []float32
	row := make([]float32, k)
	add := func() { out = append(out, row...) }
	for _, scale := range []float64{0.1, 1, 5, 20, 100} {
		for range 16 {
			for j := range row {
				row[j] = float32(rng.NormFloat64() * scale)
			}
			add()
		}
	}
	for j := 0; j < k; j++ {
		for _, v := range []float32{1e4, -1e4} {
			clear(row)
			row[j] = v
			add()
		}
	}
	for j := range row { // all tied, then a tied top pair
		row[j] = 3
	}
	add()
	for j := range row {
		row[j] = float32(-j)
	}
	row[k-1] = 0
	add()

	var bins int
	switch c := c.(type) {
	case *calib.Histogram:
		bins = c.Bins
	case *calib.BBQ:
		bins = 1 << c.Mexp
	case *calib.Isotonic:
		bins = c.Bins
	case *calib.EqualMass:
		bins = c.Bins
	}
	for j := 0; bins > 0 && j < k; j++ {
		for m := 0; m < bins; m++ {
			p := (float64(m) + 0.5) / float64(bins)
			rest := float32(math.Log((1 - p) / float64(k-1)))
			for i := range row {
				row[i] = rest
			}
			row[j] = float32(math.Log(p))
			add()
		}
	}
	if iso, ok := c.(*calib.Isotonic); ok && iso.Exact() {
		at := func(j int, p float64) {
			if !(p > 0 && p < 1) {
				return
			}
			rest := float32(math.Log((1 - p) / float64(k-1)))
			for i := range row {
				row[i] = rest
			}
			row[j] = float32(math.Log(p))
			add()
		}
		per := probeBreakpoints(k)
		for j, x := range iso.X {
			step := max(1, (len(x)+per-1)/per)
			for m := 0; m < len(x); m += step {
				at(j, x[m])
				if m+1 < len(x) {
					at(j, (x[m]+x[m+1])/2)
				}
			}
		}
	}
	if sb, ok := c.(*calib.ScalingBinning); ok {
		// Rows whose scaled probability of class j lies at each of its
		// distinct thresholds, as near as float32 logits reach (a
		// repeated threshold would repeat the row: with one bin per
		// class at C = 1,000 most are repeats).
		for j := range k {
			th := sb.Thresholds[j*(sb.Bins-1) : (j+1)*(sb.Bins-1)]
			for n, t := range th {
				if t <= 0 || n > 0 && t == th[n-1] {
					continue
				}
				rest := float32(sb.T * math.Log((1-t)/float64(k-1)))
				for i := range row {
					row[i] = rest
				}
				row[j] = float32(sb.T * math.Log(t))
				add()
			}
		}
	}
	return out
}

// Verify runs the standalone form of c with ONNX Runtime on the probe
// logits and compares its probabilities with c.Predict, failing when any
// differs by more than Tolerance or is not finite. It runs the probe
// rows in batches of VerifyRows(c) rows.
func Verify(c calib.Calibrator, probe []float32, opt Options) error {
	return verify(c, probe, opt, VerifyRows(c))
}

// verify is Verify running batches of rows rows.
func verify(c calib.Calibrator, probe []float32, opt Options, rows int) error {
	m, err := Standalone(c)
	if err != nil {
		return err
	}
	g, err := infer.OpenGraph(m.Bytes(), graphOptions(opt.Runtime, []string{"logits"}, []string{DefaultOutput}))
	if err != nil {
		return fmt.Errorf("verify: ONNX Runtime cannot run the calibrator: %w", err)
	}
	defer g.Close()
	k := c.Classes()
	step := rows * k
	got := make([]float32, 0, len(probe))
	for at := 0; at < len(probe); at += step {
		batch := probe[at:min(at+step, len(probe))]
		out, err := g.Run(&infer.Batch{Shape: []int64{int64(len(batch) / k), int64(k)}, Float: batch})
		if err != nil {
			return fmt.Errorf("verify: ONNX Runtime cannot run the calibrator: %w", err)
		}
		got = append(got, out[0]...)
	}
	return compare(c, probe, got)
}

// verifyValues is the most values of the widest intermediate tensor of
// the calibrator graph that one run of Verify makes: 2^24, about 150 MB
// for exact isotonic regression's comparisons (a bool and an int64 each).
const verifyValues = 1 << 24

// VerifyRows returns the rows of a batch that Verify runs: all of them
// for most calibrators (up to 2^24 values of C per row), and for exact
// isotonic regression, whose graph compares every probability with
// every breakpoint of its class (C·K values per row, K its largest
// breakpoint count plus one), as many as keep C·K values per row within
// 2^24, at least one.
func VerifyRows(c calib.Calibrator) int {
	width := c.Classes()
	if iso, ok := c.(*calib.Isotonic); ok && iso.Exact() {
		k := 0
		for _, x := range iso.X {
			k = max(k, len(x)+1)
		}
		width *= k
	}
	return max(1, verifyValues/max(width, 1))
}

// compare checks ONNX Runtime's probabilities against c's on logits.
func compare(c calib.Calibrator, logits, got []float32) error {
	k := c.Classes()
	z := make([]float64, len(logits))
	for i, v := range logits {
		z[i] = float64(v)
	}
	if len(z)%k != 0 || len(got) != len(z) {
		return fmt.Errorf("verify: the model gave %d logits and %d probabilities, which do not fit %d classes", len(z), len(got), k)
	}
	want := make([]float64, len(z))
	c.Predict(want, z)
	if len(got) != len(want) {
		return fmt.Errorf("verify: the exported model gave %d probabilities, want %d", len(got), len(want))
	}
	for i, g := range got {
		if d := math.Abs(float64(g) - want[i]); !(d <= Tolerance) {
			return fmt.Errorf("verify: row %d, class %d: the exported model gives %.9g, the Go calibrator %.9g (difference %.3g > %g); nothing was written", i/k, i%k, g, want[i], d, Tolerance)
		}
	}
	return nil
}

// run runs model bytes on one float32 input and returns the named float32
// outputs.
func run(model []byte, input string, outputs []string, shape []int64, data []float32, runtime string) ([][]float32, error) {
	g, err := infer.OpenGraph(model, graphOptions(runtime, []string{input}, outputs))
	if err != nil {
		return nil, err
	}
	defer g.Close()
	return g.Run(&infer.Batch{Shape: shape, Float: data})
}

// graphOptions configures the ONNX Runtime sessions of verification: one
// intra-op thread, the named inputs and outputs.
func graphOptions(runtime string, inputs, outputs []string) infer.GraphOptions {
	return infer.GraphOptions{Runtime: runtime, Threads: 1, Inputs: inputs, Outputs: outputs}
}

// Stages of ExportContext and CheckModel, as Progress.Stage names them.
const (
	StageModel      = "running the model"              // the model alone, on random inputs
	StageCalibrator = "verifying the calibrator"       // the calibrator alone, on its probe set
	StageWrite      = "writing"                        // the calibrated model, to a temporary file
	StageCalibrated = "verifying the calibrated model" // the whole calibrated model
)

// Progress says how far ExportContext or CheckModel is: Done of Total
// stages are finished and Stage, one of the Stage* constants, runs now;
// Stage is empty once all are done. The zero value is the start of an
// unknown amount of work.
type Progress struct {
	Stage       string
	Done, Total int
}

// stages returns a function reporting the start of each of total stages
// to report, which may be nil; called with "" it reports the end.
func stages(report func(Progress), total int) func(stage string) {
	done := -1
	return func(stage string) {
		done++
		if stage == "" {
			done = total
		}
		if report != nil {
			report(Progress{Stage: stage, Done: done, Total: total})
		}
	}
}

// Export is ExportContext without cancellation.
func Export(modelPath, outPath string, c calib.Calibrator, file *calib.File, opt Options) error {
	return ExportContext(context.Background(), modelPath, outPath, c, file, opt)
}

// ExportContext checks that calibrator c fits the model at modelPath as
// CheckModel does, appends c to it, verifies the result (the calibrator
// alone on its probe set, and the whole model on random inputs: its
// probabilities output must equal c applied to its logits output), and
// writes it atomically to outPath. The input model is never modified; on
// any failure, or when ctx is cancelled, nothing is written and no
// temporary file is left. ctx is checked between stages: a stage running
// in ONNX Runtime finishes first.
//
// A self-contained model is verified from memory before anything is
// written. A model with external data is verified from the temporary
// file of outPath, which must then be in the model's directory, and that
// file becomes outPath when verification passes.
func ExportContext(ctx context.Context, modelPath, outPath string, c calib.Calibrator, file *calib.File, opt Options) error {
	if fileio.Same(modelPath, outPath) {
		return fmt.Errorf("%s is the input model: write the calibrated model to a new file", outPath)
	}
	stage := stages(opt.Progress, 4)
	m, logitsName, outName, err := appendChecked(ctx, modelPath, c, file, opt, stage)
	if err != nil {
		return err
	}
	external := externalData(m)
	if len(external) > 0 {
		if dir, outDir := filepath.Dir(modelPath), filepath.Dir(outPath); !fileio.Same(dir, outDir) {
			return fmt.Errorf("%s keeps its weights in external files (%s), which the calibrated model refers to by relative path: write it into %s too", modelPath, strings.Join(external, ", "), dir)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	stage(StageCalibrator)
	if err := Verify(c, Probe(c, opt.Seed), opt); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(external) == 0 {
		stage(StageCalibrated)
		if err := verifyModel(m, "", logitsName, outName, c, opt); err != nil {
			return err
		}
		stage(StageWrite)
		if err := fileio.WriteContext(ctx, outPath, m.Bytes()); err != nil {
			return err
		}
		stage("")
		return nil
	}
	// External data resolve against the model file's directory, so
	// ONNX Runtime must load the candidate from a file there: the
	// temporary file of outPath.
	stage(StageWrite)
	tmp, err := writeTemp(ctx, outPath, m.Bytes())
	if err != nil {
		return err
	}
	defer tmp.Abort()
	stage(StageCalibrated)
	if err := verifyModel(m, tmp.Name(), logitsName, outName, c, opt); err != nil {
		return err
	}
	if err := tmp.Commit(ctx); err != nil {
		return err
	}
	stage("")
	return nil
}

// appendChecked starts stage StageModel, checks that c fits the model at
// modelPath (CheckModel), reads it and appends c to it (Append).
func appendChecked(ctx context.Context, modelPath string, c calib.Calibrator, file *calib.File, opt Options, stage func(string)) (m *onnx.Model, logitsName, outName string, err error) {
	stage(StageModel)
	if err := CheckModel(ctx, modelPath, c, opt); err != nil {
		return nil, "", "", err
	}
	m, err = onnx.ReadFile(modelPath)
	if err != nil {
		return nil, "", "", err
	}
	logitsName, outName, err = Append(m, c, file, opt)
	if err != nil {
		return nil, "", "", fmt.Errorf("%s: %w", modelPath, err)
	}
	return m, logitsName, outName, nil
}

// CalibrateContext is ExportContext that writes nothing: it returns the
// calibrated model, verified, in memory, for callers that write it in
// other forms (WriteTriton, WriteTestVectors). Options.Progress sees the
// stages StageModel, StageCalibrator and StageCalibrated. It refuses a
// model that keeps its weights in external files, which only
// ExportContext writes.
func CalibrateContext(ctx context.Context, modelPath string, c calib.Calibrator, file *calib.File, opt Options) (*onnx.Model, error) {
	stage := stages(opt.Progress, 3)
	m, logitsName, outName, err := appendChecked(ctx, modelPath, c, file, opt, stage)
	if err != nil {
		return nil, err
	}
	if ext := externalData(m); len(ext) > 0 {
		return nil, fmt.Errorf("%s keeps its weights in external files (%s): fedcalib writes such a model only as one calibrated file (export --out)", modelPath, strings.Join(ext, ", "))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	stage(StageCalibrator)
	if err := Verify(c, Probe(c, opt.Seed), opt); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	stage(StageCalibrated)
	if err := verifyModel(m, "", logitsName, outName, c, opt); err != nil {
		return nil, err
	}
	stage("")
	return m, nil
}

// writeTemp writes data to a new temporary file of path, leaving it to
// the caller to commit or abort.
func writeTemp(ctx context.Context, path string, data []byte) (*fileio.Temp, error) {
	tmp, err := fileio.Create(ctx, path)
	if err != nil {
		return nil, err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Abort()
		return nil, err
	}
	return tmp, nil
}

// externalData returns the external data files the model's initializers
// refer to, relative to its directory.
func externalData(m *onnx.Model) []string {
	var files []string
	for _, t := range m.Proto().GetGraph().GetInitializer() {
		if t.GetDataLocation() != onnxpb.TensorProto_EXTERNAL {
			continue
		}
		for _, kv := range t.GetExternalData() {
			if kv.GetKey() == "location" && !slices.Contains(files, kv.GetValue()) {
				files = append(files, kv.GetValue())
			}
		}
	}
	return files
}

// verifyModel runs the whole calibrated model on a few random inputs and
// checks its probabilities against c applied to its own logits.
//
// The model is loaded from path, a file holding exactly m (for a model
// with external data, in its directory); path is "" for a self-contained
// model, which runs from memory.
func verifyModel(m *onnx.Model, path, logitsName, outName string, c calib.Calibrator, opt Options) error {
	outs, err := runModel(m, path, []string{logitsName, outName}, opt)
	if err != nil {
		return fmt.Errorf("verify: ONNX Runtime cannot run the calibrated model: %w", err)
	}
	kind, _ := m.MetadataValue(KeyInput)
	z, err := toLogits(outs[0], c.Classes(), kind)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	return compare(c, z, outs[1])
}

// runModel runs m (from path, or from memory when path is "") on the
// random inputs of randomInputs and returns the named float32 outputs.
// Errors do not name path, which is a temporary file.
func runModel(m *onnx.Model, path string, outputs []string, opt Options) ([][]float32, error) {
	if _, err := infer.InitRuntime(opt.Runtime); err != nil {
		return nil, err
	}
	names, vals, err := randomInputs(m, opt.Seed)
	if err != nil {
		return nil, err
	}
	gopt := graphOptions(opt.Runtime, names, outputs)
	var g *infer.Graph
	if path != "" {
		g, err = infer.OpenGraphFile(path, gopt)
	} else {
		g, err = infer.OpenGraph(m.Bytes(), gopt)
	}
	if err != nil {
		return nil, hidePath(err, path)
	}
	defer g.Close()
	outs, err := g.Run(vals...)
	return outs, hidePath(err, path)
}

// randomBatch is the batch size of the random inputs of runModel.
const randomBatch = 4

// randomInputs returns the names of m's inputs and a random batch of
// randomBatch rows for each, drawn from seed: float32 inputs uniform in
// [0, 1), int64 inputs zero.
func randomInputs(m *onnx.Model, seed uint64) ([]string, []*infer.Batch, error) {
	ins := m.Inputs()
	if len(ins) == 0 {
		return nil, nil, fmt.Errorf("verify: the model has no inputs")
	}
	rng := rand.New(rand.NewPCG(seed, 0x696e707574)) // "input"
	names := make([]string, len(ins))
	vals := make([]*infer.Batch, len(ins))
	for i, in := range ins {
		names[i] = in.Name
		shape := make([]int64, len(in.Shape))
		n := int64(1)
		for d, dim := range in.Shape {
			switch {
			case d == 0 && !dim.Known():
				shape[d] = randomBatch
			case dim.Known():
				shape[d] = dim.Value
			default:
				return nil, nil, fmt.Errorf("verify: input %q has the symbolic dimension %s beyond the batch axis; fedcalib cannot make a test input for it", in.Name, dim)
			}
			n *= shape[d]
		}
		v := &infer.Batch{Shape: shape}
		switch in.Elem {
		case onnx.Float:
			v.Float = make([]float32, n)
			for j := range v.Float {
				v.Float[j] = float32(rng.Float64())
			}
		case onnx.Int64:
			v.Int = make([]int64, n)
		default:
			return nil, nil, fmt.Errorf("verify: input %q has element type %s, which fedcalib cannot generate", in.Name, in.Type)
		}
		vals[i] = v
	}
	return names, vals, nil
}

// pathHidden is an error whose message leaves out a temporary file's name.
type pathHidden struct {
	err error
	msg string
}

func (e *pathHidden) Error() string { return e.msg }
func (e *pathHidden) Unwrap() error { return e.err }

// hidePath returns err with "path: " and path removed from its message.
func hidePath(err error, path string) error {
	if err == nil || path == "" || !strings.Contains(err.Error(), path) {
		return err
	}
	msg := strings.ReplaceAll(err.Error(), path+": ", "")
	return &pathHidden{err: err, msg: strings.ReplaceAll(msg, path, "the model")}
}
