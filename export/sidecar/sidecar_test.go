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
