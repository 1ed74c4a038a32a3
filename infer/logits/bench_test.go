package logits

import (
	"archive/zip"
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// benchFile returns a logits file of n rows of c classes with random
// logits, labels and a split column.
func benchFile(n, c int) *File {
	rng := rand.New(rand.NewPCG(1, 2))
	f := &File{
		Logits:  make([]float32, n*c),
		Labels:  make([]int32, n),
		Split:   make([]uint8, n),
		Classes: c,
	}
	for i := range f.Logits {
		f.Logits[i] = float32(rng.NormFloat64() * 3)
	}
	for i := range f.Labels {
		f.Labels[i] = int32(rng.IntN(c))
		f.Split[i] = uint8(rng.IntN(3))
	}
	return f
}

// deflate rewrites a stored .npz archive with every member deflated, as
// numpy.savez_compressed writes it.
func deflate(tb testing.TB, stored []byte) []byte {
	tb.Helper()
	zr, err := zip.NewReader(bytes.NewReader(stored), int64(len(stored)))
	if err != nil {
		tb.Fatal(err)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, zf := range zr.File {
		r, err := zf.Open()
		if err != nil {
			tb.Fatal(err)
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: zf.Name, Method: zip.Deflate})
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := io.Copy(w, r); err != nil {
			tb.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// TestDeflatedRoundTrip reads a deflated archive of the benchmark's kind.
func TestDeflatedRoundTrip(t *testing.T) {
	want := benchFile(3000, 7)
	var buf bytes.Buffer
	if err := Encode(&buf, want); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "d.npz")
	if err := os.WriteFile(p, deflate(t, buf.Bytes()), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Error("deflated round trip differs")
	}
}

// BenchmarkRead reads a 10⁵ × 10 logits file (4.9 MB of arrays), stored
// as numpy.savez writes it and deflated as numpy.savez_compressed does.
func BenchmarkRead(b *testing.B) {
	f := benchFile(100000, 10)
	var buf bytes.Buffer
	if err := Encode(&buf, f); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"savez", buf.Bytes()},
		{"savez_compressed", deflate(b, buf.Bytes())},
	} {
		p := filepath.Join(dir, tc.name+".npz")
		if err := os.WriteFile(p, tc.data, 0o644); err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(4*len(f.Logits) + 9*len(f.Labels)))
			for b.Loop() {
				if _, err := Read(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWrite encodes a 10⁵ × 10 logits file.
func BenchmarkWrite(b *testing.B) {
	f := benchFile(100000, 10)
	var buf bytes.Buffer
	b.SetBytes(int64(4*len(f.Logits) + 9*len(f.Labels)))
	for b.Loop() {
		buf.Reset()
		if err := Encode(&buf, f); err != nil {
			b.Fatal(err)
		}
	}
}
