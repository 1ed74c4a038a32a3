package logits

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestReadNumPyFixtures(t *testing.T) {
	tests := []struct {
		path string
		want File
	}{
		{"testdata/numpy_small.npz", File{
			Logits:  []float32{1.5, -2, 0.25, 0, 3, -1},
			Labels:  []int32{2, 1},
			Client:  []int32{7, 3},
			Split:   []uint8{1, 2},
			Classes: 3,
		}},
		{"testdata/numpy_f8_i4.npz", File{
			Logits:  []float32{0.5, 0.25, -1, 2, 4, 8},
			Labels:  []int32{0, 1, 1},
			Classes: 2,
		}},
		// Class names as gen.py writes them: numpy.array of str (<U6),
		// big-endian UCS-4 deflated (>U6), and bytes (|S4).
		{"testdata/numpy_classes_u.npz", File{
			Logits:     []float32{0.5, -1, 2, 1, 0, -3},
			Labels:     []int32{2, 0},
			Classes:    3,
			ClassNames: []string{"cat", "dög", "\U0001F426 bird"},
		}},
		{"testdata/numpy_classes_be.npz", File{
			Logits:     []float32{0.5, -1, 2, 1, 0, -3},
			Labels:     []int32{2, 0},
			Classes:    3,
			ClassNames: []string{"cat", "dög", "\U0001F426 bird"},
		}},
		{"testdata/numpy_classes_s.npz", File{
			Logits:     []float32{0.5, -1, 2, 1, 0, -3},
			Labels:     []int32{2, 0},
			Classes:    3,
			ClassNames: []string{"cat", "dog", "bird"},
		}},
	}
	for _, tt := range tests {
		got, err := Read(tt.path)
		if err != nil {
			t.Fatalf("Read(%s): %v", tt.path, err)
		}
		if !reflect.DeepEqual(*got, tt.want) {
			t.Errorf("Read(%s) = %+v, want %+v", tt.path, *got, tt.want)
		}
	}
}

// TestReadDtypeMatrix reads the NumPy-written matrix of gen.py: float32
// and float64 logits, little- and big-endian, C and Fortran order, stored
// and deflated, with integer columns of every integer dtype.
func TestReadDtypeMatrix(t *testing.T) {
	full := File{
		Logits:  []float32{1.5, -2, 0.25, 4, 0, 3, -1, 0.5, -8, 16, 0.125, 2},
		Labels:  []int32{2, 1, 3},
		Client:  []int32{7, 3, 0},
		Split:   []uint8{1, 2, 0},
		Classes: 4,
	}
	bare := full
	bare.Client, bare.Split = nil, nil
	n := 0
	for _, ftype := range []string{"f4", "f8"} {
		for _, order := range []string{"le", "be"} {
			for _, layout := range []string{"c", "f"} {
				for _, save := range []string{"savez", "compressed"} {
					path := fmt.Sprintf("testdata/matrix_%s_%s_%s_%s.npz", ftype, order, layout, save)
					want := bare
					if n%2 == 0 { // gen.py adds client and split to every other file
						want = full
					}
					n++
					got, err := Read(path)
					if err != nil {
						t.Errorf("Read(%s): %v", path, err)
						continue
					}
					if !reflect.DeepEqual(*got, want) {
						t.Errorf("Read(%s) = %+v, want %+v", path, *got, want)
					}
				}
			}
		}
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	want := &File{
		Logits:  []float32{1, 2, 3, -4, 5.5, 6e-3, 1e4, -1e4, 0},
		Labels:  []int32{0, 2, 1},
		Client:  []int32{0, 0, 5},
		Split:   []uint8{0, 1, 2},
		Classes: 3,
	}
	path := filepath.Join(dir, "l.npz")
	if err := Write(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip: got %+v, want %+v", got, want)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after Write, want 1 (no temp files)", len(entries))
	}
}

// TestNPYHeader checks the header bytes against the .npy format
// specification by hand: magic, version 1.0, little-endian length, a dict
// padded with spaces and ending in a newline at a multiple of 64 bytes.
func TestNPYHeader(t *testing.T) {
	h := npyHeader("<f4", []int{2, 3})
	dict := "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
	// 10 prefix bytes + 59 dict bytes + padding + newline = 128.
	if len(dict) != 59 || len(h) != 128 {
		t.Fatalf("header length %d, want 128", len(h))
	}
	if !bytes.HasPrefix(h, []byte("\x93NUMPY\x01\x00")) {
		t.Errorf("bad magic/version % x", h[:8])
	}
	if n := int(h[8]) | int(h[9])<<8; n != 118 {
		t.Errorf("header length field %d, want 118", n)
	}
	if got := string(h[10:]); got != dict+strings.Repeat(" ", 118-59-1)+"\n" {
		t.Errorf("header dict %q", got)
	}
	if got := string(npyHeader("<i8", []int{5})[10:]); !strings.HasPrefix(got, "{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }") {
		t.Errorf("1-D header dict %q", got)
	}
}

