package export

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/onnx"
	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// CheckModel checks that calibrator c fits the model at modelPath, as an
// export or a sidecar needs: the model parses and has a float32 logits
// output (opt.Logits, or the first float32 output) declared, if at all,
// as [batch, classes]; and ONNX Runtime runs the model on random inputs
// (see Options.Seed), where that output must really be [batch, classes],
// with the classes it declares and c's, and finite. A model that gives
// NaN or ±Inf is reported as at fault, not c. Errors name modelPath and
// say what to fix.
//
// A model with external data runs from a temporary copy beside it (named
// after modelPath, see fileio.Create), removed before CheckModel returns.
func CheckModel(ctx context.Context, modelPath string, c calib.Calibrator, opt Options) error {
	_, _, err := checkModel(ctx, modelPath, c, opt)
	return err
}

// checkModel is CheckModel returning the name of the logits output and
// the values it gave on the random inputs.
func checkModel(ctx context.Context, modelPath string, c calib.Calibrator, opt Options) (string, []float32, error) {
	if err := ctx.Err(); err != nil {
		return "", nil, err
	}
	m, err := onnx.ReadFile(modelPath)
	if err != nil {
		return "", nil, err
	}
	name, err := logitsOutput(m, opt.Logits)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", modelPath, err)
	}
	declared := outputShape(m, name)
	if declared != nil && len(declared) != 2 {
		return "", nil, fmt.Errorf("%s: output %q is declared with rank %d, %s: fedcalib calibrates a logits output of shape [batch, classes]", modelPath, name, len(declared), declared)
	}
	rows := int64(-1) // unknown unless the batch axis is ours to choose
	if ins := m.Inputs(); len(ins) > 0 && len(ins[0].Shape) > 0 && !ins[0].Shape[0].Known() {
		rows = randomBatch
	}
	shape, logits, err := probe(ctx, m, modelPath, name, opt)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", modelPath, err)
	}
	if err := checkLogits(name, declared, shape, rows, logits, c.Classes()); err != nil {
		return "", nil, fmt.Errorf("%s: %w", modelPath, err)
	}
	return name, logits, nil
}

// probe runs m, read from modelPath, on random inputs and returns the
// real shape and the values of its output name. It edits m: the shape
// comes from Shape and Cast nodes added for it.
func probe(ctx context.Context, m *onnx.Model, modelPath, name string, opt Options) ([]int64, []float32, error) {
	shapeName := freshName(m.Proto().GetGraph(), prefix+"probe_shape")
	m.AddNodes(
		onnx.NewNode("Shape", []string{name}, []string{shapeName + "_int64"}),
		onnx.NewNode("Cast", []string{shapeName + "_int64"}, []string{shapeName}, onnx.AttrInt("to", int64(onnx.Float))),
	)
	m.AddOutputs(onnx.NewValueInfo(shapeName, onnx.Float, onnx.Shape{{Value: -1}}))
	path := ""
	if len(externalData(m)) > 0 {
		// External data resolve against the model's directory.
		tmp, err := writeTemp(ctx, modelPath+".probe", m.Bytes())
		if err != nil {
			return nil, nil, fmt.Errorf("running a model with external data needs a temporary copy of it in %s: %w", filepath.Dir(modelPath), err)
		}
		defer tmp.Abort()
		path = tmp.Name()
	}
	outs, err := runModel(m, path, []string{name, shapeName}, opt)
	if err != nil {
		return nil, nil, fmt.Errorf("ONNX Runtime cannot run the model: %w", err)
	}
	shape := make([]int64, len(outs[1]))
	for i, v := range outs[1] {
		shape[i] = int64(v)
	}
	return shape, outs[0], nil
}

// checkLogits checks the values of the logits output name, of the given
// shape, against its declared shape (nil when not declared), the number
// of rows the inputs had (negative when unknown) and the calibrator's
// classes.
func checkLogits(name string, declared onnx.Shape, shape []int64, rows int64, values []float32, classes int) error {
	if len(shape) != 2 {
		return fmt.Errorf("output %q has rank %d, shape %s: fedcalib calibrates a logits output of shape [batch, classes]", name, len(shape), fmtDims(shape))
	}
	if rows >= 0 && shape[0] != rows {
		return fmt.Errorf("output %q has %d rows for a batch of %d inputs: fedcalib calibrates a logits output of shape [batch, classes]", name, shape[0], rows)
	}
	k, declaredK := shape[1], int64(-1)
	if len(declared) == 2 && declared[1].Known() {
		declaredK = declared[1].Value
	}
	switch {
	case k != int64(classes) && declaredK >= 0 && declaredK != k:
		return fmt.Errorf("output %q has %d classes (though it declares %d) but the calibrator has %d: was it fitted on this model's logits?", name, k, declaredK, classes)
	case k != int64(classes):
		return fmt.Errorf("output %q has %d classes but the calibrator has %d: was it fitted on this model's logits?", name, k, classes)
	case declaredK >= 0 && declaredK != k:
		return fmt.Errorf("output %q is declared with %d classes but has %d: the model's declared output shape is wrong; fix it and export the model again", name, declaredK, k)
	}
	for i, v := range values {
		if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("output %q gives %v (row %d, class %d) on random inputs: the model, not the calibrator, is at fault; check its weights", name, v, int64(i)/k, int64(i)%k)
		}
	}
	return nil
}

// fmtDims formats a shape as [4, 2, 3].
func fmtDims(dims []int64) string {
	s := make([]string, len(dims))
	for i, d := range dims {
		s[i] = strconv.FormatInt(d, 10)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// outputShape returns the declared shape of the named output, nil when
// it declares none.
func outputShape(m *onnx.Model, name string) onnx.Shape {
	for _, o := range m.Outputs() {
		if o.Name == name {
			return o.Shape
		}
	}
	return nil
}

// freshName returns base, or base with a number appended, such that no
// tensor, input, output or initializer of g has that name.
func freshName(g *onnxpb.GraphProto, base string) string {
	used := map[string]bool{}
	for _, n := range g.GetNode() {
		for _, s := range slices.Concat(n.GetInput(), n.GetOutput()) {
			used[s] = true
		}
	}
	for _, v := range slices.Concat(g.GetInput(), g.GetOutput()) {
		used[v.GetName()] = true
	}
	for _, t := range g.GetInitializer() {
		used[t.GetName()] = true
	}
	name := base
	for i := 1; used[name] || used[name+"_int64"]; i++ {
		name = fmt.Sprintf("%s_%d", base, i)
	}
	return name
}
