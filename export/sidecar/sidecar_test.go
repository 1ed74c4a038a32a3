package sidecar_test

import (
	"bytes"
	"fmt"
	"log"
	"math"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/export/sidecar"
)

func TestApplyTemperature(t *testing.T) {
	var buf bytes.Buffer
	tc := calib.NewTemperature(2)
	tc.T = 2
	if err := calib.Encode(&buf, tc, nil, calib.Provenance{}); err != nil {
		t.Fatal(err)
	}
	s, err := sidecar.Load(&buf)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Apply([]float32{2, 0, 0, 0})
	if err != nil {
		t.Fatal(err)
	}
	// softmax([2, 0] / 2) = [e/(e+1), 1/(e+1)].
	want := []float64{math.E / (math.E + 1), 1 / (math.E + 1), 0.5, 0.5}
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > 1e-7 {
			t.Errorf("p[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	for _, bad := range [][]float32{{1, 2, 3}, {float32(math.NaN()), 0}} {
		if _, err := s.Apply(bad); err == nil {
			t.Errorf("Apply(%v) succeeded", bad)
		}
	}
}

func TestLoadRefusesUnknownVersion(t *testing.T) {
	_, err := sidecar.Load(strings.NewReader(`{"format":"fedcalib.calibrator/v9","method":"temp","classes":2,"params":{}}`))
	if err == nil || !strings.Contains(err.Error(), "unsupported calibrator format") {
		t.Errorf("error %v", err)
	}
}

func Example() {
	// A calibrator file as `fedcalib calibrate` writes it.
	file := `{"format": "fedcalib.calibrator/v1", "method": "temp", "classes": 3,
	          "params": {"t": 2, "classes": 3}, "provenance": {"seed": 1}}`
	s, err := sidecar.Load(strings.NewReader(file))
	if err != nil {
		log.Fatal(err)
	}
	probs, err := s.Apply([]float32{4, 0, -2})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %.4f\n", s.Method(), probs)
	// Output: temp: [0.8438 0.1142 0.0420]
}

// load encodes c with provenance prov and loads it.
func load(t *testing.T, c calib.Calibrator, prov calib.Provenance) *sidecar.Calibrator {
	t.Helper()
	var buf bytes.Buffer
	if err := calib.Encode(&buf, c, nil, prov); err != nil {
		t.Fatal(err)
	}
	s, err := sidecar.Load(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestApplyNonFinite checks that Apply refuses a calibrator whose output
// is not finite: vector scaling with a = 1e308 turns the logits ±1e4 into
// ±Inf, whose softmax is NaN. It used to return the NaN.
func TestApplyNonFinite(t *testing.T) {
	v := calib.NewVector(2)
	v.A = []float64{1e308, 1e308}
	v.B = []float64{0, 0}
	s := load(t, v, calib.Provenance{})
	if p, err := s.Apply([]float32{1e4, -1e4}); err == nil || !strings.Contains(err.Error(), "NaN") {
		t.Errorf("Apply = %v, %v; want an error naming NaN", p, err)
	}
	if _, err := s.Apply([]float32{0.5, 0}); err != nil {
		t.Errorf("finite row: %v", err)
	}
}

// TestApplyProbabilities checks a file fitted on probabilities: Apply
// reads the model's probabilities, takes log max(p, 1e-12) and applies
// the calibrator. Temperature 2 on log p gives p^(1/2) normalised:
// [0.9, 0.1] → [3, 1]/4 (√0.9 : √0.1 = 3 : 1); a row that is not a
// distribution is refused; the file's input kind is what Input says.
func TestApplyProbabilities(t *testing.T) {
	tc := calib.NewTemperature(2)
	tc.T = 2
	s := load(t, tc, calib.Provenance{Input: calib.InputProbabilities})
	if s.Input() != calib.InputProbabilities {
		t.Errorf("Input = %q", s.Input())
	}
	got, err := s.Apply([]float32{0.9, 0.1, 1, 0})
	if err != nil {
		t.Fatal(err)
	}
	// A zero probability is floored at 1e-12: [1, 1e-6]/(1 + 1e-6).
	want := []float64{0.75, 0.25, 1 / (1 + 1e-6), 1e-6 / (1 + 1e-6)}
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > 1e-7 {
			t.Errorf("p[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	if _, err := s.Apply([]float32{2, 0.5}); err == nil || !strings.Contains(err.Error(), "not probabilities") {
		t.Errorf("a row summing to 2.5: %v", err)
	}
	if in := load(t, tc, calib.Provenance{}).Input(); in != calib.InputLogits {
		t.Errorf("a file without provenance.input reads %q, want logits", in)
	}
}
