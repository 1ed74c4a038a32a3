package logits

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"strings"
	"unicode/utf8"

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
	// Labels holds the class of each row. The file stores them as int64
	// (SPEC §3); they are held as int32, half the memory, since a class
	// index is below C.
	Labels []int32
	// Client holds each row's client id; nil when the file has none.
	Client []int32
	// Split holds each row's split (SplitTrain, SplitCalibration,
	// SplitTest); nil when the file has none.
	Split []uint8
	// Classes is the number of classes C.
	Classes int
	// ClassNames names the C classes in label order (the optional
	// "classes" array); nil when the file names none.
	ClassNames []string
	// Input records what the "logits" array holds (the optional "input"
	// array, one string): InputLogits, or InputProbabilities when the
	// model's output was made by a Softmax (fedcalib infer records it);
	// "" when the file does not say.
	Input string
}

// Len returns the number of rows.
func (f *File) Len() int { return len(f.Labels) }

// Validate reports the first inconsistency in f: lengths that do not
// match, fewer than two classes, class names that calib.CheckClassNames
// refuses, non-finite logits, labels outside [0, Classes), negative
// client ids or unknown split values.
func (f *File) Validate() error {
	if f.Classes >= 2 && len(f.Logits) != len(f.Labels)*f.Classes {
		return fmt.Errorf("logits: have %d values for %d labels of %d classes: lengths do not match", len(f.Logits), len(f.Labels), f.Classes)
	}
	return f.validateColumns()
}

// validateColumns is Validate without the check of the logits' length
// (which lets ReadColumns check a File without logits).
func (f *File) validateColumns() error {
	n := len(f.Labels)
	switch {
	case f.Classes < 2:
		return fmt.Errorf("logits: need at least 2 classes, have %d", f.Classes)
	case f.Client != nil && len(f.Client) != n:
		return fmt.Errorf("client: has %d rows, labels has %d", len(f.Client), n)
	case f.Split != nil && len(f.Split) != n:
		return fmt.Errorf("split: has %d rows, labels has %d", len(f.Split), n)
	}
	if err := calib.CheckClassNames(f.ClassNames, f.Classes); err != nil {
		return fmt.Errorf("classes: %w", err)
	}
	if err := f.validateInput(); err != nil {
		return err
	}
	return f.checkValues(0)
}

// validateInput refuses an Input other than "", InputLogits and
// InputProbabilities.
func (f *File) validateInput() error {
	switch f.Input {
	case "", InputLogits, InputProbabilities:
		return nil
	}
	return fmt.Errorf("input: %q: want %q or %q", f.Input, InputLogits, InputProbabilities)
}

