package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

// TestCalibrateGuard runs calibrate --guard on over-confident logits
// (overconfident: true temperature 3, calibration and test rows
// alternating): temperature scaling improves the held-out rows and is
// written; histogram binning with 256 bins per class on 1,000 rows makes
// the test NLL far worse (empty and pure bins give probabilities near 0)
// and is refused, centrally and federated, leaving no file.
func TestCalibrateGuard(t *testing.T) {
	lf := overconfident(t, 2000)
	noSplit, _ := calibrateFile(t, false)
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		want    string
		written bool
	}{
		{"temp passes", []string{"--central", "--method", "temp", "--guard"}, ExitOK, "; test (1000 rows) cwECE", true},
		{"no guard, bin written", []string{"--central", "--method", "bin", "--bins-exp", "8"}, ExitOK, "NLL", true},
		{"bin refused", []string{"--central", "--method", "bin", "--bins-exp", "8", "--guard"}, ExitFailed, "--guard: on the test rows cwECE improved by -", false},
		{"bin tolerated", []string{"--central", "--method", "bin", "--bins-exp", "8", "--guard", "--guard-nll-tolerance", "1000", "--guard-cwece-tolerance", "1"}, ExitOK, "test (1000 rows)", true},
		{"federated bin refused", []string{"--method", "bin", "--bins-exp", "8", "--clients", "5", "--beta", "0.5", "--rounds", "2", "-q", "--guard"}, ExitFailed, "NLL rose by", false},
		{"federated temp passes", []string{"--method", "temp", "--clients", "5", "--beta", "0.5", "--rounds", "2", "-q", "--guard"}, ExitOK, "NLL", true},
		{"tolerance without guard", []string{"--central", "--method", "temp", "--guard-nll-tolerance", "0.1"}, ExitUsage, "need --guard", false},
		{"negative tolerance", []string{"--central", "--method", "temp", "--guard", "--guard-nll-tolerance", "-1"}, ExitUsage, "max NLL increase -1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".json")
			code, stdout, stderr := fedcalib(append([]string{"calibrate", "--logits", lf, "--out", out}, tc.args...)...)
			if code != tc.code || !strings.Contains(stdout+stderr, tc.want) {
				t.Fatalf("exit %d, output %q %q; want exit %d and %q", code, stdout, stderr, tc.code, tc.want)
			}
			if _, err := os.Stat(out); (err == nil) != tc.written {
				t.Errorf("%s written: %v, want %v", out, err == nil, tc.written)
			}
		})
	}
	out := filepath.Join(dir, "nosplit.json")
	if code, _, stderr := fedcalib("calibrate", "--central", "--method", "temp", "--guard", "--logits", noSplit, "--out", out); code != ExitUsage || !strings.Contains(stderr, "no test rows") {
		t.Errorf("no test rows: exit %d, %q", code, stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("written without test rows to judge on")
	}
}

// TestCalibrateRecordsFitMetrics checks that calibrate records the
// calibration rows' metrics in the file it writes: the numbers its
// summary prints (central), and the pooled calibration rows of the
// clients (federated).
func TestCalibrateRecordsFitMetrics(t *testing.T) {
	lf := overconfident(t, 2000)
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"central", []string{"--central", "--method", "temp"}},
		{"federated", []string{"--method", "bbq", "--clients", "5", "--beta", "0.5", "--rounds", "2", "-q"}},
	} {
		out := filepath.Join(dir, tc.name+".json")
		code, stdout, stderr := fedcalib(append([]string{"calibrate", "--logits", lf, "--out", out}, tc.args...)...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.name, code, stderr)
		}
		_, f, err := calib.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		fm := f.Provenance.FitMetrics
		// Central: the file's 1,000 calibration rows; federated: the
		// partition's, which --clients makes anew (10% of each client's).
		rows := map[string]int{"central": 1000, "federated": 203}[tc.name]
		if fm == nil || fm.Rows != rows || fm.Before.N != rows || fm.After.N != rows || fm.After.CWECE >= fm.Before.CWECE {
			t.Fatalf("%s: fit metrics %+v", tc.name, fm)
		}
		if tc.name == "central" {
			want := fmt.Sprintf("cwECE on them %.3f%% → %.3f%%", 100*fm.Before.CWECE, 100*fm.After.CWECE)
			if !strings.Contains(stdout, want) {
				t.Errorf("summary %q does not say %q", stdout, want)
			}
		}
	}
}
