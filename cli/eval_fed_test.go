package cli

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// fedEvalFixture writes a logits file of 600 rows of 4 classes, a
// partition of it into 20 clients and a central temperature calibrator.
func fedEvalFixture(t *testing.T) (in, part, cal string) {
	t.Helper()
	in, _ = fedLogitsFile(t, 600, 4, 0)
	dir := t.TempDir()
	part, cal = filepath.Join(dir, "p.json"), filepath.Join(dir, "temp.json")
	if code, _, stderr := fedcalib("partition", "--data-or-logits", in, "--clients", "20", "--beta", "0.5", "--out", part); code != 0 {
		t.Fatal(stderr)
	}
	if code, _, stderr := fedcalib("calibrate", "--central", "--method", "temp", "--logits", in, "--out", cal); code != 0 {
		t.Fatal(stderr)
	}
	return in, part, cal
}

// TestEvalFederatedEqualsPooled checks eval --federated against eval of
// the pooled test rows of the same partition, key by key and exactly.
func TestEvalFederatedEqualsPooled(t *testing.T) {
	in, part, cal := fedEvalFixture(t)
	for _, extra := range [][]string{nil, {"--calibrator", cal}, {"--bins", "7"}} {
		args := append([]string{"eval", "--logits", in, "--partition", part, "--json"}, extra...)
		code, pooled, errs := fedcalib(args...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d: %s", extra, code, errs)
		}
		code, fed, errs := fedcalib(append(args, "--federated")...)
		if code != ExitOK {
			t.Fatalf("%v --federated: exit %d: %s", extra, code, errs)
		}
		p, f := decodeReport(t, pooled), decodeReport(t, fed)
		for _, key := range []string{"n", "classes", "accuracy", "cwece", "ece", "nll", "brier", "bins", "split", "method"} {
			if p[key] != f[key] {
				t.Errorf("%v: %s federated %v, pooled %v", extra, key, f[key], p[key])
			}
		}
		if f["federated"] != true || f["clients"] != 20.0 || f["privacy"] != nil {
			t.Errorf("%v: federated %v, clients %v, privacy %v", extra, f["federated"], f["clients"], f["privacy"])
		}
		if extra != nil && extra[0] == "--calibrator" {
			pb, fb := p["before"].(map[string]any), f["before"].(map[string]any)
			if pb["cwece"] != fb["cwece"] || pb["accuracy"] != fb["accuracy"] {
				t.Errorf("before: federated %v, pooled %v", fb, pb)
			}
		}
	}
	code, out, errs := fedcalib("eval", "--logits", in, "--partition", part, "--federated", "--calibrator", cal)
	if code != ExitOK || !strings.Contains(out, "federated evaluation over 20 clients") || !strings.Contains(out, "uncalibrated") || !strings.Contains(out, "temp") {
		t.Errorf("table: exit %d\n%s%s", code, out, errs)
	}
}

func TestEvalFederatedPrivate(t *testing.T) {
	in, part, cal := fedEvalFixture(t)
	ledger := filepath.Join(t.TempDir(), "ledger.json")
	args := []string{"eval", "--logits", in, "--partition", part, "--calibrator", cal, "--federated", "--json",
		"--epsilon", "1", "--delta", "1e-5", "--clip", "20", "--seed", "7"}
	code, a, errs := fedcalib(append(args, "--ledger", ledger)...)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(errs, "this run spent ε 1") {
		t.Errorf("stderr does not report the ledger's spend: %q", errs)
	}
	code, b, errs := fedcalib(args...)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if a != b {
		t.Errorf("the same seed gives different reports:\n%s\n%s", a, b)
	}
	m := decodeReport(t, a)
	pr, _ := m["privacy"].(map[string]any)
	rho, _ := dp.ZCDPRho(1, 1e-5)
	if pr == nil || math.Abs(pr["epsilon"].(float64)-1) > 1e-6 || math.Abs(pr["sigma"].(float64)-20/math.Sqrt(2*rho)) > 1e-6 || pr["clip"] != 20.0 {
		t.Errorf("privacy %v: want ε 1, σ = 20/√(2ρ) = %v, clip 20", pr, 20/math.Sqrt(2*rho))
	}
	if m["before"] != nil || m["top_label"] != nil || m["method"] != "temp" {
		t.Errorf("a private evaluation measures the calibrator only: before %v, top_label %v, method %v", m["before"], m["top_label"], m["method"])
	}
	f, err := dp.ReadLedgerFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Datasets {
		if len(d.Runs) != 1 || d.Runs[0].Kind != dp.KindEvaluation || d.Runs[0].Method != "temp" || d.Runs[0].Calibrator != cal {
			t.Errorf("ledger runs %+v: want one evaluation of temp", d.Runs)
		}
	}
	code, out, errs := fedcalib("privacy", "--ledger", ledger)
	if code != ExitOK || !strings.Contains(out, "evaluation of temp") {
		t.Errorf("privacy --ledger: exit %d\n%s%s", code, out, errs)
	}
	code, out, _ = fedcalib("eval", "--logits", in, "--partition", part, "--federated", "--epsilon", "2", "--seed", "1")
	if code != ExitOK || !strings.Contains(out, "ε = 2 spent") || !strings.Contains(out, "private: noisy") {
		t.Errorf("table: exit %d\n%s", code, out)
	}
}

