package data

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"codeberg.org/sbinet/npyio/npz"
	"gonum.org/v1/gonum/mat"
)

// Hand-built arrays: X float32 [[1, 2], [3.5, -4], [0, 0.25]] and
// Y int64 [2, 0, 1].
var (
	npyX = npyBytes("<f4", false, []int{3, 2}, le32(1, 2, 3.5, -4, 0, 0.25))
	npyY = npyBytes("<i8", false, []int{3}, le64(2, 0, 1))

	npyWant = []Record{
		{Float: []float32{1, 2}, Shape: []int{2}, Label: 2},
		{Float: []float32{3.5, -4}, Shape: []int{2}, Label: 0},
		{Float: []float32{0, 0.25}, Shape: []int{2}, Label: 1},
	}
)

func TestNPYHandMade(t *testing.T) {
	// The header is padded so that data starts at byte 128.
	if len(npyX) != 128+24 || npyX[127] != '\n' {
		t.Fatalf("fixture: %d bytes, byte 127 = %q", len(npyX), npyX[127])
	}
	dir := t.TempDir()
	x := writeFile(t, dir, "x.npy", npyX)
	y := writeFile(t, dir, "y.npy.gz", gz(npyY)) // gzip is detected
	z := writeFile(t, dir, "xy.npz", zipFile(t, []string{"y.npy", "x.npy"}, map[string][]byte{"x.npy": npyX, "y.npy": npyY}))
	for _, spec := range []string{"npy:" + x + "," + y, "npz:" + z, z, "npz:" + z + ":x,y", "npz:" + z + ":x.npy,y.npy"} {
		r, err := Open(spec)
		if err != nil {
			t.Fatalf("Open(%q): %v", spec, err)
		}
		if n := r.(Sized).Len(); n != 3 {
			t.Errorf("%s: Len = %d, want 3", spec, n)
		}
		if c := r.Classes(); c != nil {
			t.Errorf("%s: classes %q, want nil", spec, c)
		}
		if got := readAll(t, r); !reflect.DeepEqual(got, npyWant) {
			t.Errorf("%s: records\n got %+v\nwant %+v", spec, got, npyWant)
		}
	}
}

