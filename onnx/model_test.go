package onnx

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// tinyPath is a model encoded by protoc from testdata/tiny.txtpb, so these
// tests read bytes that no Go code of ours wrote.
const tinyPath = "testdata/tiny.onnx"

// Byte layout of tiny.onnx, read off `protoc --decode_raw` and a hex dump:
// ir_version (2 bytes), producer_name (2+17), producer_version (2+3),
// model_version (2), then the graph record at byte 28 with a 2-byte length
// of 229. The file ends with the metadata entry {"author", "testdata"},
// whose record is 1+1+(2+6)+(2+8) = 20 bytes.
const (
	tinyGraphAt    = 28
	tinyGraphLen   = 229
	tinyLastRecord = 20
)

func readTiny(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReadFileTiny(t *testing.T) {
	m, err := ReadFile(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.IRVersion(); got != 8 {
		t.Errorf("IRVersion = %d, want 8", got)
	}
	if name, version := m.Producer(); name != "fedcalib-testdata" || version != "1.0" {
		t.Errorf("Producer = %q, %q; want fedcalib-testdata, 1.0", name, version)
	}
	wantOpsets := []Opset{{Domain: "", Version: 13}, {Domain: "ai.onnx.ml", Version: 3}}
	if got := m.Opsets(); !reflect.DeepEqual(got, wantOpsets) {
		t.Errorf("Opsets = %v, want %v", got, wantOpsets)
	}
	for _, tc := range []struct {
		domain string
		want   int64
	}{{"", 13}, {"ai.onnx", 13}, {"ai.onnx.ml", 3}, {"com.microsoft", 0}} {
		if got := m.OpsetVersion(tc.domain); got != tc.want {
			t.Errorf("OpsetVersion(%q) = %d, want %d", tc.domain, got, tc.want)
		}
	}
	wantIn := []Value{{Name: "input", Type: "tensor(float)", Elem: Float, Shape: Shape{{Value: -1, Param: "batch"}, {Value: 4}}}}
	if got := m.Inputs(); !reflect.DeepEqual(got, wantIn) {
		t.Errorf("Inputs = %+v, want %+v (W is an initializer)", got, wantIn)
	}
	wantOut := []Value{{Name: "logits", Type: "tensor(float)", Elem: Float, Shape: Shape{{Value: -1, Param: "batch"}, {Value: 3}}}}
	if got := m.Outputs(); !reflect.DeepEqual(got, wantOut) {
		t.Errorf("Outputs = %+v, want %+v", got, wantOut)
	}
	wantMeta := []Prop{{"fedcalib.preprocess.scale", "0.5"}, {"author", "testdata"}}
	if got := m.Metadata(); !reflect.DeepEqual(got, wantMeta) {
		t.Errorf("Metadata = %v, want %v (file order)", got, wantMeta)
	}
	if v, ok := m.MetadataValue("author"); !ok || v != "testdata" {
		t.Errorf("MetadataValue(author) = %q, %v", v, ok)
	}
	if _, ok := m.MetadataValue("nope"); ok {
		t.Error("MetadataValue(nope) found an entry")
	}
	for name, want := range map[string]bool{"input": true, "W": true, "h": true, "logits": true, "B": true, "probs": false, "matmul": false} {
		if got := m.usesName(name); got != want {
			t.Errorf("usesName(%q) = %v, want %v", name, got, want)
		}
	}
	if !bytes.Equal(m.Bytes(), readTiny(t)) {
		t.Error("Bytes of an unedited model differ from the file")
	}
	if m.Edited() {
		t.Error("Edited = true for a fresh model")
	}
}

func TestParseErrors(t *testing.T) {
	tiny := readTiny(t)
	if len(tiny) != 336 || tiny[tinyGraphAt] != 0x3a {
		t.Fatalf("testdata/tiny.onnx changed (%d bytes); update the layout constants", len(tiny))
	}
	// A message with a corrupt varint deep inside: graph.node[1].attribute[0].i.
	attr := append(protowire.AppendTag(nil, 3, protowire.VarintType), bytes.Repeat([]byte{0xff}, 11)...)
	node1 := appendRecord(nil, 5, attr)
	graph := appendRecord(nil, 1, appendString(nil, 4, "Relu"))
	graph = appendRecord(graph, 1, node1)
	nested := appendVarint(nil, 1, 8)
	graphAt := len(nested)
	nested = appendRecord(nested, 7, graph)
	// Offset of the attribute's i field: graph tag+len, node[0] record, node[1] tag+len, attribute tag+len.
	iAt := graphAt + 2 + (2 + 6) + 2 + 2

	// A float tensor whose packed float_data holds 5 bytes.
	packed := appendRecord(nil, 4, []byte{0, 0, 128, 63, 0})
	badPacked := appendVarint(nil, 1, 8)
	badPacked = appendRecord(badPacked, 7, appendRecord(nil, 5, packed))

	for _, tc := range []struct {
		name   string
		in     []byte
		offset int64
		field  string
		msg    string
		detail string // substring of Detail
	}{
		{"empty", nil, -1, "", "empty file", ""},
		{"cut in last entry", tiny[:len(tiny)-3], int64(len(tiny) - tinyLastRecord), "metadata_props[1]", "truncated protobuf", "field needs 18 bytes, 15 remain"},
		{"cut in graph", tiny[:40], tinyGraphAt, "graph", "truncated protobuf", "field needs 229 bytes, 9 remain"},
		{"cut in graph length", tiny[:tinyGraphAt+2], tinyGraphAt, "graph", "truncated protobuf", "length cut short"},
		{"cut in tag", []byte{0x08, 0x08, 0xba}, 2, "", "truncated protobuf", "field tag cut short"},
		{"reserved wire type", []byte{0x0f}, 0, "ir_version", "corrupt protobuf", "reserved wire type"},
		{"field number 0", []byte{0x08, 0x08, 0x02, 0x00}, 2, "", "corrupt protobuf", "invalid field number"},
		{"varint overflow", nested, int64(iAt), "graph.node[1].attribute[0].i", "corrupt protobuf", "overflow"},
		{"packed floats", badPacked, int64(len(badPacked) - 5), "graph.initializer[0].float_data", "corrupt protobuf", "not a whole number of 4-byte values"},
		{"no graph", appendVarint(nil, 1, 8), -1, "", "no graph", "field 7"},
		{"no ir_version", appendRecord(nil, 7, nil), -1, "", "no ir_version", "field 1"},
		{"zip", []byte("PK\x03\x04\x14\x00\x00\x00\x08\x00"), -2, "", "", "zip archive"},
		{"text format", []byte("ir_version: 8\ngraph {}\n"), 9, "field 13", "", "text format"},
		{"text file", []byte("module example.com/m\n\ngo 1.26\n"), -2, "*", "", "looks like a text file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Parse(tc.in)
			if err == nil {
				t.Fatalf("Parse succeeded: %v", m.Opsets())
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T) is not a *FormatError", err, err)
			}
			if !strings.HasPrefix(err.Error(), "not an ONNX model: ") {
				t.Errorf("error %q does not start with %q", err, "not an ONNX model: ")
			}
			if tc.offset != -2 && fe.Offset != tc.offset {
				t.Errorf("Offset = %d, want %d (%v)", fe.Offset, tc.offset, err)
			}
			if tc.field != "*" && fe.Field != tc.field {
				t.Errorf("Field = %q, want %q (%v)", fe.Field, tc.field, err)
			}
			if tc.msg != "" && fe.Msg != tc.msg {
				t.Errorf("Msg = %q, want %q (%v)", fe.Msg, tc.msg, err)
			}
			if !strings.Contains(fe.Detail, tc.detail) {
				t.Errorf("Detail = %q, want it to contain %q", fe.Detail, tc.detail)
			}
		})
	}
}

