package logits

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode"

	"github.com/klauspost/compress/flate"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/internal/npy"
)

// blockSize is the size of the blocks in which arrays are read: large
// enough that a stored (uncompressed) entry takes one system call per
// MiB, small enough that reading adds no more than that to the memory the
// decoded arrays take.
const blockSize = 1 << 20

// maxDeflateRatio bounds the ratio of uncompressed to compressed size of
// a deflated entry; DEFLATE cannot exceed about 1032:1, so a larger claim
// in the archive's directory is corrupt and must not drive an allocation.
const maxDeflateRatio = 1040

// dtype is a NumPy scalar type that a logits file may hold.
type dtype struct {
	kind      byte // 'f', 'i', 'u', 'U' (UCS-4 string) or 'S' (byte string)
	size      int  // bytes per element
	bigEndian bool
}

// unit returns the size in bytes of the parts of an element whose byte
// order the dtype gives: a code point of a 'U' string, the whole element
// otherwise.
func (d dtype) unit() int {
	if d.kind == 'U' {
		return 4
	}
	return d.size
}

// parseDtype returns the scalar type of descr: '<' or '>' (or '|' for
// single bytes) followed by f4, f8, i1, i2, i4, i8, u1, u2, u4 or u8; or
// a fixed-length string, '<' or '>' and Un (n UCS-4 code points), or '|'
// and Sn (n bytes), with 1 ≤ n ≤ calib.MaxClassNameBytes. The ok result
// is false for anything else.
func parseDtype(descr string) (d dtype, ok bool) {
	if len(descr) < 3 {
		return d, false
	}
	d.kind = descr[1]
	if d.kind == 'U' || d.kind == 'S' {
		return parseStringDtype(descr, d)
	}
	if len(descr) != 3 {
		return d, false
	}
	d.size = int(descr[2] - '0')
	switch d.kind {
	case 'f':
		ok = d.size == 4 || d.size == 8
	case 'i', 'u':
		ok = d.size == 1 || d.size == 2 || d.size == 4 || d.size == 8
	}
	switch descr[0] {
	case '<':
		ok = ok && d.size > 1
	case '>':
		ok = ok && d.size > 1
		d.bigEndian = true
	case '|':
		ok = ok && d.size == 1
	default:
		ok = false
	}
	return d, ok
}

// parseStringDtype is parseDtype for the string dtypes, of kind d.kind.
func parseStringDtype(descr string, d dtype) (dtype, bool) {
	digits := descr[2:]
	if len(digits) > 9 || strings.Trim(digits, "0123456789") != "" || digits[0] == '0' {
		return d, false
	}
	n, _ := strconv.Atoi(digits)
	if n > calib.MaxClassNameBytes {
		return d, false
	}
	switch {
	case d.kind == 'U' && (descr[0] == '<' || descr[0] == '>'):
		d.size, d.bigEndian = 4*n, descr[0] == '>'
	case d.kind == 'S' && descr[0] == '|':
		d.size = n
	default:
		return d, false
	}
	return d, true
}

// array is one array of an .npz archive, positioned at its data.
type array struct {
	name string
	npy.Header
	dtype
	rc       io.ReadCloser
	size     int  // number of elements
	pos      int  // elements read so far
	deflated bool // the entry is compressed: its declared size is a claim
}

// openArray opens the archive entry zf, which must hold a .npy array,
// and reads its header. fileSize is the size of the archive; the sizes
// the archive claims for the entry are checked against it before they
// drive an allocation. The caller closes the array's rc.
func openArray(zf *zip.File, name string, fileSize int64) (*array, error) {
	usize := zf.UncompressedSize64
	switch zf.Method {
	case zip.Store:
		if usize != zf.CompressedSize64 || usize > uint64(fileSize) {
			return nil, fmt.Errorf("%s: archive entry claims %d bytes in a file of %d: the archive is corrupt", name, usize, fileSize)
		}
	case zip.Deflate:
		if zf.CompressedSize64 > uint64(fileSize) || usize/maxDeflateRatio > zf.CompressedSize64 {
			return nil, fmt.Errorf("%s: archive entry claims %d bytes deflated into %d: the archive is corrupt", name, usize, zf.CompressedSize64)
		}
	}
	rc, err := zf.Open()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	a := &array{name: name, rc: rc, deflated: zf.Method != zip.Store}
	hlen, err := a.readHeader()
	if err != nil {
		rc.Close()
		return nil, err
	}
	if a.dtype.size == 0 {
		return a, nil // an unsupported dtype: the caller says which it wants
	}
	// The data is exactly the elements of the shape: NumPy writes
	// nothing after them.
	data := usize - uint64(min(hlen, int(usize)))
	n := uint64(1)
	for _, d := range a.Shape {
		if d != 0 && n > data/uint64(d) {
			n = math.MaxUint64
			break
		}
		n *= uint64(d)
	}
	if n == math.MaxUint64 || n*uint64(a.dtype.size) != data {
		rc.Close()
		return nil, fmt.Errorf("%s: shape %v of %s needs %d·%d bytes of data, the archive entry holds %d", name, a.Shape, a.Descr, n, a.dtype.size, data)
	}
	a.size = int(n)
	return a, nil
}

