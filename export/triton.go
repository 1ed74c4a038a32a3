package export

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/internal/fileio"
	"github.com/fedcalib/fedcalib/onnx"
)

// DefaultMaxBatch is the max_batch_size of a Triton model configuration
// when TritonOptions.MaxBatch is 0: the largest batch Triton's dynamic
// batcher forms.
const DefaultMaxBatch = 64

// Files of a Triton model directory, as WriteTriton lays it out:
// REPO/NAME/config.pbtxt, REPO/NAME/1/model.onnx and REPO/NAME/labels.txt.
const (
	TritonConfigFile = "config.pbtxt"
	TritonModelFile  = "1/model.onnx"
	TritonLabelsFile = "labels.txt"
	// TritonModelName is the model file's name in a version directory.
	TritonModelName = "model.onnx"
)

// TritonPlatform is the platform of an ONNX model in Triton's model
// configuration: the ONNX Runtime backend.
const TritonPlatform = "onnxruntime_onnx"

// TritonOptions configures WriteTriton. The zero value is not usable:
// Name is required.
type TritonOptions struct {
	// Name is the model's name in the repository, its directory's name
	// (see TritonName).
	Name string
	// MaxBatch is max_batch_size; 0 means DefaultMaxBatch. It is ignored
	// (max_batch_size 0, full shapes) when an input or output has no
	// variable first axis, as Triton requires.
	MaxBatch int
	// Version is the model version directory the model is written to;
	// 0 means 1. With a Version, a model directory that exists already
	// gains that version (see PrepareTriton), so a calibrator can be
	// swapped without copying by hand.
	Version int
	// Labels are the class names written to labels.txt, one a line, and
	// named by label_filename on the outputs of [batch, classes] (Triton's
	// classification extension). Nil means the model's fedcalib.classes
	// metadata; no names means no labels file.
	Labels []string
}

// Validate reports whether opt names a model (letters, digits, '-' and
// '_' only) and a max batch size of 0 or more.
func (opt TritonOptions) Validate() error {
	if opt.Name == "" || opt.Name != TritonName(opt.Name+".onnx") {
		return fmt.Errorf("triton: model name %q: want letters, digits, '-' and '_' only", opt.Name)
	}
	if opt.MaxBatch < 0 || opt.MaxBatch > math.MaxInt32 {
		return fmt.Errorf("triton: max batch size %d: want 1 to %d, max_batch_size being an int32 (0: %d)", opt.MaxBatch, math.MaxInt32, DefaultMaxBatch)
	}
	if opt.Version < 0 || opt.Version > math.MaxInt32 {
		return fmt.Errorf("triton: version %d: want 1 to %d (0: 1)", opt.Version, math.MaxInt32)
	}
	return nil
}

// TritonConfig is the part of Triton's model configuration (ModelConfig,
// written as protobuf text in config.pbtxt) that fedcalib writes. The
// zero value is an unnamed configuration of no tensors.
type TritonConfig struct {
	Name         string
	Platform     string
	MaxBatchSize int
	Inputs       []TritonTensor
	Outputs      []TritonTensor
	// DynamicBatching enables Triton's dynamic batcher with its defaults
	// (dynamic_batching { }).
	DynamicBatching bool
}

// TritonTensor is one input or output of a TritonConfig. The zero value
// is an unnamed scalar of no type.
type TritonTensor struct {
	Name string
	// DataType is Triton's name of the element type, such as TYPE_FP32.
	DataType string
	// Dims is the shape without the batch axis when max_batch_size > 0;
	// -1 marks a variable dimension.
	Dims []int64
	// LabelFilename names the labels file, relative to the model's
	// directory; empty for none.
	LabelFilename string
	// Reshape, when not nil, is the shape the model really has (without
	// the batch axis) where it differs from Dims: an output of the batch
	// axis alone, or a scalar, has Dims [1] (Triton refuses empty dims)
	// and Reshape [] (reshape: { shape: [ ] }).
	Reshape []int64
}

// tritonTypes maps ONNX element types to Triton's data types.
var tritonTypes = map[onnx.DataType]string{
	onnx.Bool: "TYPE_BOOL", onnx.Uint8: "TYPE_UINT8", onnx.Uint16: "TYPE_UINT16",
	onnx.Uint32: "TYPE_UINT32", onnx.Uint64: "TYPE_UINT64", onnx.Int8: "TYPE_INT8",
	onnx.Int16: "TYPE_INT16", onnx.Int32: "TYPE_INT32", onnx.Int64: "TYPE_INT64",
	onnx.Float16: "TYPE_FP16", onnx.Float: "TYPE_FP32", onnx.Double: "TYPE_FP64",
	onnx.String: "TYPE_STRING", onnx.BFloat16: "TYPE_BF16",
}

// TritonName returns a Triton model name made from the file name path:
// its base name without the extension, every character other than an
// ASCII letter, digit, '-' or '_' replaced by '_' ("model" when nothing
// is left).
func TritonName(path string) string {
	base := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	name := []rune(base)
	for i, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			name[i] = '_'
		}
	}
	if len(name) == 0 || base == "." {
		return "model"
	}
	return string(name)
}

