package onnx

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// Records of fields that onnx.proto does not define, standing in for
// fields of a newer ONNX release.
var (
	futureModelHead = appendString(nil, 999, "future model field")
	futureModelTail = appendVarint(nil, 1000, 42)
	futureGraph     = appendString(nil, 999, "future graph field")
)

// withFuture returns model b with an unknown field record at the start and
// at the end of the ModelProto and at the end of the GraphProto.
func withFuture(t testing.TB, b []byte) []byte {
	t.Helper()
	out := append([]byte(nil), futureModelHead...)
	for _, f := range mustSplit(t, b) {
		if f.num == modelGraph {
			content := append(append([]byte(nil), b[f.val:f.end]...), futureGraph...)
			out = appendRecord(out, modelGraph, content)
			continue
		}
		out = append(out, b[f.start:f.end]...)
	}
	return append(out, futureModelTail...)
}

func decode(t testing.TB, b []byte) *onnxpb.ModelProto {
	t.Helper()
	pb := new(onnxpb.ModelProto)
	if err := proto.Unmarshal(b, pb); err != nil {
		t.Fatalf("edited model does not decode: %v", err)
	}
	return pb
}

func mustParse(t testing.TB, b []byte) *Model {
	t.Helper()
	m, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// exportEdits makes the edits an exporter makes, to m and, by hand with
// the generated types, to want.
func exportEdits(m *Model, want *onnxpb.ModelProto) {
	m.SetMetadata("fedcalib.preprocess.scale", "0.25")
	want.MetadataProps[0].Value = proto.String("0.25")
	m.SetMetadata("fedcalib.method", "temperature")
	want.MetadataProps = append(want.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String("fedcalib.method"), Value: proto.String("temperature")})
	m.SetOpsetVersion("ai.onnx", 17)
	want.OpsetImport[0].Version = proto.Int64(17)

	temp := NewTensorFloat("fedcalib.T", nil, []float32{1.5})
	div := NewNode("Div", []string{"logits", "fedcalib.T"}, []string{"fedcalib.scaled"})
	softmax := NewNode("Softmax", []string{"fedcalib.scaled"}, []string{"probs"}, AttrInt("axis", -1))
	probs := NewValueInfo("probs", Float, Shape{{Param: "batch"}, {Value: 3}})
	m.AddInitializers(temp)
	m.AddNodes(div, softmax)
	m.AddOutputs(probs)
	want.Graph.Initializer = append(want.Graph.Initializer, temp)
	want.Graph.Node = append(want.Graph.Node, div, softmax)
	want.Graph.Output = append(want.Graph.Output, probs)
}

