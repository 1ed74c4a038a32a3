package onnx

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"
)

// FuzzParse checks that Parse never panics, that every failure is a
// *FormatError pointing inside the input, and that every model it accepts
// serialises back to its input and stays valid after the edits an
// exporter makes.
func FuzzParse(f *testing.F) {
	tiny := readTiny(f)
	f.Add(tiny)
	f.Add(withFuture(f, tiny))
	f.Add(tiny[:100])
	f.Add(marshal(tinyLinear()))
	f.Add([]byte{})
	f.Add([]byte("PK\x03\x04"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is a %T, not a *FormatError", err, err)
			}
			if fe.Offset >= int64(len(b)) {
				t.Fatalf("offset %d outside the %d-byte input: %v", fe.Offset, len(b), err)
			}
			return
		}
		if !bytes.Equal(m.Bytes(), b) {
			t.Fatal("unedited model serialises differently")
		}
		_, _, _, _ = m.Inputs(), m.Outputs(), m.Opsets(), m.Metadata()

		m.SetMetadata("fedcalib.method", "temperature")
		m.SetOpsetVersion("", 13)
		m.AddInitializers(NewTensorFloat("fuzz.T", nil, []float32{2}))
		m.AddNodes(NewNode("Div", []string{"x", "fuzz.T"}, []string{"fuzz.y"}))
		m.AddOutputs(NewValueInfo("fuzz.y", Float, Shape{{Param: "batch"}}))
		out := m.Bytes()
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("edited model does not parse: %v", err)
		}
		if !proto.Equal(again.Proto(), m.Proto()) {
			t.Fatal("edited bytes and Proto() disagree")
		}
		if v, _ := again.MetadataValue("fedcalib.method"); v != "temperature" {
			t.Fatalf("metadata lost: %q", v)
		}
		if v := again.OpsetVersion(""); v != 13 {
			t.Fatalf("opset version %d, want 13", v)
		}
	})
}