// readHeader reads the magic, version and header of a .npy stream and
// returns the length of the preamble and header together.
func (a *array) readHeader() (int, error) {
	h, n, err := npy.ReadHeader(a.rc)
	if err != nil {
		return 0, fmt.Errorf("%s: unreadable NumPy header: %w", a.name, err)
	}
	a.Header = h
	if d, ok := parseDtype(h.Descr); ok {
		a.dtype = d
	}
	return n, nil
}

// take reads the next len(p)/size elements into p, a whole number of
// them, converting big-endian elements to little-endian in place.
func (a *array) take(p []byte) error {
	if _, err := io.ReadFull(a.rc, p); err != nil {
		return fmt.Errorf("%s: element %d of %d: %w", a.name, a.pos, a.size, noEOF(err))
	}
	if a.bigEndian {
		npy.SwapBytes(p, a.dtype.unit())
	}
	a.pos += len(p) / a.dtype.size
	return nil
}

// end checks, once every element is read, that the entry ends there,
// which also verifies its CRC-32.
func (a *array) end() error {
	var one [1]byte
	if _, err := io.ReadFull(a.rc, one[:]); err != io.EOF {
		if err == nil {
			err = errors.New("data continues after the last element")
		}
		return fmt.Errorf("%s: %w", a.name, err)
	}
	return nil
}

// each reads the array's data in blocks of whole elements, converts
// big-endian elements to little-endian in place, and calls fn with each
// block and the index of its first element. It then checks that the
// entry ends there (end).
func (a *array) each(fn func(b []byte, first int) error) error {
	buf := make([]byte, min(blockSize/a.dtype.size*a.dtype.size, a.size*a.dtype.size))
	for a.pos < a.size {
		first := a.pos
		b := buf[:min(len(buf)/a.dtype.size, a.size-first)*a.dtype.size]
		if err := a.take(b); err != nil {
			return err
		}
		if err := fn(b, first); err != nil {
			return err
		}
	}
	return a.end()
}

// checkColumn checks that the array is a column of n integers.
func (a *array) checkColumn(n int) error {
	if len(a.Shape) != 1 || a.Shape[0] != n {
		return fmt.Errorf("%s: shape %v, want [%d] (one per logits row)", a.name, a.Shape, n)
	}
	if a.kind != 'i' && a.kind != 'u' {
		return fmt.Errorf("%s: dtype %s, want an integer type", a.name, a.Descr)
	}
	return nil
}

// noEOF turns an early io.EOF into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readFloat32 reads a float32 or float64 array of any shape into a new
// slice, in the order of its data.
func (a *array) readFloat32() ([]float32, error) {
	if a.kind != 'f' {
		return nil, fmt.Errorf("%s: dtype %s, want float32 (<f4) or float64 (<f8)", a.name, a.Descr)
	}
	out := a.alloc32()
	err := a.each(func(b []byte, first int) error {
		out = grow(out, first+len(b)/a.dtype.size, a.size)
		decodeFloat32(out[first:], b, a.dtype.size)
		return nil
	})
	return out, err
}

// alloc32 is allocFor of float32.
func (a *array) alloc32() []float32 { return allocFor[float32](a) }

// allocFor returns the slice an array's elements are read into: all of
// them at once for a stored entry, whose size the file's own size bounds;
// for a deflated one, whose declared size only the data can confirm, one
// block's worth, which grow extends as the data actually arrives, so that
// an archive that declares more than it holds costs what it holds.
func allocFor[T any](a *array) []T {
	if !a.deflated {
		return make([]T, a.size)
	}
	return make([]T, 0, min(a.size, blockSize))
}

// grow returns s with length n (n ≤ total), growing its capacity
// geometrically up to total.
func grow[T any](s []T, n, total int) []T {
	if n <= cap(s) {
		return s[:max(len(s), n)]
	}
	c := min(total, max(n, 2*cap(s)))
	out := make([]T, n, c)
	copy(out, s)
	return out
}

