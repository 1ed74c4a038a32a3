package resize

import (
	"bytes"
	"testing"
)

func TestShorterSide(t *testing.T) {
	for _, tc := range []struct{ h, w, s, wantH, wantW int }{
		{480, 640, 256, 256, 341}, // 256·640/480 = 341.33
		{640, 480, 256, 341, 256},
		{9, 17, 256, 256, 483},      // 256·17/9 = 483.56
		{1200, 1600, 224, 224, 298}, // 224·4/3 = 298.67
		{300, 300, 256, 256, 256},
		{256, 256, 256, 256, 256},
	} {
		h, w := ShorterSide(tc.h, tc.w, tc.s)
		if h != tc.wantH || w != tc.wantW {
			t.Errorf("ShorterSide(%d, %d, %d) = %d×%d, want %d×%d", tc.h, tc.w, tc.s, h, w, tc.wantH, tc.wantW)
		}
	}
}

// row makes a one-row, one-channel image.
func row(px ...uint8) Image { return Image{Pix: px, H: 1, W: len(px), C: 1} }

func TestResampleByHand(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  Image
		w    int
		f    Filter
		want []uint8
	}{
		// 4 → 2 bilinear: scale 2 stretches the triangle to support 2.
		// Output 0 (centre 1) weighs inputs 0,1,2 by 0.75,0.75,0.25 → 3/7,3/7,1/7:
		// (0·3 + 70·3 + 140)/7 = 50. Output 1 (centre 3) weighs 1,2,3 by
		// 0.25,0.75,0.75: (70 + 140·3 + 210·3)/7 = 160.
		{"bilinear down", row(0, 70, 140, 210), 2, Bilinear, []uint8{50, 160}},
		// Nearest reads inputs ⌊1⌋ and ⌊3⌋.
		{"nearest down", row(0, 70, 140, 210), 2, Nearest, []uint8{70, 210}},
		// 2 → 4 bilinear, no stretching: centres 0.25, 0.75, 1.25, 1.75;
		// output 1 weighs inputs 0,1 by 0.75,0.25 → 100·0.25 = 25, output 2
		// by 0.25, 0.75 → 75; the edges see one input.
		{"bilinear up", row(0, 100), 4, Bilinear, []uint8{0, 25, 75, 100}},
		// 3 → 1 box: support 1.5 around centre 1.5 covers all three inputs
		// with weight 1 except the last, (j+½−1.5)/3 = 0.5 → included.
		{"box down", row(30, 60, 90), 1, Box, []uint8{60}},
		// 2 → 4 bicubic: output 1 (centre 0.75) weighs inputs 0 and 1 by
		// the cubic at 0.25 and 0.75, 0.8671875 and 0.2265625, normalised
		// by their sum 1.09375: 255·0.2265625/1.09375 = 52.8 → 53; output 2
		// mirrors it, 255·0.8671875/1.09375 = 202.2 → 202.
		{"bicubic up", row(0, 255), 4, Bicubic, []uint8{0, 53, 202, 255}},
	} {
		got := Resample(nil, tc.src, 1, tc.w, tc.f)
		if !bytes.Equal(got.Pix, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got.Pix, tc.want)
		}
	}
}

// TestResampleConstant: normalised weights keep a constant image constant,
// whatever the filter and sizes.
func TestResampleConstant(t *testing.T) {
	src := Image{Pix: bytes.Repeat([]uint8{17, 200, 255}, 13*29), H: 13, W: 29, C: 3}
	for f := Bilinear; f <= Lanczos; f++ {
		for _, size := range [][2]int{{5, 7}, {40, 3}, {13, 64}, {100, 29}} {
			got := Resample(nil, src, size[0], size[1], f)
			want := bytes.Repeat([]uint8{17, 200, 255}, size[0]*size[1])
			if !bytes.Equal(got.Pix, want) {
				t.Errorf("%v to %v: not constant", f, size)
			}
		}
	}
}

