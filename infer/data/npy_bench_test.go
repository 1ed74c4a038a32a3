package data

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"testing"
)

// BenchmarkNPZ streams every record of an .npz input through Open and
// Next: 60,000 MNIST-sized uint8 images (47 MB, read as images) and
// 100,000 rows of 64 float32 features (25.6 MB, read as Float), each
// stored (numpy.savez) and deflated (numpy.savez_compressed).
func BenchmarkNPZ(b *testing.B) {
	images := make([]byte, 60000*28*28)
	for i := range images {
		images[i] = byte(i * 7 % 251)
	}
	floats := make([]byte, 0, 4*100000*64)
	for i := range 100000 * 64 {
		floats = binary.LittleEndian.AppendUint32(floats, math.Float32bits(float32(i%1000)/7))
	}
	labels := func(n int) []byte {
		out := make([]byte, 0, 8*n)
		for i := range n {
			out = binary.LittleEndian.AppendUint64(out, uint64(i%10))
		}
		return out
	}
	dir := b.TempDir()
	for _, tc := range []struct {
		name string
		x    []byte
		n    int
	}{
		{"images", npyBytes("|u1", false, []int{60000, 28, 28}, images), 60000},
		{"float32", npyBytes("<f4", false, []int{100000, 64}, floats), 100000},
	} {
		files := map[string][]byte{"x.npy": tc.x, "y.npy": npyBytes("<i8", false, []int{tc.n}, labels(tc.n))}
		names := []string{"x.npy", "y.npy"}
		for _, method := range []uint16{zip.Store, zip.Deflate} {
			var buf bytes.Buffer
			zw := zip.NewWriter(&buf)
			for _, n := range names {
				w, err := zw.CreateHeader(&zip.FileHeader{Name: n, Method: method})
				if err != nil {
					b.Fatal(err)
				}
				w.Write(files[n])
			}
			if err := zw.Close(); err != nil {
				b.Fatal(err)
			}
			kind := "savez"
			if method == zip.Deflate {
				kind = "savez_compressed"
			}
			p := writeFile(b, dir, tc.name+"-"+kind+".npz", buf.Bytes())
			b.Run(tc.name+"/"+kind, func(b *testing.B) {
				b.SetBytes(int64(len(tc.x)))
				for b.Loop() {
					r, err := Open("npz:" + p)
					if err != nil {
						b.Fatal(err)
					}
					var rec Record
					n := 0
					for {
						err := r.Next(&rec)
						if err == io.EOF {
							break
						}
						if err != nil {
							b.Fatal(err)
						}
						n++
					}
					r.Close()
					if n != tc.n {
						b.Fatalf("%d records, want %d", n, tc.n)
					}
				}
			})
		}
	}
}
