package onnx

import (
	"fmt"
	"math"
	"os"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/internal/fileio"
	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// Field numbers of onnx.ModelProto and onnx.GraphProto that Model reads or
// rewrites on the wire.
const (
	modelIRVersion     protowire.Number = 1
	modelGraph         protowire.Number = 7
	modelOpsetImport   protowire.Number = 8
	modelMetadataProps protowire.Number = 14

	graphNode        protowire.Number = 1
	graphInitializer protowire.Number = 5
	graphOutput      protowire.Number = 12

	entryKey   protowire.Number = 1 // StringStringEntryProto.key, OperatorSetIdProto.domain
	entryValue protowire.Number = 2 // StringStringEntryProto.value, OperatorSetIdProto.version
)

// A Model is a serialised ONNX model together with a decoded view of it and
// the edits made so far.
//
// A Model keeps the bytes it was parsed from. Edits are recorded, applied
// to the decoded view at once, and spliced into the original bytes by Bytes
// and WriteFile: only the protobuf fields an edit changes are re-encoded,
// so untouched bytes, fields unknown to onnx.proto at IR version 8 and
// external-data references all survive exactly.
//
// Models are made by Parse and ReadFile; the zero Model is not usable. A
// Model may be read from several goroutines at once, but an edit must not
// run concurrently with any other use.
type Model struct {
	src []byte             // the bytes parsed; never modified
	pb  *onnxpb.ModelProto // decoded view, kept in step with the edits
	top []wireField        // top-level fields of src, in order

	ir        int64   // new ir_version; 0 when unchanged
	opsets    []Opset // opset versions set, one per domain (canonical names)
	meta      []Prop  // metadata_props set, one per key
	graphTail []byte  // encoded GraphProto fields appended to the graph
}

// wireField locates one field record in a message: src[start:val] is the
// tag (and length prefix), src[val:end] the value.
type wireField struct {
	num        protowire.Number
	typ        protowire.Type
	start, val int
	end        int
}

// ReadFile reads and parses the ONNX model in the named file. Errors name
// the file; a malformed file gives a *FormatError wrapped with the name.
// External data files are not read.
func ReadFile(name string) (*Model, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%s: is a directory, not an ONNX model file", name)
	}
	if err := fileio.CheckRegular(name, fi); err != nil {
		return nil, err
	}
	if fi.Size() > math.MaxInt32 {
		return nil, fmt.Errorf("%s: %d bytes is over protobuf's 2 GiB limit; a model this large must keep its weights in external data files", name, fi.Size())
	}
	b, err := fileio.ReadLimited(name, math.MaxInt32)
	if err != nil {
		return nil, err
	}
	m, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return m, nil
}

// Parse parses a serialised ONNX ModelProto. It returns a *FormatError when
// b is not well-formed protobuf or lacks an IR version or a graph. Parse
// copies b; the caller may reuse it.
func Parse(b []byte) (*Model, error) {
	return parse(slices.Clone(b))
}

// parse is Parse without the copy; the Model keeps b.
func parse(b []byte) (*Model, error) {
	if len(b) == 0 {
		return nil, &FormatError{Offset: -1, Msg: "empty file"}
	}
	pb := new(onnxpb.ModelProto)
	if err := proto.Unmarshal(b, pb); err != nil {
		fe := locate(b, modelDescriptor(), 0, "", 0)
		if fe == nil {
			fe = &FormatError{Offset: -1, Msg: "corrupt protobuf", Detail: err.Error()}
		}
		fe.Detail += sniff(b)
		return nil, fe
	}
	if pb.GetIrVersion() <= 0 {
		return nil, &FormatError{Offset: -1, Msg: "no ir_version", Detail: "ModelProto field 1 is missing or not positive" + sniff(b)}
	}
	if pb.Graph == nil {
		return nil, &FormatError{Offset: -1, Msg: "no graph", Detail: "ModelProto field 7 is missing" + sniff(b)}
	}
	top, err := splitFields(b)
	if err != nil {
		return nil, err
	}
	return &Model{src: b, pb: pb, top: top}, nil
}

