//go:build ignore

// Command gen writes the binary and generated fixtures of package data's
// tests. Run it from infer/data with
//
//	go run testdata/gen.go
//
// The tests check the fixtures' content against values written by hand in
// the tests, not against this program.
package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
)

func main() {
	images := map[string][]byte{
		"cat/a.png":     encodePNG(rgb2x2()),
		"cat/b.png":     encodePNG(gray2x2()),
		"dog/c.png":     encodePNG(alpha2x2()),
		"dog/sub/d.jpg": encodeJPEG(flat2x2()),
	}
	order := []string{"cat/a.png", "cat/b.png", "dog/c.png", "dog/sub/d.jpg"}
	for _, name := range order {
		write(filepath.Join("testdata/imagefolder", name), images[name])
	}
	write("testdata/imagefolder/dog/notes.txt", []byte("not an image; ignored\n"))
	write("testdata/imagefolder/README", []byte("a file at the root belongs to no class\n"))

	// The archive lists dog before cat, so that labels must come from the
	// sorted class names, not from the archive order.
	var tb bytes.Buffer
	gz := gzip.NewWriter(&tb)
	tw := tar.NewWriter(gz)
	mtime := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	add := func(name string, data []byte) {
		h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: mtime, Typeflag: tar.TypeReg}
		if data == nil {
			h.Typeflag, h.Mode, h.Name = tar.TypeDir, 0o755, name+"/"
		}
		check(tw.WriteHeader(h))
		_, err := tw.Write(data)
		check(err)
	}
	add("./train", nil)
	add("./train/dog", nil)
	add("./train/dog/c.png", images["dog/c.png"])
	add("./train/dog/sub/d.jpg", images["dog/sub/d.jpg"])
	add("./train/cat/a.png", images["cat/a.png"])
	add("./train/cat/b.png", images["cat/b.png"])
	add("./train/cat/notes.txt", []byte("ignored\n"))
	add("./test/bird/a.png", images["cat/a.png"])
	check(tw.Close())
	check(gz.Close())
	write("testdata/imagefolder.tgz", tb.Bytes())

	write("testdata/leaf/femnist/train/shard_0.json", []byte(femnistJSON()))
	write("testdata/leaf/femnist/test/shard_0.json", []byte(femnistTestJSON()))
}

// rgb2x2 has a red, a green, a blue and a (10,20,30) pixel.
func rgb2x2() image.Image {
	m := image.NewRGBA(image.Rect(0, 0, 2, 2))
	m.Set(0, 0, color.RGBA{255, 0, 0, 255})
	m.Set(1, 0, color.RGBA{0, 255, 0, 255})
	m.Set(0, 1, color.RGBA{0, 0, 255, 255})
	m.Set(1, 1, color.RGBA{10, 20, 30, 255})
	return m
}

// gray2x2 is a gray image 0, 64 / 128, 255.
func gray2x2() image.Image {
	m := image.NewGray(image.Rect(0, 0, 2, 2))
	m.Pix = []uint8{0, 64, 128, 255}
	return m
}

// alpha2x2 has non-opaque pixels: (100,150,200,128) everywhere except a
// transparent (7,8,9,0) at (1,1).
func alpha2x2() image.Image {
	m := image.NewNRGBA(image.Rect(0, 0, 2, 2))
	for i := range 4 {
		copy(m.Pix[4*i:], []uint8{100, 150, 200, 128})
	}
	copy(m.Pix[12:], []uint8{7, 8, 9, 0})
	return m
}

// flat2x2 is a uniform (200,100,50) image.
func flat2x2() image.Image {
	m := image.NewRGBA(image.Rect(0, 0, 2, 2))
	for i := range 4 {
		copy(m.Pix[4*i:], []uint8{200, 100, 50, 255})
	}
	return m
}

func encodePNG(m image.Image) []byte {
	var b bytes.Buffer
	check(png.Encode(&b, m))
	return b.Bytes()
}

func encodeJPEG(m image.Image) []byte {
	var b bytes.Buffer
	check(jpeg.Encode(&b, m, &jpeg.Options{Quality: 100}))
	return b.Bytes()
}

// femnistX returns 784 values, all 1 except x[0] = 0, x[29] = 0.25 and
// x[783] = v.
func femnistX(v string) string {
	x := make([]string, 784)
	for i := range x {
		x[i] = "1.0"
	}
	x[0], x[29], x[783] = "0.0", "0.25", v
	return "[" + strings.Join(x, ", ") + "]"
}

// femnistJSON is a LEAF file with an extra key before user_data, users
// listed in another order than user_data's, and a user without samples.
func femnistJSON() string {
	return fmt.Sprintf(`{"users": ["f_b", "f_a", "f_empty"], "num_samples": [1, 2, 0],
 "hierarchies": [{"deep": [1, [2, {"x": 3}]]}],
 "user_data": {
  "f_a": {"x": [%s, %s], "y": [61, 0]},
  "f_empty": {"x": [], "y": []},
  "f_b": {"y": [10], "x": [%s]}
 }}
`, femnistX("0.5"), femnistX("0.125"), femnistX("0.75"))
}

func femnistTestJSON() string {
	return fmt.Sprintf(`{"users": ["f_a"], "num_samples": [1], "user_data": {"f_a": {"x": [%s], "y": [36]}}}
`, femnistX("1e-1"))
}

func write(name string, data []byte) {
	check(os.MkdirAll(filepath.Dir(name), 0o755))
	check(os.WriteFile(name, data, 0o644))
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
