package export

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/internal/fileio"
	"github.com/fedcalib/fedcalib/onnx"
)

// VectorTolerance bounds the difference between an output that
// CheckTestVectors replays and the one recorded in the test vectors:
// value got matches the recorded want when |got − want| ≤
// VectorTolerance·(1 + |want|), that is 1e-5 absolute for probabilities
// and about 1e-5 relative for large logits. Replayed on the ONNX Runtime
// and machine that recorded them the outputs are usually bit-identical;
// the bound leaves room for other CPUs' kernels.
const VectorTolerance = 1e-5

// TestVectorModel is the name of the model file in a test vector
// directory, and TestSetPrefix the prefix of its test data sets
// (test_data_set_0, ...): the layout of ONNX's test runners (onnx's
// backend test data, onnxruntime's onnx_test_runner).
const (
	TestVectorModel = "model.onnx"
	TestSetPrefix   = "test_data_set_"
)

// ErrVectorsDiffer is wrapped by the error of CheckTestVectors when the
// model ran and an output differs from the recorded one beyond
// VectorTolerance.
var ErrVectorsDiffer = errors.New("test vectors differ")

// A TestSet is one test data set of ONNX's test runners: tensors for a
// model's inputs (input_0.pb, ...) and the outputs the model gives for
// them (output_0.pb, ...), each named after the graph input or output it
// is, in the graph's order. The zero value is an empty set.
type TestSet struct {
	Inputs, Outputs []*onnx.Tensor
}

// NewTestSet runs m with ONNX Runtime on inputs, one per graph input in
// the graph's order, and returns the test set of those inputs and every
// output of m, which must all be float32. A model with external data
// cannot run from memory: NewTestSet refuses it.
func NewTestSet(m *onnx.Model, inputs []*onnx.Tensor, opt Options) (*TestSet, error) {
	if ext := externalData(m); len(ext) > 0 {
		return nil, fmt.Errorf("test vectors: the model keeps its weights in external files (%s); fedcalib makes test vectors of self-contained models only", strings.Join(ext, ", "))
	}
	ins := m.Inputs()
	if len(ins) != len(inputs) {
		return nil, fmt.Errorf("test vectors: the model takes %d inputs, given %d", len(ins), len(inputs))
	}
	var outNames []string
	for _, o := range m.Outputs() {
		if o.Elem != onnx.Float {
			return nil, fmt.Errorf("test vectors: output %q is %s; fedcalib records float32 outputs only", o.Name, o.Type)
		}
		outNames = append(outNames, o.Name)
	}
	inNames := make([]string, len(ins))
	batches := make([]*infer.Batch, len(ins))
	for i, in := range ins {
		inNames[i] = in.Name
		batches[i] = &infer.Batch{Shape: inputs[i].Dims, Float: inputs[i].Float, Int: inputs[i].Int}
	}
	g, err := infer.OpenGraph(m.Bytes(), graphOptions(opt.Runtime, inNames, outNames))
	if err != nil {
		return nil, fmt.Errorf("test vectors: %w", err)
	}
	defer g.Close()
	outs, err := g.RunShaped(batches...)
	if err != nil {
		return nil, fmt.Errorf("test vectors: %w", err)
	}
	set := &TestSet{}
	for i, in := range inputs {
		t := *in
		t.Name = inNames[i]
		set.Inputs = append(set.Inputs, &t)
	}
	for i, o := range outs {
		set.Outputs = append(set.Outputs, &onnx.Tensor{Name: outNames[i], Elem: onnx.Float, Dims: o.Shape, Float: o.Float})
	}
	return set, nil
}

// ModelTestSet returns the test set of a calibrated model m on the random
// inputs that verification runs it on (see Options.Seed): a batch of 4
// rows, float32 inputs uniform in [0, 1), int64 inputs zero.
func ModelTestSet(m *onnx.Model, opt Options) (*TestSet, error) {
	names, vals, err := randomInputs(m, opt.Seed)
	if err != nil {
		return nil, err
	}
	inputs := make([]*onnx.Tensor, len(vals))
	for i, v := range vals {
		elem := onnx.Float
		if v.Int != nil {
			elem = onnx.Int64
		}
		inputs[i] = &onnx.Tensor{Name: names[i], Elem: elem, Dims: v.Shape, Float: v.Float, Int: v.Int}
	}
	return NewTestSet(m, inputs, opt)
}

// ProbeTestSet returns the test set of the standalone model of c
// (Standalone) on its verification probe set (Probe with opt.Seed).
func ProbeTestSet(c calib.Calibrator, opt Options) (*TestSet, error) {
	m, err := Standalone(c)
	if err != nil {
		return nil, err
	}
	probe := Probe(c, opt.Seed)
	k := int64(c.Classes())
	in := &onnx.Tensor{Name: "logits", Elem: onnx.Float, Dims: []int64{int64(len(probe)) / k, k}, Float: probe}
	return NewTestSet(m, []*onnx.Tensor{in}, opt)
}

