package data

import (
	"archive/zip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"codeberg.org/sbinet/npyio/npy/float16"
	"github.com/klauspost/compress/flate"

	"github.com/fedcalib/fedcalib/internal/npy"
)

// npyDtype is a NumPy scalar type: kind 'f', 'i', 'u' or 'b', size in
// bytes, byte order.
type npyDtype struct {
	kind  byte
	size  int
	order binary.ByteOrder
	descr string
}

// parseDtype parses a simple dtype description such as '<f4' or '|u1'.
func parseDtype(descr string) (npyDtype, error) {
	s := strings.Trim(descr, `'" `)
	if len(s) < 3 {
		return npyDtype{}, fmt.Errorf("dtype %s is not supported", s)
	}
	d := npyDtype{kind: s[1], descr: s, order: binary.LittleEndian}
	switch s[0] {
	case '<', '|', '=':
	case '>':
		d.order = binary.BigEndian
	default:
		return d, fmt.Errorf("dtype %s is not supported", s)
	}
	size, err := strconv.Atoi(s[2:])
	if err != nil {
		return d, fmt.Errorf("dtype %s is not supported", s)
	}
	d.size = size
	ok := false
	switch d.kind {
	case 'f':
		ok = size == 2 || size == 4 || size == 8
	case 'i', 'u':
		ok = size == 1 || size == 2 || size == 4 || size == 8
	case 'b':
		ok = size == 1
	}
	if !ok {
		return d, fmt.Errorf("dtype %s is not supported (want a float, integer or bool dtype)", s)
	}
	return d, nil
}

// value decodes one element, little-endian: npyArray swaps big-endian
// data as it reads it.
func (d npyDtype) value(b []byte) float64 {
	le := binary.LittleEndian
	switch d.kind {
	case 'f':
		switch d.size {
		case 2:
			return float64(float16.Float16Frombits(le.Uint16(b)).Float32())
		case 4:
			return float64(math.Float32frombits(le.Uint32(b)))
		}
		return math.Float64frombits(le.Uint64(b))
	case 'i':
		switch d.size {
		case 1:
			return float64(int8(b[0]))
		case 2:
			return float64(int16(le.Uint16(b)))
		case 4:
			return float64(int32(le.Uint32(b)))
		}
		return float64(int64(le.Uint64(b)))
	case 'b':
		if b[0] != 0 {
			return 1
		}
		return 0
	}
	switch d.size { // 'u'
	case 1:
		return float64(b[0])
	case 2:
		return float64(le.Uint16(b))
	case 4:
		return float64(le.Uint32(b))
	}
	return float64(le.Uint64(b))
}

// npyBlockSize is the number of bytes of whole rows an array reads at
// once: large reads (one system call per MiB of a stored .npz member or a
// plain .npy file) while the memory stays bounded whatever the array's
// size.
const npyBlockSize = 1 << 20

// npyArray streams the rows of one array of a .npy file. It reads the
// data in blocks of whole rows (the whole array for a Fortran-ordered
// one, which it transposes to row-major order first) and hands out one
// row at a time from the current block.
type npyArray struct {
	name    string
	r       io.Reader
	dtype   npyDtype
	shape   []int // full shape; shape[0] is the number of rows
	row     int   // elements per row
	fortran bool  // data in column-major order
	block   []byte
	next    int   // row number of the first unread row of block
	end     int   // row number after the last complete row of block
	err     error // what ended the data early, reported at row end
}

// readNPY reads the header of a .npy stream and returns the array
// positioned at its first row.
func readNPY(r io.Reader, name string) (*npyArray, error) {
	hdr, err := readNPYHeader(r, name)
	if err != nil {
		return nil, err
	}
	d, err := parseDtype(hdr.Descr)
	if err != nil {
		return nil, formatError(name, nil, "%v", err)
	}
	shape := hdr.Shape
	if len(shape) == 0 {
		return nil, formatError(name, nil, "array is a scalar, want rows")
	}
	for _, n := range shape {
		if n < 0 {
			return nil, formatError(name, nil, "negative dimension in shape %v", shape)
		}
	}
	rowBytes, ok := recordSize(d.size, shape[1:]...)
	if !ok {
		return nil, formatError(name, nil, "unsupported row shape %v", shape[1:])
	}
	a := &npyArray{name: name, r: r, dtype: d, shape: shape, row: rowBytes / d.size}
	// Column-major order differs from row-major only with at least two
	// dimensions longer than 1.
	big := 0
	for _, n := range shape {
		if n > 1 {
			big++
		}
	}
	a.fortran = hdr.Fortran && big > 1
	if a.fortran && shape[0] > math.MaxInt/rowBytes {
		return nil, formatError(name, nil, "shape %v is too large", shape)
	}
	return a, nil
}

