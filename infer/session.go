package infer

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/internal/fileio"
)

// DefaultBatch is the batch size used when Options.Batch is zero.
const DefaultBatch = 256

// MaxThreads is the largest number of intra-op threads a session takes:
// more than any machine has cores, so larger values are typing mistakes
// (ONNX Runtime would fail to allocate their pools).
const MaxThreads = 1024

// Options configures a Session. The zero value runs the first input and
// first float32 output of the model 256 records at a time, one batch per
// core at once on one thread each, reading one batch ahead, with the
// preprocessing recorded in the model (the thread plan: threads.go).
type Options struct {
	// Runtime is the ONNX Runtime shared library to load. Empty means
	// ResolveRuntime's search: $ONNXRUNTIME_SHARED_LIBRARY_PATH, then the
	// cache that Setup fills.
	Runtime string
	// Threads is the number of intra-op threads of each model run. Zero
	// means the thread plan's choice (runPlan): the cores this process
	// may use (DefaultThreads) shared out among the runs, which is one
	// thread per run on up to four cores.
	Threads int
	// Runs is the number of batches Infer runs through the model at
	// once, on as many goroutines, each run on Threads intra-op threads
	// and holding its own activations in memory. Zero means the thread
	// plan's choice when Threads is zero and Infer reads ahead: one run
	// per core this process may use (DefaultThreads) on up to four
	// cores, else the most runs up to four that divide the cores
	// (runPlan); and one run otherwise. The logits do not depend on it.
	Runs int
	// Spin lets ONNX Runtime's pool threads spin while they wait for
	// work, as ONNX Runtime does by default, instead of sleeping. False
	// (the zero value) makes them sleep, so that they do not fight the
	// reader, the Go runtime or other processes for the cores; spinning
	// gains only on a machine where nothing else runs.
	Spin bool
	// Sequential makes Infer read each batch between model runs, on its
	// own goroutine, one run at a time whatever Runs says. False (the
	// zero value) reads while the model runs: with several runs, each
	// reads its own next batch between its model runs while the others
	// run; with one, a goroutine of its own reads the next batch while
	// ONNX Runtime runs the current one.
	Sequential bool
	// ForegroundReader runs that goroutine at normal priority throughout
	// when Infer runs one batch at a time (with several runs at once it
	// always does). False (the zero value) reads the first batch at normal
	// priority and the rest on a thread of background priority (Linux's
	// SCHED_IDLE), so that the reader runs only on cores the model's
	// threads leave idle and never preempts them; it stays at normal
	// priority when other processes' load is half a core or more or the
	// first batch found no idle core, and is promoted
	// to normal priority once Infer has had to wait for a batch longer
	// than the model ran (a busy machine, or reading that costs more
	// than the model). Outside Linux the reader always runs at normal
	// priority. The logits are the same either way.
	ForegroundReader bool
	// Input names the model input to feed. Empty means the first input.
	Input string
	// Output names the model output to collect. Empty means the first
	// output of type float32.
	Output string
	// Extra names further float32 outputs of shape [batch, columns] to
	// collect in the same model runs as Output, into Result.Extra (e.g.
	// the logits and the probabilities of a calibrated model in one
	// pass). Nil collects none.
	Extra []string
	// Preprocess overrides the model's metadata_props, key by key (the Key*
	// constants). Nil overrides nothing.
	Preprocess map[string]string
	// Batch is the most records a model run takes. Zero means
	// DefaultBatch. Concurrent runs (Runs) take fewer: at most 256 KiB
	// of input each (a record at least), and smaller batches first and,
	// when the data knows its size, last. The logits do not depend on
	// it.
	Batch int
	// Progress, when not nil, is called by Infer once before the first
	// batch and after each batch, in order and never two calls at once,
	// to report how many records have run; the first call comes from the
	// goroutine that called Infer, later ones may come from the goroutines
	// of concurrent runs (Runs), while the others run. Nil reports
	// nothing. The package prints nothing itself: the command line draws
	// the bar.
	Progress func(Progress)
	// Logger receives warnings (e.g. outputs that look like probabilities).
	// Nil means slog.Default().
	Logger *slog.Logger
	// ClassNames names the model's classes in output order, as a labels
	// file gives them (calib.ReadClassNames); Result.ClassNames is then
	// these. They must agree with the model's fedcalib.classes, when it
	// has them, and with the number of output columns (errors wrapping
	// calib.ErrClassNames). Nil takes the names from the model or the
	// data (Result.ClassNames).
	ClassNames []string
}

