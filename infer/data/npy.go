package data

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"codeberg.org/sbinet/npyio/npy"
	"codeberg.org/sbinet/npyio/npy/float16"
	"codeberg.org/sbinet/npyio/npz"
)

// maxNPYHeader bounds the header length of a .npy file; NumPy writes
// headers of a few hundred bytes.
const maxNPYHeader = 1 << 20

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

// value decodes one element.
func (d npyDtype) value(b []byte) float64 {
	switch d.kind {
	case 'f':
		switch d.size {
		case 2:
			return float64(float16.Float16Frombits(d.order.Uint16(b)).Float32())
		case 4:
			return float64(math.Float32frombits(d.order.Uint32(b)))
		}
		return math.Float64frombits(d.order.Uint64(b))
	case 'i':
		switch d.size {
		case 1:
			return float64(int8(b[0]))
		case 2:
			return float64(int16(d.order.Uint16(b)))
		case 4:
			return float64(int32(d.order.Uint32(b)))
		}
		return float64(int64(d.order.Uint64(b)))
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
		return float64(d.order.Uint16(b))
	case 4:
		return float64(d.order.Uint32(b))
	}
	return float64(d.order.Uint64(b))
}

// npyArray streams the rows of one array of a .npy file.
type npyArray struct {
	name  string
	r     io.Reader
	dtype npyDtype
	shape []int  // full shape; shape[0] is the number of rows
	row   int    // elements per row
	buf   []byte // grown as rows arrive; see readN
}

// readNPY reads the header of a .npy stream and returns the array
// positioned at its first row.
func readNPY(r io.Reader, name string) (*npyArray, error) {
	hdr, err := readNPYHeader(r, name)
	if err != nil {
		return nil, err
	}
	d, err := parseDtype(hdr.Descr.Type)
	if err != nil {
		return nil, formatError(name, nil, "%v", err)
	}
	shape := hdr.Descr.Shape
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
	row := rowBytes / d.size
	if hdr.Descr.Fortran {
		big := 0
		for _, n := range shape {
			if n > 1 {
				big++
			}
		}
		if big > 1 {
			return nil, formatError(name, nil, "Fortran-order arrays cannot be read row by row; save with numpy.ascontiguousarray")
		}
	}
	return &npyArray{name: name, r: r, dtype: d, shape: shape, row: row}, nil
}

// readNPYHeader reads the preamble and header dictionary of a .npy
// stream and parses it with npyio. It first checks the layout that npyio's
// parser relies on, so that a malformed header is an error, not a panic.
func readNPYHeader(r io.Reader, name string) (npy.Header, error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return npy.Header{}, formatError(name, eofError(err), "reading .npy header")
	}
	if [6]byte(pre[:6]) != npy.Magic {
		return npy.Header{}, formatError(name, nil, "not a .npy file (no \\x93NUMPY magic)")
	}
	var hlen int
	switch pre[6] {
	case 1:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return npy.Header{}, formatError(name, eofError(err), "reading .npy header")
		}
		hlen = int(binary.LittleEndian.Uint16(b[:]))
	case 2, 3:
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return npy.Header{}, formatError(name, eofError(err), "reading .npy header")
		}
		hlen = int(binary.LittleEndian.Uint32(b[:]))
	default:
		return npy.Header{}, formatError(name, nil, ".npy format version %d.%d is not supported", pre[6], pre[7])
	}
	if hlen > maxNPYHeader {
		return npy.Header{}, formatError(name, nil, ".npy header of %d bytes is too long", hlen)
	}
	dict := make([]byte, hlen)
	if _, err := io.ReadFull(r, dict); err != nil {
		return npy.Header{}, formatError(name, eofError(err), "reading .npy header")
	}
	if !npyHeaderLayoutOK(dict) {
		return npy.Header{}, formatError(name, nil, "malformed .npy header %.80q", dict)
	}
	// Version 3 differs from 2 only by allowing UTF-8 in the header.
	var full bytes.Buffer
	full.Write(npy.Magic[:])
	full.Write([]byte{2, 0})
	binary.Write(&full, binary.LittleEndian, uint32(hlen))
	full.Write(dict)
	rd, err := npy.NewReader(&full)
	if err != nil {
		return npy.Header{}, formatError(name, err, "parsing .npy header")
	}
	return rd.Header, nil
}