func TestCenterCrop(t *testing.T) {
	// A 5×7 one-channel image whose pixel (y, x) is 10y + x.
	src := Image{H: 5, W: 7, C: 1}
	for y := range 5 {
		for x := range 7 {
			src.Pix = append(src.Pix, uint8(10*y+x))
		}
	}
	for _, tc := range []struct {
		h, w int
		want []uint8
	}{
		// (5−2)/2 = 1.5 rounds to 2, (7−2)/2 = 2.5 rounds to 2 (half to even).
		{2, 2, []uint8{22, 23, 32, 33}},
		{1, 3, []uint8{22, 23, 24}},
		// Height 7 > 5 pads ⌊2/2⌋ = 1 zero row above, 1 below; width 1: (7−1)/2 = 3.
		{7, 1, []uint8{0, 3, 13, 23, 33, 43, 0}},
		// Width 8 > 7 pads 0 columns left, 1 right; height 1: (5−1)/2 = 2.
		{1, 8, []uint8{20, 21, 22, 23, 24, 25, 26, 0}},
	} {
		got := CenterCrop(nil, src, tc.h, tc.w)
		if !bytes.Equal(got.Pix, tc.want) {
			t.Errorf("CenterCrop(%d×%d) = %v, want %v", tc.h, tc.w, got.Pix, tc.want)
		}
	}
}

func TestParseFilter(t *testing.T) {
	for _, name := range []string{"bilinear", "nearest", "bicubic", "box", "hamming", "lanczos"} {
		f, err := ParseFilter(name)
		if err != nil || f.String() != name {
			t.Errorf("ParseFilter(%q) = %v, %v", name, f, err)
		}
	}
	if f, err := ParseFilter("Cubic"); err != nil || f != Bicubic {
		t.Errorf("ParseFilter(Cubic) = %v, %v", f, err)
	}
	if _, err := ParseFilter("area"); err == nil {
		t.Error("ParseFilter(area) succeeded")
	}
	for code, want := range []Filter{Nearest, Lanczos, Bilinear, Bicubic, Box, Hamming} {
		if f, err := PILFilter(code); err != nil || f != want {
			t.Errorf("PILFilter(%d) = %v, %v, want %v", code, f, err, want)
		}
	}
}

// TestResamplerReuse: one Resampler over images of changing sizes and
// filters gives what a fresh Resample gives each time.
func TestResamplerReuse(t *testing.T) {
	var r Resampler
	var buf []uint8
	for i, tc := range []struct {
		h, w, oh, ow int
		f            Filter
	}{
		{30, 40, 7, 9, Bilinear}, {30, 40, 7, 9, Bilinear}, {30, 40, 7, 9, Bicubic},
		{40, 30, 7, 9, Bicubic}, {9, 9, 30, 9, Lanczos}, {9, 9, 9, 30, Lanczos}, {30, 40, 7, 9, Bilinear},
	} {
		src := Image{H: tc.h, W: tc.w, C: 2}
		for k := range tc.h * tc.w * 2 {
			src.Pix = append(src.Pix, uint8(k*37+i*11))
		}
		got := r.Resample(buf, src, tc.oh, tc.ow, tc.f)
		buf = got.Pix
		if want := Resample(nil, src, tc.oh, tc.ow, tc.f); !bytes.Equal(got.Pix, want.Pix) {
			t.Errorf("call %d (%+v): a reused Resampler differs from a fresh one", i, tc)
		}
	}
}

// naive resamples src to h×w by the package documentation's definition,
// pixel by pixel: every row along its width into an intermediate image
// (when the width changes), then every column along its height (when the
// height changes), with the same kernels but none of Resample's windows,
// channel cases or row-ordered sums.
func naive(src Image, h, w int, f Filter) Image {
	c := src.C
	at := func(m Image, y, x, ch int) int32 { return int32(m.Pix[(y*m.W+x)*c+ch]) }
	tmp := src
	if w != src.W {
		kn := weights(src.W, w, f)
		tmp = Image{Pix: make([]uint8, src.H*w*c), H: src.H, W: w, C: c}
		for y := range src.H {
			for x := range w {
				for ch := range c {
					s := int32(1 << (precision - 1))
					for j := range kn.bounds[2*x+1] {
						s += at(src, y, kn.bounds[2*x]+j, ch) * kn.k[x*kn.size+j]
					}
					tmp.Pix[(y*w+x)*c+ch] = clamp8(s)
				}
			}
		}
	}
	if h == src.H {
		return tmp
	}
	kn := weights(src.H, h, f)
	out := Image{Pix: make([]uint8, h*w*c), H: h, W: w, C: c}
	for y := range h {
		for x := range w {
			for ch := range c {
				s := int32(1 << (precision - 1))
				for j := range kn.bounds[2*y+1] {
					s += at(tmp, kn.bounds[2*y]+j, x, ch) * kn.k[y*kn.size+j]
				}
				out.Pix[(y*w+x)*c+ch] = clamp8(s)
			}
		}
	}
	return out
}

