package infer

import (
	"errors"
	"fmt"
	"os"
	"slices"

	ort "github.com/yalue/onnxruntime_go"
)

// GraphOptions configures OpenGraph and OpenGraphFile. The zero value feeds
// every model input and collects every float32 output, on
// DefaultThreads() intra-op threads that sleep when idle, with the ONNX
// Runtime that ResolveRuntime finds.
type GraphOptions struct {
	// Runtime is the ONNX Runtime shared library to load. Empty means
	// ResolveRuntime's search.
	Runtime string
	// Threads is the number of intra-op threads. Zero means
	// DefaultThreads().
	Threads int
	// Spin lets ONNX Runtime's idle pool threads spin, as Options.Spin.
	// False (the zero value) makes them sleep.
	Spin bool
	// Inputs names the model inputs Run feeds, in the order of its
	// arguments. Nil means every input, in the model's order.
	Inputs []string
	// Outputs names the float32 outputs Run returns, in order. Nil means
	// every float32 output, in the model's order.
	Outputs []string
}

// Graph is an ONNX model loaded into ONNX Runtime that runs tensors as
// they are: no preprocessing, no batching, no checks on what the outputs
// hold. Session is the inference path for datasets; Graph serves callers
// that make their own tensors, such as package export's verification.
// A Graph must not be used by several goroutines at once. Close releases
// it. The zero Graph is closed: its Run fails.
type Graph struct {
	sess      *ort.DynamicAdvancedSession
	ins, outs []ort.InputOutputInfo
}

// OpenGraph loads the ONNX model held in model, loading ONNX Runtime first
// if needed (InitRuntime(opt.Runtime)). A model that keeps weights in
// external files must be opened with OpenGraphFile, which resolves them
// against its directory.
func OpenGraph(model []byte, opt GraphOptions) (*Graph, error) {
	if err := initGraph(opt); err != nil {
		return nil, err
	}
	ins, outs, err := ort.GetInputOutputInfoWithONNXData(model)
	if err != nil {
		return nil, fmt.Errorf("not a model ONNX Runtime can read: %w", err)
	}
	return openGraph(ins, outs, opt, func(in, out []string, so *ort.SessionOptions) (*ort.DynamicAdvancedSession, error) {
		return ort.NewDynamicAdvancedSessionWithONNXData(model, in, out, so)
	})
}