func TestEditSplice(t *testing.T) {
	src := withFuture(t, readTiny(t))
	m := mustParse(t, src)
	want := decode(t, src)
	exportEdits(m, want)
	got := m.Bytes()

	dec := decode(t, got)
	if !proto.Equal(dec, want) {
		t.Errorf("edited model decodes to\n%v\nwant\n%v", dec, want)
	}
	if !proto.Equal(m.Proto(), want) {
		t.Errorf("Proto() after edits =\n%v\nwant\n%v", m.Proto(), want)
	}
	if u := dec.ProtoReflect().GetUnknown(); !bytes.Contains(u, futureModelHead) || !bytes.Contains(u, futureModelTail) {
		t.Errorf("unknown ModelProto fields lost: %x", u)
	}
	if u := dec.GetGraph().ProtoReflect().GetUnknown(); !bytes.Equal(u, futureGraph) {
		t.Errorf("unknown GraphProto fields = %x, want %x", u, futureGraph)
	}

	// Byte identity: the output has the source's records in the same
	// order, each byte for byte, except the three edited ones (the graph,
	// opset_import[0] and metadata_props[0]) and one new metadata record
	// after the last old one. The graph's original bytes are a prefix of
	// the new graph.
	in, out := mustSplit(t, src), mustSplit(t, got)
	if len(out) != len(in)+1 {
		t.Fatalf("edited model has %d top-level records, want %d", len(out), len(in)+1)
	}
	lastMeta := -1
	for i, f := range in {
		if f.num == modelMetadataProps {
			lastMeta = i
		}
	}
	edited := map[string]bool{"graph": true, "opset": true, "meta": true}
	seenOpset, seenMeta := false, false
	j := 0
	for i, f := range in {
		g := out[j]
		j++
		if g.num != f.num {
			t.Fatalf("record %d is field %d, want %d", i, g.num, f.num)
		}
		was, now := src[f.start:f.end], got[g.start:g.end]
		switch {
		case f.num == modelGraph:
			delete(edited, "graph")
			if !bytes.HasPrefix(got[g.val:g.end], src[f.val:f.end]) {
				t.Error("original graph bytes are not a prefix of the edited graph")
			}
		case f.num == modelOpsetImport && !seenOpset:
			seenOpset = true
			delete(edited, "opset")
			if bytes.Equal(was, now) {
				t.Error("opset_import[0] unchanged")
			}
		case f.num == modelMetadataProps && !seenMeta:
			seenMeta = true
			delete(edited, "meta")
			if bytes.Equal(was, now) {
				t.Error("metadata_props[0] unchanged")
			}
		default:
			if !bytes.Equal(was, now) {
				t.Errorf("untouched record %d (field %d) changed: %x -> %x", i, f.num, was, now)
			}
		}
		if i == lastMeta {
			if out[j].num != modelMetadataProps {
				t.Errorf("no new metadata record after the last old one")
			}
			j++
		}
	}
	if len(edited) != 0 {
		t.Errorf("edited records not found: %v", edited)
	}

	// Inspection sees the edits.
	if v, _ := m.MetadataValue("fedcalib.method"); v != "temperature" {
		t.Errorf("MetadataValue(fedcalib.method) = %q", v)
	}
	if v := m.OpsetVersion(""); v != 17 {
		t.Errorf("OpsetVersion = %d, want 17", v)
	}
	wantOut := []string{"logits", "probs"}
	var gotOut []string
	for _, v := range m.Outputs() {
		gotOut = append(gotOut, v.Name)
	}
	if !reflect.DeepEqual(gotOut, wantOut) {
		t.Errorf("Outputs = %v, want %v", gotOut, wantOut)
	}
	if !m.Edited() {
		t.Error("Edited = false after edits")
	}
	if !bytes.Equal(got, m.Bytes()) {
		t.Error("Bytes is not repeatable")
	}
	// The edited bytes parse again and serialise unchanged.
	if again := mustParse(t, got); !bytes.Equal(again.Bytes(), got) {
		t.Error("re-parsed edited model serialises differently")
	}
}

func TestEditNoOp(t *testing.T) {
	src := withFuture(t, readTiny(t))
	m := mustParse(t, src)
	m.SetMetadata("author", "testdata")
	m.SetMetadata("fedcalib.preprocess.scale", "0.5")
	m.SetOpsetVersion("", 13)
	m.SetOpsetVersion("ai.onnx.ml", 3)
	m.SetIRVersion(8)
	if got := m.Bytes(); !bytes.Equal(got, src) {
		t.Errorf("edits to the same values changed the bytes:\n%x\nwant\n%x", got, src)
	}
}