// readNPYHeader reads the preamble and header dictionary of a .npy
// stream (internal/npy, the parser the logits reader uses too).
func readNPYHeader(r io.Reader, name string) (npy.Header, error) {
	h, _, err := npy.ReadHeader(r)
	switch {
	case err == nil:
		return h, nil
	case errors.Is(err, io.ErrUnexpectedEOF):
		return npy.Header{}, formatError(name, err, "reading .npy header")
	case errors.Is(err, npy.ErrNotNPY):
		return npy.Header{}, formatError(name, nil, "not a .npy file (no \\x93NUMPY magic)")
	}
	return npy.Header{}, formatError(name, nil, ".npy %v", err)
}

// rows returns the number of rows.
func (a *npyArray) rows() int { return a.shape[0] }

// rowBytes returns the size of one row in bytes.
func (a *npyArray) rowBytes() int { return a.row * a.dtype.size }

// readRow returns row i's raw bytes, little-endian, and reads the next
// block when the current one is used up. Rows must be read in order. The
// slice aliases the block and is valid until the next call.
func (a *npyArray) readRow(i int) ([]byte, error) {
	if i == a.end {
		if err := a.fill(i); err != nil {
			return nil, err
		}
	}
	rb := a.rowBytes()
	off := (i - a.next) * rb
	return a.block[off : off+rb], nil
}

// fill reads the block that starts at row i: about npyBlockSize bytes of
// whole rows, or every row of a Fortran-ordered array. An early end of
// the data is reported once the complete rows before it are used up.
func (a *npyArray) fill(i int) error {
	if a.err != nil {
		return formatError(a.name, a.err, "row %d of %d", i, a.rows())
	}
	rb := a.rowBytes()
	n := a.rows() - i // rows to read
	if !a.fortran {
		n = min(n, max(1, npyBlockSize/rb))
	}
	// readN grows a new block as bytes arrive, so that a header claiming
	// more rows than the data holds cannot allocate more than that.
	var err error
	if want := n * rb; cap(a.block) >= want {
		var k int
		k, err = io.ReadFull(a.r, a.block[:want])
		a.block, err = a.block[:k], eofError(err)
	} else {
		a.block, err = readN(a.r, a.block[:0], want)
	}
	got := len(a.block) / rb
	if err != nil {
		a.err = err
		if a.fortran {
			got = 0 // no row of a partial column-major array is complete
		}
		if got == 0 {
			return formatError(a.name, err, "row %d of %d", i, a.rows())
		}
	}
	a.block = a.block[:got*rb]
	if a.dtype.order == binary.BigEndian {
		npy.SwapBytes(a.block, a.dtype.size)
	}
	if a.fortran {
		a.block = fortranToC(a.block, a.shape, a.dtype.size)
	}
	a.next, a.end = i, i+got
	return nil
}

// fortranToC returns the row-major (C-order) form of the column-major
// array b of the given shape and element size.
func fortranToC(b []byte, shape []int, size int) []byte {
	out := make([]byte, len(b))
	if len(b) == 0 {
		return out
	}
	if len(shape) == 2 && size == 4 {
		// The common case, float32 [N, D]: a plain transpose.
		rows, cols := shape[0], shape[1]
		for j := range cols {
			for i := range rows {
				copy(out[4*(i*cols+j):], b[4*(j*rows+i):4*(j*rows+i)+4])
			}
		}
		return out
	}
	// stride[d] is the column-major step of dimension d, in elements;
	// idx is the row-major odometer over the shape.
	stride := make([]int, len(shape))
	step := 1
	for d, n := range shape {
		stride[d] = step
		step *= n
	}
	idx := make([]int, len(shape))
	src := 0
	for dst := 0; dst < len(out); dst += size {
		copy(out[dst:dst+size], b[src*size:])
		for d := len(shape) - 1; d >= 0; d-- {
			idx[d]++
			src += stride[d]
			if idx[d] < shape[d] {
				break
			}
			src -= stride[d] * shape[d]
			idx[d] = 0
		}
	}
	return out
}