// NewTritonConfig returns the model configuration of m for Triton's ONNX
// Runtime backend under opt: every graph input and output with its type
// and shape, batched on the first axis with dynamic batching when every
// one of them has a variable first axis. labels reports whether a labels
// file exists, to be named by the outputs of [batch, classes].
func NewTritonConfig(m *onnx.Model, opt TritonOptions, labels bool) (*TritonConfig, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	ins, outs := m.Inputs(), m.Outputs()
	batched := true
	for _, v := range append(append([]onnx.Value(nil), ins...), outs...) {
		if len(v.Shape) == 0 || v.Shape[0].Known() {
			batched = false
		}
	}
	cfg := &TritonConfig{Name: opt.Name, Platform: TritonPlatform}
	if batched {
		cfg.MaxBatchSize, cfg.DynamicBatching = opt.MaxBatch, true
		if cfg.MaxBatchSize == 0 {
			cfg.MaxBatchSize = DefaultMaxBatch
		}
	}
	probs, ok := m.MetadataValue(KeyOutput)
	if !ok {
		probs = DefaultOutput // a Standalone model
	}
	classes := outputClasses(m, probs)
	tensor := func(v onnx.Value, output bool) (TritonTensor, error) {
		typ, ok := tritonTypes[v.Elem]
		if !ok {
			return TritonTensor{}, fmt.Errorf("triton: %s %q is %s, which Triton's ONNX Runtime backend does not take", map[bool]string{false: "input", true: "output"}[output], v.Name, v.Type)
		}
		if v.Shape == nil {
			return TritonTensor{}, fmt.Errorf("triton: %q declares no shape: Triton needs the rank of every input and output", v.Name)
		}
		shape := v.Shape
		if batched {
			shape = shape[1:]
		}
		t := TritonTensor{Name: v.Name, DataType: typ, Dims: make([]int64, len(shape))}
		for i, d := range shape {
			t.Dims[i] = -1
			if d.Known() {
				t.Dims[i] = d.Value
			}
		}
		if len(t.Dims) == 0 { // Triton refuses empty dims
			t.Dims, t.Reshape = []int64{1}, []int64{}
		}
		// The classes axis: the one dimension of a batched output, the
		// second of a fixed-batch [N, classes] one.
		if output && labels && classes > 0 && t.Reshape == nil &&
			(batched && len(t.Dims) == 1 || !batched && len(t.Dims) == 2) && t.Dims[len(t.Dims)-1] == int64(classes) {
			t.LabelFilename = TritonLabelsFile
		}
		return t, nil
	}
	for _, v := range ins {
		t, err := tensor(v, false)
		if err != nil {
			return nil, err
		}
		cfg.Inputs = append(cfg.Inputs, t)
	}
	for _, v := range outs {
		t, err := tensor(v, true)
		if err != nil {
			return nil, err
		}
		cfg.Outputs = append(cfg.Outputs, t)
	}
	return cfg, nil
}

