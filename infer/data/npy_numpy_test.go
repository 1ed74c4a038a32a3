package data

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
)

// numpyWant returns the records that testdata/npy/gen.py's array
// x<rank>_<dtype>_<order>_<layout> paired with labels [2, 0, 1] yields:
// row i of x2 holds 4i … 4i+3 and of x3 8i … 8i+7 (bool arrays: % 2);
// uint8 x3 rows are [2 4 1] images, every other row is Float.
func numpyWant(key string, labels []int) []Record {
	f := strings.Split(key, "_")
	rank, dtype := f[0], f[1]
	per, shape := 4, []int{4}
	if rank == "x3" {
		per, shape = 8, []int{2, 4}
	}
	var out []Record
	for i := range 3 {
		rec := Record{Label: labels[i]}
		vals := make([]float32, per)
		for j := range vals {
			v := per*i + j
			if dtype == "b1" {
				v %= 2
			}
			vals[j] = float32(v)
		}
		if dtype == "u1" && rank == "x3" {
			rec.Image = make([]byte, per)
			for j, v := range vals {
				rec.Image[j] = byte(v)
			}
			rec.Shape = []int{2, 4, 1}
		} else {
			rec.Float, rec.Shape = vals, shape
		}
		out = append(out, rec)
	}
	return out
}

// TestNPZNumPyMatrix reads every array of the NumPy-written fixtures:
// each dtype, byte order, C and Fortran order, of rank 2 and 3, from a
// stored (numpy.savez) and a deflated (numpy.savez_compressed) archive,
// paired with labels of every dtype in turn.
func TestNPZNumPyMatrix(t *testing.T) {
	for _, file := range []string{"testdata/npy/matrix_savez.npz", "testdata/npy/matrix_compressed.npz"} {
		z, err := zip.OpenReader(file)
		if err != nil {
			t.Fatal(err)
		}
		var xs, ys []string
		for _, f := range z.File {
			k := strings.TrimSuffix(f.Name, ".npy")
			if strings.HasPrefix(k, "y_") {
				ys = append(ys, k)
			} else {
				xs = append(xs, k)
			}
		}
		z.Close()
		if len(xs) != 84 || len(ys) != 21 {
			t.Fatalf("%s: %d X and %d label arrays, want 84 and 21", file, len(xs), len(ys))
		}
		for i, x := range xs {
			y := ys[i%len(ys)]
			labels := []int{2, 0, 1}
			if strings.HasPrefix(y, "y_b1") {
				labels = []int{0, 0, 1}
			}
			spec := "npz:" + file + ":" + x + "," + y
			got, _ := openAll(t, spec)
			if want := numpyWant(x, labels); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: records\n got %+v\nwant %+v", spec, got, want)
			}
		}
	}
	// npy: big-endian, Fortran-ordered float32 X and big-endian int16 Y.
	got, _ := openAll(t, "npy:testdata/npy/x.npy,testdata/npy/y.npy")
	if want := numpyWant("x2_f4_be_f", []int{2, 0, 1}); !reflect.DeepEqual(got, want) {
		t.Errorf("npy: records\n got %+v\nwant %+v", got, want)
	}
}

