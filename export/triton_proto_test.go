package export

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/onnx"
	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// tritonProto is Triton's own model_config.proto, which CI has beside
// the repository (not copied into it).
var tritonProto = filepath.Join("..", "..", "shared", "vendor", "triton", "model_config.proto")

// modelConfigDescriptor compiles Triton's model_config.proto and returns
// its ModelConfig message, skipping the test when the file is absent.
func modelConfigDescriptor(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	if _, err := os.Stat(tritonProto); err != nil {
		t.Skipf("Triton's model_config.proto is not here (%v)", err)
	}
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{filepath.Dir(tritonProto)}})}
	files, err := c.Compile(context.Background(), filepath.Base(tritonProto))
	if err != nil {
		t.Fatalf("compiling %s: %v", tritonProto, err)
	}
	d := files[0].FindDescriptorByName("inference.ModelConfig")
	md, ok := d.(protoreflect.MessageDescriptor)
	if !ok {
		t.Fatalf("%s has no message inference.ModelConfig", tritonProto)
	}
	return md
}

// withLabelOutput returns the tiny model with a second output, "label",
// the ArgMax of the logits: int64 [batch], an output of the batch axis
// alone.
func withLabelOutput(t *testing.T) *onnx.Model {
	t.Helper()
	m, err := onnx.ReadFile("../infer/testdata/tiny.onnx")
	if err != nil {
		t.Fatal(err)
	}
	pb := proto.Clone(m.Proto()).(*onnxpb.ModelProto)
	pb.Graph.Node = append(pb.Graph.Node, onnx.NewNode("ArgMax", []string{"logits"}, []string{"label"}, onnx.AttrInt("axis", 1), onnx.AttrInt("keepdims", 0)))
	pb.Graph.Output = append(pb.Graph.Output, onnx.NewValueInfo("label", onnx.Int64, onnx.Shape{{Param: "batch"}}))
	out, err := onnx.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTritonConfigProto writes the Triton entry of every method of the
// registry appended to models of every output shape — batched [batch,
// C], batched with a [batch] label output, fixed batch [1, C], without
// class names, and the calibrator alone — parses each config.pbtxt with
// Triton's own model_config.proto (unknown fields, wrong types and bad
// enum values fail there), and checks the loader's rules against the
// ONNX model (tritonLoaderRules).
func TestTritonConfigProto(t *testing.T) {
	md := modelConfigDescriptor(t)
	s := skewed(600, 3, 7)
	for _, method := range calib.Methods() {
		c, err := calib.New(method.Name, calib.Settings{Mexp: 4, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Fit(s); err != nil {
			t.Fatalf("%s: %v", method.Name, err)
		}
		models := map[string]func() *onnx.Model{
			"batched":     func() *onnx.Model { return readModel(t, "tiny.onnx") },
			"label":       func() *onnx.Model { return withLabelOutput(t) },
			"fixed batch": func() *onnx.Model { return readModel(t, "tiny_fixed.onnx") },
			"no names":    func() *onnx.Model { return readModel(t, "tiny_nometa.onnx") },
		}
		for shape, load := range models {
			m := load()
			if _, _, err := Append(m, c, nil, Options{}); err != nil {
				t.Fatalf("%s, %s: %v", method.Name, shape, err)
			}
			tritonLoaderRules(t, md, method.Name+", "+shape, m, TritonOptions{Name: "m", MaxBatch: 16})
		}
		alone, err := Standalone(c)
		if err != nil {
			t.Fatal(err)
		}
		tritonLoaderRules(t, md, method.Name+", standalone", alone, TritonOptions{Name: "alone", Labels: []string{"a", "b", "c"}})
	}
}

// readModel reads a model of infer/testdata.
func readModel(t *testing.T, file string) *onnx.Model {
	t.Helper()
	m, err := onnx.ReadFile(filepath.Join("../infer/testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// tritonLoaderRules writes m's Triton entry under opt, parses its
// config.pbtxt with Triton's ModelConfig md and checks the rules
// Triton's model loader applies to an ONNX Runtime model: the platform;
// max_batch_size > 0 only when every model input and output has a
// variable first axis; each tensor's dims non-empty, each -1 or
// positive, and with the first axis dropped when batched (reshape
// standing for the model's shape where dims cannot: [1] for a rank-1
// batched output, same element count); the data type of the ONNX
// element type; label_filename naming a file in the model directory
// with one line per class of that tensor's last axis, on every
// [.., classes] output when the classes have names.
func tritonLoaderRules(t *testing.T, md protoreflect.MessageDescriptor, name string, m *onnx.Model, opt TritonOptions) {
	t.Helper()
	repo := t.TempDir()
	if _, err := WriteTriton(context.Background(), repo, m, opt); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	dir := filepath.Join(repo, opt.Name)
	text, err := os.ReadFile(filepath.Join(dir, TritonConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	msg := dynamicpb.NewMessage(md)
	if err := prototext.Unmarshal(text, msg); err != nil {
		t.Fatalf("%s: Triton's model_config.proto refuses config.pbtxt: %v\n%s", name, err, text)
	}
	field := func(m protoreflect.Message, f string) protoreflect.Value {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(f))
		if fd == nil {
			t.Fatalf("ModelConfig has no field %s", f)
		}
		return m.Get(fd)
	}
	if p := field(msg, "platform").String(); p != "onnxruntime_onnx" {
		t.Errorf("%s: platform %q", name, p)
	}
	maxBatch := field(msg, "max_batch_size").Int()
	batched := true
	for _, v := range append(m.Inputs(), m.Outputs()...) {
		if len(v.Shape) == 0 || v.Shape[0].Known() {
			batched = false
		}
	}
	if maxBatch > 0 && !batched {
		t.Errorf("%s: max_batch_size %d for a model without a variable first axis on every tensor", name, maxBatch)
	}
	if batched && maxBatch != int64(opt.MaxBatch) && !(opt.MaxBatch == 0 && maxBatch == DefaultMaxBatch) {
		t.Errorf("%s: max_batch_size %d, asked %d", name, maxBatch, opt.MaxBatch)
	}
	var names []string
	if labels, err := os.ReadFile(filepath.Join(dir, TritonLabelsFile)); err == nil {
		names = strings.Split(strings.TrimSuffix(string(labels), "\n"), "\n")
	}
	wantNames := opt.Labels
	if wantNames == nil {
		wantNames = ClassNames(m)
	}
	for _, list := range []struct {
		field string
		vals  []onnx.Value
	}{{"input", m.Inputs()}, {"output", m.Outputs()}} {
		l := field(msg, list.field).List()
		if l.Len() != len(list.vals) {
			t.Fatalf("%s: %d %ss for a model of %d", name, l.Len(), list.field, len(list.vals))
		}
		for i, v := range list.vals {
			tm := l.Get(i).Message()
			where := name + ", " + list.field + " " + v.Name
			if got := field(tm, "name").String(); got != v.Name {
				t.Errorf("%s: name %q", where, got)
			}
			dt := field(tm, "data_type").Enum()
			if got := string(md.ParentFile().Enums().ByName("DataType").Values().ByNumber(dt).Name()); got != tritonTypes[v.Elem] {
				t.Errorf("%s: data_type %s for %s", where, got, v.Type)
			}
			var dims []int64
			for j := range field(tm, "dims").List().Len() {
				dims = append(dims, field(tm, "dims").List().Get(j).Int())
			}
			if len(dims) == 0 {
				t.Errorf("%s: empty dims, which Triton refuses", where)
			}
			for _, d := range dims {
				if d != -1 && d < 1 {
					t.Errorf("%s: dims %v", where, dims)
				}
			}
			model := v.Shape
			if batched && maxBatch > 0 {
				model = model[1:]
			}
			want := make([]int64, len(model))
			for j, d := range model {
				want[j] = -1
				if d.Known() {
					want[j] = d.Value
				}
			}
			shape := dims
			if tm.Has(tm.Descriptor().Fields().ByName("reshape")) {
				shape = nil
				rl := field(field(tm, "reshape").Message(), "shape").List()
				for j := range rl.Len() {
					shape = append(shape, rl.Get(j).Int())
				}
				if product(shape) != product(dims) {
					t.Errorf("%s: reshape %v does not hold the elements of dims %v", where, shape, dims)
				}
			}
			if !slices.Equal(shape, want) {
				t.Errorf("%s: dims %v (reshape to %v) for the model's %v", where, dims, shape, v.Shape)
			}
			label := ""
			if list.field == "output" {
				label = field(tm, "label_filename").String()
			}
			classes := int64(0)
			if len(want) > 0 {
				classes = want[len(want)-1]
			}
			labelled := list.field == "output" && len(wantNames) > 0 && len(want) >= 1 && classes == int64(len(wantNames)) && (batched && len(want) == 1 || !batched && len(want) == 2)
			switch {
			case labelled && label != TritonLabelsFile:
				t.Errorf("%s: label_filename %q, want %s (classes named)", where, label, TritonLabelsFile)
			case !labelled && label != "":
				t.Errorf("%s: label_filename %q on a tensor of %v", where, label, want)
			case label != "" && int64(len(names)) != classes:
				t.Errorf("%s: %s has %d lines for %d classes", where, label, len(names), classes)
			}
		}
	}
}

// product is the number of elements of a shape, -1 counting as 1.
func product(s []int64) int64 {
	n := int64(1)
	for _, d := range s {
		if d > 0 {
			n *= d
		}
	}
	return n
}
