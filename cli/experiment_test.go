package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// experimentFixture writes a logits file, a partition of it into 5
// clients and a configuration running FedBBQ (with and without weighting)
// and FedTemp over 2 seeds, with a plot; it returns the configuration's
// path.
func experimentFixture(t *testing.T) string {
	t.Helper()
	in, _ := fedLogitsFile(t, 600, 4, 0)
	dir := t.TempDir()
	part := filepath.Join(dir, "p.json")
	if code, _, stderr := fedcalib("partition", "--data-or-logits", in, "--clients", "5", "--beta", "1", "--out", part); code != 0 {
		t.Fatal(stderr)
	}
	cfg := filepath.Join(dir, "exp.yaml")
	os.WriteFile(cfg, []byte(`
name: cli-test
datasets:
  - name: fixture
    logits: `+in+`
    partition: {file: p.json}
grid:
  method: [bbq, temp]
  weighting: [none, all]
  rounds: [1, 3]
  sample_rate: 0.6
  seed: [1, 2]
plots:
  - {name: rounds, x: rounds, y: cwece}
`), 0o644)
	return cfg
}

func TestExperiment(t *testing.T) {
	cfg := experimentFixture(t)
	out := filepath.Join(t.TempDir(), "results")
	code, stdout, stderr := fedcalib("experiment", "--config", cfg, "--out", out, "--workers", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// 2 Ts × 2 seeds × (FedBBQ, FedBBQ all weight, FedTemp).
	if !strings.Contains(stdout, "cli-test: 12 runs (12 computed, 0 reused)") || stderr != "" {
		t.Errorf("stdout %q, stderr %q", stdout, stderr)
	}
	for _, name := range []string{"runs.csv", "timings.csv", "summary.md", "timings.md", "rounds-fixture.png"} {
		if !strings.Contains(stdout, "wrote "+filepath.Join(out, name)) {
			t.Errorf("stdout does not report %s: %q", name, stdout)
		}
	}
	runs, err := os.ReadFile(filepath.Join(out, "runs.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(runs), "\n"); n != 13 {
		t.Errorf("runs.csv has %d lines, want a header and 12 rows", n)
	}
	summary, _ := os.ReadFile(filepath.Join(out, "summary.md"))
	if !strings.Contains(string(summary), "| Dataset | T | Base | FedBBQ | FedBBQ all weight | FedTemp |") {
		t.Errorf("summary.md:\n%s", summary)
	}

	// Again, on one worker: nothing recomputed, the same runs.csv.
	code, stdout, _ = fedcalib("experiment", "--config", cfg, "--out", out, "--workers", "1", "-q")
	if code != 0 || !strings.Contains(stdout, "12 runs (0 computed, 12 reused)") {
		t.Errorf("rerun: exit %d, %q", code, stdout)
	}
	if again, _ := os.ReadFile(filepath.Join(out, "runs.csv")); string(again) != string(runs) {
		t.Error("rerun changed runs.csv")
	}
}

func TestExperimentErrors(t *testing.T) {
	cfg := experimentFixture(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("datasets: [{name: a, logits: a.npz, partition: {natural: true}}]\ngrid: {method: bbqq, rounds: 1, seed: 1}\n"), 0o644)
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--out", dir}, "needs --config"},
		{[]string{"--config", cfg}, "needs --out"},
		{[]string{"--config", cfg, "--out", dir, "--workers", "-1"}, "--workers is -1"},
		{[]string{"--config", cfg, "--out", dir, "--workers", "1000000000"}, "--workers is 1000000000: want 0 to 1024"},
		{[]string{"--config", cfg, "--out", file}, "is a file: give a directory"},
		{[]string{"--config", filepath.Join(dir, "none.yaml"), "--out", dir}, "none.yaml"},
		{[]string{"--config", bad, "--out", dir}, bad + `: grid: method[0]: unknown method "bbqq"`},
		{[]string{"--config", bad + "x", "--out", dir}, "no such file"},
	} {
		code, _, stderr := fedcalib(append([]string{"experiment"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line with %q", tc.args, code, stderr, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "runs.csv")); err == nil {
		t.Error("a failed experiment wrote runs.csv")
	}
}

func TestExperimentHelp(t *testing.T) {
	code, stdout, _ := fedcalib("experiment", "--help")
	for _, want := range []string{"--config", "--out", "--workers", "--quiet", "Examples:", "runs.csv", "byte-identical"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}