// TestParsePrefixes checks every strict prefix of a model: it either
// fails with a *FormatError or ends exactly on a top-level field boundary
// after the graph, where it is a valid (smaller) model.
func TestParsePrefixes(t *testing.T) {
	tiny := readTiny(t)
	boundaries := map[int]bool{}
	for _, f := range mustSplit(t, tiny) {
		boundaries[f.end] = true
	}
	graphEnd := tinyGraphAt + 3 + tinyGraphLen
	for n := 0; n < len(tiny); n++ {
		m, err := Parse(tiny[:n])
		var fe *FormatError
		switch {
		case err == nil:
			if !boundaries[n] || n < graphEnd {
				t.Errorf("prefix of %d bytes parsed", n)
			} else if !bytes.Equal(m.Bytes(), tiny[:n]) {
				t.Errorf("prefix of %d bytes: Bytes differ", n)
			}
		case !errors.As(err, &fe):
			t.Errorf("prefix of %d bytes: %v is not a *FormatError", n, err)
		case fe.Offset >= int64(n):
			t.Errorf("prefix of %d bytes: offset %d past the end", n, fe.Offset)
		}
	}
}

func TestReadFileErrors(t *testing.T) {
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "model.onnx")
	if err := os.WriteFile(corrupt, readTiny(t)[:100], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadFile(corrupt)
	want := corrupt + ": not an ONNX model: truncated protobuf at byte 28 in graph: field needs 229 bytes, 69 remain"
	if err == nil || err.Error() != want {
		t.Errorf("ReadFile(truncated) = %v, want %q", err, want)
	}
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Errorf("ReadFile(truncated) error does not wrap a *FormatError")
	}

	_, err = ReadFile(filepath.Join(dir, "missing.onnx"))
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "missing.onnx") {
		t.Errorf("ReadFile(missing) = %v, want a not-exist error naming the file", err)
	}
	_, err = ReadFile(dir)
	if err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("ReadFile(dir) = %v, want an is-a-directory error", err)
	}
}

func TestParseCopies(t *testing.T) {
	b := readTiny(t)
	m, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0
	}
	if !bytes.Equal(m.Bytes(), readTiny(t)) {
		t.Error("Model aliases the slice given to Parse")
	}
}

func mustSplit(t testing.TB, b []byte) []wireField {
	t.Helper()
	fs, err := splitFields(b)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// Wire-format helpers for building test inputs by hand.

func appendRecord(b []byte, num protowire.Number, msg []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), msg)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}
