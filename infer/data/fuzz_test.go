package data

import (
	"bufio"
	"bytes"
	"errors"
	"image"
	pngenc "image/png"
	"io"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

// checkRecords reads up to limit records of r and checks the invariants
// every record satisfies; a reader may fail, but only with an error that
// wraps ErrFormat, never by panicking.
func checkRecords(t *testing.T, r Reader, limit int) {
	t.Helper()
	classes := r.Classes()
	var rec Record
	for range limit {
		err := r.Next(&rec)
		if err != nil {
			if err != io.EOF && !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		n := 0
		switch {
		case rec.Image != nil:
			n = len(rec.Image)
		case rec.Float != nil:
			n = len(rec.Float)
		}
		if rec.Image != nil || rec.Float != nil {
			size := 1
			for _, d := range rec.Shape {
				size *= d
			}
			if size != n {
				t.Fatalf("%d values for shape %v", n, rec.Shape)
			}
		}
		if rec.Label < 0 || (classes != nil && rec.Label >= len(classes)) {
			t.Fatalf("label %d outside %d classes", rec.Label, len(classes))
		}
	}
}

func FuzzIDX(f *testing.F) {
	images, labels := threeImages()
	f.Add(images, labels)
	f.Add(idxFile([]int{2, 1, 2, 3}, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}), idxFile([]int{2}, []byte{1, 2}))
	f.Add(idxFile([]int{1, 1 << 15, 1 << 15}, nil), idxFile([]int{1}, []byte{1}))
	f.Fuzz(func(t *testing.T, images, labels []byte) {
		r, err := newIDXReader(bytes.NewReader(images), bytes.NewReader(labels), "i", "l", digitClasses)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		checkRecords(t, r, 100)
	})
}

func FuzzCIFAR(f *testing.F) {
	f.Add(append(cifarRecord(0, 3), cifarRecord(1, 9)...), false)
	f.Add(cifarRecord(0, 5, 42), true)
	f.Add([]byte{1, 2, 3}, false)
	f.Fuzz(func(t *testing.T, data []byte, hundred bool) {
		format := cifar10
		if hundred {
			format = cifar100
		}
		r := newCIFARReader(format, &byteFiles{names: []string{"b"}, data: [][]byte{data}}, -1)
		checkRecords(t, r, 100)
	})
}

func FuzzLEAF(f *testing.F) {
	for _, name := range []string{"testdata/leaf/femnist/test/shard_0.json", "testdata/leaf/shakespeare/test/shard_0.json"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"user_data": {"u1": {"x": [[0.5, -1e-1], [2, 3]], "y": [4, 0]}}, "extra": {"a": [1, {"b": []}]}}`))
	f.Add([]byte(`{"users": ["u"], "user_data": {"u": {"x": ["abc", "de\"f"], "y": ["a", "}"]}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := newLEAFReader(&byteFiles{names: []string{"f.json"}, data: [][]byte{data}})
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		checkRecords(t, r, 1000)
	})
}

func FuzzSpeakers(f *testing.F) {
	b, err := os.ReadFile("testdata/speakers.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte("A:\r\nx\r\n\r\nB:\n" + string(bytes.Repeat([]byte("é y"), 40))))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := newSpeakers(bytes.NewReader(data), int64(len(data)), "s.txt")
		if err != nil {
			return
		}
		r := &textReader{src: s}
		var rec Record
		for range 1000 {
			if err := r.Next(&rec); err != nil {
				return
			}
			if n := utf8.RuneCountInString(rec.Text); n != WindowLen || rec.Client == "" || rec.Label < 0 || rec.Label >= 80 {
				t.Fatalf("window of %d characters, client %q, label %d", n, rec.Client, rec.Label)
			}
		}
	})
}

func FuzzNPY(f *testing.F) {
	f.Add(npyX, npyY)
	f.Add(npyBytes("|u1", false, []int{2, 2, 2}, []byte{10, 20, 30, 40, 50, 60, 70, 80}), npyBytes("<i4", false, []int{2, 1}, []byte{3, 0, 0, 0, 7, 0, 0, 0}))
	f.Add(npyBytes("<f2", true, []int{1, 3}, []byte{0, 0x3c, 0, 0xc0, 0, 0x38}), npyBytes(">f8", false, []int{1}, []byte{0x40, 0x14, 0, 0, 0, 0, 0, 0}))
	f.Fuzz(func(t *testing.T, x, y []byte) {
		r, err := newNPYReader(bytes.NewReader(x), bytes.NewReader(y), "x", "y")
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		checkRecords(t, r, 100)
	})
}

// FuzzImage checks that no PNG or JPEG input makes the image decoder
// panic or crash libjpeg-turbo, and that every failure wraps ErrFormat;
// the seeds are the JPEG fixtures. Images are limited to 2²⁰ pixels so
// that inputs declaring large images stay fast.
func FuzzImage(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "jpeg", "*.jpg"))
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	var png bytes.Buffer
	m := image.NewNRGBA(image.Rect(0, 0, 3, 2))
	for i := range m.Pix {
		m.Pix[i] = uint8(40 * i)
	}
	if err := pngenc.Encode(&png, m); err != nil {
		f.Fatal(err)
	}
	f.Add(png.Bytes())
	r := &imageFolder{br: bufio.NewReaderSize(nil, 1<<16), maxPixels: 1 << 20}
	f.Cleanup(func() { r.Close() })
	f.Fuzz(func(t *testing.T, b []byte) {
		var rec Record
		if err := r.decode(&rec, "f", bytes.NewReader(b)); err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		if len(rec.Shape) != 3 || rec.Shape[2] != 3 || len(rec.Image) != rec.Shape[0]*rec.Shape[1]*3 {
			t.Fatalf("shape %v, %d bytes", rec.Shape, len(rec.Image))
		}
	})
}
