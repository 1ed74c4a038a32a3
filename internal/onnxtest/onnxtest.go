package onnxtest

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"testing"

	"github.com/fedcalib/fedcalib/onnx"
)

// FlipFloat flips bit 6 of the high byte of the first float32 value of
// the TensorProto file at path, where the value's little-endian bytes are
// found in the file, and returns the value before and after. It fails t
// when the file cannot be read, parsed or written, or the value's bytes
// are not in it.
func FlipFloat(t testing.TB, path string) (before, after float32) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tt, err := onnx.ParseTensor(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(tt.Float) == 0 {
		t.Fatalf("%s: no float32 values", path)
	}
	var le [4]byte
	binary.LittleEndian.PutUint32(le[:], math.Float32bits(tt.Float[0]))
	at := bytes.Index(b, le[:])
	if at < 0 {
		t.Fatalf("%s: the bytes of %v are not in the file", path, tt.Float[0])
	}
	b[at+3] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return tt.Float[0], math.Float32frombits(binary.LittleEndian.Uint32(b[at:]))
}
