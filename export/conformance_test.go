package export_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/export"
	"github.com/fedcalib/fedcalib/export/sidecar"
	"github.com/fedcalib/fedcalib/infer"
)

// The export half of the conformance suite of package calib (see
// calib/conformance_test.go): every method × weighting of the registry,
// as fitted on calib's seeded miscalibrated set and stored in calib's
// golden sidecar files, must give the same probabilities through the
// sidecar package as through calib's Predict, and through its exported
// ONNX graph in ONNX Runtime to export.Tolerance (1e-5).

// conformanceDir holds calib's golden sidecar files, one per method ×
// weighting, and the logits they are applied to.
const conformanceDir = "../calib/testdata/sidecar"

// conformanceWeightings are the weightings with a golden file: all three
// for binning methods, none for scaling.
func conformanceWeightings(m calib.Method) []calib.Weighting {
	if m.Family == calib.Binning {
		return []calib.Weighting{calib.WeightNone, calib.WeightAll, calib.WeightChanged}
	}
	return []calib.Weighting{calib.WeightNone}
}

// conformanceLogits returns calib's golden logits as float32 rows, the
// form a serving stack and the ONNX graph take.
func conformanceLogits(t *testing.T) []float32 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(conformanceDir, "logits.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Classes int         `json:"classes"`
		Logits  [][]float64 `json:"logits"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	var out []float32
	for _, r := range f.Logits {
		for _, v := range r {
			out = append(out, float32(v))
		}
	}
	return out
}

// goPredict is the reference: calib's Predict in float64 on the float32
// logits.
func goPredict(c calib.Calibrator, logits []float32) []float64 {
	z := make([]float64, len(logits))
	for i, v := range logits {
		z[i] = float64(v)
	}
	p := make([]float64, len(z))
	c.Predict(p, z)
	return p
}

// ortMissing reports whether ONNX Runtime is not installed (make setup
// installs it); any other failure to load it fails the test.
func ortMissing(t *testing.T) bool {
	t.Helper()
	if _, err := infer.InitRuntime(""); err != nil {
		if errors.Is(err, infer.ErrRuntimeNotFound) {
			t.Logf("ONNX Runtime not installed (run make setup): %v", err)
			return true
		}
		t.Fatal(err)
	}
	return false
}

func TestConformance(t *testing.T) {
	golden := conformanceLogits(t)
	noORT := ortMissing(t)
	for _, m := range calib.Methods() {
		for _, w := range conformanceWeightings(m) {
			name := m.Name + "-" + string(w)
			t.Run(name, func(t *testing.T) {
				file, err := os.ReadFile(filepath.Join(conformanceDir, name+".json"))
				if err != nil {
					t.Fatalf("%v: every method × weighting needs a golden sidecar file (go test ./calib -run TestGolden -update)", err)
				}
				c, _, err := calib.Decode(bytes.NewReader(file))
				if err != nil {
					t.Fatal(err)
				}
				if c.Method() != m.Name {
					t.Fatalf("%s.json holds method %q", name, c.Method())
				}
				logits := append(append([]float32(nil), golden...), export.Probe(c, 1)...)
				want := goPredict(c, logits)
				t.Run("Sidecar", func(t *testing.T) { checkSidecar(t, file, c, logits, want) })
				t.Run("ONNX", func(t *testing.T) {
					if noORT {
						t.Skip("ONNX Runtime not installed (run make setup)")
					}
					checkONNX(t, c, logits, want)
				})
			})
		}
	}
}

// checkSidecar checks that export/sidecar, loading the file, gives the
// float32 rounding of Predict bit for bit, and describes the calibrator.
func checkSidecar(t *testing.T, file []byte, c calib.Calibrator, logits []float32, want []float64) {
	t.Helper()
	sc, err := sidecar.Load(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Method() != c.Method() || sc.Classes() != c.Classes() || sc.File().Method != c.Method() {
		t.Errorf("sidecar says method %q, %d classes, file method %q", sc.Method(), sc.Classes(), sc.File().Method)
	}
	got, err := sc.Apply(logits)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("sidecar gave %d probabilities for %d logits", len(got), len(want))
	}
	for i, g := range got {
		if math.Float32bits(g) != math.Float32bits(float32(want[i])) {
			t.Fatalf("row %d, class %d: sidecar %.9g, Predict %.9g", i/c.Classes(), i%c.Classes(), g, float32(want[i]))
		}
	}
}

// checkONNX runs the standalone ONNX form of c in ONNX Runtime and
// compares it with Predict to export.Tolerance, then checks that
// export.Verify, which does the same, agrees.
func checkONNX(t *testing.T, c calib.Calibrator, logits []float32, want []float64) {
	t.Helper()
	const tol = 1e-5
	if export.Tolerance > tol {
		t.Errorf("export.Tolerance is %g, looser than SPEC §9's 1e-5", export.Tolerance)
	}
	m, err := export.Standalone(c)
	if err != nil {
		t.Fatal(err)
	}
	g, err := infer.OpenGraph(m.Bytes(), infer.GraphOptions{Threads: 1, Inputs: []string{"logits"}, Outputs: []string{export.DefaultOutput}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	k := c.Classes()
	out, err := g.Run(&infer.Batch{Shape: []int64{int64(len(logits) / k), int64(k)}, Float: logits})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || len(out[0]) != len(want) {
		t.Fatalf("ONNX Runtime gave %d outputs", len(out))
	}
	var worst float64
	for i, v := range out[0] {
		d := math.Abs(float64(v) - want[i])
		if !(d <= tol) {
			t.Fatalf("row %d %v, class %d: ONNX %.9g, Predict %.9g (difference %.3g > %g)", i/k, logits[i/k*k:i/k*k+k], i%k, v, want[i], d, tol)
		}
		worst = max(worst, d)
	}
	t.Logf("%d rows: largest difference %.3g", len(logits)/k, worst)
	if err := export.Verify(c, logits, export.Options{}); err != nil {
		t.Errorf("export.Verify disagrees with the comparison above: %v", err)
	}
}