// WriteTestVectors writes the directory dir of test vectors: model m as
// TestVectorModel and each set as test_data_set_N/input_I.pb and
// output_I.pb, serialised TensorProtos. dir must not exist or be empty;
// it is written atomically (fileio.WriteDir).
func WriteTestVectors(ctx context.Context, dir string, m *onnx.Model, sets ...*TestSet) error {
	files := []fileio.DirFile{{Name: TestVectorModel, Data: m.Bytes()}}
	for n, s := range sets {
		for i, t := range s.Inputs {
			files = append(files, fileio.DirFile{Name: fmt.Sprintf("%s%d/input_%d.pb", TestSetPrefix, n, i), Data: t.Marshal()})
		}
		for i, t := range s.Outputs {
			files = append(files, fileio.DirFile{Name: fmt.Sprintf("%s%d/output_%d.pb", TestSetPrefix, n, i), Data: t.Marshal()})
		}
	}
	return fileio.WriteDir(ctx, dir, files)
}

// ReadTestVectors reads the test data sets of the test vector directory
// dir, in the order of their numbers: every input_I.pb and output_I.pb of
// each, from 0 up to the first missing number. A set without inputs or
// outputs, a file that does not parse (onnx.ParseTensor) and a directory
// without sets are errors naming the file.
func ReadTestVectors(dir string) ([]*TestSet, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var nums []int
	for _, e := range entries {
		var n int
		if rest, ok := strings.CutPrefix(e.Name(), TestSetPrefix); ok && e.IsDir() {
			if _, err := fmt.Sscanf(rest, "%d", &n); err == nil && fmt.Sprint(n) == rest {
				nums = append(nums, n)
			}
		}
	}
	if len(nums) == 0 {
		return nil, fmt.Errorf("%s has no %sN directories: is it a test vector directory (fedcalib export --test-vectors)?", dir, TestSetPrefix)
	}
	slices.Sort(nums)
	var sets []*TestSet
	for _, n := range nums {
		sub := filepath.Join(dir, fmt.Sprintf("%s%d", TestSetPrefix, n))
		s := &TestSet{}
		for _, kind := range []string{"input", "output"} {
			for i := 0; ; i++ {
				path := filepath.Join(sub, fmt.Sprintf("%s_%d.pb", kind, i))
				b, err := os.ReadFile(path)
				if errors.Is(err, os.ErrNotExist) {
					break
				}
				if err != nil {
					return nil, err
				}
				t, err := onnx.ParseTensor(b)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", path, err)
				}
				if kind == "input" {
					s.Inputs = append(s.Inputs, t)
				} else {
					s.Outputs = append(s.Outputs, t)
				}
			}
		}
		if err := checkNumbering(sub, len(s.Inputs), len(s.Outputs)); err != nil {
			return nil, err
		}
		if len(s.Inputs) == 0 || len(s.Outputs) == 0 {
			return nil, fmt.Errorf("%s holds %d inputs (input_0.pb, ...) and %d outputs (output_0.pb, ...): want at least one of each", sub, len(s.Inputs), len(s.Outputs))
		}
		sets = append(sets, s)
	}
	return sets, nil
}

// checkNumbering refuses a test data set directory sub holding an
// input_I.pb or output_I.pb beyond the first ins inputs and outs outputs
// read: a file missing in the middle of the numbering.
func checkNumbering(sub string, ins, outs int) error {
	entries, err := os.ReadDir(sub)
	if err != nil {
		return err
	}
	for _, e := range entries {
		for kind, have := range map[string]int{"input": ins, "output": outs} {
			var i int
			if rest, ok := strings.CutPrefix(e.Name(), kind+"_"); ok {
				if _, err := fmt.Sscanf(rest, "%d.pb", &i); err == nil && rest == fmt.Sprintf("%d.pb", i) && i >= have {
					return fmt.Errorf("%s: %s_%d.pb is missing but %s exists: the test vectors are incomplete", sub, kind, have, e.Name())
				}
			}
		}
	}
	return nil
}

// A VectorReport is what CheckTestVectors found. The zero value is a
// check of nothing.
type VectorReport struct {
	// Model is the model file that ran.
	Model string
	// Sets and Values count the test data sets and the output values
	// compared.
	Sets, Values int
	// MaxError is the largest |got − want| over all values, and Worst
	// says where the largest scaled error |got − want|/(1 + |want|) was,
	// as "test_data_set_0/output_1.pb (probabilities) value 3: got …,
	// want …"; empty when every value was equal.
	MaxError float64
	Worst    string
	// Failures counts the values beyond VectorTolerance.
	Failures int
}