// checkValues reports the first non-finite logit, label outside
// [0, Classes), negative client id or unknown split value of f, whose
// rows it numbers from first (f may be a block of a larger file).
func (f *File) checkValues(first int) error {
	for i, v := range f.Logits {
		// All exponent bits set: ±Inf or NaN.
		if math.Float32bits(v)&0x7f800000 == 0x7f800000 {
			return fmt.Errorf("logits: row %d, class %d is %v: logits must be finite", first+i/f.Classes, i%f.Classes, v)
		}
	}
	for i, y := range f.Labels {
		if y < 0 || int(y) >= f.Classes {
			return fmt.Errorf("labels: row %d is %d, outside [0, %d)", first+i, y, f.Classes)
		}
	}
	for i, c := range f.Client {
		if c < 0 {
			return fmt.Errorf("client: row %d is %d: client ids must be non-negative", first+i, c)
		}
	}
	for i, s := range f.Split {
		if s > SplitTest {
			return fmt.Errorf("split: row %d is %d: want 0 (train), 1 (calibration) or 2 (test)", first+i, s)
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

// Read reads and validates the logits file at path, within
// DefaultMemoryBudget: see ReadBudget.
func Read(path string) (*File, error) { return ReadBudget(path, 0) }

// ReadBudget reads and validates the logits file at path, refusing with
// an error wrapping ErrOverBudget, before reading its data, a file whose
// arrays would take more than budget bytes (≤ 0: DefaultMemoryBudget).
func ReadBudget(path string, budget int64) (*File, error) {
	a, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	a.SetMemoryBudget(budget)
	return a.readAll()
}

// decode reads and validates the logits file held by r, of size bytes.
func decode(r io.ReaderAt, size int64) (*File, error) {
	a, err := openArchive(r, size)
	if err != nil {
		return nil, err
	}
	return a.readAll()
}

// readAll reads the whole archive: ReadColumns, then ReadLogits.
func (a *Archive) readAll() (*File, error) {
	if err := a.CheckBudget(); err != nil {
		return nil, err
	}
	f, err := a.ReadColumns()
	if err != nil {
		return nil, err
	}
	if err := a.ReadLogits(f); err != nil {
		return nil, err
	}
	return f, nil
}

// readNames reads the "classes" array: c class names.
func readNames(zf *zip.File, c int, fileSize int64) ([]string, error) {
	a, err := openArray(zf, "classes", fileSize)
	if err != nil {
		return nil, err
	}
	defer a.rc.Close()
	if len(a.Shape) != 1 || a.Shape[0] != c {
		return nil, fmt.Errorf("classes: shape %v, want [%d] (one name per logits column)", a.Shape, c)
	}
	return a.readStrings()
}

// readColumn reads the archive's column key, one integer a row of any
// integer dtype, converting it to T and checking the range.
func readColumn[T integer](a *Archive, key string) ([]T, error) {
	c, err := a.openColumn(key)
	if err != nil {
		return nil, err
	}
	defer c.rc.Close()
	return readIntegers[T](c)
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

// Encode writes f as an .npz archive to buf, uncompressed, as
// numpy.savez writes it: one stored member per array, each built in one
// buffer and written at once. It does not validate f.
func Encode(buf *bytes.Buffer, f *File) error {
	n := f.Len()
	// The class names are a NumPy UCS-4 string array, as numpy.array
	// makes of a list of str: each name padded with NUL code points to
	// the longest.
	width := 1
	for _, s := range f.ClassNames {
		width = max(width, utf8.RuneCountInString(s))
	}
	arrays := []struct {
		name  string
		descr string
		shape []int
		size  int // bytes per element
		skip  bool
	}{
		{"logits", "<f4", []int{n, f.Classes}, 4, false},
		{"labels", "<i8", []int{n}, 8, false},
		{"client", "<i4", []int{n}, 4, f.Client == nil},
		{"split", "|u1", []int{n}, 1, f.Split == nil},
		{"classes", fmt.Sprintf("<U%d", width), []int{len(f.ClassNames)}, 4 * width, len(f.ClassNames) == 0},
		{"input", fmt.Sprintf("<U%d", len(f.Input)), []int{1}, 4 * len(f.Input), f.Input == ""},
	}
	total := 0
	for _, a := range arrays {
		if !a.skip {
			elems := 1
			for _, d := range a.shape {
				elems *= d
			}
			total += 256 + 2*len(a.name) + a.size*elems
		}
	}
	buf.Grow(total)
	zw := zip.NewWriter(buf)
	var b []byte
	for _, a := range arrays {
		if a.skip {
			continue
		}
		b = append(b[:0], npyHeader(a.descr, a.shape)...)
		switch a.name {
		case "logits":
			for _, v := range f.Logits {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
			}
		case "labels":
			for _, v := range f.Labels {
				b = binary.LittleEndian.AppendUint64(b, uint64(int64(v)))
			}
		case "client":
			for _, v := range f.Client {
				b = binary.LittleEndian.AppendUint32(b, uint32(v))
			}
		case "split":
			b = append(b, f.Split...)
		case "classes":
			for _, s := range f.ClassNames {
				k := 0
				for _, r := range s {
					b = binary.LittleEndian.AppendUint32(b, uint32(r))
					k++
				}
				b = append(b, make([]byte, 4*(width-k))...)
			}
		case "input": // ASCII
			for _, r := range f.Input {
				b = binary.LittleEndian.AppendUint32(b, uint32(r))
			}
		}
		w, err := zw.CreateRaw(&zip.FileHeader{
			Name:               a.name + ".npy",
			Method:             zip.Store,
			CRC32:              crc32.ChecksumIEEE(b),
			CompressedSize64:   uint64(len(b)),
			UncompressedSize64: uint64(len(b)),
		})
		if err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
		if _, err := w.Write(b); err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
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
