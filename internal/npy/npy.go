// Package npy holds what the two readers of NumPy's .npy format share —
// infer/logits (the logits file) and infer/data (npy: and npz: datasets):
// the header (ReadHeader, ParseHeader) and the byte-order conversion of an
// array's body (SwapBytes). Each reader keeps the dtypes it decodes.
package npy

import "encoding/binary"

// SwapBytes reverses the bytes of each size-byte element of b in place,
// turning a big-endian array body into a little-endian one and back.
// Elements of other sizes than 2, 4 and 8 bytes (single bytes) are left
// as they are; a trailing partial element is left untouched.
func SwapBytes(b []byte, size int) {
	switch size {
	case 2:
		for i := 0; i+1 < len(b); i += 2 {
			binary.LittleEndian.PutUint16(b[i:], binary.BigEndian.Uint16(b[i:]))
		}
	case 4:
		for i := 0; i+3 < len(b); i += 4 {
			binary.LittleEndian.PutUint32(b[i:], binary.BigEndian.Uint32(b[i:]))
		}
	case 8:
		for i := 0; i+7 < len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], binary.BigEndian.Uint64(b[i:]))
		}
	}
}
