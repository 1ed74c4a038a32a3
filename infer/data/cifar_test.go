package data

import (
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// cifarRecord returns one binary CIFAR record with the given label bytes
// and pixels plane[c][p] = c*50 + (p+k)%7 in the file's channel-major
// order.
func cifarRecord(k int, labels ...byte) []byte {
	b := append([]byte(nil), labels...)
	for c := range 3 {
		for p := range 1024 {
			b = append(b, byte(c*50+(p+k)%7))
		}
	}
	return b
}

// checkCIFARPixels checks the HWC pixels of record k against the formula
// of cifarRecord at a few positions worked out by hand.
func checkCIFARPixels(t *testing.T, rec Record, k int) {
	t.Helper()
	if !slices.Equal(rec.Shape, []int{32, 32, 3}) || len(rec.Image) != 3072 {
		t.Fatalf("shape %v, %d bytes; want [32 32 3], 3072", rec.Shape, len(rec.Image))
	}
	// Pixel (y=1, x=2) is p = 34; in HWC it starts at byte 3*34 = 102.
	// (34+0)%7 = 6 and (34+1)%7 = 0.
	want := map[int][3]byte{0: {6, 56, 106}, 1: {0, 50, 100}}[k]
	if got := [3]byte(rec.Image[102:105]); got != want {
		t.Errorf("record %d pixel (1,2) = %v, want %v", k, got, want)
	}
	// The last pixel, p = 1023: (1023+k)%7 is 1 for k = 0 and 2 for k = 1.
	last := map[int][3]byte{0: {1, 51, 101}, 1: {2, 52, 102}}[k]
	if got := [3]byte(rec.Image[3069:]); got != last {
		t.Errorf("record %d last pixel = %v, want %v", k, got, last)
	}
}

func TestCIFAR10(t *testing.T) {
	dir := t.TempDir()
	batches := filepath.Join(dir, "cifar-10-batches-bin")
	writeFile(t, batches, "data_batch_1.bin", cifarRecord(0, 3))
	writeFile(t, batches, "data_batch_2.bin", cifarRecord(1, 9))
	writeFile(t, batches, "test_batch.bin", cifarRecord(1, 0))
	writeFile(t, batches, "batches.meta.txt", []byte("airplane\n"))
	files := map[string][]byte{
		"cifar-10-batches-bin/data_batch_1.bin": cifarRecord(0, 3),
		"cifar-10-batches-bin/data_batch_2.bin": cifarRecord(1, 9),
		"cifar-10-batches-bin/test_batch.bin":   cifarRecord(1, 0),
	}
	archive := writeFile(t, dir, "cifar-10-binary.tar.gz", tarGz(t, []string{
		"cifar-10-batches-bin/data_batch_1.bin", "cifar-10-batches-bin/test_batch.bin", "cifar-10-batches-bin/data_batch_2.bin",
	}, files))
	single := filepath.Join(batches, "data_batch_2.bin")
	for _, tc := range []struct {
		spec   string
		labels []int
		pixels []int // the k of each record
		n      int   // Len
	}{
		{"cifar10:" + dir, []int{3, 9}, []int{0, 1}, 2},
		{"cifar10:" + batches + ":train", []int{3, 9}, []int{0, 1}, 2},
		{"cifar10:" + dir + ":test", []int{0}, []int{1}, 1},
		{"cifar10:" + archive, []int{3, 9}, []int{0, 1}, -1},
		{"cifar10:" + archive + ":test", []int{0}, []int{1}, -1},
		{"cifar10:" + single, []int{9}, []int{1}, 1},
		{single, []int{9}, []int{1}, 1},
		{dir, []int{3, 9}, []int{0, 1}, 2},
	} {
		r, err := Open(tc.spec)
		if err != nil {
			t.Fatalf("Open(%q): %v", tc.spec, err)
		}
		if n := r.(Sized).Len(); n != tc.n {
			t.Errorf("%s: Len = %d, want %d", tc.spec, n, tc.n)
		}
		if c := r.Classes(); len(c) != 10 || c[0] != "airplane" || c[9] != "truck" {
			t.Errorf("%s: classes %q", tc.spec, c)
		}
		got := readAll(t, r)
		if len(got) != len(tc.labels) {
			t.Fatalf("%s: %d records, want %d", tc.spec, len(got), len(tc.labels))
		}
		for i, rec := range got {
			if rec.Label != tc.labels[i] || rec.Client != "" {
				t.Errorf("%s: record %d label %d client %q, want %d and no client", tc.spec, i, rec.Label, rec.Client, tc.labels[i])
			}
			checkCIFARPixels(t, rec, tc.pixels[i])
		}
	}
}

func TestCIFAR100(t *testing.T) {
	dir := t.TempDir()
	// Coarse label 5, fine label 42; then coarse 19, fine 99.
	writeFile(t, dir, "cifar-100-binary/train.bin", append(cifarRecord(0, 5, 42), cifarRecord(1, 19, 99)...))
	writeFile(t, dir, "cifar-100-binary/test.bin", cifarRecord(1, 0, 7))
	got, classes := openAll(t, "cifar100:"+dir)
	if len(got) != 2 || got[0].Label != 42 || got[1].Label != 99 {
		t.Fatalf("records %d, labels want 42, 99: %+v", len(got), got)
	}
	checkCIFARPixels(t, got[0], 0)
	checkCIFARPixels(t, got[1], 1)
	if len(classes) != 100 || !slices.IsSorted(classes) || classes[42] != "leopard" || classes[99] != "worm" {
		t.Errorf("classes: %d, sorted %v, [42] %q, [99] %q", len(classes), slices.IsSorted(classes), classes[42], classes[99])
	}
	got, _ = openAll(t, "cifar100:"+dir+":test")
	if len(got) != 1 || got[0].Label != 7 {
		t.Errorf("test split: %+v", got)
	}
}

func TestCIFARErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    *cifarFormat
		data []byte
		msg  string
		eof  bool
	}{
		{"truncated", cifar10, cifarRecord(0, 1)[:3000], "record 0 is truncated (3000 of 3073 bytes", true},
		{"second truncated", cifar10, append(cifarRecord(0, 1), 2), "record 1 is truncated (1 of 3073", true},
		{"label 10", cifar10, cifarRecord(0, 10), "label 10, want below 10 (is this a cifar10 file?)", false},
		{"fine label 100", cifar100, cifarRecord(0, 1, 100), "label 100, want below 100", false},
		{"empty", cifar10, nil, "empty batch file", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCIFARReader(tc.f, &byteFiles{names: []string{"batch.bin"}, data: [][]byte{tc.data}}, -1)
			_, err := drain(r, 10)
			if err == nil || !strings.Contains(err.Error(), "batch.bin: ") || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want one naming batch.bin and containing %q", err, tc.msg)
			}
			if !errors.Is(err, ErrFormat) || errors.Is(err, io.ErrUnexpectedEOF) != tc.eof {
				t.Errorf("error %v: wraps ErrFormat %v, io.ErrUnexpectedEOF %v (want %v)", err, errors.Is(err, ErrFormat), errors.Is(err, io.ErrUnexpectedEOF), tc.eof)
			}
		})
	}

	dir := t.TempDir()
	writeFile(t, dir, "x.bin", cifarRecord(0, 1))
	for _, tc := range []struct{ spec, msg string }{
		{"cifar10:" + dir, "no cifar10 training batches"},
		{"cifar10:" + filepath.Join(dir, "x.bin") + ":test", "a single batch file takes no split"},
		{"cifar100:" + filepath.Join(dir, "none"), "no such file"},
	} {
		if _, err := Open(tc.spec); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Open(%q) error %v, want one containing %q", tc.spec, err, tc.msg)
		}
	}
}
