package logits

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestFromProbabilities(t *testing.T) {
	// ln 0.25 = −2 ln 2, ln 0.75 = ln 3 − 2 ln 2, ln 1e-12 = −12 ln 10.
	ln2, ln3, ln10 := 0.6931471805599453, 1.0986122886681098, 2.302585092994046
	f := &File{Logits: []float32{0.25, 0.75, 1, 0, 0.5, 0.5005}, Labels: []int32{0, 1, 1}, Classes: 2}
	if err := f.FromProbabilities(); err != nil {
		t.Fatal(err)
	}
	want := []float64{-2 * ln2, ln3 - 2*ln2, 0, -12 * ln10, -ln2, math.Log(0.5005)}
	for i, w := range want {
		if got := float64(f.Logits[i]); math.Abs(got-w) > 1e-6*math.Max(1, math.Abs(w)) {
			t.Errorf("value %d: %v, want %v", i, got, w)
		}
	}
	// Softmax of the result gives the probabilities back.
	for r, p := range [][]float64{{0.25, 0.75}, {1, 0}} {
		z := f.Logits[2*r : 2*r+2]
		e0, e1 := math.Exp(float64(z[0])), math.Exp(float64(z[1]))
		if math.Abs(e0/(e0+e1)-p[0]) > 1e-6 || math.Abs(e1/(e0+e1)-p[1]) > 1e-6 {
			t.Errorf("row %d: softmax %v, %v; want %v", r, e0/(e0+e1), e1/(e0+e1), p)
		}
	}
}

func TestFromProbabilitiesErrors(t *testing.T) {
	for _, tt := range []struct {
		probs []float32
		want  string
	}{
		{[]float32{0.5, 0.5, 0.5, 0.4}, "row 1 sums to 0.9"},
		{[]float32{0.5, 0.5, 0.5, 0.502}, "not 1 within 0.001"},
		{[]float32{-0.25, 1.25, 0.5, 0.5}, "row 0, class 0 is -0.25, outside [0, 1]"},
		{[]float32{0.5, 0.5, 1.5, -0.5}, "row 1, class 0 is 1.5"},
		{[]float32{1, 2, 3, 4}, "row 0, class 1 is 2"}, // logits given as probabilities
	} {
		f := &File{Logits: slices.Clone(tt.probs), Labels: []int32{0, 1}, Classes: 2}
		err := f.FromProbabilities()
		if !errors.Is(err, ErrNotProbabilities) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want ErrNotProbabilities and %q", tt.probs, err, tt.want)
		}
		if !slices.Equal(f.Logits, tt.probs) {
			t.Errorf("%v: changed to %v despite the error", tt.probs, f.Logits)
		}
	}
}

func TestConvertInput(t *testing.T) {
	f := &File{Logits: []float32{2, -1}, Labels: []int32{0}, Classes: 2}
	if err := f.ConvertInput(InputLogits); err != nil || !slices.Equal(f.Logits, []float32{2, -1}) {
		t.Errorf("ConvertInput(logits): %v, %v; want the logits unchanged", err, f.Logits)
	}
	if err := f.ConvertInput(InputProbabilities); !errors.Is(err, ErrNotProbabilities) {
		t.Errorf("ConvertInput(probabilities) of logits: %v", err)
	}
	if err := f.ConvertInput("softmax"); err == nil || !strings.Contains(err.Error(), `input kind "softmax": want "logits" or "probabilities"`) {
		t.Errorf("ConvertInput(softmax): %v", err)
	}
}
