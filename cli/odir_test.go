package cli

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// TestCalibrateODIR checks --lambda and --mu: a central dirichlet fit with
// them is the fit of calib.New with that fixed regularisation; a
// federated one runs; bad values and other methods exit 2.
func TestCalibrateODIR(t *testing.T) {
	path, f := calibrateFile(t, true)
	dir := t.TempDir()
	out := filepath.Join(dir, "dir.json")
	if code, _, stderr := fedcalib("calibrate", "--central", "--method", "dirichlet", "--lambda", "0.5", "--mu", "0.2", "--logits", path, "--out", out); code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	c, _, err := calib.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := calib.New(calib.MethodDirichlet, calib.Settings{ODIR: &calib.ODIR{Lambda: 0.5, Mu: 0.2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := want.Fit(f.Set(f.Rows(logits.SplitCalibration))); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.(calib.Scaler).Params(), want.(calib.Scaler).Params()) {
		t.Errorf("calibrate --lambda 0.5 --mu 0.2 wrote %v, the fit with λ = 0.5, μ = 0.2 is %v", c.(calib.Scaler).Params(), want.(calib.Scaler).Params())
	}

	fedIn, _ := fedLogitsFile(t, 400, 4, 5)
	if code, _, stderr := fedcalib("calibrate", "--method", "dirichlet", "--lambda", "0", "--logits", fedIn, "--rounds", "2", "--quiet", "--out", filepath.Join(dir, "fed.json")); code != ExitOK {
		t.Fatalf("federated: exit %d: %s", code, stderr)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--central", "--method", "dirichlet", "--lambda", "-1"}, "--lambda -1: want a finite number ≥ 0"},
		{[]string{"--central", "--method", "dirichlet", "--mu", "NaN"}, "--mu NaN: want a finite number ≥ 0"},
		{[]string{"--method", "dirichlet", "--mu", "-0.5"}, "--mu -0.5: want a finite number ≥ 0"},
		{[]string{"--central", "--method", "matrix", "--lambda", "0.1"}, "--lambda and --mu set dirichlet's regularisation, not matrix's"},
		{[]string{"--method", "bbq", "--mu", "0.1"}, "not bbq's"},
	} {
		args := append([]string{"calibrate", "--logits", path, "--out", filepath.Join(dir, "bad.json")}, tc.args...)
		code, _, stderr := fedcalib(args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q: want %d and a message containing %q", tc.args, code, stderr, ExitUsage, tc.want)
		}
	}
}
