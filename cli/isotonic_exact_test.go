package cli

import (
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

// TestExactIsotonicEndToEnd runs the exact isotonic calibrator through
// the commands a user runs: infer writes the tiny model's logits,
// calibrate --central --method isotonic fits exactly (no --bins-exp),
// export appends the piecewise-linear graph (verified in ONNX Runtime
// before it is written), and check judges the calibrated graph equal to
// the plain model with the calibrator file applied in Go.
func TestExactIsotonicEndToEnd(t *testing.T) {
	requireORT(t)
	const model = "../infer/testdata/tiny.onnx"
	images, cf, out, stdout := inferCalibrateExport(t, model, "--method", "isotonic")
	if !strings.Contains(stdout, ", exact, ") {
		t.Errorf("calibrate summary %q does not say the fit is exact", stdout)
	}
	c, f, err := calib.ReadFile(cf)
	if err != nil {
		t.Fatal(err)
	}
	if iso := c.(*calib.Isotonic); !iso.Exact() || f.Provenance.Protocol != "central" {
		t.Fatalf("calibrator exact %v, protocol %q: want an exact central fit", iso.Exact(), f.Provenance.Protocol)
	}
	g, p := checkTwice(t, images, []string{"--max-accuracy-drop", "1"}, []string{"--model", out}, []string{"--model", model, "--calibrator", cf})
	if g.Method != calib.MethodIsotonic || g.Before != p.Before || g.After.Accuracy != p.After.Accuracy ||
		abs(g.After.CWECE-p.After.CWECE) > 1e-6 || abs(g.After.NLL-p.After.NLL) > 1e-5 {
		t.Errorf("calibrated graph %+v\nGo calibrator  %+v", g, p)
	}
}