// decodeFloat32 decodes the little-endian floats of size bytes (4 or 8)
// in b into dst, converting float64 to the nearest float32.
func decodeFloat32(dst []float32, b []byte, size int) {
	if size == 4 {
		dst = dst[:len(b)/4]
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return
	}
	dst = dst[:len(b)/8]
	for i := range dst {
		dst[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
	}
}

// readStrings reads an array of fixed-length strings: NumPy's UCS-4
// strings (<Un, >Un), whose code points must be valid, or byte strings
// (|Sn), taken as UTF-8. NumPy pads shorter strings with NUL code points
// or bytes and drops them when it reads an element; so does readStrings.
func (a *array) readStrings() ([]string, error) {
	if a.kind != 'U' && a.kind != 'S' {
		return nil, fmt.Errorf("%s: dtype %s, want strings (<U… as numpy.array([\"cat\", \"dog\"]) makes, or |S…)", a.name, a.Descr)
	}
	out := make([]string, 0, min(a.size, 1<<16))
	var runes []rune
	err := a.each(func(b []byte, first int) error {
		for e := 0; e < len(b); e += a.dtype.size {
			el := b[e : e+a.dtype.size]
			if a.kind == 'S' {
				out = append(out, string(bytes.TrimRight(el, "\x00")))
				continue
			}
			n := len(el) / 4
			for n > 0 && binary.LittleEndian.Uint32(el[4*(n-1):]) == 0 {
				n--
			}
			runes = runes[:0]
			for k := range n {
				r := binary.LittleEndian.Uint32(el[4*k:])
				if r > unicode.MaxRune || r >= 0xd800 && r <= 0xdfff {
					return fmt.Errorf("%s: element %d holds %#x, which is not a Unicode code point", a.name, first+e/a.dtype.size, r)
				}
				runes = append(runes, rune(r))
			}
			out = append(out, string(runes))
		}
		return nil
	})
	return out, err
}

// integer is an element type of an integer column.
type integer interface{ ~int64 | ~int32 | ~uint8 }

// readIntegers reads an integer array into a new []T, checking that every
// value fits T.
func readIntegers[T integer](a *array) ([]T, error) {
	if a.kind != 'i' && a.kind != 'u' {
		return nil, fmt.Errorf("%s: dtype %s, want an integer type", a.name, a.Descr)
	}
	out := allocFor[T](a)
	err := a.each(func(b []byte, first int) error {
		out = grow(out, first+len(b)/a.dtype.size, a.size)
		dst := out[first : first+len(b)/a.dtype.size]
		if i, v, ok := decodeIntegers(dst, b, a.dtype); !ok {
			return fmt.Errorf("%s: row %d is %s, out of range", a.name, first+i, v)
		}
		return nil
	})
	return out, err
}

// decodeIntegers decodes the little-endian integers of type d in b into
// dst. When one does not fit T it returns its index and value and false.
func decodeIntegers[T integer](dst []T, b []byte, d dtype) (int, string, bool) {
	// Each case converts through int64 (or uint64) and checks the round
	// trip, in a loop of its own so that the compiler keeps it tight.
	switch {
	case d.kind == 'i' && d.size == 8:
		for i := range dst {
			v := int64(binary.LittleEndian.Uint64(b[8*i:]))
			if dst[i] = T(v); int64(dst[i]) != v {
				return i, strconv.FormatInt(v, 10), false
			}
		}
	case d.kind == 'i' && d.size == 4:
		for i := range dst {
			v := int64(int32(binary.LittleEndian.Uint32(b[4*i:])))
			if dst[i] = T(v); int64(dst[i]) != v {
				return i, strconv.FormatInt(v, 10), false
			}
		}
	case d.kind == 'i' && d.size == 2:
		for i := range dst {
			v := int64(int16(binary.LittleEndian.Uint16(b[2*i:])))
			if dst[i] = T(v); int64(dst[i]) != v {
				return i, strconv.FormatInt(v, 10), false
			}
		}
	case d.kind == 'i':
		for i := range dst {
			v := int64(int8(b[i]))
			if dst[i] = T(v); int64(dst[i]) != v {
				return i, strconv.FormatInt(v, 10), false
			}
		}
	case d.size == 8:
		for i := range dst {
			v := binary.LittleEndian.Uint64(b[8*i:])
			if dst[i] = T(v); v > math.MaxInt64 || int64(dst[i]) != int64(v) {
				return i, strconv.FormatUint(v, 10), false
			}
		}
	case d.size == 4:
		for i := range dst {
			v := int64(binary.LittleEndian.Uint32(b[4*i:]))
			if dst[i] = T(v); int64(dst[i]) != v {
				return i, strconv.FormatInt(v, 10), false
			}
		}
	case d.size == 2:
		for i := range dst {
			v := int64(binary.LittleEndian.Uint16(b[2*i:]))
			if dst[i] = T(v); int64(dst[i]) != v {
				return i, strconv.FormatInt(v, 10), false
			}
		}
	default:
		for i := range dst {
			v := int64(b[i])
			if dst[i] = T(v); int64(dst[i]) != v {
				return i, strconv.FormatInt(v, 10), false
			}
		}
	}
	return 0, "", true
}

// transpose returns the row-major form of the column-major rows×cols
// matrix m.
func transpose(m []float32, rows, cols int) []float32 {
	out := make([]float32, len(m))
	for j := range cols {
		col := m[j*rows : (j+1)*rows]
		for i, v := range col {
			out[i*cols+j] = v
		}
	}
	return out
}

// newFlateReader decompresses deflated archive entries with
// klauspost/compress, several times faster than compress/flate.
func newFlateReader(r io.Reader) io.ReadCloser { return flate.NewReader(r) }
