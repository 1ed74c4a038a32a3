package data

import (
	"bufio"
	"image"
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

// TestUpsample checks the chroma upsampler against outputs computed by
// hand from jdsample.c's formulas. The planes have a stride wider than
// their width, padded with 255, which must not leak into the output.
func TestUpsample(t *testing.T) {
	for _, test := range []struct {
		name   string
		rows   [][]uint8 // the plane
		hx, vy int
		w, h   int // output size
		want   [][]uint8
	}{
		{
			name: "h2v1", rows: [][]uint8{{10, 20, 40}}, hx: 2, vy: 1, w: 6, h: 1,
			// 10; (3·10+20+2)>>2; (3·20+10+1)>>2; (3·20+40+2)>>2; (3·40+20+1)>>2; 40
			want: [][]uint8{{10, 13, 17, 25, 35, 40}},
		},
		{
			name: "h2v1 cropped", rows: [][]uint8{{10, 20, 40}}, hx: 2, vy: 1, w: 5, h: 1,
			want: [][]uint8{{10, 13, 17, 25, 35}},
		},
		{
			// Column sums 3·near + far, the row above the first and below
			// the last replicating the edge row, then (3·this + left + 8)>>4
			// and (3·this + right + 7)>>4, 4·this at the ends. Row 0: sums
			// 40 80 160; row 1: 80 60 220; row 2: 160 20 340; row 3: 200 0 400.
			name: "h2v2", rows: [][]uint8{{10, 20, 40}, {50, 0, 100}}, hx: 2, vy: 2, w: 6, h: 4,
			want: [][]uint8{
				{10, 12, 18, 25, 35, 40},
				{20, 19, 16, 25, 45, 55},
				{40, 31, 14, 25, 65, 85},
				{50, 37, 13, 25, 75, 100},
			},
		},
		{
			name: "h2v2 cropped", rows: [][]uint8{{10, 20, 40}, {50, 0, 100}}, hx: 2, vy: 2, w: 5, h: 3,
			want: [][]uint8{
				{10, 12, 18, 25, 35},
				{20, 19, 16, 25, 45},
				{40, 31, 14, 25, 65},
			},
		},
		{
			name: "h2v2 narrow", rows: [][]uint8{{1, 2}, {3, 4}}, hx: 2, vy: 2, w: 3, h: 3,
			// 2 samples wide: replicated, not interpolated
			want: [][]uint8{{1, 1, 2}, {1, 1, 2}, {3, 3, 4}},
		},
		{
			name: "h2v1 narrow", rows: [][]uint8{{1, 2}}, hx: 2, vy: 1, w: 4, h: 1,
			want: [][]uint8{{1, 1, 2, 2}},
		},
		{
			// (3·near + far + 1)>>2
			name: "h1v2", rows: [][]uint8{{0, 100}, {200, 3}}, hx: 1, vy: 2, w: 2, h: 4,
			want: [][]uint8{{0, 100}, {50, 76}, {150, 27}, {200, 3}},
		},
		{
			name: "h4v1", rows: [][]uint8{{7, 9}}, hx: 4, vy: 1, w: 6, h: 1,
			want: [][]uint8{{7, 7, 7, 7, 9, 9}},
		},
		{
			name: "h1v1", rows: [][]uint8{{7, 9}, {1, 2}}, hx: 1, vy: 1, w: 2, h: 2,
			want: [][]uint8{{7, 9}, {1, 2}},
		},
	} {
		t.Run(test.name, func(t *testing.T) {
			const pad = 3
			p := chromaPlane{w: len(test.rows[0]), h: len(test.rows), stride: len(test.rows[0]) + pad}
			for _, row := range test.rows {
				p.pix = append(p.pix, row...)
				p.pix = append(p.pix, slices.Repeat([]uint8{255}, pad)...)
			}
			dst := make([]uint8, test.w*test.h)
			p.upsample(dst, test.w, test.h, test.hx, test.vy)
			if want := slices.Concat(test.want...); !slices.Equal(dst, want) {
				t.Errorf("got %v, want %v", dst, want)
			}
		})
	}
}

// TestLibjpegYCbCrToRGB checks the color conversion against values
// computed by hand with jdcolor.c's tables.
func TestLibjpegYCbCrToRGB(t *testing.T) {
	for _, test := range []struct {
		y, cb, cr uint8
		want      [3]uint8
	}{
		{128, 128, 128, [3]uint8{128, 128, 128}},
		// R: 150 + ⌊(91881·52 + 32768)/2¹⁶⌋ = 150 + 73;
		// G: 150 + ⌊(22554·28 + 32768 − 46802·52)/2¹⁶⌋ = 150 − 27;
		// B: 150 + ⌊(−116130·28 + 32768)/2¹⁶⌋ = 150 − 50.
		{150, 100, 180, [3]uint8{223, 123, 100}},
		{100, 200, 50, [3]uint8{0, 131, 228}}, // R clamped
		{255, 0, 255, [3]uint8{255, 208, 28}},
		{0, 255, 0, [3]uint8{0, 48, 225}},
	} {
		r, g, b := libjpegYCbCrToRGB(test.y, test.cb, test.cr)
		if got := [3]uint8{r, g, b}; got != test.want {
			t.Errorf("YCbCr %d %d %d: RGB %v, want %v", test.y, test.cb, test.cr, got, test.want)
		}
	}
}

// TestYCCToRGBRefuses checks that an image whose origin is not (0, 0)
// is left to the generic conversion.
func TestYCCToRGBRefuses(t *testing.T) {
	m := image.NewYCbCr(image.Rect(1, 1, 5, 5), image.YCbCrSubsampleRatio420)
	if _, ok := yccToRGB(make([]uint8, 3*16), m, nil); ok {
		t.Error("converted an image with origin (1, 1)")
	}
	m = image.NewYCbCr(image.Rect(0, 0, 4, 4), image.YCbCrSubsampleRatio420)
	for i := range m.Y {
		m.Y[i] = uint8(10 * i)
	}
	for i := range m.Cb {
		m.Cb[i], m.Cr[i] = 128, 128
	}
	dst := make([]uint8, 3*16)
	if _, ok := yccToRGB(dst, m, nil); !ok {
		t.Fatal("did not convert a 4:2:0 image")
	}
	for i := range 16 { // neutral chroma: gray
		if want := m.Y[i]; dst[3*i] != want || dst[3*i+1] != want || dst[3*i+2] != want {
			t.Errorf("pixel %d: %v, want gray %d", i, dst[3*i:3*i+3], want)
		}
	}
}
