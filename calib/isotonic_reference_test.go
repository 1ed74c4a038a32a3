package calib_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// TestIsotonicExactMNISTLike checks the registry's central isotonic fit
// (exact) on the calibration rows of mnistlike.npz against scikit-learn's
// IsotonicRegression per class on the same softmax, normalised
// (make_isotonic_reference.py): the same number of breakpoints per class
// and the same test probabilities and test NLL. NumPy's exp may differ
// from Go's in the last bit of a probability, which moves a fitted value
// by as little, so the tolerance is 1e-12, far below the 0.01 nats that
// separate the binned fit from the exact one.
func TestIsotonicExactMNISTLike(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(referenceDir, "isotonic_reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		MNISTLike struct {
			Breakpoints       []int       `json:"breakpoints"`
			TestProbabilities [][]float64 `json:"test_probabilities"`
			TestNLL           float64     `json:"test_nll"`
		} `json:"mnistlike"`
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	want := ref.MNISTLike
	f, err := logits.Read(filepath.Join(referenceDir, "mnistlike.npz"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := calib.New(calib.MethodIsotonic, calib.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Fit(f.Set(f.Rows(logits.SplitCalibration))); err != nil {
		t.Fatal(err)
	}
	iso := c.(*calib.Isotonic)
	for j, x := range iso.X {
		if len(x) != want.Breakpoints[j] {
			t.Errorf("class %d: %d breakpoints, scikit-learn %d", j, len(x), want.Breakpoints[j])
		}
	}
	test := f.Set(f.Rows(logits.SplitTest))
	p := make([]float64, len(test.Logits))
	c.Predict(p, test.Logits)
	if len(want.TestProbabilities) != test.Len() {
		t.Fatalf("%d reference rows, %d test rows", len(want.TestProbabilities), test.Len())
	}
	var nll float64
	for i, row := range want.TestProbabilities {
		for j, v := range row {
			if g := p[i*test.Classes+j]; math.Abs(g-v) > 1e-12 {
				t.Fatalf("test row %d, class %d: %.17g, scikit-learn %.17g", i, j, g, v)
			}
		}
		nll -= math.Log(max(p[i*test.Classes+test.Labels[i]], 1e-12))
	}
	nll /= float64(test.Len())
	if math.Abs(nll-want.TestNLL) > 1e-12 {
		t.Errorf("test NLL %.17g, scikit-learn %.17g", nll, want.TestNLL)
	}
	m, err := calib.EvaluateSet(test, c, calib.DefaultMetricBins)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(m.NLL-want.TestNLL) > 1e-12 {
		t.Errorf("EvaluateSet's NLL %.17g, scikit-learn %.17g", m.NLL, want.TestNLL)
	}
}