func TestEvalFederatedErrors(t *testing.T) {
	in, part, cal := fedEvalFixture(t)
	noClients, _ := fedLogitsFile(t, 100, 4, 0)
	base := []string{"eval", "--logits", in, "--partition", part}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--epsilon", "1"}, "--epsilon applies to federated evaluation: add --federated"},
		{[]string{"--ledger", "l.json"}, "--ledger applies to federated evaluation"},
		{[]string{"--federated", "--clip", "5"}, "--clip sets up privacy and needs --epsilon"},
		{[]string{"--federated", "--epsilon", "1", "--clip", "0"}, "--clip is 0"},
		{[]string{"--federated", "--epsilon", "0"}, "--epsilon is 0"},
		{[]string{"--federated", "--epsilon", "1", "--delta", "1"}, "--delta is 1"},
		{[]string{"--federated", "--delta", "1e-6"}, "--delta sets up privacy and needs --epsilon"},
		{[]string{"--federated", "--epsilon", "1", "--accountant", "x"}, "--accountant \"x\""},
		{[]string{"--federated", "--seed", "3"}, "--seed seeds the noise of --epsilon"},
		{[]string{"--federated", "--bootstrap", "10"}, "--bootstrap needs every probability"},
		{[]string{"--federated", "--split", "all"}, "--split \"all\""},
		{[]string{"--federated", "--bins", "0"}, "--bins is 0"},
		{[]string{"--federated", "--calibrator", cal, "--calibrator", cal}, "at most once"},
		{[]string{"--federated", "--ledger", "l.json"}, "--ledger records the privacy of private runs and needs --epsilon"},
		{[]string{"--federated", "--epsilon", "1", "--budget", "1"}, "--budget limits the spend recorded in a ledger"},
	} {
		code, _, stderr := fedcalib(append(base, tc.args...)...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	code, _, stderr := fedcalib("eval", "--logits", noClients, "--federated")
	if code != ExitUsage || !strings.Contains(stderr, "no client column, so --federated needs the clients from --partition") {
		t.Errorf("no clients: exit %d, %q", code, stderr)
	}
	// A budget already spent refuses the evaluation before it runs.
	ledger := filepath.Join(t.TempDir(), "ledger.json")
	priv := append(base, "--federated", "--epsilon", "1", "--ledger", ledger, "--budget", "1.2")
	if code, _, stderr := fedcalib(priv...); code != ExitOK {
		t.Fatal(stderr)
	}
	before, _ := os.ReadFile(ledger)
	if code, _, stderr := fedcalib(priv...); code != ExitUsage || !strings.Contains(stderr, "above the budget") {
		t.Errorf("over budget: exit %d, %q", code, stderr)
	}
	if after, _ := os.ReadFile(ledger); string(after) != string(before) {
		t.Error("a refused evaluation changed the ledger")
	}
}

func TestEvalHelpShowsFederated(t *testing.T) {
	code, out, _ := fedcalib("eval", "--help")
	for _, want := range []string{"--federated", "--epsilon", "--clip", "eval --logits cifar10.npz --partition p.json --calibrator temp.json --federated"} {
		if code != ExitOK || !strings.Contains(out, want) {
			t.Errorf("eval --help lacks %q", want)
		}
	}
}

// TestPrivacyEvaluationAgreesWithEval checks that "privacy --method
// evaluation" states the σ that eval --federated --epsilon adds.
func TestPrivacyEvaluationAgreesWithEval(t *testing.T) {
	in, part, _ := fedEvalFixture(t)
	for _, tc := range [][]string{
		{"--epsilon", "1", "--delta", "1e-5"},
		{"--epsilon", "3", "--delta", "1e-6", "--clip", "20", "--accountant", "rdp"},
	} {
		code, plan, errs := fedcalib(append([]string{"privacy", "--method", "evaluation", "--json"}, tc...)...)
		if code != ExitOK {
			t.Fatalf("privacy %v: exit %d: %s", tc, code, errs)
		}
		code, ev, errs := fedcalib(append([]string{"eval", "--logits", in, "--partition", part, "--federated", "--json"}, tc...)...)
		if code != ExitOK {
			t.Fatalf("eval %v: exit %d: %s", tc, code, errs)
		}
		p, e := decodeReport(t, plan), decodeReport(t, ev)["privacy"].(map[string]any)
		if p["sigma"] != e["sigma"] || p["sigma"] == nil {
			t.Errorf("%v: privacy states σ %v, eval adds %v", tc, p["sigma"], e["sigma"])
		}
	}
	for _, bad := range [][]string{{"--classes", "3"}, {"--rounds", "2"}, {"--sample-rate", "0.5"}, {"--clip", "0"}} {
		code, _, stderr := fedcalib(append([]string{"privacy", "--method", "evaluation", "--epsilon", "1"}, bad...)...)
		if code != ExitUsage {
			t.Errorf("privacy --method evaluation %v: exit %d, %q", bad, code, stderr)
		}
	}
}

// TestEvalFederatedNaturalPartition checks eval --federated on the
// clients of the logits file's own client and split columns, for both
// splits it evaluates.
func TestEvalFederatedNaturalPartition(t *testing.T) {
	in, _ := fedLogitsFile(t, 300, 3, 5)
	for _, split := range []string{"test", "calibration"} {
		code, fed, errs := fedcalib("eval", "--logits", in, "--split", split, "--federated", "--json")
		if code != ExitOK {
			t.Fatalf("%s: exit %d: %s", split, code, errs)
		}
		code, pooled, errs := fedcalib("eval", "--logits", in, "--split", split, "--json")
		if code != ExitOK {
			t.Fatalf("%s: exit %d: %s", split, code, errs)
		}
		f, p := decodeReport(t, fed), decodeReport(t, pooled)
		for _, key := range []string{"n", "accuracy", "cwece", "ece", "nll", "brier"} {
			if f[key] != p[key] {
				t.Errorf("%s: %s federated %v, pooled %v", split, key, f[key], p[key])
			}
		}
		if f["clients"] != 5.0 || f["split"] != split || f["partition"] != "the data's client column" {
			t.Errorf("%s: clients %v, split %v, partition %v", split, f["clients"], f["split"], f["partition"])
		}
	}
}

// TestEvalFederatedTestOnlyClients checks eval --federated on a client
// column where one client has test rows only and another calibration
// rows only: both are accepted, each split's evaluation counts exactly the
// rows of the clients that have that split (the pooled rows of that
// split), and clients without any are skipped.
func TestEvalFederatedTestOnlyClients(t *testing.T) {
	path, f := fedLogitsFile(t, 300, 4, 5)
	for i := range f.Labels {
		switch f.Client[i] {
		case 0:
			f.Split[i] = logits.SplitTest
		case 1:
			f.Split[i] = logits.SplitCalibration
		}
	}
	if err := logits.Write(path, f); err != nil {
		t.Fatal(err)
	}
	count := func(split uint8) float64 {
		n := 0
		for _, s := range f.Split {
			if s == split {
				n++
			}
		}
		return float64(n)
	}
	for _, tc := range []struct {
		split string
		want  float64
	}{{"test", count(logits.SplitTest)}, {"calibration", count(logits.SplitCalibration)}} {
		code, out, errs := fedcalib("eval", "--logits", path, "--federated", "--split", tc.split, "--json")
		if code != ExitOK {
			t.Fatalf("--split %s: exit %d: %s", tc.split, code, errs)
		}
		r := decodeReport(t, out)
		if r["n"] != tc.want || r["clients"] != 5.0 {
			t.Errorf("--split %s: n %v over %v clients, want %v rows of 5 clients", tc.split, r["n"], r["clients"], tc.want)
		}
		_, pooled, errs := fedcalib("eval", "--logits", path, "--split", tc.split, "--json")
		if p := decodeReport(t, pooled); p["cwece"] != r["cwece"] || p["nll"] != r["nll"] {
			t.Errorf("--split %s: federated cwECE %v NLL %v, pooled %v %v (%s)", tc.split, r["cwece"], r["nll"], p["cwece"], p["nll"], errs)
		}
	}
	// calibrate still needs every client to have calibration rows, and
	// says how to get them without naming a flag it lacks.
	code, _, errs := fedcalib("calibrate", "--method", "temp", "--logits", path, "--rounds", "1", "--quiet", "--out", filepath.Join(t.TempDir(), "t.json"))
	if code != ExitUsage || !strings.Contains(errs, "none in its calibration split") || !strings.Contains(errs, "fedcalib partition") {
		t.Errorf("calibrate on a client without calibration rows: exit %d: %s", code, errs)
	}
}