// CheckTestVectors replays the test vectors of dir (ReadTestVectors) in
// ONNX Runtime on the model at modelPath (dir's TestVectorModel when
// modelPath is empty): each set's inputs feed the graph inputs of their
// names (by position when unnamed), and each output must have the
// recorded shape and values within VectorTolerance. It returns the
// report, and an error wrapping ErrVectorsDiffer when an output differs;
// unreadable files, outputs the model lacks and a missing ONNX Runtime
// (infer.ErrRuntimeNotFound) are other errors.
func CheckTestVectors(ctx context.Context, dir, modelPath string, opt Options) (*VectorReport, error) {
	if modelPath == "" {
		modelPath = filepath.Join(dir, TestVectorModel)
	}
	m, err := onnx.ReadFile(modelPath)
	if err != nil {
		return nil, err
	}
	sets, err := ReadTestVectors(dir)
	if err != nil {
		return nil, err
	}
	rep := &VectorReport{Model: modelPath}
	worst := 0.0 // the largest scaled error so far
	for n, s := range sets {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		got, err := replay(m, modelPath, s, opt)
		if err != nil {
			return nil, fmt.Errorf("%s%d: %w", TestSetPrefix, n, err)
		}
		for i, want := range s.Outputs {
			where := fmt.Sprintf("%s%d/output_%d.pb (%s)", TestSetPrefix, n, i, want.Name)
			g := got[i]
			if !slices.Equal(g.Shape, want.Dims) {
				rep.Failures++
				if worst < math.Inf(1) {
					rep.Worst, worst = fmt.Sprintf("%s: the model gives shape %v, the vectors hold %v", where, g.Shape, want.Dims), math.Inf(1)
				}
				continue
			}
			for j, w := range want.Float {
				v, w := float64(g.Float[j]), float64(w)
				rep.Values++
				if math.IsNaN(v) && math.IsNaN(w) {
					continue
				}
				d := math.Abs(v - w)
				scaled := d / (1 + math.Abs(w))
				if math.IsNaN(d) { // one of them is NaN
					d, scaled = math.Inf(1), math.Inf(1)
				}
				if !(scaled <= VectorTolerance) {
					rep.Failures++
				}
				rep.MaxError = max(rep.MaxError, d)
				if scaled > worst && d > 0 {
					rep.Worst, worst = fmt.Sprintf("%s value %d: got %.9g, want %.9g", where, j, v, w), scaled
				}
			}
		}
		rep.Sets++
	}
	if rep.Failures > 0 {
		return rep, fmt.Errorf("%w: %d value(s) of %s beyond |got − want| ≤ %g·(1 + |want|); worst %s", ErrVectorsDiffer, rep.Failures, dir, VectorTolerance, rep.Worst)
	}
	return rep, nil
}

// replay runs the model at path (parsed as m) on the inputs of s and
// returns the outputs s records, by name (by position when unnamed).
func replay(m *onnx.Model, path string, s *TestSet, opt Options) ([]*infer.Batch, error) {
	ins, outs := m.Inputs(), m.Outputs()
	if len(s.Inputs) != len(ins) {
		return nil, fmt.Errorf("%d input tensors for a model of %d inputs", len(s.Inputs), len(ins))
	}
	name := func(t *onnx.Tensor, i int, vals []onnx.Value) string {
		if t.Name != "" || i >= len(vals) {
			return t.Name
		}
		return vals[i].Name
	}
	inNames := make([]string, len(s.Inputs))
	batches := make([]*infer.Batch, len(s.Inputs))
	for i, t := range s.Inputs {
		inNames[i] = name(t, i, ins)
		batches[i] = &infer.Batch{Shape: t.Dims, Float: t.Float, Int: t.Int}
	}
	if len(s.Outputs) != len(outs) {
		return nil, fmt.Errorf("%d output tensors for a model of %d outputs: output_%d.pb is missing (every output is recorded)", len(s.Outputs), len(outs), len(s.Outputs))
	}
	outNames := make([]string, len(s.Outputs))
	for i, t := range s.Outputs {
		if t.Elem != onnx.Float {
			return nil, fmt.Errorf("output_%d.pb is %s: fedcalib compares float32 outputs", i, t.Elem)
		}
		outNames[i] = name(t, i, outs)
	}
	g, err := infer.OpenGraphFile(path, graphOptions(opt.Runtime, inNames, outNames))
	if err != nil {
		return nil, err
	}
	defer g.Close()
	return g.RunShaped(batches...)
}