// OpenGraphFile is OpenGraph for the model file at path.
func OpenGraphFile(path string, opt GraphOptions) (*Graph, error) {
	if err := initGraph(opt); err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	ins, outs, err := ort.GetInputOutputInfo(path)
	if err != nil {
		return nil, fmt.Errorf("%s: not a model ONNX Runtime can read: %w", path, err)
	}
	g, err := openGraph(ins, outs, opt, func(in, out []string, so *ort.SessionOptions) (*ort.DynamicAdvancedSession, error) {
		return ort.NewDynamicAdvancedSession(path, in, out, so)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return g, nil
}

func initGraph(opt GraphOptions) error {
	if opt.Threads < 0 {
		return fmt.Errorf("threads = %d: want 0 (all cores) or more", opt.Threads)
	}
	_, err := InitRuntime(opt.Runtime)
	return err
}

// openGraph picks the inputs and outputs opt names and opens the session.
func openGraph(ins, outs []ort.InputOutputInfo, opt GraphOptions, open sessionOpener) (*Graph, error) {
	g := &Graph{}
	if opt.Inputs == nil {
		g.ins = ins
	}
	for _, name := range opt.Inputs {
		i := indexInfo(ins, name)
		if i < 0 {
			return nil, fmt.Errorf("model has no input %q (inputs: %s)", name, names(ins))
		}
		g.ins = append(g.ins, ins[i])
	}
	if opt.Outputs == nil {
		for _, o := range outs {
			if isFloat32(o) {
				g.outs = append(g.outs, o)
			}
		}
	}
	for _, name := range opt.Outputs {
		i := indexInfo(outs, name)
		if i < 0 {
			return nil, fmt.Errorf("model has no output %q (outputs: %s)", name, names(outs))
		}
		if !isFloat32(outs[i]) {
			return nil, fmt.Errorf("model output %q is %s, not a float32 tensor", name, describe(outs[i]))
		}
		g.outs = append(g.outs, outs[i])
	}
	if len(g.outs) == 0 {
		return nil, fmt.Errorf("model has no float32 output (outputs: %s)", names(outs))
	}
	var err error
	g.sess, err = newORTSession(open, infoNames(g.ins), infoNames(g.outs), threadPlan{opt.Threads, opt.Spin})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// A sessionOpener creates an ONNX Runtime session from a model held in
// memory or in a file.
type sessionOpener func(inputs, outputs []string, so *ort.SessionOptions) (*ort.DynamicAdvancedSession, error)

// newORTSession opens a session feeding inputs and collecting outputs
// with the thread plan p. It is the one place fedcalib creates ONNX
// Runtime sessions.
func newORTSession(open sessionOpener, inputs, outputs []string, p threadPlan) (*ort.DynamicAdvancedSession, error) {
	so, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("ONNX Runtime session options: %w", err)
	}
	defer so.Destroy()
	if err := p.apply(so); err != nil {
		return nil, err
	}
	sess, err := open(inputs, outputs, so)
	if err != nil {
		return nil, fmt.Errorf("ONNX Runtime cannot load the model: %w", err)
	}
	return sess, nil
}

// Inputs describes the inputs Run feeds, in order.
func (g *Graph) Inputs() []TensorInfo { return tensorInfos(g.ins) }

// Outputs describes the outputs Run returns, in order.
func (g *Graph) Outputs() []TensorInfo { return tensorInfos(g.outs) }

// Run runs the model once on in, one Batch per input of Inputs() in that
// order (Shape the whole tensor shape; Float or Int as the input's element
// type), and returns the values of every output of Outputs(), row-major in
// the shape the model gives them.
func (g *Graph) Run(in ...*Batch) ([][]float32, error) {
	outs, err := g.RunShaped(in...)
	if err != nil {
		return nil, err
	}
	res := make([][]float32, len(outs))
	for i, o := range outs {
		res[i] = o.Float
	}
	return res, nil
}

// RunShaped is Run that also returns the shape of each output: output i
// is a Batch whose Shape is the shape the model gave it and whose Float
// holds its values.
func (g *Graph) RunShaped(in ...*Batch) ([]*Batch, error) {
	if g.sess == nil {
		return nil, errors.New("infer: Run on a closed Graph")
	}
	if len(in) != len(g.ins) {
		return nil, fmt.Errorf("the model takes %d inputs (%s), given %d", len(g.ins), names(g.ins), len(in))
	}
	vals := make([]ort.Value, len(in))
	defer destroyAll(vals)
	for i, b := range in {
		v, err := newTensor(g.ins[i], b)
		if err != nil {
			return nil, fmt.Errorf("input %q of shape %s: %w", g.ins[i].Name, fmtShape(b.Shape), err)
		}
		vals[i] = v
	}
	outs := make([]ort.Value, len(g.outs))
	defer destroyAll(outs)
	if err := g.sess.Run(vals, outs); err != nil {
		return nil, fmt.Errorf("running the model: %w", err)
	}
	res := make([]*Batch, len(outs))
	for i, o := range outs {
		t, ok := o.(*ort.Tensor[float32])
		if !ok {
			return nil, fmt.Errorf("model output %q is not a float32 tensor", g.outs[i].Name)
		}
		res[i] = &Batch{Shape: slices.Clone([]int64(t.GetShape())), Float: slices.Clone(t.GetData())}
	}
	return res, nil
}

// Close releases the graph. The process-wide ONNX Runtime environment
// stays loaded.
func (g *Graph) Close() error {
	if g.sess == nil {
		return nil
	}
	err := g.sess.Destroy()
	g.sess = nil
	return err
}

// newTensor makes the tensor of b for input info.
func newTensor(info ort.InputOutputInfo, b *Batch) (ort.Value, error) {
	switch info.DataType {
	case ort.TensorElementDataTypeFloat:
		return checkTensor(ort.NewTensor(ort.Shape(b.Shape), b.Float))
	case ort.TensorElementDataTypeInt64:
		return checkTensor(ort.NewTensor(ort.Shape(b.Shape), b.Int))
	}
	return nil, fmt.Errorf("it is %s: Graph feeds float32 or int64", describe(info))
}

// checkTensor returns t as an ort.Value, nil (not a nil *Tensor) on error.
func checkTensor[T ort.TensorData](t *ort.Tensor[T], err error) (ort.Value, error) {
	if err != nil {
		return nil, err
	}
	return t, nil
}

func destroyAll(vals []ort.Value) {
	for _, v := range vals {
		if v != nil {
			v.Destroy()
		}
	}
}

func infoNames(infos []ort.InputOutputInfo) []string {
	s := make([]string, len(infos))
	for i := range infos {
		s[i] = infos[i].Name
	}
	return s
}

func tensorInfos(infos []ort.InputOutputInfo) []TensorInfo {
	t := make([]TensorInfo, len(infos))
	for i := range infos {
		t[i] = tensorInfo(infos[i])
	}
	return t
}