// TensorInfo describes a model input or output.
type TensorInfo struct {
	Name  string  // the name in the graph
	Shape []int64 // negative for dynamic (symbolic) dimensions
	Type  string  // element type: "float32", "int64", "uint8", ...; "" if not a tensor
}

// Session is a loaded model ready to run. A Session must not be used by
// several goroutines at once. Close releases it.
type Session struct {
	path    string
	opt     Options
	sess    *ort.DynamicAdvancedSession
	in, out ort.InputOutputInfo
	extra   []ort.InputOutputInfo // Options.Extra, in order
	dtype   DType
	props   map[string]string // metadata_props merged with Options.Preprocess
	pre     Preprocessing
	classes int   // output columns; 0 until known
	cols    []int // columns of each extra output; 0 until known
	runs    int   // model runs Infer keeps in flight (runPlan)

	planHook  func(*readerPlan) // batcher.planHook (tests)
	batchHook func(*batcher)    // called on Infer's batcher before it reads (tests)
	runHook   func(seq int)     // called before batch seq runs, when runs are concurrent (tests)
}

// OpenSession loads the ONNX model at path, loading ONNX Runtime first if
// needed (InitRuntime(opt.Runtime)). It checks that the model has an input
// with a dynamic batch dimension, a float32 output, and preprocessing
// metadata or overrides.
func OpenSession(path string, opt Options) (*Session, error) {
	if opt.Threads < 0 || opt.Threads > MaxThreads {
		return nil, fmt.Errorf("threads = %d: want 0 (the thread plan's choice) to %d", opt.Threads, MaxThreads)
	}
	if opt.Runs < 0 || opt.Runs > MaxThreads {
		return nil, fmt.Errorf("runs = %d: want 0 (the thread plan's choice) to %d", opt.Runs, MaxThreads)
	}
	if opt.Batch < 0 {
		return nil, fmt.Errorf("batch = %d: want a positive batch size", opt.Batch)
	}
	if opt.Batch == 0 {
		opt.Batch = DefaultBatch
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if _, err := InitRuntime(opt.Runtime); err != nil {
		return nil, err
	}
	// A model is one protobuf message, which cannot exceed 2 GiB; a path
	// that is no regular file (/dev/zero, a FIFO) is refused unread.
	model, err := fileio.ReadLimited(path, math.MaxInt32)
	if err != nil {
		return nil, err
	}
	s := &Session{path: path, opt: opt}
	threads, runs := runPlan(opt)
	s.runs = runs
	if err := s.discover(model); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	outs := append([]string{s.out.Name}, infoNames(s.extra)...)
	s.sess, err = newORTSession(func(in, out []string, so *ort.SessionOptions) (*ort.DynamicAdvancedSession, error) {
		return ort.NewDynamicAdvancedSessionWithONNXData(model, in, out, so)
	}, []string{s.in.Name}, outs, threadPlan{threads, opt.Spin})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := s.readMetadata(); err != nil {
		s.sess.Destroy()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// discover picks the input and output and checks their types and shapes.
func (s *Session) discover(model []byte) error {
	ins, outs, err := ort.GetInputOutputInfoWithONNXData(model)
	if err != nil {
		return fmt.Errorf("not a model ONNX Runtime can read: %w", err)
	}
	if len(ins) == 0 {
		return errors.New("model has no inputs")
	}
	s.in = ins[0]
	if s.opt.Input != "" {
		i := indexInfo(ins, s.opt.Input)
		if i < 0 {
			return fmt.Errorf("model has no input %q (inputs: %s)", s.opt.Input, names(ins))
		}
		s.in = ins[i]
	}
	if s.opt.Output != "" {
		i := indexInfo(outs, s.opt.Output)
		if i < 0 {
			return fmt.Errorf("model has no output %q (outputs: %s)", s.opt.Output, names(outs))
		}
		s.out = outs[i]
		if !isFloat32(s.out) {
			return fmt.Errorf("model output %q is %s, not a float32 tensor", s.out.Name, describe(s.out))
		}
	} else {
		i := indexFunc(outs, isFloat32)
		if i < 0 {
			return fmt.Errorf("model has no float32 output (outputs: %s)", names(outs))
		}
		s.out = outs[i]
	}
	if s.in.OrtValueType != ort.ONNXTypeTensor {
		return fmt.Errorf("model input %q is %s, not a tensor", s.in.Name, describe(s.in))
	}
	switch s.in.DataType {
	case ort.TensorElementDataTypeFloat:
		s.dtype = Float32
	case ort.TensorElementDataTypeInt64:
		s.dtype = Int64
	default:
		return fmt.Errorf("model input %q has element type %s: fedcalib feeds float32 or int64", s.in.Name, elemName(s.in.DataType))
	}
	if len(s.in.Dimensions) < 2 {
		return fmt.Errorf("model input %q has shape %s: want a batch dimension and at least one more", s.in.Name, fmtShape(s.in.Dimensions))
	}
	if d := s.in.Dimensions[0]; d >= 0 {
		return fmt.Errorf("model input %q has a fixed batch dimension of %d (shape %s): re-export the model with a dynamic batch axis (e.g. torch.onnx.export dynamic_axes={%q: {0: \"batch\"}})", s.in.Name, d, fmtShape(s.in.Dimensions), s.in.Name)
	}
	if r := len(s.out.Dimensions); r != 2 {
		return fmt.Errorf("model output %q has shape %s: want logits of shape [batch classes]", s.out.Name, fmtShape(s.out.Dimensions))
	}
	if c := s.out.Dimensions[1]; c > 0 {
		s.classes = int(c)
	}
	s.cols = make([]int, len(s.opt.Extra))
	for k, name := range s.opt.Extra {
		i := indexInfo(outs, name)
		switch {
		case i < 0:
			return fmt.Errorf("model has no output %q (outputs: %s)", name, names(outs))
		case name == s.out.Name || slices.Contains(s.opt.Extra[:k], name):
			return fmt.Errorf("output %q is asked for twice", name)
		case !isFloat32(outs[i]):
			return fmt.Errorf("model output %q is %s, not a float32 tensor", name, describe(outs[i]))
		case len(outs[i].Dimensions) != 2:
			return fmt.Errorf("model output %q has shape %s: want [batch columns]", name, fmtShape(outs[i].Dimensions))
		}
		s.extra = append(s.extra, outs[i])
		if c := outs[i].Dimensions[1]; c > 0 {
			s.cols[k] = int(c)
		}
	}
	return nil
}

// readMetadata merges the model's metadata_props with the overrides and
// parses the preprocessing.
func (s *Session) readMetadata() error {
	md, err := s.sess.GetModelMetadata()
	if err != nil {
		return fmt.Errorf("reading metadata: %w", err)
	}
	defer md.Destroy()
	keys, err := md.GetCustomMetadataMapKeys()
	if err != nil {
		return fmt.Errorf("reading metadata: %w", err)
	}
	s.props = make(map[string]string, len(keys)+len(s.opt.Preprocess))
	for _, k := range keys {
		v, _, err := md.LookupCustomMetadataMap(k)
		if err != nil {
			return fmt.Errorf("reading metadata %q: %w", k, err)
		}
		s.props[k] = v
	}
	maps.Copy(s.props, s.opt.Preprocess)
	if !hasInputKeys(s.props) {
		return fmt.Errorf("model has no preprocessing metadata (%s.* keys): pass --layout (NCHW, NHWC or NC) and, as the model needs, --scale, --mean, --std, --dtype, --vocab",
			strings.TrimSuffix(KeyScale, ".scale"))
	}
	if s.pre, err = ParsePreprocessing(s.props); err != nil {
		return err
	}
	if s.pre.DType != "" && s.pre.DType != s.dtype {
		return fmt.Errorf("%s is %s but model input %q is %s", KeyDType, s.pre.DType, s.in.Name, s.dtype)
	}
	if s.classes > 0 && len(s.ClassNames()) > 0 && len(s.ClassNames()) != s.classes {
		return fmt.Errorf("%s names %d classes but output %q has %d", KeyClasses, len(s.ClassNames()), s.out.Name, s.classes)
	}
	if names := s.ClassNames(); names != nil {
		if err := calib.CheckClassNames(names, len(names)); err != nil {
			return fmt.Errorf("%s: %w", KeyClasses, err)
		}
	}
	if s.opt.ClassNames != nil {
		if err := calib.MatchClassNames("the names given", s.opt.ClassNames, "the model's "+KeyClasses, s.ClassNames()); err != nil {
			return err
		}
		return s.checkGivenNames()
	}
	return nil
}

// checkGivenNames checks that Options.ClassNames, when given, name as
// many classes as the output has, once that is known.
func (s *Session) checkGivenNames() error {
	if s.opt.ClassNames != nil && s.classes > 0 && len(s.opt.ClassNames) != s.classes {
		return fmt.Errorf("%w: %d class names given but output %q has %d classes", calib.ErrClassNames, len(s.opt.ClassNames), s.out.Name, s.classes)
	}
	return nil
}

// Close releases the session. The process-wide ONNX Runtime environment
// stays loaded.
func (s *Session) Close() error {
	if s.sess == nil {
		return nil
	}
	err := s.sess.Destroy()
	s.sess = nil
	return err
}

// Runs returns the model runs Infer keeps in flight at once (the
// thread plan's choice, or Options.Runs): one when it reads between runs
// (Options.Sequential). Each run holds a P of the Go runtime through its
// ONNX Runtime calls; a program that runs nothing else beside Infer may,
// as the fedcalib commands do, raise GOMAXPROCS to Runs()+1 while Infer
// runs when the runs would hold every P, so that the runtime does not
// take the P back from every call (3–5 % of mnist-tiny's records/s on
// two cores). The package leaves GOMAXPROCS alone: it is the process's.
func (s *Session) Runs() int {
	if s.opt.Sequential {
		return 1
	}
	return s.runs
}

// Input describes the model input the session feeds.
func (s *Session) Input() TensorInfo { return tensorInfo(s.in) }

// Output describes the model output the session collects.
func (s *Session) Output() TensorInfo { return tensorInfo(s.out) }

// Metadata returns the model's metadata_props with Options.Preprocess
// applied over them.
func (s *Session) Metadata() map[string]string { return maps.Clone(s.props) }

// Preprocessing returns the preprocessing in effect.
func (s *Session) Preprocessing() Preprocessing { return s.pre }

// ClassNames returns the class names from the fedcalib.classes metadata,
// or nil when the model has none.
func (s *Session) ClassNames() []string { return SplitClassNames(s.props[KeyClasses]) }

// SplitClassNames returns the class names of a fedcalib.classes value:
// split at commas, each trimmed of spaces; nil for a blank value.
func SplitClassNames(v string) []string {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	names := strings.Split(v, ",")
	for i := range names {
		names[i] = strings.TrimSpace(names[i])
	}
	return names
}

// Classes returns the number of output columns, or 0 when the output shape
// leaves it dynamic and nothing has run yet.
func (s *Session) Classes() int { return s.classes }

// Batch is a batch of model inputs, already laid out as the model input.
// Exactly one of Float and Int is used, as the input's element type says.
type Batch struct {
	// Shape is the tensor shape; Shape[0] is the number of rows.
	Shape []int64
	// Float holds the values of a float32 input, row-major.
	Float []float32
	// Int holds the values of an int64 input, row-major.
	Int []int64
}

// Run runs one batch and appends its logits, Shape[0] rows of Classes()
// values, to dst, returning the extended slice. It fails on outputs that
// are not [rows classes] or that hold NaN or ±Inf. Outputs named by
// Options.Extra are computed and dropped; RunExtra keeps them.
func (s *Session) Run(dst []float32, b *Batch) ([]float32, error) {
	dst, _, err := s.RunExtra(dst, nil, b)
	return dst, err
}

// RunExtra is Run that also appends the batch's rows of each output named
// by Options.Extra to extra[i], returning the extended slices; extra may
// be nil or short, and missing slices start empty. On error dst and every
// extra[i] keep their lengths.
func (s *Session) RunExtra(dst []float32, extra [][]float32, b *Batch) ([]float32, [][]float32, error) {
	if s.sess == nil {
		return dst, extra, errors.New("infer: Run on a closed Session")
	}
	if len(b.Shape) == 0 || b.Shape[0] <= 0 {
		return dst, extra, fmt.Errorf("batch shape %v: want at least one row", b.Shape)
	}
	rows := int(b.Shape[0])
	var in ort.Value
	var err error
	switch s.dtype {
	case Float32:
		in, err = ort.NewTensor(ort.Shape(b.Shape), b.Float)
	case Int64:
		in, err = ort.NewTensor(ort.Shape(b.Shape), b.Int)
	}
	if err != nil {
		return dst, extra, fmt.Errorf("batch of shape %s: %w", fmtShape(b.Shape), err)
	}
	defer in.Destroy()

	base := len(dst)
	outputs := make([]ort.Value, 1+len(s.extra))
	defer destroyAll(outputs)
	if s.classes > 0 {
		// Let ONNX Runtime write straight into dst.
		dst = grow(dst, rows*s.classes)
		t, err := ort.NewTensor(ort.NewShape(int64(rows), int64(s.classes)), dst[base:])
		if err != nil {
			return dst[:base], extra, err
		}
		outputs[0] = t
	}
	if err := s.sess.Run([]ort.Value{in}, outputs); err != nil {
		return dst[:base], extra, fmt.Errorf("running the model on a batch of shape %s: %w", fmtShape(b.Shape), err)
	}
	if s.classes == 0 {
		t, ok := outputs[0].(*ort.Tensor[float32])
		if !ok {
			return dst, extra, fmt.Errorf("model output %q is not a float32 tensor", s.out.Name)
		}
		shape := t.GetShape()
		if len(shape) != 2 || shape[0] != int64(rows) || shape[1] < 1 {
			return dst, extra, fmt.Errorf("model output %q has shape %v for %d rows: want logits of shape [%d classes]", s.out.Name, shape, rows, rows)
		}
		s.classes = int(shape[1])
		dst = append(dst, t.GetData()...)
	}
	if err := checkFinite(dst[base:], s.classes); err != nil {
		return dst[:base], extra, fmt.Errorf("model output %q: %w", s.out.Name, err)
	}
	more := make([][]float32, len(s.extra))
	for k, o := range s.extra {
		t, err := rowsOf(outputs[1+k], o.Name, rows, s.cols[k])
		if err != nil {
			return dst[:base], extra, err
		}
		if err := checkFinite(t.GetData(), int(t.GetShape()[1])); err != nil {
			return dst[:base], extra, fmt.Errorf("model output %q: %w", o.Name, err)
		}
		if s.cols[k] == 0 {
			s.cols[k] = int(t.GetShape()[1]) // rowsOf checked it against a known one
		}
		more[k] = t.GetData()
	}
	for len(extra) < len(more) {
		extra = append(extra, nil)
	}
	for k, v := range more {
		extra[k] = append(extra[k], v...)
	}
	return dst, extra, nil
}

// rowsOf returns v, the value of the named extra output, as a float32
// tensor of shape [rows cols], or [rows k] for any k ≥ 1 when cols is 0.
func rowsOf(v ort.Value, name string, rows, cols int) (*ort.Tensor[float32], error) {
	t, ok := v.(*ort.Tensor[float32])
	if !ok {
		return nil, fmt.Errorf("model output %q is not a float32 tensor", name)
	}
	shape := t.GetShape()
	if len(shape) != 2 || shape[0] != int64(rows) || shape[1] < 1 || (cols > 0 && shape[1] != int64(cols)) {
		return nil, fmt.Errorf("model output %q has shape %v for %d rows: want [%d columns]", name, shape, rows, rows)
	}
	return t, nil
}

// grow extends dst by n elements, reusing capacity.
func grow(dst []float32, n int) []float32 {
	if cap(dst)-len(dst) < n {
		dst = append(dst[:cap(dst)], make([]float32, len(dst)+n-cap(dst))...)[:len(dst)]
	}
	return dst[:len(dst)+n]
}

func checkFinite(x []float32, classes int) error {
	for i, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("value %v in row %d, class %d of the batch: the model produced non-finite logits", v, i/classes, i%classes)
		}
	}
	return nil
}

// looksLikeProbabilities reports whether every row of x is non-negative
// and sums to 1 within logits.ProbabilitySumTolerance.
func looksLikeProbabilities(x []float32, classes int) bool {
	if len(x) == 0 {
		return false
	}
	for r := 0; r < len(x); r += classes {
		sum := 0.0
		for _, v := range x[r : r+classes] {
			if v < 0 {
				return false
			}
			sum += float64(v)
		}
		if math.Abs(sum-1) > logits.ProbabilitySumTolerance {
			return false
		}
	}
	return true
}

func tensorInfo(i ort.InputOutputInfo) TensorInfo {
	t := TensorInfo{Name: i.Name, Shape: append([]int64(nil), i.Dimensions...)}
	if i.OrtValueType == ort.ONNXTypeTensor {
		t.Type = elemName(i.DataType)
	}
	return t
}

// elemName names an element type as NumPy does.
func elemName(t ort.TensorElementDataType) string {
	switch t {
	case ort.TensorElementDataTypeFloat:
		return "float32"
	case ort.TensorElementDataTypeDouble:
		return "float64"
	}
	return strings.ToLower(strings.TrimPrefix(t.String(), "ONNX_TENSOR_ELEMENT_DATA_TYPE_"))
}

func isFloat32(i ort.InputOutputInfo) bool {
	return i.OrtValueType == ort.ONNXTypeTensor && i.DataType == ort.TensorElementDataTypeFloat
}

func describe(i ort.InputOutputInfo) string {
	if i.OrtValueType == ort.ONNXTypeTensor {
		return "a " + elemName(i.DataType) + " tensor"
	}
	return "a " + i.OrtValueType.String()
}

func indexInfo(infos []ort.InputOutputInfo, name string) int {
	return indexFunc(infos, func(i ort.InputOutputInfo) bool { return i.Name == name })
}

func indexFunc(infos []ort.InputOutputInfo, f func(ort.InputOutputInfo) bool) int {
	for i := range infos {
		if f(infos[i]) {
			return i
		}
	}
	return -1
}

func names(infos []ort.InputOutputInfo) string {
	s := make([]string, len(infos))
	for i := range infos {
		s[i] = fmt.Sprintf("%q", infos[i].Name)
	}
	return strings.Join(s, ", ")
}