// TestNumPyReadsOurFile checks with NumPy itself, when it is installed,
// that a file we write is what NumPy reads.
func TestNumPyReadsOurFile(t *testing.T) {
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil || exec.Command(py, "-c", "import numpy").Run() != nil {
		t.Skip("NumPy not available: skipping the cross-check with numpy.load")
	}
	path := filepath.Join(t.TempDir(), "l.npz")
	f := &File{Logits: []float32{0.5, -1.25, 2, 3}, Labels: []int32{1, 0}, Split: []uint8{2, 1}, Classes: 2,
		ClassNames: []string{"tabby cat", "dög"}}
	if err := Write(path, f); err != nil {
		t.Fatal(err)
	}
	script := `import numpy as np, sys
d = np.load(sys.argv[1])
print(sorted(d.files), d["logits"].dtype, d["logits"].shape, d["logits"].tolist(), d["labels"].dtype, d["labels"].tolist(), d["split"].dtype, d["split"].tolist(), d["classes"].dtype, d["classes"].tolist())`
	out, err := exec.Command(py, "-c", script, path).CombinedOutput()
	if err != nil {
		t.Fatalf("numpy: %v\n%s", err, out)
	}
	want := "['classes', 'labels', 'logits', 'split'] float32 (2, 2) [[0.5, -1.25], [2.0, 3.0]] int64 [1, 0] uint8 [2, 1] <U9 ['tabby cat', 'dög']\n"
	if string(out) != want {
		t.Errorf("numpy read\n%s want\n%s", out, want)
	}

	// And the other way: what this NumPy's numpy.savez makes of a list
	// of str, we read.
	path = filepath.Join(t.TempDir(), "np.npz")
	script = `import numpy as np, sys
np.savez(sys.argv[1], logits=np.zeros((1, 2), dtype=np.float32), labels=np.array([1]), classes=np.array(["a", "bé"]))`
	if out, err := exec.Command(py, "-c", script, path).CombinedOutput(); err != nil {
		t.Fatalf("numpy: %v\n%s", err, out)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "bé"}; !reflect.DeepEqual(got.ClassNames, want) {
		t.Errorf("class names %q from numpy.savez, want %q", got.ClassNames, want)
	}
}

// TestClassNamesRoundTrip checks that Write then Read gives back the class
// names unchanged, whatever their length and script, and that a file
// without names reads back without them.
func TestClassNamesRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for i, names := range [][]string{
		nil,
		{"0", "1", "2"},
		{"a", "a much longer name", "é"},
		{"\U0001F426", "猫", " padded "},
	} {
		f := &File{Logits: []float32{1, 2, 3, 4, 5, 6}, Labels: []int32{2, 0}, Classes: 3, ClassNames: names}
		path := filepath.Join(dir, fmt.Sprintf("%d.npz", i))
		if err := Write(path, f); err != nil {
			t.Fatal(err)
		}
		got, err := Read(path)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, f) {
			t.Errorf("names %q: read back %+v, want %+v", names, got, f)
		}
	}
}

func TestRowsAndSet(t *testing.T) {
	f := &File{
		Logits:  []float32{1, 2, 3, 4, 5, 6},
		Labels:  []int32{1, 0, 1},
		Split:   []uint8{1, 2, 1},
		Classes: 2,
	}
	if got := f.Rows(SplitCalibration); !reflect.DeepEqual(got, []int{0, 2}) {
		t.Errorf("Rows(calibration) = %v", got)
	}
	if got := f.Rows(AllRows); !reflect.DeepEqual(got, []int{0, 1, 2}) {
		t.Errorf("Rows(all) = %v", got)
	}
	s := f.Set([]int{2, 1})
	if !reflect.DeepEqual(s.Logits, []float64{5, 6, 3, 4}) || !reflect.DeepEqual(s.Labels, []int{1, 0}) || s.Classes != 2 {
		t.Errorf("Set = %+v", s)
	}
	f.Split = nil
	if got := f.Rows(SplitTest); len(got) != 3 {
		t.Errorf("Rows without a split column = %v, want every row", got)
	}
}

