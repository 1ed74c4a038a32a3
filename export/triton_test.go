package export

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/onnx"
)

// A pbNode is a protobuf text-format message as parseText reads it: each
// field name with its values in order, a value being a scalar (a string,
// an identifier or a number, as written) or a message.
type pbNode map[string][]pbValue

type pbValue struct {
	scalar string
	msg    pbNode
}

// parseText parses protobuf text format, the subset Triton's config.pbtxt
// uses: "name: value", "name { ... }", "name: { ... }", lists "name: [ v,
// ... ]" and "name [ { ... }, ... ]", quoted strings with Go escapes. It
// is written from the text format's grammar, independently of
// MarshalText.
func parseText(src string) (pbNode, error) {
	toks, err := tokenize(src)
	if err != nil {
		return nil, err
	}
	p := &pbParser{toks: toks}
	n, err := p.message("")
	if err != nil {
		return nil, err
	}
	if p.i != len(p.toks) {
		return nil, fmt.Errorf("unexpected %q", p.toks[p.i])
	}
	return n, nil
}

func tokenize(src string) ([]string, error) {
	var toks []string
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '#':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case unicode.IsSpace(rune(c)):
			i++
		case strings.ContainsRune(":{}[],", rune(c)):
			toks = append(toks, string(c))
			i++
		case c == '"':
			j := i + 1
			for j < len(src) && src[j] != '"' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(src) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			toks = append(toks, src[i:j+1])
			i = j + 1
		default:
			j := i
			for j < len(src) && (src[j] == '_' || src[j] == '-' || src[j] == '.' || unicode.IsLetter(rune(src[j])) || unicode.IsDigit(rune(src[j]))) {
				j++
			}
			if j == i {
				return nil, fmt.Errorf("unexpected %q at %d", c, i)
			}
			toks = append(toks, src[i:j])
			i = j
		}
	}
	return toks, nil
}

type pbParser struct {
	toks []string
	i    int
}

func (p *pbParser) peek() string {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return ""
}

func (p *pbParser) next() string { t := p.peek(); p.i++; return t }

// message parses fields up to the closing token end ("" at the top).
func (p *pbParser) message(end string) (pbNode, error) {
	n := pbNode{}
	for p.peek() != end {
		name := p.next()
		if name == "" || strings.ContainsAny(name, ":{}[],\"") {
			return nil, fmt.Errorf("want a field name, have %q", name)
		}
		if p.peek() == ":" {
			p.next()
		}
		vals, err := p.values()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		n[name] = append(n[name], vals...)
	}
	if end != "" {
		p.next()
	}
	return n, nil
}

// values parses a value or a list of values.
func (p *pbParser) values() ([]pbValue, error) {
	if p.peek() != "[" {
		v, err := p.value()
		return []pbValue{v}, err
	}
	p.next()
	var vals []pbValue
	for p.peek() != "]" {
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		vals = append(vals, v)
		if p.peek() == "," {
			p.next()
		} else if p.peek() != "]" {
			return nil, fmt.Errorf("want , or ], have %q", p.peek())
		}
	}
	p.next()
	return vals, nil
}

func (p *pbParser) value() (pbValue, error) {
	t := p.next()
	switch {
	case t == "{":
		m, err := p.message("}")
		return pbValue{msg: m}, err
	case strings.HasPrefix(t, `"`):
		s, err := strconv.Unquote(t)
		return pbValue{scalar: s}, err
	case t == "" || strings.ContainsAny(t, ":{}[],"):
		return pbValue{}, fmt.Errorf("want a value, have %q", t)
	}
	return pbValue{scalar: t}, nil
}