// TestEditEntries covers opset and metadata entries the simple case does
// not: the "ai.onnx" alias, repeated keys, unknown fields inside an entry,
// and a model with no entries at all.
func TestEditEntries(t *testing.T) {
	graph := appendRecord(nil, modelGraph, appendString(nil, 2, "g"))
	ir := appendVarint(nil, modelIRVersion, 7)
	opset := func(domain string, v uint64) []byte {
		return appendRecord(nil, modelOpsetImport, appendVarint(appendString(nil, 1, domain), 2, v))
	}
	prop := func(k, v string, extra ...byte) []byte {
		return appendRecord(nil, modelMetadataProps, append(appendString(appendString(nil, 1, k), 2, v), extra...))
	}
	unknownInEntry := appendVarint(nil, 7, 99)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

	for _, tc := range []struct {
		name string
		src  []byte
		edit func(*Model)
		want []byte
	}{{
		name: "alias keeps domain name",
		src:  cat(ir, opset("ai.onnx", 11), graph),
		edit: func(m *Model) { m.SetOpsetVersion("", 13) },
		want: cat(ir, opset("ai.onnx", 13), graph),
	}, {
		name: "duplicate domains collapse",
		src:  cat(ir, opset("", 11), opset("x", 1), opset("ai.onnx", 12), graph),
		edit: func(m *Model) { m.SetOpsetVersion("ai.onnx", 13) },
		want: cat(ir, opset("", 13), opset("x", 1), graph),
	}, {
		name: "duplicate keys collapse",
		src:  cat(ir, graph, prop("a", "1"), prop("b", "2"), prop("a", "3")),
		edit: func(m *Model) { m.SetMetadata("a", "9") },
		want: cat(ir, graph, prop("a", "9"), prop("b", "2")),
	}, {
		name: "unknown field in entry kept",
		src:  cat(ir, graph, prop("a", "1", unknownInEntry...)),
		edit: func(m *Model) { m.SetMetadata("a", "2") },
		want: cat(ir, graph, prop("a", "2", unknownInEntry...)),
	}, {
		name: "new entries go after the last old one",
		src:  cat(ir, opset("", 13), graph, prop("a", "1"), appendVarint(nil, 1000, 1)),
		edit: func(m *Model) { m.SetMetadata("b", "2"); m.SetOpsetVersion("ai.onnx.ml", 3) },
		want: cat(ir, opset("", 13), opset("ai.onnx.ml", 3), graph, prop("a", "1"), prop("b", "2"), appendVarint(nil, 1000, 1)),
	}, {
		name: "no entries: appended at the end",
		src:  cat(graph, ir),
		edit: func(m *Model) { m.SetMetadata("k", "v"); m.SetOpsetVersion("", 17); m.SetIRVersion(8) },
		want: cat(graph, appendVarint(nil, modelIRVersion, 8), opset("", 17), prop("k", "v")),
	}, {
		name: "last edit wins",
		src:  cat(ir, graph),
		edit: func(m *Model) {
			m.SetMetadata("k", "1")
			m.SetMetadata("k", "2")
			m.SetOpsetVersion("", 1)
			m.SetOpsetVersion("ai.onnx", 2)
		},
		want: cat(ir, graph, opset("", 2), prop("k", "2")),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			m := mustParse(t, tc.src)
			tc.edit(m)
			if got := m.Bytes(); !bytes.Equal(got, tc.want) {
				t.Errorf("Bytes =\n%x\nwant\n%x", got, tc.want)
			}
			if dec := decode(t, tc.want); !proto.Equal(m.Proto(), dec) {
				t.Errorf("Proto() =\n%v\nwant\n%v", m.Proto(), dec)
			}
		})
	}
}

// TestEditExternalData checks that a model whose weights live in an
// external file keeps its external_data references byte for byte.
func TestEditExternalData(t *testing.T) {
	w := &onnxpb.TensorProto{
		Name:         proto.String("W"),
		DataType:     proto.Int32(int32(Float)),
		Dims:         []int64{4, 3},
		DataLocation: onnxpb.TensorProto_EXTERNAL.Enum(),
		ExternalData: []*onnxpb.StringStringEntryProto{
			newPropProto("location", "tiny.weights"),
			newPropProto("offset", "0"),
			newPropProto("length", "48"),
		},
	}
	pb := tinyLinear()
	pb.Graph.Initializer[0] = w
	dir := t.TempDir()
	path := filepath.Join(dir, "model.onnx")
	m0, err := FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	if err := m0.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	wRecord := appendRecord(nil, graphInitializer, marshal(w))
	if !bytes.Contains(src, wRecord) {
		t.Fatal("test setup: initializer record not found in the model")
	}

	m, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	exportEdits(m, proto.Clone(pb).(*onnxpb.ModelProto))
	if err := m.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(got.Bytes(), wRecord) {
		t.Error("external-data initializer bytes changed")
	}
	if gw := got.Proto().GetGraph().GetInitializer()[0]; !proto.Equal(gw, w) {
		t.Errorf("initializer = %v, want %v", gw, w)
	}
	if _, err := os.Stat(filepath.Join(dir, "tiny.weights")); err == nil {
		t.Error("an external data file appeared")
	}
}

