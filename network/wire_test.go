package network

import (
	"errors"
	"math"
	"testing"

	"github.com/fedcalib/fedcalib/federation"
)

// TestUpdateEncoding: every update travels bit for bit, dense or, when
// sparse updates are allowed, in the smaller encoding, of the size
// expected; malformed messages are refused with ErrBadUpdate.
func TestUpdateEncoding(t *testing.T) {
	histogram := make([]float64, 2560) // a binning update: 2·10·2^7 cells
	for i := 0; i < len(histogram); i += 10 {
		histogram[i] = float64(i % 7)
	}
	ramp := make([]float64, 20)
	for i := range ramp {
		ramp[i] = float64(i) + 0.5
	}
	for _, tc := range []struct {
		name string
		u    []float64
		enc  byte
		size int
	}{
		{"empty", []float64{}, encDense, 1},
		{"dense ramp", ramp, encDense, 1 + 8*20},
		{"special values", []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 1e-310}, encDense, 1 + 8*5},
		{"special values and one +0", []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 0, 1e-310}, encSparse, 1 + 1 + 1 + 8*5},
		// 256 cells hold a multiple of 10 below 2560; those ≡ 0 mod 7
		// are 0 (37 of them), so 219 values are sent.
		{"sparse histogram", histogram, encSparse, 1 + 2 + 320 + 8*219},
		{"all zero", make([]float64, 2560), encSparse, 1 + 2 + 320},
		{"sparse with -0 and NaN", append(make([]float64, 30), math.Copysign(0, -1), math.NaN()), encSparse, 1 + 1 + 4 + 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if b := encodeUpdate(tc.u, false); b[0] != encDense || len(b) != 1+8*len(tc.u) {
				t.Errorf("not sparse: encoding %d of %d bytes, want %d of %d", b[0], len(b), encDense, 1+8*len(tc.u))
			} else if u, err := decodeUpdate(b, len(tc.u)); err != nil || !sameBits(u, tc.u) {
				t.Errorf("not sparse: decoded %v, %v; want %v", u, err, tc.u)
			}
			b := encodeUpdate(tc.u, true)
			if b[0] != tc.enc || len(b) != tc.size {
				t.Errorf("encoding %d of %d bytes, want %d of %d", b[0], len(b), tc.enc, tc.size)
			}
			u, err := decodeUpdate(b, len(tc.u))
			if err != nil {
				t.Fatal(err)
			}
			if !sameBits(u, tc.u) {
				t.Errorf("decoded %v, want %v", u, tc.u)
			}
		})
	}
	sparse := encodeUpdate(append(make([]float64, 30), 2), true) // 1, n = 31, 4 bitmap bytes, one value
	for _, tc := range []struct {
		name string
		b    []byte
		max  int
	}{
		{"empty message", nil, 10},
		{"unknown encoding", []byte{7, 0, 0}, 10},
		{"dense, not whole float64s", []byte{encDense, 1, 2, 3}, 10},
		{"sparse, longer than an update", sparse, 30},
		{"sparse, no length", []byte{encSparse}, 10},
		{"sparse, bitmap cut short", sparse[:4], 31},
		{"sparse, value cut short", sparse[:len(sparse)-1], 31},
		{"sparse, trailing bytes", append(append([]byte{}, sparse...), 0), 31},
		{"sparse, bit beyond the length", []byte{encSparse, 3, 0x08}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if u, err := decodeUpdate(tc.b, tc.max); !errors.Is(err, federation.ErrBadUpdate) {
				t.Errorf("decoded %v, %v; want an error wrapping ErrBadUpdate", u, err)
			}
		})
	}
}

// sameBits reports whether u and v hold the same float64s, bit for bit.
func sameBits(u, v []float64) bool {
	if len(u) != len(v) {
		return false
	}
	for i := range u {
		if math.Float64bits(u[i]) != math.Float64bits(v[i]) {
			return false
		}
	}
	return true
}