// config reads a TritonConfig back from a parsed config.pbtxt.
func (n pbNode) config(t *testing.T) *TritonConfig {
	t.Helper()
	one := func(n pbNode, field string) string {
		if len(n[field]) != 1 {
			t.Fatalf("field %s appears %d times", field, len(n[field]))
		}
		return n[field][0].scalar
	}
	tensors := func(field string) []TritonTensor {
		var out []TritonTensor
		for _, v := range n[field] {
			tt := TritonTensor{Name: one(v.msg, "name"), DataType: one(v.msg, "data_type"), Dims: []int64{}}
			for _, d := range v.msg["dims"] {
				x, err := strconv.ParseInt(d.scalar, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				tt.Dims = append(tt.Dims, x)
			}
			if len(v.msg["label_filename"]) > 0 {
				tt.LabelFilename = one(v.msg, "label_filename")
			}
			out = append(out, tt)
		}
		return out
	}
	mb, err := strconv.Atoi(one(n, "max_batch_size"))
	if err != nil {
		t.Fatal(err)
	}
	return &TritonConfig{Name: one(n, "name"), Platform: one(n, "platform"), MaxBatchSize: mb,
		Inputs: tensors("input"), Outputs: tensors("output"), DynamicBatching: len(n["dynamic_batching"]) == 1}
}

// calibratedTiny returns the tiny model (input x [batch, 1, 4, 4],
// logits [batch, 3], classes zero, one, two) of file, with a temperature
// calibrator appended in memory.
func calibratedTiny(t *testing.T, file string) *onnx.Model {
	t.Helper()
	m, err := onnx.ReadFile(filepath.Join("../infer/testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	c := calib.NewTemperature(3)
	c.T = 2
	if _, _, err := Append(m, c, nil, Options{}); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestTritonConfigParsesBack writes Triton repositories and parses each
// config.pbtxt back, comparing its fields with the configuration written
// out by hand from the models' shapes.
func TestTritonConfigParsesBack(t *testing.T) {
	fp32 := "TYPE_FP32"
	for _, tc := range []struct {
		name   string
		model  string
		opt    TritonOptions
		want   TritonConfig
		labels string // "" for no labels file
	}{
		{"batched", "tiny.onnx", TritonOptions{Name: "tiny"}, TritonConfig{Name: "tiny", Platform: "onnxruntime_onnx", MaxBatchSize: 64,
			Inputs: []TritonTensor{{Name: "x", DataType: fp32, Dims: []int64{1, 4, 4}}},
			Outputs: []TritonTensor{{Name: "logits", DataType: fp32, Dims: []int64{3}, LabelFilename: "labels.txt"},
				{Name: "probabilities", DataType: fp32, Dims: []int64{3}, LabelFilename: "labels.txt"}},
			DynamicBatching: true}, "zero\none\ntwo\n"},
		{"given labels and batch", "tiny.onnx", TritonOptions{Name: "t-2", MaxBatch: 8, Labels: []string{"a b", "c", "d"}}, TritonConfig{Name: "t-2", Platform: "onnxruntime_onnx", MaxBatchSize: 8,
			Inputs: []TritonTensor{{Name: "x", DataType: fp32, Dims: []int64{1, 4, 4}}},
			Outputs: []TritonTensor{{Name: "logits", DataType: fp32, Dims: []int64{3}, LabelFilename: "labels.txt"},
				{Name: "probabilities", DataType: fp32, Dims: []int64{3}, LabelFilename: "labels.txt"}},
			DynamicBatching: true}, "a b\nc\nd\n"},
		{"no names", "tiny_nometa.onnx", TritonOptions{Name: "nometa"}, TritonConfig{Name: "nometa", Platform: "onnxruntime_onnx", MaxBatchSize: 64,
			Inputs:          []TritonTensor{{Name: "x", DataType: fp32, Dims: []int64{1, 4, 4}}},
			Outputs:         []TritonTensor{{Name: "logits", DataType: fp32, Dims: []int64{3}}, {Name: "probabilities", DataType: fp32, Dims: []int64{3}}},
			DynamicBatching: true}, ""},
		{"fixed batch", "tiny_fixed.onnx", TritonOptions{Name: "fixed", MaxBatch: 8}, TritonConfig{Name: "fixed", Platform: "onnxruntime_onnx", MaxBatchSize: 0,
			Inputs: []TritonTensor{{Name: "x", DataType: fp32, Dims: []int64{1, 1, 4, 4}}},
			Outputs: []TritonTensor{{Name: "logits", DataType: fp32, Dims: []int64{1, 3}, LabelFilename: "labels.txt"},
				{Name: "probabilities", DataType: fp32, Dims: []int64{-1, 3}, LabelFilename: "labels.txt"}}}, "zero\none\ntwo\n"},
	} {
		m := calibratedTiny(t, tc.model)
		repo := filepath.Join(t.TempDir(), "repo")
		if _, err := WriteTriton(context.Background(), repo, m, tc.opt); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		dir := filepath.Join(repo, tc.want.Name)
		text, err := os.ReadFile(filepath.Join(dir, "config.pbtxt"))
		if err != nil {
			t.Fatal(err)
		}
		n, err := parseText(string(text))
		if err != nil {
			t.Fatalf("%s: config.pbtxt does not parse: %v\n%s", tc.name, err, text)
		}
		if got := n.config(t); !reflect.DeepEqual(*got, tc.want) {
			t.Errorf("%s: config.pbtxt gives\n%+v\nwant\n%+v\n%s", tc.name, *got, tc.want, text)
		}
		if model, err := os.ReadFile(filepath.Join(dir, "1", "model.onnx")); err != nil || string(model) != string(m.Bytes()) {
			t.Errorf("%s: 1/model.onnx is not the calibrated model (%v)", tc.name, err)
		}
		labels, err := os.ReadFile(filepath.Join(dir, "labels.txt"))
		if tc.labels == "" && !os.IsNotExist(err) || tc.labels != "" && string(labels) != tc.labels {
			t.Errorf("%s: labels.txt %q (%v), want %q", tc.name, labels, err, tc.labels)
		}
	}
}

// TestTritonRefuses checks the errors of WriteTriton, and that it never
// writes over a model directory.
func TestTritonRefuses(t *testing.T) {
	m := calibratedTiny(t, "tiny.onnx")
	repo := t.TempDir()
	if _, err := WriteTriton(context.Background(), repo, m, TritonOptions{Name: "tiny"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opt  TritonOptions
		want string
	}{
		{TritonOptions{Name: "tiny"}, "holds a model already"},
		{TritonOptions{Name: "big", MaxBatch: 1 << 31}, "max batch size 2147483648"},
		{TritonOptions{Name: "ver", Version: -1}, "version -1"},
		{TritonOptions{Name: "a/b"}, "want letters, digits"},
		{TritonOptions{Name: ""}, "want letters, digits"},
		{TritonOptions{Name: "neg", MaxBatch: -1}, "max batch size -1"},
		{TritonOptions{Name: "two", Labels: []string{"a", "b"}}, "2 class names for 3 classes"},
		{TritonOptions{Name: "nl", Labels: []string{"a\nb", "c", "d"}}, "one non-empty name a line"},
	} {
		if _, err := WriteTriton(context.Background(), repo, m, tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.opt, err, tc.want)
		}
	}
}

// TestTritonName checks the default model names.
func TestTritonName(t *testing.T) {
	for in, want := range map[string]string{
		"models/mnist-tiny/model.onnx": "model",
		"out/mnist.calibrated.onnx":    "mnist_calibrated",
		"a b/ré sumé.onnx":             "r__sum_",
		"x_1-2":                        "x_1-2",
		".onnx":                        "model",
	} {
		if got := TritonName(in); got != want {
			t.Errorf("TritonName(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzTritonConfigText checks that any configuration of valid UTF-8
// names and any dims that MarshalText writes parses back, by parseText,
// to the same fields: names with quotes, backslashes and control
// characters are escaped as the text format wants.
func FuzzTritonConfigText(f *testing.F) {
	f.Add("mnist-tiny", "input", int64(28), int64(-1))
	f.Add(`a"b\c`, "x\n\ty\x01", int64(0), int64(1<<40))
	f.Add("", "é ü", int64(-5), int64(3))
	f.Fuzz(func(t *testing.T, name, tensor string, d1, d2 int64) {
		if !utf8.ValidString(name) || !utf8.ValidString(tensor) {
			t.Skip("protobuf strings are UTF-8")
		}
		want := TritonConfig{Name: name, Platform: TritonPlatform, MaxBatchSize: 8,
			Inputs:          []TritonTensor{{Name: tensor, DataType: "TYPE_FP32", Dims: []int64{d1, d2}}},
			Outputs:         []TritonTensor{{Name: tensor + "_out", DataType: "TYPE_INT64", Dims: []int64{}, LabelFilename: name}},
			DynamicBatching: true}
		if name == "" {
			want.Outputs[0].LabelFilename = ""
		}
		text, err := want.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		n, err := parseText(string(text))
		if err != nil {
			t.Fatalf("does not parse: %v\n%s", err, text)
		}
		if got := n.config(t); !reflect.DeepEqual(*got, want) {
			t.Fatalf("parses back as\n%+v\nwant\n%+v\n%s", *got, want, text)
		}
	})
}

// TestTritonVersion adds versions to a model directory: version 2 of the
// same model with another calibrator is written beside version 1 (the
// configuration and labels kept as they were), version 2 again is
// refused, and so is a model whose configuration differs (another
// max_batch_size), each writing nothing.
func TestTritonVersion(t *testing.T) {
	repo := t.TempDir()
	v1 := calibratedTiny(t, "tiny.onnx")
	if _, err := WriteTriton(context.Background(), repo, v1, TritonOptions{Name: "tiny"}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(repo, "tiny")
	config, _ := os.ReadFile(filepath.Join(dir, TritonConfigFile))
	m, err := onnx.ReadFile("../infer/testdata/tiny.onnx")
	if err != nil {
		t.Fatal(err)
	}
	c := calib.NewTemperature(3)
	c.T = 0.5
	if _, _, err := Append(m, c, nil, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteTriton(context.Background(), repo, m, TritonOptions{Name: "tiny", Version: 2}); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "2", "model.onnx")); err != nil || string(got) != string(m.Bytes()) {
		t.Errorf("2/model.onnx is not the new model (%v)", err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "1", "model.onnx")); err != nil || string(got) != string(v1.Bytes()) {
		t.Errorf("1/model.onnx changed (%v)", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, TritonConfigFile)); string(got) != string(config) {
		t.Errorf("config.pbtxt changed:\n%s", got)
	}
	for _, tc := range []struct {
		opt  TritonOptions
		want string
	}{
		{TritonOptions{Name: "tiny", Version: 2}, "has a version 2 already"},
		{TritonOptions{Name: "tiny", Version: 3, MaxBatch: 8}, "config.pbtxt is not the config.pbtxt this model gives"},
	} {
		if _, err := WriteTriton(context.Background(), repo, m, tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.opt, err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "3")); err == nil {
		t.Errorf("version 3 was written")
	}
}