// decodeFloats decodes the little-endian elements of type d in b into
// dst, one tight loop per type.
func decodeFloats(dst []float32, b []byte, d npyDtype) {
	le := binary.LittleEndian
	switch {
	case d.kind == 'f' && d.size == 4:
		for j := range dst {
			dst[j] = math.Float32frombits(le.Uint32(b[4*j:]))
		}
	case d.kind == 'f' && d.size == 8:
		for j := range dst {
			dst[j] = float32(math.Float64frombits(le.Uint64(b[8*j:])))
		}
	case d.kind == 'f':
		for j := range dst {
			dst[j] = float16.Float16Frombits(le.Uint16(b[2*j:])).Float32()
		}
	case d.kind == 'u' && d.size == 1:
		for j := range dst {
			dst[j] = float32(b[j])
		}
	case d.kind == 'b':
		for j := range dst {
			dst[j] = 0
			if b[j] != 0 {
				dst[j] = 1
			}
		}
	case d.kind == 'i' && d.size == 1:
		for j := range dst {
			dst[j] = float32(int8(b[j]))
		}
	case d.kind == 'i' && d.size == 2:
		for j := range dst {
			dst[j] = float32(int16(le.Uint16(b[2*j:])))
		}
	case d.kind == 'i' && d.size == 4:
		for j := range dst {
			dst[j] = float32(int32(le.Uint32(b[4*j:])))
		}
	case d.kind == 'i':
		for j := range dst {
			dst[j] = float32(int64(le.Uint64(b[8*j:])))
		}
	case d.size == 2:
		for j := range dst {
			dst[j] = float32(le.Uint16(b[2*j:]))
		}
	case d.size == 4:
		for j := range dst {
			dst[j] = float32(le.Uint32(b[4*j:]))
		}
	default:
		for j := range dst {
			dst[j] = float32(le.Uint64(b[8*j:]))
		}
	}
}

// npyReader pairs an input array X with a label array Y.
type npyReader struct {
	x, y    *npyArray
	image   bool // X rows are uint8 images
	i       int
	closers []io.Closer
}

// newNPYReader reads the headers of the X and Y streams and checks that
// they pair up.
func newNPYReader(x, y io.Reader, xName, yName string) (*npyReader, error) {
	xa, err := readNPY(x, xName)
	if err != nil {
		return nil, err
	}
	ya, err := readNPY(y, yName)
	if err != nil {
		return nil, err
	}
	if ya.row != 1 {
		return nil, formatError(yName, nil, "labels have shape %v, want [N] or [N, 1]", ya.shape)
	}
	if ya.rows() != xa.rows() {
		return nil, formatError(yName, nil, "%d labels for %d rows of %s", ya.rows(), xa.rows(), xName)
	}
	rank := len(xa.shape) - 1
	image := xa.dtype.kind == 'u' && xa.dtype.size == 1 && (rank == 2 || rank == 3)
	return &npyReader{x: xa, y: ya, image: image}, nil
}

func (r *npyReader) Next(rec *Record) error {
	if r.i == r.x.rows() {
		return io.EOF
	}
	b, err := r.x.readRow(r.i)
	if err != nil {
		return err
	}
	if r.image {
		s := r.x.shape
		c := 1
		if len(s) == 4 {
			c = s[3]
		}
		copy(rec.setImage(s[1], s[2], c), b)
	} else {
		decodeFloats(rec.setFloat(r.x.row), b, r.x.dtype)
		rec.Shape = append(rec.Shape[:0], r.x.shape[1:]...)
		if len(rec.Shape) == 0 {
			rec.Shape = append(rec.Shape, 1)
		}
	}
	yb, err := r.y.readRow(r.i)
	if err != nil {
		return err
	}
	v := r.y.dtype.value(yb)
	if v < 0 || v != math.Trunc(v) || v > math.MaxInt32 {
		return formatError(r.y.name, nil, "label %d is %v, not a class index", r.i, v)
	}
	rec.Label = int(v)
	rec.Client = ""
	r.i++
	return nil
}

func (r *npyReader) Classes() []string { return nil }

// Len returns the number of rows.
func (r *npyReader) Len() int { return r.x.rows() }

func (r *npyReader) Close() error {
	err := closeAll(r.closers)
	r.closers = nil
	return err
}

