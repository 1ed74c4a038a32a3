package dp

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"testing"
)

func TestNorm(t *testing.T) {
	big, tiny := 1e300, 1e-300
	for _, tc := range []struct {
		x    []float64
		want float64
	}{
		{nil, 0},
		{[]float64{0, 0}, 0},
		{[]float64{3, -4}, 5},
		{[]float64{1, 2, 2}, 3},
		{[]float64{big, big}, big * math.Sqrt2},    // naive Σx² overflows
		{[]float64{tiny, tiny}, tiny * math.Sqrt2}, // naive Σx² underflows
		{[]float64{1, math.Inf(-1)}, math.Inf(1)},
	} {
		if got := Norm(tc.x); relErr(got, tc.want) > 1e-15 && got != tc.want {
			t.Errorf("Norm(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
	if got := Norm([]float64{1, math.NaN()}); !math.IsNaN(got) {
		t.Errorf("Norm with NaN = %v, want NaN", got)
	}
}

func TestClipL2(t *testing.T) {
	for _, tc := range []struct {
		name string
		x    []float64
		c    float64
		want []float64
		norm float64 // returned: the norm before clipping
	}{
		{"inside", []float64{0.3, -0.4}, 1, []float64{0.3, -0.4}, 0.5},
		{"on the sphere", []float64{3, 4}, 5, []float64{3, 4}, 5},
		{"zero", []float64{0, 0, 0}, 0.5, []float64{0, 0, 0}, 0},
		{"empty", nil, 0.5, nil, 0},
		{"outside", []float64{3, 4}, 0.5, []float64{0.3, 0.4}, 5},
		{"one coordinate", []float64{-8}, 2, []float64{-2}, 8},
		{"huge", []float64{1e300, 1e300}, 1, []float64{math.Sqrt2 / 2, math.Sqrt2 / 2}, 1e300 * math.Sqrt2},
		{"huge to tiny", []float64{1e300, -1e300}, 1e-300, []float64{1e-300 / math.Sqrt2, -1e-300 / math.Sqrt2}, 1e300 * math.Sqrt2},
		{"NaN", []float64{1, math.NaN()}, 1, []float64{0, 0}, math.NaN()},
		{"Inf", []float64{math.Inf(1), 1}, 1, []float64{0, 0}, math.Inf(1)},
	} {
		x := slices.Clone(tc.x)
		norm := ClipL2(x, tc.c)
		if relErr(norm, tc.norm) > 1e-15 && norm != tc.norm && !(math.IsNaN(norm) && math.IsNaN(tc.norm)) {
			t.Errorf("%s: returned norm %v, want %v", tc.name, norm, tc.norm)
		}
		for i := range x {
			if relErr(x[i], tc.want[i]) > 1e-14 && x[i] != tc.want[i] {
				t.Errorf("%s: got %v, want %v", tc.name, x, tc.want)
				break
			}
		}
		if n := Norm(x); n > tc.c {
			t.Errorf("%s: norm %v after clipping to %v", tc.name, n, tc.c)
		}
	}
}

func TestClipL2Panics(t *testing.T) {
	for _, c := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("ClipL2 with clip norm %v did not panic", c)
				}
			}()
			ClipL2([]float64{1}, c)
		}()
		if err := CheckClip("clip norm C", c); !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckClip(%v) = %v, want ErrInvalid", c, err)
		}
	}
	if err := CheckClip("clip norm C", 0.5); err != nil {
		t.Errorf("CheckClip(0.5) = %v", err)
	}
}

func TestClipHistograms(t *testing.T) {
	pos := [][]float64{{30, 40}, {1, 0}}
	neg := [][]float64{{300, 400}, {10, 0}}
	ClipHistograms(pos, neg, 10, 50)
	want := map[string][][]float64{
		"pos": {{6, 8}, {1, 0}},
		"neg": {{30, 40}, {10, 0}},
	}
	for name, got := range map[string][][]float64{"pos": pos, "neg": neg} {
		for i := range got {
			for j := range got[i] {
				if relErr(got[i][j], want[name][i][j]) > 1e-14 && got[i][j] != want[name][i][j] {
					t.Errorf("%s histograms = %v, want %v", name, got, want[name])
				}
			}
		}
	}
}

// FuzzClip checks ClipL2's invariants on arbitrary vectors and clip norms:
// the result never has norm above c; a vector within the ball is unchanged
// bit for bit; a clipped finite vector keeps its direction.
func FuzzClip(f *testing.F) {
	enc := func(c float64, x ...float64) []byte {
		b := binary.LittleEndian.AppendUint64(nil, math.Float64bits(c))
		for _, v := range x {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
		return b
	}
	f.Add(enc(0.5, 3, 4))
	f.Add(enc(10, 1, 2, 3))
	f.Add(enc(1e-300, 1e300, -1e300, 7))
	f.Add(enc(1, math.NaN(), 1))
	f.Add(enc(3, math.Inf(-1)))
	f.Add(enc(math.MaxFloat64, math.MaxFloat64, math.MaxFloat64))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 8 {
			return
		}
		c := math.Abs(math.Float64frombits(binary.LittleEndian.Uint64(data)))
		if !(c > 0) || math.IsInf(c, 1) {
			return
		}
		var x []float64
		for b := data[8:]; len(b) >= 8; b = b[8:] {
			x = append(x, math.Float64frombits(binary.LittleEndian.Uint64(b)))
		}
		orig := slices.Clone(x)
		n0 := ClipL2(x, c)
		if want := Norm(orig); math.Float64bits(n0) != math.Float64bits(want) {
			t.Fatalf("returned norm %v, want %v", n0, want)
		}
		n := Norm(x)
		if !(n <= c) {
			t.Fatalf("clip to %v left norm %v (input %v)", c, n, orig)
		}
		switch {
		case n0 <= c:
			for i := range x {
				if math.Float64bits(x[i]) != math.Float64bits(orig[i]) {
					t.Fatalf("input within the ball changed: %v -> %v", orig, x)
				}
			}
		case math.IsNaN(n0) || math.IsInf(n0, 1):
			if n != 0 {
				t.Fatalf("non-finite input not zeroed: %v -> %v", orig, x)
			}
		default:
			// On the sphere, in the original direction.
			if c > 1e-280 && n < c*(1-1e-12) {
				t.Fatalf("clipped norm %v well inside %v", n, c)
			}
			for i := range x {
				want := orig[i] / n0 * c
				if math.Abs(x[i]-want) > 1e-14*c+4*math.SmallestNonzeroFloat64 {
					t.Fatalf("element %d: %v, want %v", i, x[i], want)
				}
			}
		}
	})
}
