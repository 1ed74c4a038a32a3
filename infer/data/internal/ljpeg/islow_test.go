package ljpeg

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestRangeLimit checks the post-IDCT range limit against libjpeg's
// table: x + 128 clamped to [0, 255] for x in [-512, 511], x taken
// modulo 1024 outside.
func TestRangeLimit(t *testing.T) {
	for _, test := range []struct {
		x    int32
		want uint8
	}{
		{0, 128}, {-128, 0}, {-129, 0}, {127, 255}, {128, 255}, {-1, 127},
		{511, 255}, {-512, 0}, {512, 0}, {1024 + 5, 133}, {-1024 - 5, 123},
	} {
		if got := rangeLimit(test.x); got != test.want {
			t.Errorf("rangeLimit(%d) = %d, want %d", test.x, got, test.want)
		}
	}
}

// TestIDCTISlow checks the IDCT on blocks whose outputs are known
// exactly, and against a floating-point IDCT on random blocks, which
// libjpeg's islow method matches within one level.
func TestIDCTISlow(t *testing.T) {
	for _, test := range []struct {
		name string
		dc   int32
		want uint8
	}{
		// A DC coefficient c gives c/8 on every sample, rounded, plus 128.
		{"zero", 0, 128},
		{"dc 80", 80, 138},
		{"dc -84", -84, 118}, // -10.5 rounds up to -10
		{"dc 2000", 2000, 255},
		{"dc -2000", -2000, 0},
	} {
		t.Run(test.name, func(t *testing.T) {
			var b block
			b[0] = test.dc
			dst := make([]byte, 8*10)
			idctISlow(&b, dst, 10)
			for y := range 8 {
				for x := range 8 {
					if got := dst[10*y+x]; got != test.want {
						t.Fatalf("sample (%d, %d) = %d, want %d", x, y, got, test.want)
					}
				}
			}
		})
	}

	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		var b block
		for k := range b {
			if rng.IntN(3) == 0 {
				b[k] = int32(rng.IntN(129) - 64)
			}
		}
		b[0] = int32(rng.IntN(1601) - 800)
		dst := make([]byte, 64)
		idctISlow(&b, dst, 8)
		for y := range 8 {
			for x := range 8 {
				want := math.Round(floatIDCT(&b, x, y)) + 128
				want = max(0, min(want, 255))
				if d := math.Abs(float64(dst[8*y+x]) - want); d > 1 {
					t.Fatalf("block %d sample (%d, %d) = %d, float IDCT %v", i, x, y, dst[8*y+x], want)
				}
			}
		}
	}
}

// floatIDCT is the 2-D IDCT of T.81 A.3.3 at sample (x, y).
func floatIDCT(b *block, x, y int) float64 {
	c := func(u int) float64 {
		if u == 0 {
			return 1 / math.Sqrt2
		}
		return 1
	}
	s := 0.0
	for v := range 8 {
		for u := range 8 {
			s += c(u) * c(v) * float64(b[8*v+u]) *
				math.Cos(float64(2*x+1)*float64(u)*math.Pi/16) *
				math.Cos(float64(2*y+1)*float64(v)*math.Pi/16)
		}
	}
	return s / 4
}

// FuzzDecode checks that no input makes the decoder panic; the seeds are
// package data's JPEG fixtures.
func FuzzDecode(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "jpeg", "*.jpg"))
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := DecodeConfig(bytes.NewReader(b)); err != nil || c.Width*c.Height > 1<<20 {
			return
		}
		Decode(bytes.NewReader(b))
	})
}
