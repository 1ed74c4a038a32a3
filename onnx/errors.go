package onnx

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// A FormatError reports bytes that are not a well-formed ONNX model: a
// truncated or corrupt protobuf stream, or a message that lacks what every
// ONNX model has (an IR version and a graph).
type FormatError struct {
	// Offset is the byte offset of the problem in the model, or -1 when the
	// problem has no single position.
	Offset int64
	// Field is the path of the message or field holding the problem, such
	// as "graph.node[3].attribute[0]"; empty for the top-level message.
	Field string
	// Msg says what is wrong, such as "truncated protobuf".
	Msg string
	// Detail adds specifics; it may be empty.
	Detail string
}

func (e *FormatError) Error() string {
	var b bytes.Buffer
	b.WriteString("not an ONNX model: ")
	b.WriteString(e.Msg)
	if e.Offset >= 0 {
		fmt.Fprintf(&b, " at byte %d", e.Offset)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, " in %s", e.Field)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// maxNesting bounds how deeply validate follows nested messages (subgraphs
// of subgraphs...); deeper models are rejected rather than risking the stack.
const maxNesting = 1000

// locate walks b as a message of type md and returns a FormatError for the
// first place where the wire format is broken, or nil if it finds none.
// base is the offset of b in the whole model; path names the message.
//
// locate is the slow path taken after proto.Unmarshal has failed: it finds
// the byte offset and field path that proto.Unmarshal does not report.
func locate(b []byte, md protoreflect.MessageDescriptor, base int, path string, depth int) *FormatError {
	if depth > maxNesting {
		return &FormatError{Offset: int64(base), Field: path, Msg: "corrupt protobuf", Detail: "messages nested too deeply"}
	}
	var seen map[protowire.Number]int
	for i := 0; i < len(b); {
		num, typ, n := protowire.ConsumeTag(b[i:])
		if n < 0 {
			return wireError(n, base+i, path, "field tag")
		}
		if !num.IsValid() {
			return &FormatError{Offset: int64(base + i), Field: path, Msg: "corrupt protobuf", Detail: "invalid field number " + strconv.Itoa(int(num))}
		}
		var fd protoreflect.FieldDescriptor
		if md != nil {
			fd = md.Fields().ByNumber(num)
		}
		name := "field " + strconv.Itoa(int(num))
		if fd != nil {
			name = string(fd.Name())
			if fd.Cardinality() == protoreflect.Repeated && !isScalar(fd.Kind()) {
				if seen == nil {
					seen = make(map[protowire.Number]int)
				}
				name += "[" + strconv.Itoa(seen[num]) + "]"
				seen[num]++
			}
		}
		child := name
		if path != "" {
			child = path + "." + name
		}
		v := i + n
		if typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b[v:])
			if m < 0 {
				return wireError(m, base+i, child, "value")
			}
			i = v + m
			continue
		}
		content, m := protowire.ConsumeBytes(b[v:])
		if m < 0 {
			if errors.Is(protowire.ParseError(m), io.ErrUnexpectedEOF) {
				if l, k := protowire.ConsumeVarint(b[v:]); k > 0 {
					return &FormatError{Offset: int64(base + i), Field: child, Msg: "truncated protobuf",
						Detail: fmt.Sprintf("field needs %d bytes, %d remain", l, len(b)-v-k)}
				}
			}
			return wireError(m, base+i, child, "length")
		}
		start := base + v + m - len(content)
		if fd != nil {
			switch {
			case fd.Kind() == protoreflect.MessageKind:
				if err := locate(content, fd.Message(), start, child, depth+1); err != nil {
					return err
				}
			case fd.Cardinality() == protoreflect.Repeated && isScalar(fd.Kind()):
				if err := locatePacked(content, fd.Kind(), start, child); err != nil {
					return err
				}
			}
		}
		i = v + m
	}
	return nil
}

// locatePacked checks the content of a packed repeated scalar field.
func locatePacked(b []byte, k protoreflect.Kind, base int, path string) *FormatError {
	size := 0
	switch k {
	case protoreflect.FloatKind, protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		size = 4
	case protoreflect.DoubleKind, protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		size = 8
	}
	if size > 0 {
		if len(b)%size != 0 {
			return &FormatError{Offset: int64(base), Field: path, Msg: "corrupt protobuf",
				Detail: fmt.Sprintf("packed field of %d bytes is not a whole number of %d-byte values", len(b), size)}
		}
		return nil
	}
	for i := 0; i < len(b); {
		_, n := protowire.ConsumeVarint(b[i:])
		if n < 0 {
			return wireError(n, base+i, path, "packed value")
		}
		i += n
	}
	return nil
}

// looksLikeText reports whether the first bytes of b are printable UTF-8
// text. A binary ONNX model starts with a field tag, usually 0x08.
func looksLikeText(b []byte) bool {
	if len(b) > 64 {
		b = b[:64]
	}
	for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.Valid(b); i++ {
		b = b[:len(b)-1] // drop a rune cut short
	}
	if len(b) == 0 || !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if r < ' ' && r != '\n' && r != '\r' && r != '\t' || r == 0x7f {
			return false
		}
	}
	return true
}

func isScalar(k protoreflect.Kind) bool {
	switch k {
	case protoreflect.MessageKind, protoreflect.GroupKind, protoreflect.StringKind, protoreflect.BytesKind:
		return false
	}
	return true
}

// wireError turns a protowire error code at offset off into a FormatError.
func wireError(code, off int, path, what string) *FormatError {
	err := protowire.ParseError(code)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return &FormatError{Offset: int64(off), Field: path, Msg: "truncated protobuf", Detail: what + " cut short"}
	}
	return &FormatError{Offset: int64(off), Field: path, Msg: "corrupt protobuf", Detail: what + ": " + protoErrorText(err)}
}

// protoErrorText is err's text without the "proto:" prefix (followed by a
// space or, at random, a no-break space) that protobuf errors carry.
func protoErrorText(err error) string {
	s := strings.TrimPrefix(err.Error(), "proto:")
	return strings.TrimLeft(s, " \u00a0")
}

// modelDescriptor is the descriptor of onnx.ModelProto.
func modelDescriptor() protoreflect.MessageDescriptor {
	return (*onnxpb.ModelProto)(nil).ProtoReflect().Descriptor()
}

// sniff names a few common file formats that people mistake for ONNX, so
// the error can say what the file looks like instead.
func sniff(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("PK\x03\x04")):
		return "; it is a zip archive (a PyTorch checkpoint or .npz?)"
	case bytes.HasPrefix(b, []byte{0x1f, 0x8b}):
		return "; it is gzip-compressed"
	case bytes.HasPrefix(b, []byte("\x93NUMPY")):
		return "; it is a NumPy .npy array"
	case len(b) >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5:
		return "; it looks like a Python pickle"
	case bytes.HasPrefix(b, []byte("ir_version")):
		return "; it is protobuf text format, not binary"
	case looksLikeText(b):
		return "; it looks like a text file"
	}
	return ""
}