// tinyLinear builds the model of testdata/tiny.txtpb with the builders.
func tinyLinear() *onnxpb.ModelProto {
	batch := Dim{Param: "batch"}
	return &onnxpb.ModelProto{
		IrVersion:    proto.Int64(8),
		ProducerName: proto.String("fedcalib-testdata"),
		OpsetImport:  []*onnxpb.OperatorSetIdProto{newOpsetProto("", 13)},
		Graph: &onnxpb.GraphProto{
			Name: proto.String("tiny"),
			Node: []*onnxpb.NodeProto{
				NewNode("MatMul", []string{"input", "W"}, []string{"h"}),
				NewNode("Add", []string{"h", "B"}, []string{"logits"}),
			},
			Initializer: []*onnxpb.TensorProto{
				NewTensorFloat("W", []int64{4, 3}, []float32{1, 0, 0, 0, 1, 0, 0, 0, 1, 0.5, -0.5, 0.25}),
				NewTensorFloat("B", []int64{3}, []float32{0.1, 0.2, 0.3}),
			},
			Input:  []*onnxpb.ValueInfoProto{NewValueInfo("input", Float, Shape{batch, {Value: 4}})},
			Output: []*onnxpb.ValueInfoProto{NewValueInfo("logits", Float, Shape{batch, {Value: 3}})},
		},
		MetadataProps: []*onnxpb.StringStringEntryProto{newPropProto("fedcalib.preprocess.scale", "0.5")},
	}
}

// TestEditProperties applies random edit sequences to several models and
// checks after each edit that the spliced bytes decode to Proto(), that
// they parse and re-serialise unchanged, and that the last value set for
// each key and domain is the one seen.
func TestEditProperties(t *testing.T) {
	tiny := readTiny(t)
	dupes := appendRecord(appendRecord(append([]byte(nil), tiny...), modelMetadataProps,
		appendString(appendString(nil, 1, "author"), 2, "again")), modelOpsetImport, appendVarint(appendString(nil, 1, "ai.onnx"), 2, 9))
	bare := append(appendVarint(nil, modelIRVersion, 3), appendRecord(nil, modelGraph, nil)...)
	bases := map[string][]byte{"tiny": tiny, "future": withFuture(t, tiny), "dupes": dupes, "bare": bare}
	keys := []string{"author", "fedcalib.preprocess.scale", "a", "b"}
	domains := []string{"", "ai.onnx", "ai.onnx.ml", "com.example"}
	rng := rand.New(rand.NewPCG(1, 2))
	for name, src := range bases {
		for trial := range 20 {
			m := mustParse(t, src)
			meta, ops := map[string]string{}, map[string]int64{}
			var ir int64
			for step := range 8 {
				var what string
				switch rng.IntN(6) {
				case 0:
					k, v := keys[rng.IntN(len(keys))], fmt.Sprint(rng.IntN(3))
					m.SetMetadata(k, v)
					meta[k], what = v, "SetMetadata"
				case 1:
					d, v := domains[rng.IntN(len(domains))], int64(1+rng.IntN(20))
					m.SetOpsetVersion(d, v)
					ops[canonicalDomain(d)], what = v, "SetOpsetVersion"
				case 2:
					ir = int64(1 + rng.IntN(10))
					m.SetIRVersion(ir)
					what = "SetIRVersion"
				case 3:
					m.AddNodes(NewNode("Relu", []string{"logits"}, []string{fmt.Sprint("r", step)}))
					what = "AddNodes"
				case 4:
					m.AddInitializers(NewTensorInt64(fmt.Sprint("c", step), []int64{2}, []int64{int64(step), -1}))
					what = "AddInitializers"
				case 5:
					m.AddOutputs(NewValueInfo(fmt.Sprint("r", step), Float, nil))
					what = "AddOutputs"
				}
				b := m.Bytes()
				if !proto.Equal(decode(t, b), m.Proto()) {
					t.Fatalf("%s trial %d step %d (%s): bytes and Proto() disagree", name, trial, step, what)
				}
				if again := mustParse(t, b); !bytes.Equal(again.Bytes(), b) {
					t.Fatalf("%s trial %d step %d: re-parsed model serialises differently", name, trial, step)
				}
				for k, v := range meta {
					if got, _ := m.MetadataValue(k); got != v {
						t.Fatalf("%s trial %d step %d: MetadataValue(%q) = %q, want %q", name, trial, step, k, got, v)
					}
				}
				for d, v := range ops {
					if got := m.OpsetVersion(d); got != v {
						t.Fatalf("%s trial %d step %d: OpsetVersion(%q) = %d, want %d", name, trial, step, d, got, v)
					}
				}
				if ir != 0 && m.IRVersion() != ir {
					t.Fatalf("%s trial %d step %d: IRVersion = %d, want %d", name, trial, step, m.IRVersion(), ir)
				}
			}
		}
	}
}