// splitFields lists the field records of the message b.
func splitFields(b []byte) ([]wireField, error) {
	var fs []wireField
	for i := 0; i < len(b); {
		num, typ, n := protowire.ConsumeTag(b[i:])
		if n < 0 {
			return nil, wireError(n, i, "", "field tag")
		}
		v := i + n
		if typ == protowire.BytesType {
			// Start the value after the length prefix.
			_, k := protowire.ConsumeVarint(b[v:])
			if k < 0 {
				return nil, wireError(k, i, "", "length")
			}
			v += k
			m := protowire.ConsumeFieldValue(num, typ, b[i+n:])
			if m < 0 {
				return nil, wireError(m, i, "", "value")
			}
			fs = append(fs, wireField{num: num, typ: typ, start: i, val: v, end: i + n + m})
			i += n + m
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b[v:])
		if m < 0 {
			return nil, wireError(m, i, "", "value")
		}
		fs = append(fs, wireField{num: num, typ: typ, start: i, val: v, end: v + m})
		i = v + m
	}
	return fs, nil
}

// Proto returns the decoded model, with the edits made so far. It is
// shared with m: the caller must not modify it, and should not keep it
// across edits.
func (m *Model) Proto() *onnxpb.ModelProto { return m.pb }

// Edited reports whether any edit has been recorded. A Model that has not
// been edited serialises to exactly the bytes it was parsed from.
func (m *Model) Edited() bool {
	return m.ir != 0 || len(m.opsets) > 0 || len(m.meta) > 0 || len(m.graphTail) > 0
}

// Bytes returns the serialised model with the edits spliced in. Fields
// that no edit touched are copied byte for byte, in their original order.
func (m *Model) Bytes() []byte {
	if !m.Edited() {
		return slices.Clone(m.src)
	}
	last := map[protowire.Number]int{}
	for i, f := range m.top {
		if f.typ == protowire.BytesType {
			last[f.num] = i
		}
	}
	lastOf := func(num protowire.Number) int {
		if i, ok := last[num]; ok {
			return i
		}
		return -1
	}
	lastGraph, lastOpset, lastMeta := lastOf(modelGraph), lastOf(modelOpsetImport), lastOf(modelMetadataProps)

	out := make([]byte, 0, len(m.src)+len(m.graphTail)+64)
	irDone := false
	opsetDone := make([]bool, len(m.opsets))
	metaDone := make([]bool, len(m.meta))
	for i, f := range m.top {
		raw := m.src[f.start:f.end]
		switch {
		case f.num == modelIRVersion && f.typ == protowire.VarintType && m.ir != 0:
			if !irDone {
				out = appendVarintField(out, modelIRVersion, uint64(m.ir))
				irDone = true
			}
		case f.num == modelOpsetImport && f.typ == protowire.BytesType && len(m.opsets) > 0:
			out = m.appendOpset(out, f, opsetDone)
		case f.num == modelMetadataProps && f.typ == protowire.BytesType && len(m.meta) > 0:
			out = m.appendMeta(out, f, metaDone)
		case i == lastGraph && len(m.graphTail) > 0:
			content := m.src[f.val:f.end]
			out = protowire.AppendTag(out, modelGraph, protowire.BytesType)
			out = protowire.AppendVarint(out, uint64(len(content)+len(m.graphTail)))
			out = append(out, content...)
			out = append(out, m.graphTail...)
		default:
			out = append(out, raw...)
		}
		if i == lastOpset {
			out = m.appendNewOpsets(out, opsetDone)
		}
		if i == lastMeta {
			out = m.appendNewMeta(out, metaDone)
		}
	}
	if m.ir != 0 && !irDone {
		out = appendVarintField(out, modelIRVersion, uint64(m.ir))
	}
	if lastOpset < 0 {
		out = m.appendNewOpsets(out, opsetDone)
	}
	if lastMeta < 0 {
		out = m.appendNewMeta(out, metaDone)
	}
	return out
}

// WriteFile writes the serialised model (see Bytes) to the named file
// atomically: it writes a temporary file in the same directory and renames
// it over name, so readers see either the old file or the whole new one.
//
// External data files are neither read nor copied. Their locations are
// relative to the model file's directory, so a model with external data
// should be written to the directory it was read from, or its data files
// copied alongside.
func (m *Model) WriteFile(name string) error {
	return fileio.Write(name, m.Bytes())
}
