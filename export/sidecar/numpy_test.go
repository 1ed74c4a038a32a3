package sidecar_test

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/calib/calibtest"
	"github.com/fedcalib/fedcalib/export/sidecar"
)

// numpyPython returns a Python interpreter that imports NumPy, skipping
// the test when there is none.
func numpyPython(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if path, err := exec.LookPath(py); err == nil && exec.Command(path, "-c", "import numpy").Run() == nil {
			return path
		}
	}
	t.Skip("no Python with NumPy: the NumPy applier of docs/SIDECAR.md is not checked here")
	return ""
}

// numpyCases returns a fitted calibrator of every method of the
// registry, the binning ones also under weightings all and changed, and
// a FedCal network whose rank weights are all 0 (every class tied with
// the top one), over c classes.
func numpyCases(t *testing.T, c int) map[string]calib.Calibrator {
	t.Helper()
	rng := rand.New(rand.NewPCG(11, 12))
	// The logits are overconfident: labels are drawn from softmax(z/2).
	s := calibtest.Overconfident(rng, 800, c, 3, 0, 2)
	out := map[string]calib.Calibrator{}
	alpha := make([]float64, c)
	for j := range alpha {
		alpha[j] = 0.3 + 0.5*float64(j)/float64(c)
	}
	for _, m := range calib.Methods() {
		fit := func() calib.Calibrator {
			cal, err := calib.New(m.Name, calib.Settings{Mexp: 4, Seed: 5})
			if err != nil {
				t.Fatal(err)
			}
			if err := cal.Fit(s); err != nil {
				t.Fatalf("%s: %v", m.Name, err)
			}
			return cal
		}
		out[m.Name] = fit()
		if m.Family != calib.Binning {
			continue
		}
		for _, w := range []calib.Weighting{calib.WeightAll, calib.WeightChanged} {
			cal := fit()
			if err := cal.(interface {
				SetWeighting(calib.Weighting, []float64) error
			}).SetWeighting(w, alpha); err != nil {
				t.Fatal(err)
			}
			out[m.Name+" "+string(w)] = cal
		}
	}
	// Isotonic's exact form (no bins), which New gives without a bin
	// exponent, under each weighting.
	for _, w := range []calib.Weighting{calib.WeightNone, calib.WeightAll, calib.WeightChanged} {
		cal, err := calib.New(calib.MethodIsotonic, calib.Settings{})
		if err != nil {
			t.Fatal(err)
		}
		if err := cal.Fit(s); err != nil {
			t.Fatal(err)
		}
		if w != calib.WeightNone {
			if err := cal.(calib.Binner).SetWeighting(w, alpha); err != nil {
				t.Fatal(err)
			}
		}
		out["isotonic exact "+string(w)] = cal
	}
	collapsed := calib.NewFedCalMLP(c, 3)
	clear(collapsed.W3)
	for j := range collapsed.B3 {
		collapsed.B3[j] = -1000
	}
	out["fedcal collapsed"] = collapsed
	return out
}

// TestNumPyApplier runs docs/sidecar_apply.py, the NumPy applier written
// from docs/SIDECAR.md alone, on the calibrator file of every method,
// weighting and input kind, and compares its probabilities with Apply's:
// within 1e-7 everywhere. The rows include ties (a tied top pair, a row
// all equal) and, for probabilities, zeros (floored at 1e-12).
func TestNumPyApplier(t *testing.T) {
	py := numpyPython(t)
	const c = 4
	rng := rand.New(rand.NewPCG(3, 4))
	var logitRows, probRows [][]float32
	for i := range 60 {
		row := make([]float32, c)
		for j := range row {
			row[j] = float32(rng.NormFloat64() * float64(1+i%5*3))
		}
		logitRows = append(logitRows, row)
	}
	logitRows = append(logitRows, []float32{2, 2, 1, -1}, []float32{0.5, 0.5, 0.5, 0.5}, []float32{40, -40, 3, 3})
	for _, z := range logitRows {
		p := make([]float64, c)
		for j, v := range z {
			p[j] = float64(v)
		}
		calib.Softmax(p, p)
		row := make([]float32, c)
		for j, v := range p {
			row[j] = float32(v)
		}
		probRows = append(probRows, row)
	}
	probRows = append(probRows, []float32{1, 0, 0, 0}, []float32{0.5, 0.5, 0, 0})
	dir := t.TempDir()
	script, err := filepath.Abs("../../docs/sidecar_apply.py")
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for name, cal := range numpyCases(t, c) {
		for _, kind := range []string{calib.InputLogits, calib.InputProbabilities} {
			rows := logitRows
			if kind == calib.InputProbabilities {
				rows = probRows
			}
			var buf bytes.Buffer
			if err := calib.Encode(&buf, cal, nil, calib.Provenance{Input: kind}); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, "c.json")
			if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := sidecar.Load(&buf)
			if err != nil {
				t.Fatal(err)
			}
			var flat []float32
			wide := make([][]float64, len(rows))
			for i, r := range rows {
				flat = append(flat, r...)
				for _, v := range r {
					wide[i] = append(wide[i], float64(v)) // exact: float32 → float64
				}
			}
			want, err := s.Apply(flat)
			if err != nil {
				t.Fatalf("%s, %s: %v", name, kind, err)
			}
			in, out := filepath.Join(dir, "rows.json"), filepath.Join(dir, "out.json")
			b, _ := json.Marshal(wide)
			if err := os.WriteFile(in, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if msg, err := exec.Command(py, script, file, in, out).CombinedOutput(); err != nil {
				t.Fatalf("%s, %s: %v\n%s", name, kind, err, msg)
			}
			var got [][]float64
			b, err = os.ReadFile(out)
			if err != nil || json.Unmarshal(b, &got) != nil || len(got) != len(rows) {
				t.Fatalf("%s, %s: %d rows back (%v)", name, kind, len(got), err)
			}
			for i := range got {
				for j, v := range got[i] {
					d := math.Abs(v - float64(want[i*c+j]))
					worst = max(worst, d)
					if !(d <= 1e-7) {
						t.Errorf("%s, %s: row %d class %d: NumPy %.9g, Go %.9g (row %v)", name, kind, i, j, v, want[i*c+j], rows[i])
					}
				}
			}
		}
	}
	t.Logf("largest |NumPy − Go| over every method, weighting and input kind: %.3g", worst)
}
