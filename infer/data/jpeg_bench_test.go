package data

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkJPEGDecode decodes JPEGs in memory as the imagefolder reader
// does, one reader, one image at a time, and reports images/s:
//
//   - cifar10: the first 2,000 JPEGs of the CIFAR-10 ImageFolder archive
//     (32×32), when the shared data folder is present;
//   - 32x32: one 32×32 4:2:0 JPEG of quality 75 encoded here;
//   - 1600x1200: infer's parity image rgb420_1600x1200.jpg (PIL, 4:2:0).
//
// The file uses only what the decoder had before and after its move to
// libjpeg-turbo, so bench/jpeg.sh runs it against both.
func BenchmarkJPEGDecode(b *testing.B) {
	small := func(b *testing.B) [][]byte {
		m := image.NewRGBA(image.Rect(0, 0, 32, 32))
		for y := range 32 {
			for x := range 32 {
				m.Set(x, y, color.RGBA{uint8(8 * x), uint8(8 * y), uint8(128 + 3*(x^y)), 255})
			}
		}
		var buf bytes.Buffer
		if err := jpeg.Encode(&buf, m, &jpeg.Options{Quality: 75}); err != nil {
			b.Fatal(err)
		}
		return [][]byte{buf.Bytes()}
	}
	large := func(b *testing.B) [][]byte {
		data, err := os.ReadFile(filepath.Join("..", "testdata", "parity", "images", "jpeg", "rgb420_1600x1200.jpg"))
		if err != nil {
			b.Fatal(err)
		}
		return [][]byte{data}
	}
	for _, tc := range []struct {
		name  string
		files func(*testing.B) [][]byte
	}{
		{"cifar10", cifarJPEGs},
		{"32x32", small},
		{"1600x1200", large},
	} {
		b.Run(tc.name, func(b *testing.B) {
			files := tc.files(b)
			r := &imageFolder{br: bufio.NewReaderSize(nil, 1<<16)}
			defer r.Close()
			var rec Record
			rd := bytes.NewReader(nil)
			i := 0
			for b.Loop() {
				rd.Reset(files[i%len(files)])
				if err := r.decode(&rec, "x.jpg", rd); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "images/s")
		})
	}
}

// cifarJPEGs returns the first 2,000 JPEGs of the shared CIFAR-10
// ImageFolder archive, or skips.
func cifarJPEGs(b *testing.B) [][]byte {
	f, err := os.Open(sharedData(b, "cifar10-jpeg.tar.gz"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		b.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var files [][]byte
	for len(files) < 2000 {
		h, err := tr.Next()
		if err != nil {
			b.Fatal(err)
		}
		if !strings.HasSuffix(h.Name, ".jpg") {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			b.Fatal(err)
		}
		files = append(files, data)
	}
	return files
}