// TestEditProtoc decodes an edited model with protoc, a decoder written
// independently of Go's, and compares its text with protoc's decoding of
// the expected message.
func TestEditProtoc(t *testing.T) {
	const protoRoot = "/usr/lib/python3/dist-packages"
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Skip("protoc not installed (apt-get install protobuf-compiler)")
	}
	if _, err := os.Stat(filepath.Join(protoRoot, "onnx/onnx.proto")); err != nil {
		t.Skip("onnx.proto not installed (apt-get install python3-onnx)")
	}
	decodeText := func(b []byte) string {
		cmd := exec.Command(protoc, "--proto_path="+protoRoot, "--decode=onnx.ModelProto", "onnx/onnx.proto")
		cmd.Stdin = bytes.NewReader(b)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("protoc --decode: %v", err)
		}
		return string(out)
	}
	src := withFuture(t, readTiny(t))
	m := mustParse(t, src)
	want := decode(t, src)
	exportEdits(m, want)
	got, exp := decodeText(m.Bytes()), decodeText(marshal(want))
	if got != exp {
		t.Errorf("protoc decodes the edited model as\n%s\nwant\n%s", got, exp)
	}
	if !bytes.Contains([]byte(got), []byte(`op_type: "Softmax"`)) || !bytes.Contains([]byte(got), []byte("999: \"future graph field\"")) {
		t.Errorf("protoc output lacks the new node or the unknown field:\n%s", got)
	}
}

func TestEditPanics(t *testing.T) {
	m := mustParse(t, readTiny(t))
	for name, f := range map[string]func(){
		"SetIRVersion(0)":       func() { m.SetIRVersion(0) },
		"SetOpsetVersion(-1)":   func() { m.SetOpsetVersion("", -1) },
		"AddNodes(nil)":         func() { m.AddNodes(nil) },
		"AddInitializers(nil)":  func() { m.AddInitializers(nil) },
		"AddOutputs(nil)":       func() { m.AddOutputs(nil) },
		"NewTensorFloat(short)": func() { NewTensorFloat("x", []int64{2, 2}, []float32{1}) },
		"NewTensorInt64(neg)":   func() { NewTensorInt64("x", []int64{-1}, nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
	if m.Edited() {
		t.Error("a panicking edit was recorded")
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.onnx")
	m := mustParse(t, readTiny(t))
	m.SetMetadata("k", "v")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, m.Bytes()) {
		t.Error("written file differs from Bytes")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after WriteFile, want 1 (no temp files)", len(entries))
	}
	if err := m.WriteFile(filepath.Join(dir, "missing", "out.onnx")); err == nil {
		t.Error("WriteFile into a missing directory succeeded")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("failed WriteFile left %d entries", len(entries))
	}
}

func TestSpliceField(t *testing.T) {
	rec := appendVarint(nil, 2, 5)
	for _, tc := range []struct {
		name string
		msg  []byte
		typ  protowire.Type
		want []byte
	}{
		{"absent", appendString(nil, 1, "a"), protowire.VarintType, append(appendString(nil, 1, "a"), rec...)},
		{"first replaced, rest dropped", bytes.Join([][]byte{appendVarint(nil, 2, 1), appendString(nil, 1, "a"), appendVarint(nil, 2, 3)}, nil), protowire.VarintType, append(append([]byte(nil), rec...), appendString(nil, 1, "a")...)},
		{"other wire type kept", appendString(nil, 2, "x"), protowire.VarintType, append(appendString(nil, 2, "x"), rec...)},
		{"empty", nil, protowire.VarintType, rec},
	} {
		if got := spliceField(tc.msg, 2, tc.typ, rec); !bytes.Equal(got, tc.want) {
			t.Errorf("%s: spliceField = %x, want %x", tc.name, got, tc.want)
		}
	}
}
