package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/internal/fileio"
	"github.com/fedcalib/fedcalib/report"
)

// readReport reads the report at path and checks it as report.Check does.
func readReport(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := report.Check(b); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return string(b)
}

func TestReport(t *testing.T) {
	lf := overconfident(t, 1000)
	good := calib.NewTemperature(4)
	good.T = 3
	worse := calib.NewTemperature(4)
	worse.T = 0.5
	gp, wp := writeCalibrator(t, good), filepath.Join(t.TempDir(), "worse.json")
	if err := calib.WriteFile(wp, worse, nil, calib.Provenance{}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "r.html")
	code, stdout, stderr := fedcalib("report", "--logits", lf, "--calibrator", gp, "--calibrator", wp, "--bootstrap", "20", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if stdout != "" || !strings.Contains(stderr, "report: "+out) {
		t.Errorf("stdout %q, stderr %q", stdout, stderr)
	}
	page := readReport(t, out)
	// The metrics agree with eval's, computed by the other command.
	_, js, _ := fedcalib("eval", "--logits", lf, "--calibrator", gp, "--json")
	var ev struct {
		CWECE  float64 `json:"cwece"`
		Before struct {
			CWECE float64 `json:"cwece"`
		} `json:"before"`
	}
	if err := json.Unmarshal([]byte(js), &ev); err != nil {
		t.Fatal(err)
	}
	sum, _ := fileio.SHA256(lf)
	for _, want := range []string{
		fmt.Sprintf("%.3f%%", 100*ev.CWECE), fmt.Sprintf("%.3f%%", 100*ev.Before.CWECE),
		">PASS<", "temp against the uncalibrated model", "over.npz, 500 test rows", sum,
		"fedcalib report --bootstrap 20 --calibrator " + gp + " --calibrator " + wp + " --logits " + lf + " --out " + out,
		"over 20 resamples",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if strings.Contains(page, "<th>ε</th>") {
		t.Error("an ε column without a private fit")
	}
	// A report is not a gate: the worse calibrator first fails the gate,
	// and report says so, exiting 0.
	out2 := filepath.Join(t.TempDir(), "r2.html")
	if code, _, stderr := fedcalib("report", "--logits", lf, "--calibrator", wp, "--bootstrap", "0", "--out", out2); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	page = readReport(t, out2)
	if !strings.Contains(page, ">FAIL<") || !strings.Contains(page, "No bootstrap intervals") {
		t.Error("the report of the worse calibrator does not fail, or has intervals")
	}
}

func TestCheckAndCalibrateReport(t *testing.T) {
	lf := overconfident(t, 1000)
	worse := calib.NewTemperature(4)
	worse.T = 0.5
	dir := t.TempDir()
	out := filepath.Join(dir, "check.html")
	code, _, stderr := fedcalib("check", "--logits", lf, "--calibrator", writeCalibrator(t, worse), "--report", out)
	if code != ExitFailed {
		t.Fatalf("check of a worse calibrator: exit %d, want %d: %s", code, ExitFailed, stderr)
	}
	if page := readReport(t, out); !strings.Contains(page, ">FAIL<") || !strings.Contains(page, "cwECE improved by") {
		t.Error("check's report does not carry its failed verdict")
	}
	// A verdict by paired intervals, with the NLL bar: the report shows
	// both, with their intervals.
	good := calib.NewTemperature(4)
	good.T = 3
	paired := filepath.Join(dir, "paired.html")
	code, _, stderr = fedcalib("check", "--logits", lf, "--calibrator", writeCalibrator(t, good), "--confidence", "0.9",
		"--bootstrap", "50", "--max-nll-increase", "0.5", "--report", paired)
	if code != 0 {
		t.Fatalf("check --confidence: exit %d: %s", code, stderr)
	}
	page := readReport(t, paired)
	for _, want := range []string{"judged by paired bootstrap intervals at 90%", "NLL increase (nats)", "≤ 0.5000", "<th>interval</th>"} {
		if !strings.Contains(page, want) {
			t.Errorf("check --confidence's report lacks %q", want)
		}
	}
	cp, rp := filepath.Join(dir, "temp.json"), filepath.Join(dir, "temp.html")
	code, stdout, stderr := fedcalib("calibrate", "--central", "--method", "temp", "--logits", lf, "--out", cp, "--report", rp)
	if code != 0 {
		t.Fatalf("calibrate: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "temp fitted on 500 calibration rows of ") {
		t.Errorf("--report changed calibrate's summary: %q", stdout)
	}
	page = readReport(t, rp)
	for _, want := range []string{"500 test rows (held out)", "temp.json", "parameter t", ">PASS<", "Not a private fit"} {
		if !strings.Contains(page, want) {
			t.Errorf("calibrate's report lacks %q", want)
		}
	}
}

func TestReportErrors(t *testing.T) {
	lf := overconfident(t, 100)
	three := writeCalibrator(t, calib.NewTemperature(3))
	out := filepath.Join(t.TempDir(), "r.html")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no logits", []string{"report", "--out", out}, "report needs --logits"},
		{"no out", []string{"report", "--logits", lf}, "report needs --out"},
		{"not html", []string{"report", "--logits", lf, "--out", "r.pdf"}, "must end in .html"},
		{"over the input", []string{"report", "--logits", lf, "--out", lf}, "--out"},
		{"bins", []string{"report", "--logits", lf, "--out", out, "--bins", "0"}, "--bins is 0"},
		{"bootstrap", []string{"report", "--logits", lf, "--out", out, "--bootstrap", "-1"}, "--bootstrap is -1"},
		{"level", []string{"report", "--logits", lf, "--out", out, "--level", "1"}, "--level is 1"},
		{"gate", []string{"report", "--logits", lf, "--out", out, "--max-accuracy-drop", "2"}, "max accuracy drop"},
		{"classes", []string{"report", "--logits", lf, "--out", out, "--calibrator", three}, "is for 3 classes"},
		{"check vectors", []string{"check", "--test-vectors", t.TempDir(), "--report", out}, "--report is of calibrated probabilities"},
		{"check not html", []string{"check", "--logits", lf, "--calibrator", three, "--report", "x.txt"}, "--report x.txt"},
		{"calibrate not html", []string{"calibrate", "--central", "--method", "temp", "--logits", lf, "--out", filepath.Join(t.TempDir(), "t.json"), "--report", "x.json"}, "--report x.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := fedcalib(tc.args...)
			if code != ExitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, ExitUsage, tc.want)
			}
		})
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed report left a file")
	}
}

// TestFederatedCalibrateReport: a private federated fit's report carries
// its privacy record, the ledger's spend and the ε column.
func TestFederatedCalibrateReport(t *testing.T) {
	lf := overconfident(t, 1000)
	dir := t.TempDir()
	out, rp, ledger := filepath.Join(dir, "fedtemp.json"), filepath.Join(dir, "fedtemp.html"), filepath.Join(dir, "ledger.json")
	code, stdout, stderr := fedcalib("calibrate", "--method", "temp", "--logits", lf, "--clients", "5", "--beta", "1",
		"--rounds", "3", "--sample-rate", "1", "--epsilon", "1", "--ledger", ledger, "--quiet", "--out", out, "--report", rp)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "FedTemp over 5 clients") {
		t.Errorf("summary %q", stdout)
	}
	page := readReport(t, rp)
	for _, want := range []string{"<th>ε</th>", "ε = 1 at δ", "protocol</td><td>FedTemp, 5 clients", "Ledger <code>" + ledger + "</code>",
		"over 1 run(s)", "test rows (held out)"} {
		if !strings.Contains(page, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}
