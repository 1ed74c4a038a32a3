package npy

import (
	"bytes"
	"testing"
)

func TestSwapBytes(t *testing.T) {
	for _, tc := range []struct {
		size    int
		in, out []byte
	}{
		{1, []byte{1, 2, 3}, []byte{1, 2, 3}},
		{2, []byte{1, 2, 3, 4, 5}, []byte{2, 1, 4, 3, 5}},
		{4, []byte{1, 2, 3, 4, 5, 6, 7, 8}, []byte{4, 3, 2, 1, 8, 7, 6, 5}},
		{8, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, []byte{8, 7, 6, 5, 4, 3, 2, 1, 9}},
	} {
		b := append([]byte(nil), tc.in...)
		SwapBytes(b, tc.size)
		if !bytes.Equal(b, tc.out) {
			t.Errorf("size %d: %v → %v, want %v", tc.size, tc.in, b, tc.out)
		}
		SwapBytes(b, tc.size)
		if !bytes.Equal(b, tc.in) {
			t.Errorf("size %d: swapping twice gave %v", tc.size, b)
		}
	}
}
