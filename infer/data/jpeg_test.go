package data

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestJPEGMatchesPIL decodes the JPEGs of testdata/jpeg (made by
// testdata/gen_jpeg.py) and compares the pixels with PIL's
// Image.open(f).convert("RGB") (libjpeg-turbo 2.1, default
// decompression), stored next to them. With libjpeg's islow IDCT
// (internal/ljpeg), fancy upsampling and color conversion the pixels are
// PIL's exactly. The comments give the maximum difference before: with
// image/jpeg's IDCT, image.YCbCr's nearest chroma sample and Go's color
// conversion, up to 64 levels; with image/jpeg's IDCT alone, up to 2 (1
// for gray).
func TestJPEGMatchesPIL(t *testing.T) {
	for _, test := range []struct {
		name    string
		w, h    int
		maxDiff int
	}{
		{"420_5x3", 5, 3, 0},                 // 64
		{"420_17x9", 17, 9, 0},               // 64
		{"420_3x3", 3, 3, 0},                 // 1 (chroma 2 wide: replicated)
		{"420_16x16_progressive", 16, 16, 0}, // 51
		{"422_17x9", 17, 9, 0},               // 52
		{"422_5x3", 5, 3, 0},                 // 46
		{"444_17x9", 17, 9, 0},               // 2
		{"gray_17x9", 17, 9, 0},              // 1
		{"gray_5x3", 5, 3, 0},                // 1
	} {
		t.Run(test.name, func(t *testing.T) {
			dir := filepath.Join("testdata", "jpeg")
			want, err := os.ReadFile(filepath.Join(dir, test.name+".rgb"))
			if err != nil {
				t.Fatal(err)
			}
			rec := decodeFile(t, filepath.Join(dir, test.name+".jpg"))
			if !slices.Equal(rec.Shape, []int{test.h, test.w, 3}) || len(want) != len(rec.Image) {
				t.Fatalf("shape %v (%d bytes), want [%d %d 3] (%d bytes)", rec.Shape, len(rec.Image), test.h, test.w, len(want))
			}
			worst, differ := 0, 0
			for i, v := range rec.Image {
				d := max(int(v)-int(want[i]), int(want[i])-int(v))
				worst = max(worst, d)
				if d > 0 {
					differ++
				}
			}
			t.Logf("%d of %d values differ from PIL's, by at most %d", differ, len(want), worst)
			if worst > test.maxDiff {
				t.Errorf("pixels differ from PIL's by up to %d levels, want at most %d", worst, test.maxDiff)
			}
		})
	}
}

// decodeFile decodes one image file as the imagefolder reader does.
func decodeFile(t *testing.T, path string) Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := &imageFolder{br: bufio.NewReaderSize(nil, 1<<16)}
	var rec Record
	if err := r.decode(&rec, path, f); err != nil {
		t.Fatal(err)
	}
	return rec
}