// TestNPYFortranAndBlocks checks the block reader on hand-made arrays:
// Fortran order of rank 2 and 3 is transposed, a C-ordered array larger
// than one block is read across blocks, and a truncated array yields its
// complete rows before the error.
func TestNPYFortranAndBlocks(t *testing.T) {
	// Column-major [3, 2]: [[1 2] [3 4] [5 6]] is stored 1 3 5 2 4 6.
	x := npyBytes("<f4", true, []int{3, 2}, le32(1, 3, 5, 2, 4, 6))
	y := npyBytes("<i8", false, []int{3}, le64(0, 1, 2))
	r, err := newNPYReader(bytes.NewReader(x), bytes.NewReader(y), "x", "y")
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{
		{Float: []float32{1, 2}, Shape: []int{2}, Label: 0},
		{Float: []float32{3, 4}, Shape: []int{2}, Label: 1},
		{Float: []float32{5, 6}, Shape: []int{2}, Label: 2},
	}
	if got := readAll(t, r); !reflect.DeepEqual(got, want) {
		t.Errorf("Fortran [3, 2]: %+v", got)
	}
	// Column-major [2, 2, 2] big-endian int16: element (i, j, k) at
	// i + 2j + 4k holds 100i + 10j + k.
	var f3 []byte
	for k := range 2 {
		for j := range 2 {
			for i := range 2 {
				v := 100*i + 10*j + k
				f3 = append(f3, byte(v>>8), byte(v))
			}
		}
	}
	x3 := npyBytes(">i2", true, []int{2, 2, 2}, f3)
	r, err = newNPYReader(bytes.NewReader(x3), bytes.NewReader(npyBytes("|u1", false, []int{2}, []byte{1, 0})), "x", "y")
	if err != nil {
		t.Fatal(err)
	}
	want = []Record{
		{Float: []float32{0, 1, 10, 11}, Shape: []int{2, 2}, Label: 1},
		{Float: []float32{100, 101, 110, 111}, Shape: []int{2, 2}, Label: 0},
	}
	if got := readAll(t, r); !reflect.DeepEqual(got, want) {
		t.Errorf("Fortran [2, 2, 2]: %+v", got)
	}

	// 3·npyBlockSize/8 + 5 rows of one float64 cross three block
	// boundaries; the last row is cut short.
	n := 3*npyBlockSize/8 + 5
	vals := make([]float32, n)
	labels := make([]int64, n)
	for i := range vals {
		vals[i] = float32(i)
	}
	var body []byte
	for _, v := range vals {
		body = append(body, le64f(float64(v))...)
	}
	big := npyBytes("<f8", false, []int{n, 1}, body[:len(body)-1])
	r, err = newNPYReader(bytes.NewReader(big), bytes.NewReader(npyBytes("<i8", false, []int{n}, le64(labels...))), "x", "y")
	if err != nil {
		t.Fatal(err)
	}
	var rec Record
	for i := range n - 1 {
		if err := r.Next(&rec); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		if rec.Float[0] != float32(i) {
			t.Fatalf("row %d holds %v", i, rec.Float)
		}
	}
	err = r.Next(&rec)
	if err == nil || !strings.Contains(err.Error(), "x: row 393220 of 393221") || !errors.Is(err, io.ErrUnexpectedEOF) || !errors.Is(err, ErrFormat) {
		t.Errorf("truncated last row: error %v", err)
	}
}

func le64f(v float64) []byte {
	return binary.LittleEndian.AppendUint64(nil, math.Float64bits(v))
}

// storedZip returns a zip archive of the named members, uncompressed, as
// numpy.savez writes it.
func storedZip(t testing.TB, names []string, files map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, n := range names {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: n, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(files[n])
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzNPZ opens .npz archives as the npz: input does and reads their
// records.
func FuzzNPZ(f *testing.F) {
	f.Add(zipFile(f, []string{"x.npy", "y.npy"}, map[string][]byte{"x.npy": npyX, "y.npy": npyY}))
	f.Add(storedZip(f, []string{"y.npy", "x.npy"}, map[string][]byte{"x.npy": npyX, "y.npy": npyY}))
	f.Add(zipFile(f, []string{"x.npy", "y.npy"}, map[string][]byte{
		"x.npy": npyBytes(">f8", true, []int{2, 2}, be64f(1, 2, 3, 4)),
		"y.npy": npyBytes("<u2", false, []int{2}, []byte{1, 0, 0, 0}),
	}))
	f.Fuzz(func(t *testing.T, b []byte) {
		// npzReader is what Open("npz:FILE") runs on the opened
		// archive; fuzzing it directly keeps the disk out of the loop.
		z, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		r, err := npzReader(z, "f.npz", "")
		if err != nil {
			return
		}
		defer r.Close()
		checkRecords(t, r, 100)
	})
}

func be64f(v ...float64) []byte {
	var b []byte
	for _, x := range v {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(x))
	}
	return b
}