// MarshalText returns c in protobuf text format, as Triton reads
// config.pbtxt.
func (c *TritonConfig) MarshalText() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "name: %s\n", textQuote(c.Name))
	fmt.Fprintf(&b, "platform: %s\n", textQuote(c.Platform))
	fmt.Fprintf(&b, "max_batch_size: %d\n", c.MaxBatchSize)
	for _, list := range []struct {
		field   string
		tensors []TritonTensor
	}{{"input", c.Inputs}, {"output", c.Outputs}} {
		if len(list.tensors) == 0 {
			continue
		}
		fmt.Fprintf(&b, "%s [\n", list.field)
		for i, t := range list.tensors {
			dims := make([]string, len(t.Dims))
			for j, d := range t.Dims {
				dims[j] = strconv.FormatInt(d, 10)
			}
			fmt.Fprintf(&b, "  {\n    name: %s\n    data_type: %s\n    dims: [ %s ]\n", textQuote(t.Name), t.DataType, strings.Join(dims, ", "))
			if t.Reshape != nil {
				shape := make([]string, len(t.Reshape))
				for j, d := range t.Reshape {
					shape[j] = strconv.FormatInt(d, 10)
				}
				fmt.Fprintf(&b, "    reshape: { shape: [ %s ] }\n", strings.Join(shape, ", "))
			}
			if t.LabelFilename != "" {
				fmt.Fprintf(&b, "    label_filename: %s\n", textQuote(t.LabelFilename))
			}
			b.WriteString("  }")
			if i < len(list.tensors)-1 {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString("]\n")
	}
	if c.DynamicBatching {
		b.WriteString("dynamic_batching { }\n")
	}
	return b.Bytes(), nil
}

// textQuote returns s as a protobuf text-format string: in double
// quotes, with '"', '\\' and the bytes below 0x20 or 0x7f escaped (\n,
// \r, \t or \xHH) and every other byte as it is.
func textQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// ClassNames returns the class names of m's fedcalib.classes metadata
// (infer.SplitClassNames), or nil when it has none.
func ClassNames(m *onnx.Model) []string {
	v, _ := m.MetadataValue(infer.KeyClasses)
	return infer.SplitClassNames(v)
}

// WriteTriton writes model m into the Triton model repository repo as
// the model opt.Name (PrepareTriton, then TritonEntry.Write). It returns
// the configuration written.
func WriteTriton(ctx context.Context, repo string, m *onnx.Model, opt TritonOptions) (*TritonConfig, error) {
	e, err := PrepareTriton(repo, m, opt)
	if err != nil {
		return nil, err
	}
	if err := e.Write(ctx); err != nil {
		return nil, err
	}
	return e.Config, nil
}

// A TritonEntry is a Triton model directory, or a version of one, ready
// to be written. The zero value writes nothing useful.
type TritonEntry struct {
	// Config is the model's configuration.
	Config *TritonConfig
	// Dir is the directory Write creates: REPO/NAME, or REPO/NAME/N when
	// a version is added to a model directory that exists.
	Dir string
	// Files are Dir's files, relative to it.
	Files []fileio.DirFile
}

// PrepareTriton makes the entry of model m in the Triton model
// repository repo under opt (TritonFiles), writing nothing. When
// repo/NAME holds a model already and opt.Version is set, the entry is
// that version alone, N/model.onnx: the directory's config.pbtxt and
// labels.txt must be those m gives (a model with other inputs, outputs
// or classes is refused) and version N must not exist. Without a
// version, repo/NAME must not exist or be empty.
func PrepareTriton(repo string, m *onnx.Model, opt TritonOptions) (*TritonEntry, error) {
	cfg, files, err := TritonFiles(m, opt)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(repo, opt.Name)
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return &TritonEntry{Config: cfg, Dir: dir, Files: files}, nil
	}
	if opt.Version == 0 {
		return nil, fmt.Errorf("triton: %s holds a model already: choose another name, or add a version to it (--version N)", dir)
	}
	version := strconv.Itoa(opt.Version)
	if _, err := os.Stat(filepath.Join(dir, version)); err == nil {
		return nil, fmt.Errorf("triton: %s has a version %s already: choose another", dir, version)
	}
	var model fileio.DirFile
	for _, f := range files {
		switch f.Name {
		case TritonConfigFile, TritonLabelsFile:
			have, err := os.ReadFile(filepath.Join(dir, f.Name))
			if err != nil || !bytes.Equal(have, f.Data) {
				return nil, fmt.Errorf("triton: %s is not the %s this model gives (other inputs, outputs, batching or classes): write it as another model (--name)", filepath.Join(dir, f.Name), f.Name)
			}
		default:
			model = fileio.DirFile{Name: TritonModelName, Data: f.Data}
		}
	}
	return &TritonEntry{Config: cfg, Dir: filepath.Join(dir, version), Files: []fileio.DirFile{model}}, nil
}

// Write writes the entry atomically (fileio.WriteDir), creating the
// directories above it when missing.
func (e *TritonEntry) Write(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(e.Dir), 0o755); err != nil {
		return fmt.Errorf("triton: %w", err)
	}
	return fileio.WriteDir(ctx, e.Dir, e.Files)
}

// TritonFiles returns the configuration of model m under opt and the
// files of its Triton model directory, relative to it: config.pbtxt
// (NewTritonConfig), N/model.onnx (N the version, 1 by default) and, when there are class names and
// outputs of [batch, classes] to name them, labels.txt. It writes
// nothing, so a caller writing several forms can find every error first.
func TritonFiles(m *onnx.Model, opt TritonOptions) (*TritonConfig, []fileio.DirFile, error) {
	labels := opt.Labels
	if labels == nil {
		labels = ClassNames(m)
	}
	for _, l := range labels {
		if l == "" || strings.ContainsAny(l, "\r\n") {
			return nil, nil, fmt.Errorf("triton: class name %q: a labels file holds one non-empty name a line", l)
		}
	}
	cfg, err := NewTritonConfig(m, opt, len(labels) > 0)
	if err != nil {
		return nil, nil, err
	}
	if k := outputClasses(m, firstLabelled(cfg)); len(labels) > 0 && k > 0 && k != len(labels) {
		return nil, nil, fmt.Errorf("triton: %d class names for %d classes", len(labels), k)
	}
	text, err := cfg.MarshalText()
	if err != nil {
		return nil, nil, err
	}
	version := max(opt.Version, 1)
	files := []fileio.DirFile{{Name: TritonConfigFile, Data: text}, {Name: strconv.Itoa(version) + "/" + TritonModelName, Data: m.Bytes()}}
	if firstLabelled(cfg) != "" {
		files = append(files, fileio.DirFile{Name: TritonLabelsFile, Data: []byte(strings.Join(labels, "\n") + "\n")})
	}
	return cfg, files, nil
}

// firstLabelled returns the name of the first output of cfg with a labels
// file, or "".
func firstLabelled(cfg *TritonConfig) string {
	for _, t := range cfg.Outputs {
		if t.LabelFilename != "" {
			return t.Name
		}
	}
	return ""
}
