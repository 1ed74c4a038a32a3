package export_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/calib/calibtest"
	"github.com/fedcalib/fedcalib/export"
)

// overconfident returns n labelled rows of c logits whose labels follow
// softmax(z/3): the logits are three times too confident. Rounding the
// logits to halves (ties) gives many equal scores.
func overconfident(n, c int, seed uint64, ties bool) *calib.Set {
	step := 0.0
	if ties {
		step = 0.5
	}
	return calibtest.Overconfident(rand.New(rand.NewPCG(seed, 32)), n, c, 3, step, 3)
}

// TestConformanceIsotonicExact is the export conformance suite for the
// exact form of isotonic regression, which the golden files (fitted
// with bins) do not hold: fitted centrally without bins at 2, 4 and 10
// classes, on distinct and on tied scores, under every weighting, its
// sidecar must give Predict's float32 rounding bit for bit, and its
// exported ONNX graph (the piecewise-linear map per class) Predict's
// probabilities to 1e-5 in ONNX Runtime, on random logits and on
// Probe's rows at and between every class's breakpoints.
func TestConformanceIsotonicExact(t *testing.T) {
	noORT := ortMissing(t)
	for _, c := range []int{2, 4, 10} {
		for _, ties := range []bool{false, true} {
			for _, w := range []calib.Weighting{calib.WeightNone, calib.WeightAll, calib.WeightChanged} {
				t.Run(fmt.Sprintf("C%d-ties=%v-%s", c, ties, w), func(t *testing.T) {
					s := overconfident(600, c, uint64(c), ties)
					cal, err := calib.New(calib.MethodIsotonic, calib.Settings{})
					if err != nil {
						t.Fatal(err)
					}
					if err := cal.Fit(s); err != nil {
						t.Fatal(err)
					}
					iso := cal.(*calib.Isotonic)
					if !iso.Exact() || iso.Breakpoints() < 2*c {
						t.Fatalf("exact %v, %d breakpoints", iso.Exact(), iso.Breakpoints())
					}
					if w != calib.WeightNone {
						alpha := make([]float64, c)
						for j := range alpha {
							alpha[j] = 0.2 + 0.6*float64(j)/float64(c)
						}
						if err := iso.SetWeighting(w, alpha); err != nil {
							t.Fatal(err)
						}
					}
					var file bytes.Buffer
					if err := calib.Encode(&file, cal, nil, calib.Provenance{}); err != nil {
						t.Fatal(err)
					}
					rng := rand.New(rand.NewPCG(uint64(c), 7))
					var logits []float32
					for range 200 * c {
						logits = append(logits, float32(3*rng.NormFloat64()))
					}
					logits = append(logits, export.Probe(cal, 1)...)
					want := goPredict(cal, logits)
					t.Run("Sidecar", func(t *testing.T) { checkSidecar(t, file.Bytes(), cal, logits, want) })
					t.Run("ONNX", func(t *testing.T) {
						if noORT {
							t.Skip("ONNX Runtime not installed (run make setup)")
						}
						checkONNX(t, cal, logits, want)
					})
				})
			}
		}
	}
}