// crop copies the window win of m.
func crop(m Image, win Window) Image {
	out := Image{H: win.H, W: win.W, C: m.C}
	for y := range win.H {
		i := ((win.Top+y)*m.W + win.Left) * m.C
		out.Pix = append(out.Pix, m.Pix[i:i+win.W*m.C]...)
	}
	return out
}

// TestResampleWindow: Resample equals the pixel-by-pixel definition, and
// every window of ResampleWindow equals that window cropped from the
// whole, for every filter, 1 to 4 channels, shrinking, enlarging and
// keeping each axis, with one Resampler reused throughout.
func TestResampleWindow(t *testing.T) {
	var r Resampler
	var buf []uint8
	seed := uint32(1)
	for f := Nearest; f <= Lanczos; f++ {
		for c := 1; c <= 4; c++ {
			for _, size := range [][4]int{{31, 47, 12, 20}, {31, 47, 31, 20}, {31, 47, 12, 47}, {9, 17, 30, 57}, {31, 47, 31, 47}, {5, 3, 2, 8}} {
				src := Image{H: size[0], W: size[1], C: c}
				for range size[0] * size[1] * c {
					seed = seed*1664525 + 1013904223
					src.Pix = append(src.Pix, uint8(seed>>24))
				}
				h, w := size[2], size[3]
				var whole Image
				if f == Nearest {
					whole = Resample(nil, src, h, w, f)
				} else {
					whole = naive(src, h, w, f)
					if got := r.Resample(buf, src, h, w, f); !bytes.Equal(got.Pix, whole.Pix) {
						t.Errorf("%v, %d channels, %d×%d → %d×%d: Resample differs from the definition", f, c, src.H, src.W, h, w)
					}
				}
				for _, win := range []Window{{0, 0, h, w}, {1, 2, h - 1, w - 3}, {h / 2, w / 3, 1, 1}, {h - 2, 0, 2, w}, {0, w - 1, h, 1}} {
					got := r.ResampleWindow(buf, src, h, w, f, win)
					buf = got.Pix
					if want := crop(whole, win); got.H != win.H || got.W != win.W || !bytes.Equal(got.Pix, want.Pix) {
						t.Errorf("%v, %d channels, %d×%d → %d×%d, window %+v: differs from the whole image cropped", f, c, src.H, src.W, h, w, win)
					}
				}
			}
		}
	}
}

// TestCenterWindow: the window CenterCrop takes, and whether it fits.
func TestCenterWindow(t *testing.T) {
	for _, tc := range []struct {
		H, W, h, w int
		want       Window
		inside     bool
	}{
		{256, 341, 224, 224, Window{16, 58, 224, 224}, true}, // (341−224)/2 = 58.5 rounds to 58
		{5, 7, 2, 2, Window{2, 2, 2, 2}, true},               // 1.5 → 2, 2.5 → 2
		{5, 7, 5, 7, Window{0, 0, 5, 7}, true},
		{5, 7, 7, 1, Window{-1, 3, 7, 1}, false},
		{5, 7, 1, 8, Window{2, 0, 1, 8}, false},
	} {
		win, inside := CenterWindow(tc.H, tc.W, tc.h, tc.w)
		if win != tc.want || inside != tc.inside {
			t.Errorf("CenterWindow(%d, %d, %d, %d) = %+v, %v; want %+v, %v", tc.H, tc.W, tc.h, tc.w, win, inside, tc.want, tc.inside)
		}
	}
}

// BenchmarkImageNet times torchvision's ImageNet evaluation geometry on a
// 500×375 RGB photo (ImageNet's most common size): Resize(256) bilinear,
// then CenterCrop(224), as one window ("window") and as the whole resize
// followed by the crop ("whole").
func BenchmarkImageNet(b *testing.B) {
	src := Image{H: 375, W: 500, C: 3}
	seed := uint32(1)
	for range src.H * src.W * src.C {
		seed = seed*1664525 + 1013904223
		src.Pix = append(src.Pix, uint8(seed>>24))
	}
	h, w := ShorterSide(src.H, src.W, 256)
	win, _ := CenterWindow(h, w, 224, 224)
	b.Run("window", func(b *testing.B) {
		var r Resampler
		var buf []uint8
		for b.Loop() {
			buf = r.ResampleWindow(buf, src, h, w, Bilinear, win).Pix
		}
	})
	b.Run("whole", func(b *testing.B) {
		var r Resampler
		var buf, cbuf []uint8
		for b.Loop() {
			m := r.Resample(buf, src, h, w, Bilinear)
			buf = m.Pix
			cbuf = CenterCrop(cbuf, m, 224, 224).Pix
		}
	})
}