func TestNPYImagesAndDtypes(t *testing.T) {
	// uint8 X of row shape [2, 2] becomes an image [2 2 1]; the split
	// option picks x_test, y_test.
	files := map[string][]byte{
		"x_train.npy": npyBytes("|u1", false, []int{1, 2, 2}, []byte{1, 2, 3, 4}),
		"y_train.npy": npyBytes("|u1", false, []int{1}, []byte{9}),
		"x_test.npy":  npyBytes("|u1", false, []int{2, 2, 2}, []byte{10, 20, 30, 40, 50, 60, 70, 80}),
		"y_test.npy":  npyBytes("<i4", false, []int{2, 1}, []byte{3, 0, 0, 0, 7, 0, 0, 0}),
	}
	z := writeFile(t, t.TempDir(), "mnist.npz", zipFile(t, []string{"x_train.npy", "y_train.npy", "x_test.npy", "y_test.npy"}, files))
	want := []Record{
		{Image: []byte{10, 20, 30, 40}, Shape: []int{2, 2, 1}, Label: 3},
		{Image: []byte{50, 60, 70, 80}, Shape: []int{2, 2, 1}, Label: 7},
	}
	for _, spec := range []string{"npz:" + z + ":test", "npz:" + z + ":x_test,y_test"} {
		if got, _ := openAll(t, spec); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: records\n got %+v\nwant %+v", spec, got, want)
		}
	}
	// Without keys, x_train, y_train is the default when x, y are absent.
	if got, _ := openAll(t, "npz:"+z); len(got) != 1 || got[0].Label != 9 || !reflect.DeepEqual(got[0].Shape, []int{2, 2, 1}) {
		t.Errorf("default keys: %+v", got)
	}

	for _, tc := range []struct {
		name   string
		x, y   []byte
		want   []Record
		detail string
	}{
		{
			"big-endian int16 X, bool Y",
			npyBytes(">i2", false, []int{2}, []byte{0xff, 0xfe, 0x01, 0x00}), // -2, 256
			npyBytes("|b1", false, []int{2}, []byte{1, 0}),
			[]Record{{Float: []float32{-2}, Shape: []int{1}, Label: 1}, {Float: []float32{256}, Shape: []int{1}, Label: 0}},
			"1-D X has Shape [1]",
		},
		{
			"float16 X, integral float64 Y",
			npyBytes("<f2", false, []int{1, 3}, []byte{0x00, 0x3c, 0x00, 0xc0, 0x00, 0x38}), // 1, -2, 0.5
			npyBytes("<f8", false, []int{1}, []byte{0, 0, 0, 0, 0, 0, 0x14, 0x40}),          // 5.0
			[]Record{{Float: []float32{1, -2, 0.5}, Shape: []int{3}, Label: 5}},
			"",
		},
		{
			"uint8 X of rank 4 is HWC",
			npyBytes("|u1", false, []int{1, 1, 2, 3}, []byte{1, 2, 3, 4, 5, 6}),
			npyBytes("<u2", false, []int{1}, []byte{0x01, 0x01}), // 257
			[]Record{{Image: []byte{1, 2, 3, 4, 5, 6}, Shape: []int{1, 2, 3}, Label: 257}},
			"",
		},
		{
			"uint8 X of rank 1 is Float",
			npyBytes("|u1", false, []int{1, 2}, []byte{200, 3}),
			npyBytes("|i1", false, []int{1}, []byte{4}),
			[]Record{{Float: []float32{200, 3}, Shape: []int{2}, Label: 4}},
			"",
		},
		{
			"Fortran order is transposed",
			npyBytes("<f4", true, []int{3, 2}, le32(1, 3, 5, 2, 4, 6)),
			npyBytes(">i4", false, []int{3}, []byte{0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0}),
			[]Record{{Float: []float32{1, 2}, Shape: []int{2}, Label: 1}, {Float: []float32{3, 4}, Shape: []int{2}, Label: 2}, {Float: []float32{5, 6}, Shape: []int{2}, Label: 0}},
			"",
		},
		{
			"Fortran order with one non-trivial dimension",
			npyBytes("<f8", true, []int{2, 1}, []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0, 0, 0, 0, 0, 0, 0, 0x40}), // 1, 2
			npyBytes("<i8", true, []int{2}, le64(1, 0)),
			[]Record{{Float: []float32{1}, Shape: []int{1}, Label: 1}, {Float: []float32{2}, Shape: []int{1}, Label: 0}},
			"",
		},
	} {
		r, err := newNPYReader(bytes.NewReader(tc.x), bytes.NewReader(tc.y), "x", "y")
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := readAll(t, r); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: records\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

// TestNPZFromNpyio reads an archive written by npyio's writer, a second,
// independent implementation of the format.
func TestNPZFromNpyio(t *testing.T) {
	p := filepath.Join(t.TempDir(), "w.npz")
	x := mat.NewDense(3, 2, []float64{1, 2, 3.5, -4, 0, 0.25})
	if err := npz.Write(p, map[string]any{"x": x, "y": []int64{2, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := openAll(t, "npz:"+p); !reflect.DeepEqual(got, npyWant) {
		t.Errorf("records\n got %+v\nwant %+v", got, npyWant)
	}
}

func TestNPYErrors(t *testing.T) {
	hdr := func(dict string) []byte {
		b := []byte("\x93NUMPY\x01\x00")
		b = append(b, byte(len(dict)), byte(len(dict)>>8))
		return append(b, dict...)
	}
	for _, tc := range []struct {
		name, msg string
		x, y      []byte
		open      bool // the error comes from the headers
		eof       bool
	}{
		{"not npy", "x: not a .npy file", []byte("PK\x03\x04xxxxxxxxxxxxxxxxx"), npyY, true, false},
		{"short", "x: reading .npy header", []byte("\x93NUM"), npyY, true, true},
		{"version 4", "x: .npy format version 4.0 is not supported", []byte("\x93NUMPY\x04\x00\x00\x00"), npyY, true, false},
		{"header too long", "header of 16777216 bytes is too long", []byte("\x93NUMPY\x02\x00\x00\x00\x00\x01"), npyY, true, false},
		{"brace in descr", "dtype } is not supported", hdr("{'descr': '}', 'fortran_order': False, 'shape': (3,), }\n"), npyY, true, false},
		{"short shape", "x: .npy shape: want a tuple", hdr("{'descr': '<f4', 'fortran_order': False, 'shape': 3, }\n"), npyY, true, false},
		{"unknown key", `x: .npy unknown key "x"`, hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}\n"), npyY, true, false},
		{"bad order", "fortran_order: want True or False", hdr("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (3,), }\n"), npyY, true, false},
		{"bad shape", "shape: want a non-negative integer", hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (a,), }\n"), npyY, true, false},
		{"complex", "dtype <c8 is not supported", npyBytes("<c8", false, []int{3}, nil), npyY, true, false},
		{"object", "dtype |O is not supported", npyBytes("|O", false, []int{3}, nil), npyY, true, false},
		{"string", "dtype <U3 is not supported", npyBytes("<U3", false, []int{3}, nil), npyY, true, false},
		{"scalar", "array is a scalar", npyBytes("<f4", false, nil, le32(1)), npyY, true, false},
		{"negative dim", "shape: want a non-negative integer", npyBytes("<f4", false, []int{3, -1}, nil), npyY, true, false},
		{"zero row", "unsupported row shape [0]", npyBytes("<f4", false, []int{3, 0}, nil), npyY, true, false},
		{"huge row", "unsupported row shape", npyBytes("<f8", false, []int{1, 1 << 20, 1 << 20}, nil), npyY, true, false},
		{"fortran truncated", "x: row 0 of 3", npyBytes("<f4", true, []int{3, 2}, le32(1, 2, 3, 4, 5)), npyY, false, true},
		{"fortran too large", "shape [4611686018427387904 2] is too large", npyBytes("<f4", true, []int{1 << 62, 2}, nil), npyY, true, false},
		{"count mismatch", "y: 2 labels for 3 rows of x", npyX, npyBytes("<i8", false, []int{2}, le64(0, 1)), true, false},
		{"label shape", "y: labels have shape [3 2], want [N] or [N, 1]", npyX, npyBytes("<i8", false, []int{3, 2}, nil), true, false},
		{"truncated x", "x: row 2 of 3", npyX[:len(npyX)-1], npyY, false, true},
		{"truncated y", "y: row 2 of 3", npyX, npyY[:len(npyY)-3], false, true},
		{"negative label", "y: label 1 is -1, not a class index", npyX, npyBytes("<i8", false, []int{3}, le64(0, -1, 2)), false, false},
		{"fractional label", "y: label 0 is 0.5, not a class index", npyX, npyBytes("<f4", false, []int{3}, le32(0.5, 1, 2)), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := newNPYReader(bytes.NewReader(tc.x), bytes.NewReader(tc.y), "x", "y")
			if (err != nil) != tc.open {
				t.Fatalf("newNPYReader error %v, want error: %v", err, tc.open)
			}
			if err == nil {
				_, err = drain(r, 10)
			}
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want one containing %q", err, tc.msg)
			}
			if !errors.Is(err, ErrFormat) {
				t.Errorf("error %v does not wrap ErrFormat", err)
			}
			if errors.Is(err, io.ErrUnexpectedEOF) != tc.eof {
				t.Errorf("errors.Is(%v, io.ErrUnexpectedEOF) = %v, want %v", err, !tc.eof, tc.eof)
			}
		})
	}

	dir := t.TempDir()
	z := writeFile(t, dir, "a.npz", zipFile(t, []string{"logits.npy", "labels.npy"}, map[string][]byte{"logits.npy": npyX, "labels.npy": npyY}))
	x := writeFile(t, dir, "x.npy", npyX)
	for _, tc := range []struct{ spec, msg string }{
		{"npz:" + z, "no x,y or images,labels or x_train,y_train arrays (has logits, labels)"},
		{"npz:" + z + ":logits,y", `no array "y" (has logits, labels)`},
		{"npz:" + z + ":logits", `option "logits" is neither XKEY,YKEY nor train|test`},
		{"npz:" + x, "not a valid zip file"},
		{"npy:" + x, "give the label array too"},
		{"npy:" + x + "," + filepath.Join(dir, "none.npy"), "no such file"},
	} {
		if _, err := Open(tc.spec); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Open(%q) error %v, want one containing %q", tc.spec, err, tc.msg)
		}
	}
	// The logits file of SPEC §3 is readable with explicit keys.
	if got, _ := openAll(t, "npz:"+z+":logits,labels"); !reflect.DeepEqual(got, npyWant) {
		t.Errorf("logits,labels: %+v", got)
	}
}
