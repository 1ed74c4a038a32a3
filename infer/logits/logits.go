package logits

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"

	"codeberg.org/sbinet/npyio/npy"
	"codeberg.org/sbinet/npyio/npz"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/internal/fileio"
)

// Split values of the split column.
const (
	SplitTrain       = 0 // used to train the model; unused by calibration
	SplitCalibration = 1 // a client's calibration data
	SplitTest        = 2 // held-out test data
)

// AllRows selects every row in Rows.
const AllRows = -1

// File is the content of a logits file. The zero value is an empty file
// with no classes.
type File struct {
	// Logits holds Len() rows of Classes values, row-major.
	Logits []float32
	// Labels holds the class of each row.
	Labels []int64
	// Client holds each row's client id; nil when the file has none.
	Client []int32
	// Split holds each row's split (SplitTrain, SplitCalibration,
	// SplitTest); nil when the file has none.
	Split []uint8
	// Classes is the number of classes C.
	Classes int
}

// Len returns the number of rows.
func (f *File) Len() int { return len(f.Labels) }

// Validate reports the first inconsistency in f: lengths that do not
// match, fewer than two classes, non-finite logits, labels outside
// [0, Classes), negative client ids or unknown split values.
func (f *File) Validate() error {
	n := len(f.Labels)
	switch {
	case f.Classes < 2:
		return fmt.Errorf("logits: need at least 2 classes, have %d", f.Classes)
	case len(f.Logits) != n*f.Classes:
		return fmt.Errorf("logits: have %d values for %d labels of %d classes: lengths do not match", len(f.Logits), n, f.Classes)
	case f.Client != nil && len(f.Client) != n:
		return fmt.Errorf("client: has %d rows, labels has %d", len(f.Client), n)
	case f.Split != nil && len(f.Split) != n:
		return fmt.Errorf("split: has %d rows, labels has %d", len(f.Split), n)
	}
	for i, v := range f.Logits {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("logits: row %d, class %d is %v: logits must be finite", i/f.Classes, i%f.Classes, v)
		}
	}
	for i, y := range f.Labels {
		if y < 0 || y >= int64(f.Classes) {
			return fmt.Errorf("labels: row %d is %d, outside [0, %d)", i, y, f.Classes)
		}
	}
	for i, c := range f.Client {
		if c < 0 {
			return fmt.Errorf("client: row %d is %d: client ids must be non-negative", i, c)
		}
	}
	for i, s := range f.Split {
		if s > SplitTest {
			return fmt.Errorf("split: row %d is %d: want 0 (train), 1 (calibration) or 2 (test)", i, s)
		}
	}
	return nil
}

// Rows returns the indices of the rows whose split is split, in order.
// With split = AllRows, or when the file has no split column, it returns
// every row.
func (f *File) Rows(split int) []int {
	out := make([]int, 0, f.Len())
	for i := 0; i < f.Len(); i++ {
		if split == AllRows || f.Split == nil || int(f.Split[i]) == split {
			out = append(out, i)
		}
	}
	return out
}

// Set returns the given rows as a calib.Set with float64 logits. A nil
// rows selects every row.
func (f *File) Set(rows []int) *calib.Set {
	if rows == nil {
		rows = f.Rows(AllRows)
	}
	c := f.Classes
	s := &calib.Set{
		Logits:  make([]float64, len(rows)*c),
		Labels:  make([]int, len(rows)),
		Classes: c,
	}
	for k, i := range rows {
		for j, v := range f.Logits[i*c : (i+1)*c] {
			s.Logits[k*c+j] = float64(v)
		}
		s.Labels[k] = int(f.Labels[i])
	}
	return s
}

