package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

// extremeLogits is the reference logits file with 0.5% of rows of two tied
// top logits and the rest at −1e4 (calib/testdata/reference).
const extremeLogits = "../calib/testdata/reference/extreme.npz"

// testNLL matches the held-out NLLs of calibrate's summary line.
var testNLL = regexp.MustCompile(`test \(\d+ rows\) cwECE [0-9.]+% → [0-9.]+%, NLL ([0-9.]+) → ([0-9.]+)`)

// TestCalibrateExtremeLogits runs every central method on the extreme
// logits: whenever the calibrator makes the test rows' NLL worse, the
// summary line says so, and --guard refuses it (exit 1, nothing
// written) when it is worse by more than the guard's tolerance. Temperature
// ends at its upper bound, and its file and line say so; every scaling
// fit's file records its fit report.
func TestCalibrateExtremeLogits(t *testing.T) {
	if testing.Short() {
		t.Skip("fits every method to 2000 rows")
	}
	dir := t.TempDir()
	worse := 0
	for _, m := range calib.Methods() {
		out := filepath.Join(dir, m.Name+".json")
		args := []string{"calibrate", "--central", "--method", m.Name, "--logits", extremeLogits}
		switch m.Name {
		case calib.MethodDirichlet:
			// The corners of the default grid, to keep the test short.
			args = append(args, "--folds", "3", "--lambda-grid", "0,9000", "--mu-grid", "0,1000")
		case calib.MethodFedCal:
			args = append(args, "--max-iterations", "20")
		}
		code, stdout, stderr := fedcalib(append(args, "--out", out)...)
		if code != ExitOK {
			t.Fatalf("%s: exit %d: %s", m.Name, code, stderr)
		}
		got := testNLL.FindStringSubmatch(stdout)
		if got == nil {
			t.Fatalf("%s: no held-out NLL in %q", m.Name, stdout)
		}
		before, _ := strconv.ParseFloat(got[1], 64)
		after, _ := strconv.ParseFloat(got[2], 64)
		warned := strings.Contains(stdout, "WARNING: the calibrator makes the test rows' NLL worse")
		t.Logf("%-9s NLL %v → %v, warned %v", m.Name, before, after, warned)
		if (after > before) != warned {
			t.Errorf("%s: test NLL %v → %v, warning given %v: want one exactly when it is worse: %s", m.Name, before, after, warned, stdout)
		}
		_, file, err := calib.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if m.Family == calib.Scaling && file.Provenance.Fit == nil {
			t.Errorf("%s: the file records no fit report", m.Name)
		}
		if m.Name == calib.MethodTemp {
			if r := file.Provenance.Fit; r == nil || len(r.AtBound) != 1 || !strings.Contains(stdout, "WARNING: parameters at a bound") {
				t.Errorf("temp: fit report %+v, line %q: want T at its upper bound, and a warning", r, stdout)
			}
		}
		if after > before {
			worse++
		}
		if m.Family != calib.Scaling || m.Name == calib.MethodFedCal {
			continue // the guard judges every method alike: the scaling fits, which are fast, show it
		}
		guarded := filepath.Join(dir, m.Name+"-guarded.json")
		code, _, stderr = fedcalib(append(args, "--guard", "--out", guarded)...)
		_, statErr := os.Stat(guarded)
		switch refuse := after-before > 0.001; {
		case refuse && (code != ExitFailed || statErr == nil || !strings.Contains(stderr, "NLL")):
			t.Errorf("%s: NLL %v → %v: --guard exit %d (%s), file written %v: want exit %d and nothing written", m.Name, before, after, code, stderr, statErr == nil, ExitFailed)
		case !refuse && code != ExitOK && !strings.Contains(stderr, "cwECE"):
			t.Errorf("%s: NLL %v → %v: --guard exit %d: %s", m.Name, before, after, code, stderr)
		}
	}
	if worse == 0 {
		t.Error("no method made the test NLL worse: the file no longer tests the warning")
	}
}

// TestCalibrateFitFlags checks --max-iterations and dirichlet's fit
// flags: a capped fit that stops short says so in its line and file; the
// chosen variant, λ and μ are printed and recorded; misuse exits 2.
func TestCalibrateFitFlags(t *testing.T) {
	path, _ := calibrateFile(t, true)
	dir := t.TempDir()
	out := filepath.Join(dir, "m.json")
	code, stdout, stderr := fedcalib("calibrate", "--central", "--method", "matrix", "--max-iterations", "1", "--logits", path, "--out", out)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	_, file, err := calib.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if r := file.Provenance.Fit; r == nil || r.Converged || r.MaxIterations != 1 || !strings.Contains(stdout, "WARNING: the fit did not converge") {
		t.Errorf("--max-iterations 1: report %+v, line %q: want an unconverged fit of at most 1 iteration, and a warning", r, stdout)
	}

	code, stdout, stderr = fedcalib("calibrate", "--central", "--method", "dirichlet", "--variant", "diag", "--folds", "3", "--mu-grid", "0,0.5", "--logits", path, "--out", out)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if _, file, err = calib.ReadFile(out); err != nil {
		t.Fatal(err)
	}
	d := file.Provenance.Fit.Dirichlet
	if d == nil || d.Variant != calib.DirichletDiag || d.Folds != 3 || d.Lambda != 0 || (d.Mu != 0 && d.Mu != 0.5) ||
		!strings.Contains(stdout, "diag variant, λ = 0, μ = "+strconv.FormatFloat(d.Mu, 'g', -1, 64)+" (3-fold cross-validation") {
		t.Errorf("dirichlet --variant diag --folds 3 --mu-grid 0,0.5: choice %+v, line %q", d, stdout)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--central", "--method", "matrix", "--max-iterations", "-1"}, "--max-iterations -1"},
		{[]string{"--central", "--method", "bin", "--max-iterations", "5"}, "not bin's"},
		{[]string{"--central", "--method", "dirichlet", "--variant", "upper"}, `variant "upper"`},
		{[]string{"--central", "--method", "dirichlet", "--folds", "0"}, "--folds 0"},
		{[]string{"--central", "--method", "dirichlet", "--lambda-grid", "1,-2"}, "lambda grid holds -2"},
		{[]string{"--central", "--method", "matrix", "--variant", "diag"}, "not matrix's"},
		{[]string{"--central", "--method", "dirichlet", "--lambda", "1", "--folds", "3"}, "give one or the other"},
		{[]string{"--method", "dirichlet", "--folds", "3"}, "a federated one fits the fixed"},
	} {
		args := append([]string{"calibrate", "--logits", path, "--out", filepath.Join(dir, "bad.json")}, tc.args...)
		code, _, stderr := fedcalib(args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q: want %d and a message containing %q", tc.args, code, stderr, ExitUsage, tc.want)
		}
	}
}
