package cli

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/dp"
)

// TestCalibrateLedger spends ε = 1 three times on one dataset with a
// budget of 1.5: under zCDP two runs compose to ε ≈ 1.46 and fit, the
// third would bring ε to ≈ 1.82 and is refused before fitting, with no
// calibrator written.
func TestCalibrateLedger(t *testing.T) {
	in, _ := fedLogitsFile(t, 1200, 4, 5)
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger.json")
	calibrate := func(out string, extra ...string) (string, string, int) {
		args := append([]string{"calibrate", "--method", "temp", "--logits", in, "--rounds", "3", "--sample-rate", "0.5",
			"--epsilon", "1", "--quiet", "--ledger", ledger, "--out", filepath.Join(dir, out)}, extra...)
		code, stdout, stderr := fedcalib(args...)
		return stdout, stderr, code
	}
	rho1, _ := dp.ZCDPRho(1, 1e-5)
	eps2, _ := dp.ZCDPEpsilon(2*rho1, 1e-5)
	eps3, _ := dp.ZCDPEpsilon(3*rho1, 1e-5)
	for i, out := range []string{"a.json", "b.json"} {
		_, stderr, code := calibrate(out, "--budget", "1.5")
		if code != 0 {
			t.Fatalf("run %d: exit %d: %s", i, code, stderr)
		}
		want := fmt.Sprintf("the dataset has spent ε %.4g in all (budget 1.5)", []float64{1, eps2}[i])
		if !strings.Contains(stderr, want) {
			t.Errorf("run %d: stderr %q lacks %q", i, stderr, want)
		}
	}
	_, stderr, code := calibrate("c.json", "--budget", "1.5")
	if code == 0 || !strings.Contains(stderr, fmt.Sprintf("would bring it to %.6g, above the budget 1.5", eps3)) {
		t.Fatalf("third run: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "c.json")); !os.IsNotExist(err) {
		t.Errorf("a refused run wrote its calibrator: %v", err)
	}

	f, err := dp.ReadLedgerFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Datasets) != 1 {
		t.Fatalf("%d datasets in the ledger, want 1", len(f.Datasets))
	}
	for key, d := range f.Datasets {
		if len(key) != 64 || !strings.HasPrefix(d.Description, "logits.npz: 1200 examples, 4 classes") || len(d.Runs) != 2 ||
			math.Abs(d.Epsilon-eps2) > 1e-9 || d.Runs[1].Calibrator != filepath.Join(dir, "b.json") || d.Runs[0].Method != "temp" {
			t.Errorf("dataset %s: %+v", key, d)
		}
	}

	// privacy --ledger prints it, as text or as the file itself.
	code, stdout, stderr := fedcalib("privacy", "--ledger", ledger)
	if code != 0 || !strings.Contains(stdout, fmt.Sprintf("epsilon %s at delta 1e-05 (zcdp", trimG(eps2))) || strings.Count(stdout, "temp") != 2 {
		t.Errorf("privacy --ledger: exit %d: %s%s", code, stdout, stderr)
	}
	code, stdout, _ = fedcalib("privacy", "--ledger", ledger, "--json")
	var back dp.LedgerFile
	if code != 0 || json.Unmarshal([]byte(stdout), &back) != nil || back.Format != dp.LedgerFormatV1 || len(back.Datasets) != 1 {
		t.Errorf("privacy --ledger --json: exit %d: %s", code, stdout)
	}
}

// trimG formats v as WriteText does.
func trimG(v float64) string { return fmt.Sprintf("%.6g", v) }

func TestCalibrateLedgerErrors(t *testing.T) {
	in, _ := fedLogitsFile(t, 600, 3, 4)
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger.json")
	base := []string{"calibrate", "--method", "temp", "--logits", in, "--quiet", "--out", filepath.Join(dir, "c.json")}
	if code, _, stderr := fedcalib(append(base, "--epsilon", "1", "--ledger", ledger)...); code != 0 {
		t.Fatalf("first run: %s", stderr)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"budget without ledger", []string{"--epsilon", "1", "--budget", "2"}, "--budget limits the spend recorded in a ledger: add --ledger F"},
		{"ledger without epsilon", []string{"--ledger", ledger}, "--ledger records the privacy of private runs and needs --epsilon"},
		{"zero budget", []string{"--epsilon", "1", "--ledger", ledger, "--budget", "0"}, "--budget is 0: want a finite ε > 0"},
		{"infinite budget", []string{"--epsilon", "1", "--ledger", ledger, "--budget", "Inf"}, "--budget is +Inf"},
		{"another accountant", []string{"--epsilon", "1", "--ledger", ledger, "--accountant", "rdp"}, "is accounted under zcdp at delta 1e-05, this run under rdp"},
		{"another delta", []string{"--epsilon", "1", "--ledger", ledger, "--delta", "1e-6"}, "use --accountant zcdp --delta 1e-05"},
		{"central", []string{"--central", "--ledger", ledger}, "--ledger applies to federated runs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := fedcalib(append(slicesClone(base), tt.args...)...)
			if code != 2 || !strings.Contains(stderr, tt.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Errorf("exit %d, stderr %q; want 2 and one line containing %q", code, stderr, tt.want)
			}
		})
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"privacy", "--ledger", filepath.Join(dir, "none.json")}, "none.json does not exist"},
		{[]string{"privacy", "--ledger", ledger, "--epsilon", "1"}, "--ledger prints a ledger and takes no --epsilon"},
	} {
		if code, _, stderr := fedcalib(tt.args...); code != 2 || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tt.args, code, stderr, tt.want)
		}
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }
