package logits

import (
	"slices"
	"testing"
)

// TestRows checks that Row, Label and IntLabels read a File's rows as Set
// converts them.
func TestRows(t *testing.T) {
	f := &File{
		Logits:  []float32{0.5, -1, 3.25, 1e-7, 16777217, -0.1},
		Labels:  []int32{2, 0},
		Classes: 3,
	}
	want := f.Set(nil)
	if f.NumClasses() != 3 {
		t.Errorf("NumClasses() = %d, want 3", f.NumClasses())
	}
	dst := make([]float64, 4) // longer than a row: Row writes dst[:C]
	for i := range f.Len() {
		f.Row(dst, i)
		if !slices.Equal(dst[:3], want.Row(i)) {
			t.Errorf("Row(%d) = %v, want %v", i, dst[:3], want.Row(i))
		}
		if f.Label(i) != want.Labels[i] {
			t.Errorf("Label(%d) = %d, want %d", i, f.Label(i), want.Labels[i])
		}
	}
	if got := f.IntLabels(); !slices.Equal(got, want.Labels) {
		t.Errorf("IntLabels() = %v, want %v", got, want.Labels)
	}
	if got := (&File{Classes: 3}).IntLabels(); got == nil || len(got) != 0 {
		t.Errorf("IntLabels() of an empty file = %#v, want an empty slice", got)
	}
}