// npyHeaderLayoutOK reports whether a header dictionary has the layout
// NumPy writes ({'descr': ..., 'fortran_order': ..., 'shape': (...), }
// followed by padding and a newline) and that npyio's parser slices
// without bounds checks.
func npyHeaderLayoutOK(dict []byte) bool {
	nl := bytes.LastIndexByte(dict, '\n')
	if nl < 0 {
		return false
	}
	buf := dict[:nl]
	const descrKey, orderKey, shapeKey = "'descr': ", "'fortran_order': ", "'shape': "
	d := bytes.Index(buf, []byte(descrKey))
	o := bytes.Index(buf, []byte(orderKey))
	s := bytes.Index(buf, []byte(shapeKey))
	e := bytes.IndexByte(buf, '}')
	if d < 0 || o < 0 || s < 0 || e < 0 {
		return false
	}
	if d+len(descrKey) > o-2 || o+len(orderKey) > s-2 || s+len(shapeKey) > e-2 {
		return false
	}
	shape := buf[s+len(shapeKey) : e-2]
	return len(shape) >= 2 && shape[0] == '(' && shape[len(shape)-1] == ')'
}

// rows returns the number of rows.
func (a *npyArray) rows() int { return a.shape[0] }

// readRow reads the next row's raw bytes.
func (a *npyArray) readRow(i int) ([]byte, error) {
	var err error
	if a.buf, err = readN(a.r, a.buf, a.row*a.dtype.size); err != nil {
		return nil, formatError(a.name, err, "row %d of %d", i, a.rows())
	}
	return a.buf, nil
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
		f := rec.setFloat(r.x.row)
		d := r.x.dtype
		if d.kind == 'f' && d.size == 4 && d.order == binary.LittleEndian {
			for j := range f {
				f[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
			}
		} else {
			for j := range f {
				f[j] = float32(d.value(b[j*d.size:]))
			}
		}
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
	xs, err := openStream(xName)
	if err != nil {
		return nil, err
	}
	ys, err := openStream(yName)
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
	z, err := npz.Open(p)
	if err != nil {
		return nil, fmt.Errorf("data: %s: %w", p, err)
	}
	keys := z.Keys()
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
			z.Close()
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
			z.Close()
			return nil, fmt.Errorf("data: %s: no x,y or images,labels or x_train,y_train arrays (has %s); name them as npz:FILE:XKEY,YKEY",
				p, strings.Join(trimNPY(keys), ", "))
		}
	}
	for _, k := range pair {
		if !has(k) {
			z.Close()
			return nil, fmt.Errorf("data: %s: no array %q (has %s)", p, k, strings.Join(trimNPY(keys), ", "))
		}
	}
	xr, err := z.Open(memberName(pair[0]))
	if err != nil {
		z.Close()
		return nil, fmt.Errorf("data: %s: %w", p, err)
	}
	yr, err := z.Open(memberName(pair[1]))
	if err != nil {
		xr.Close()
		z.Close()
		return nil, fmt.Errorf("data: %s: %w", p, err)
	}
	r, err := newNPYReader(bufio.NewReaderSize(xr, 1<<16), bufio.NewReader(yr), member(p, pair[0]), member(p, pair[1]))
	if err != nil {
		xr.Close()
		yr.Close()
		z.Close()
		return nil, err
	}
	r.closers = []io.Closer{xr, yr, z}
	return r, nil
}

// trimNPY returns npz member names without their .npy extension.
func trimNPY(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = strings.TrimSuffix(k, ".npy")
	}
	return out
}