// openNPYSpec opens "X.npy,Y.npy".
func openNPYSpec(rest string) (Reader, error) {
	xName, yName := splitPair(rest)
	if yName == "" {
		return nil, fmt.Errorf("data: npy:%s: give the label array too, as npy:X.npy,Y.npy", rest)
	}
	xs, err := openStream(xName, true)
	if err != nil {
		return nil, err
	}
	ys, err := openStream(yName, true)
	if err != nil {
		xs.Close()
		return nil, err
	}
	r, err := newNPYReader(xs, ys, xName, yName)
	if err != nil {
		xs.Close()
		ys.Close()
		return nil, err
	}
	r.closers = []io.Closer{xs, ys}
	return r, nil
}

// npzDefaultKeys are the X, Y key pairs tried in order when a spec names
// none.
var npzDefaultKeys = [][2]string{{"x", "y"}, {"images", "labels"}, {"x_train", "y_train"}}

// openNPZSpec opens "FILE.npz[:XKEY,YKEY|:train|:test]".
func openNPZSpec(rest string) (Reader, error) {
	p, option := splitOption(rest)
	z, err := zip.OpenReader(p)
	if err != nil {
		return nil, fmt.Errorf("data: %s: %w", p, err)
	}
	r, err := npzReader(&z.Reader, p, option)
	if err != nil {
		z.Close()
		return nil, err
	}
	r.closers = append(r.closers, z)
	return r, nil
}

// npzReader returns the reader of the X, Y pair that option names (see
// openNPZSpec) in the archive z, named p in errors. Closing it closes the
// two members, not z.
func npzReader(z *zip.Reader, p, option string) (*npyReader, error) {
	z.RegisterDecompressor(zip.Deflate, newFlateReader)
	keys := make([]string, len(z.File))
	files := make(map[string]*zip.File, len(z.File))
	for i, f := range z.File {
		keys[i] = f.Name
		if files[f.Name] == nil {
			files[f.Name] = f
		}
	}
	// NumPy names members KEY.npy; other writers may use KEY alone.
	memberName := func(k string) string {
		for _, m := range []string{k + ".npy", k} {
			if slices.Contains(keys, m) {
				return m
			}
		}
		return ""
	}
	has := func(k string) bool { return memberName(k) != "" }
	var pair [2]string
	switch {
	case option == "train" || option == "test":
		pair = [2]string{"x_" + option, "y_" + option}
	case option != "":
		x, y, ok := strings.Cut(option, ",")
		if !ok {
			return nil, fmt.Errorf("data: %s: option %q is neither XKEY,YKEY nor train|test", p, option)
		}
		pair = [2]string{strings.TrimSuffix(x, ".npy"), strings.TrimSuffix(y, ".npy")}
	default:
		for _, kp := range npzDefaultKeys {
			if has(kp[0]) && has(kp[1]) {
				pair = kp
				break
			}
		}
		if pair[0] == "" {
			return nil, fmt.Errorf("data: %s: no x,y or images,labels or x_train,y_train arrays (has %s); name them as npz:FILE:XKEY,YKEY",
				p, strings.Join(trimNPY(keys), ", "))
		}
	}
	for _, k := range pair {
		if !has(k) {
			return nil, fmt.Errorf("data: %s: no array %q (has %s)", p, k, strings.Join(trimNPY(keys), ", "))
		}
	}
	xr, err := files[memberName(pair[0])].Open()
	if err != nil {
		return nil, fmt.Errorf("data: %s: %w", member(p, pair[0]), err)
	}
	yr, err := files[memberName(pair[1])].Open()
	if err != nil {
		xr.Close()
		return nil, fmt.Errorf("data: %s: %w", member(p, pair[1]), err)
	}
	// The arrays read their data in blocks of about a MiB, each one
	// read of a stored member, so only the headers' small reads would
	// gain from a buffer.
	r, err := newNPYReader(xr, yr, member(p, pair[0]), member(p, pair[1]))
	if err != nil {
		xr.Close()
		yr.Close()
		return nil, err
	}
	r.closers = []io.Closer{xr, yr}
	return r, nil
}

// newFlateReader decompresses deflated .npz members (numpy.savez_compressed)
// with klauspost/compress, several times faster than compress/flate.
func newFlateReader(r io.Reader) io.ReadCloser { return flate.NewReader(r) }

// trimNPY returns npz member names without their .npy extension.
func trimNPY(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = strings.TrimSuffix(k, ".npy")
	}
	return out
}