// Read reads and validates the logits file at path.
func Read(path string) (*File, error) {
	f, err := read(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

func read(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	r, err := npz.NewReader(fh, st.Size())
	if err != nil {
		return nil, fmt.Errorf("not a NumPy .npz archive: %w", err)
	}
	has := map[string]bool{}
	for _, k := range r.Keys() {
		has[strings.TrimSuffix(k, ".npy")] = true
	}
	for _, k := range []string{"logits", "labels"} {
		if !has[k] {
			return nil, fmt.Errorf("no %q array: a logits file needs \"logits\" [N, C] and \"labels\" [N]", k)
		}
	}

	var f File
	hdr := r.Header("logits.npy")
	if hdr == nil {
		return nil, errors.New("logits: unreadable NumPy header")
	}
	if len(hdr.Descr.Shape) != 2 {
		return nil, fmt.Errorf("logits: shape %v, want [N, C]", hdr.Descr.Shape)
	}
	if hdr.Descr.Fortran {
		return nil, errors.New("logits: Fortran-ordered array; save it C-ordered (numpy.ascontiguousarray)")
	}
	f.Classes = hdr.Descr.Shape[1]
	if f.Logits, err = readFloat32(r, "logits", hdr); err != nil {
		return nil, err
	}
	n := hdr.Descr.Shape[0]
	if f.Labels, err = readInts[int64](r, "labels", n); err != nil {
		return nil, err
	}
	if has["client"] {
		if f.Client, err = readInts[int32](r, "client", n); err != nil {
			return nil, err
		}
	}
	if has["split"] {
		if f.Split, err = readInts[uint8](r, "split", n); err != nil {
			return nil, err
		}
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return &f, nil
}

func readFloat32(r *npz.Reader, name string, hdr *npy.Header) ([]float32, error) {
	switch t := strings.Trim(hdr.Descr.Type, "'"); t {
	case "<f4":
		var v []float32
		if err := r.Read(name+".npy", &v); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return v, nil
	case "<f8":
		var v []float64
		if err := r.Read(name+".npy", &v); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out := make([]float32, len(v))
		for i, x := range v {
			out[i] = float32(x)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("%s: dtype %s, want float32 (<f4) or float64 (<f8)", name, t)
	}
}

type integer interface{ ~int64 | ~int32 | ~uint8 }

// readInts reads a 1-D integer array of length n of any little-endian
// integer dtype, converting it to T and checking the range.
func readInts[T integer](r *npz.Reader, name string, n int) ([]T, error) {
	hdr := r.Header(name + ".npy")
	if hdr == nil {
		return nil, fmt.Errorf("%s: unreadable NumPy header", name)
	}
	if len(hdr.Descr.Shape) != 1 || hdr.Descr.Shape[0] != n {
		return nil, fmt.Errorf("%s: shape %v, want [%d] (one per logits row)", name, hdr.Descr.Shape, n)
	}
	var wide []int64
	var err error
	switch t := strings.Trim(hdr.Descr.Type, "'"); t {
	case "<i8":
		err = r.Read(name+".npy", &wide)
	case "<i4":
		wide, err = readAs[int32](r, name)
	case "<i2":
		wide, err = readAs[int16](r, name)
	case "|i1":
		wide, err = readAs[int8](r, name)
	case "<u8":
		wide, err = readAs[uint64](r, name)
	case "<u4":
		wide, err = readAs[uint32](r, name)
	case "<u2":
		wide, err = readAs[uint16](r, name)
	case "|u1":
		wide, err = readAs[uint8](r, name)
	default:
		return nil, fmt.Errorf("%s: dtype %s, want an integer type", name, t)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	out := make([]T, len(wide))
	for i, v := range wide {
		out[i] = T(v)
		if int64(out[i]) != v {
			return nil, fmt.Errorf("%s: row %d is %d, out of range", name, i, v)
		}
	}
	return out, nil
}

func readAs[S int8 | int16 | int32 | uint8 | uint16 | uint32 | uint64](r *npz.Reader, name string) ([]int64, error) {
	var v []S
	if err := r.Read(name+".npy", &v); err != nil {
		return nil, err
	}
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out, nil
}

// Write validates f and writes it to path as an .npz archive, atomically:
// on error no file is left behind and an existing file is untouched.
func Write(path string, f *File) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var buf bytes.Buffer
	if err := Encode(&buf, f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return fileio.Write(path, buf.Bytes())
}

// Encode writes f as an .npz archive (deflate-compressed, as
// numpy.savez_compressed writes) to buf. It does not validate f.
func Encode(buf *bytes.Buffer, f *File) error {
	zw := zip.NewWriter(buf)
	n := f.Len()
	arrays := []struct {
		name  string
		descr string
		shape []int
		data  any
	}{
		{"logits", "<f4", []int{n, f.Classes}, f.Logits},
		{"labels", "<i8", []int{n}, f.Labels},
		{"client", "<i4", []int{n}, f.Client},
		{"split", "|u1", []int{n}, f.Split},
	}
	for _, a := range arrays {
		if a.name == "client" && f.Client == nil || a.name == "split" && f.Split == nil {
			continue
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: a.name + ".npy", Method: zip.Deflate})
		if err != nil {
			return err
		}
		if _, err := w.Write(npyHeader(a.descr, a.shape)); err != nil {
			return err
		}
		if err := binary.Write(w, binary.LittleEndian, a.data); err != nil {
			return err
		}
	}
	return zw.Close()
}

// npyHeader returns a version 1.0 .npy header for a C-ordered array,
// padded with spaces and a newline to a multiple of 64 bytes as the
// format specification asks.
func npyHeader(descr string, shape []int) []byte {
	var sh string
	switch len(shape) {
	case 1:
		sh = fmt.Sprintf("(%d,)", shape[0])
	default:
		parts := make([]string, len(shape))
		for i, d := range shape {
			parts[i] = fmt.Sprint(d)
		}
		sh = "(" + strings.Join(parts, ", ") + ")"
	}
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, sh)
	const prefix = 10 // magic (6) + version (2) + header length (2)
	pad := 64 - (prefix+len(dict)+1)%64
	if pad == 64 {
		pad = 0
	}
	hdr := make([]byte, 0, prefix+len(dict)+pad+1)
	hdr = append(hdr, "\x93NUMPY\x01\x00"...)
	hdr = binary.LittleEndian.AppendUint16(hdr, uint16(len(dict)+pad+1))
	hdr = append(hdr, dict...)
	hdr = append(hdr, bytes.Repeat([]byte{' '}, pad)...)
	return append(hdr, '\n')
}