func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, f *File) string {
		var buf bytes.Buffer
		if err := Encode(&buf, f); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notZip := filepath.Join(dir, "junk.npz")
	os.WriteFile(notZip, []byte("not a zip"), 0o644)
	nan := float32(0)
	nan /= nan
	tests := []struct {
		path string
		want string
	}{
		{notZip, "not a NumPy .npz archive"},
		{filepath.Join(dir, "missing.npz"), "no such file"},
		{write("nan.npz", &File{Logits: []float32{nan, 1}, Labels: []int32{0}, Classes: 2}), "must be finite"},
		{write("label.npz", &File{Logits: []float32{0, 1}, Labels: []int32{2}, Classes: 2}), "outside [0, 2)"},
		{write("split.npz", &File{Logits: []float32{0, 1}, Labels: []int32{0}, Split: []uint8{3}, Classes: 2}), "split: row 0 is 3"},
		{write("names.npz", &File{Logits: []float32{0, 1}, Labels: []int32{0}, Classes: 2, ClassNames: []string{"a", "a"}}), "both named \"a\""},
	}
	for _, tt := range tests {
		_, err := Read(tt.path)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.path) {
			t.Errorf("Read(%s) error = %v, want it to name the file and contain %q", filepath.Base(tt.path), err, tt.want)
		}
	}
	// Write refuses mismatched lengths and leaves nothing behind.
	bad := filepath.Join(dir, "bad-write.npz")
	if err := Write(bad, &File{Logits: []float32{1, 2, 3}, Labels: []int32{0}, Classes: 2}); err == nil {
		t.Error("Write accepted 3 logits for 1 row of 2 classes")
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Error("Write left a file behind after an error")
	}
}

func FuzzRead(f *testing.F) {
	seeds, err := filepath.Glob("testdata/*.npz")
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// decode is Read after opening the file; fuzzing it directly
		// keeps the disk out of the loop.
		got, err := decode(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("Read returned an invalid file: %v", err)
		}
		// Blocks reads the same rows from what Read accepts.
		rows, err := readBlocks(t, b, 3)
		if err != nil {
			t.Fatalf("Read accepts the file, Blocks does not: %v", err)
		}
		want := *got
		want.Client, want.ClassNames = nil, nil
		if !reflect.DeepEqual(rows, &want) {
			t.Fatalf("Blocks read %+v, Read %+v", rows, want)
		}
		// What Read accepts, Encode writes back to the same file,
		// class names included.
		var buf bytes.Buffer
		if err := Encode(&buf, got); err != nil {
			t.Fatalf("Encode: %v", err)
		}
		back, err := decode(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
		if err != nil || !reflect.DeepEqual(back, got) {
			t.Fatalf("re-encoded file reads back as %+v, %v; want %+v", back, err, got)
		}
	})
}

// TestInputRoundTrip checks the optional "input" array: Write then Read
// gives back what it records (and nothing when it records nothing), the
// Archive reads it alone, NumPy reads it as the one-string array
// numpy.array(["probabilities"]) is, and an unknown kind is refused.
func TestInputRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, in := range []string{"", InputLogits, InputProbabilities} {
		f := &File{Logits: []float32{0.25, 0.75, 1, 0}, Labels: []int32{1, 0}, Classes: 2, Input: in}
		path := filepath.Join(dir, "f"+in+".npz")
		if err := Write(path, f); err != nil {
			t.Fatal(err)
		}
		got, err := Read(path)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, f) {
			t.Errorf("input %q: read back %+v", in, got)
		}
		a, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := a.Input(); v != in || err != nil {
			t.Errorf("Archive.Input = %q, %v; want %q", v, err, in)
		}
		a.Close()
		if py, err := exec.LookPath("/usr/bin/python3"); in != "" && err == nil && exec.Command(py, "-c", "import numpy").Run() == nil {
			out, err := exec.Command(py, "-c", `import numpy as np, sys; d = np.load(sys.argv[1]); print(d["input"].dtype, d["input"].tolist())`, path).CombinedOutput()
			if want := fmt.Sprintf("<U%d ['%s']\n", len(in), in); err != nil || string(out) != want {
				t.Errorf("numpy reads input as %q (%v), want %q", out, err, want)
			}
		}
	}
	bad := &File{Logits: []float32{1, 0}, Labels: []int32{0}, Classes: 2, Input: "odds"}
	if err := Write(filepath.Join(dir, "bad.npz"), bad); err == nil || !strings.Contains(err.Error(), `input: "odds"`) {
		t.Errorf("Write of input odds: %v", err)
	}
}
