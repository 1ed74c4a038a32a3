package cli

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// evalFile writes a logits file whose test rows have the softmax
// probabilities (0.9, 0.1), (0.8, 0.2), (0.3, 0.7), (0.5, 0.5) with labels
// 0, 1, 1, 0, and whose other rows are different, confidently wrong ones.
func evalFile(t *testing.T, withSplit bool) string {
	t.Helper()
	f := &logits.File{Classes: 2}
	add := func(p0 float64, y int32, split uint8) {
		f.Logits = append(f.Logits, float32(math.Log(p0)), float32(math.Log(1-p0)))
		f.Labels = append(f.Labels, y)
		f.Split = append(f.Split, split)
	}
	add(0.99, 1, logits.SplitTrain)
	add(0.9, 0, logits.SplitTest)
	add(0.8, 1, logits.SplitTest)
	add(0.97, 1, logits.SplitCalibration)
	add(0.3, 1, logits.SplitTest)
	add(0.5, 0, logits.SplitTest)
	if !withSplit {
		f.Split = nil
	}
	path := filepath.Join(t.TempDir(), "logits.npz")
	if err := logits.Write(path, f); err != nil {
		t.Fatal(err)
	}
	return path
}

func decodeReport(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, s)
	}
	return m
}

func assertNear(t *testing.T, m map[string]any, key string, want float64) {
	t.Helper()
	got, ok := m[key].(float64)
	if !ok || math.Abs(got-want) > 1e-6 {
		t.Errorf("%s = %v, want %v", key, m[key], want)
	}
}

func TestEvalJSON(t *testing.T) {
	path := evalFile(t, true)
	code, out, errs := fedcalib("eval", "--logits", path, "--bins", "2", "--json")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	m := decodeReport(t, out)
	// The test rows by default; the values worked out by hand in calib's
	// TestEvaluateByHand.
	for key, want := range map[string]float64{
		"n": 4, "classes": 2, "accuracy": 0.75, "cwece": 0.175, "ece": 0.025,
		"nll": 0.6911551381476511, "brier": 0.495, "bins": 2,
	} {
		assertNear(t, m, key, want)
	}
	if m["split"] != "test" || m["before"] != nil || m["method"] != nil {
		t.Errorf("split %v, before %v, method %v", m["split"], m["before"], m["method"])
	}
	// The equal-mass and KS errors, by hand. Top label, sorted: 0.5 ✓,
	// 0.7 ✓ | 0.8 ✗, 0.9 ✓: adaptive (|2 − 1.2| + |1 − 1.7|)/4 = 0.375;
	// running Σ(c − a) −0.5, −0.8, 0, −0.1: KS 0.8/4. Class 0 sorted:
	// 0.3 ✗, 0.5 ✓ | 0.8 ✗, 0.9 ✓: gaps 0.2 + 0.7, running 0.3, −0.2,
	// 0.6, 0.5; class 1: 0.1 ✗, 0.2 ✓ | 0.5 ✗, 0.7 ✓: gaps 0.7 + 0.2,
	// running 0.1, −0.7, −0.2, −0.5. Debiased: every d_j < 0 (e.g. class
	// 0's first bin, ½(0.1² − ½·½/1)), so 0.
	top, _ := m["top_label"].(map[string]any)
	cw, _ := m["classwise"].(map[string]any)
	if top == nil || cw == nil {
		t.Fatalf("top_label %v, classwise %v", m["top_label"], m["classwise"])
	}
	assertNear(t, top, "adaptive_ece", 0.375)
	assertNear(t, top, "ks", 0.2)
	assertNear(t, cw, "adaptive_cwece", 1.8/4/2)
	assertNear(t, cw, "debiased_cwce", 0)
	assertNear(t, cw, "cw_ks", 1.3/4/2)
	code, out, errs = fedcalib("eval", "--logits", path, "--bins", "2")
	if want := "adaptive ECE (2 equal-mass bins) 37.500%, KS error 20.000%\nclasswise, 2 equal-mass bins: adaptive cwECE 22.500%, debiased (Kumar et al.) 0.000%, KS error 16.250%\n"; code != ExitOK || !strings.Contains(out, want) {
		t.Errorf("exit %d, stderr %q; the table\n%s\nlacks\n%s", code, errs, out, want)
	}
}

func TestEvalSplits(t *testing.T) {
	tests := []struct {
		name      string
		withSplit bool
		args      []string
		split     string
		n         float64
		accuracy  float64
	}{
		{"default without split column", false, nil, "all", 6, 0.5},
		{"all", true, []string{"--split", "all"}, "all", 6, 0.5},
		{"calibration", true, []string{"--split", "calibration"}, "calibration", 1, 0},
		{"test", true, []string{"--split", "test"}, "test", 4, 0.75},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"eval", "--json", "--logits", evalFile(t, tt.withSplit)}, tt.args...)
			code, out, errs := fedcalib(args...)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, errs)
			}
			m := decodeReport(t, out)
			assertNear(t, m, "n", tt.n)
			assertNear(t, m, "accuracy", tt.accuracy)
			assertNear(t, m, "bins", 15)
			if m["split"] != tt.split {
				t.Errorf("split %v, want %s", m["split"], tt.split)
			}
		})
	}
}

func TestEvalWithCalibrator(t *testing.T) {
	path := evalFile(t, true)
	// One bin per class, each 1/2: every prediction becomes (1/2, 1/2).
	// On the test rows (labels 0, 1, 1, 0) with 2 bins: accuracy 2/4 (ties
	// go to class 0), cwECE 0 (class 0: |2 − 2|, class 1: |2 − 2|), ECE 0,
	// NLL ln 2, Brier 1/4 + 1/4.
	cpath := filepath.Join(t.TempDir(), "c.json")
	if err := calib.WriteFile(cpath, &calib.Histogram{Bins: 1, Table: []float64{0.5, 0.5}}, nil, calib.Provenance{}); err != nil {
		t.Fatal(err)
	}
	code, out, errs := fedcalib("eval", "--logits", path, "--calibrator", cpath, "--bins", "2", "--json")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	m := decodeReport(t, out)
	for key, want := range map[string]float64{"n": 4, "accuracy": 0.5, "cwece": 0, "ece": 0, "nll": math.Ln2, "brier": 0.5} {
		assertNear(t, m, key, want)
	}
	if m["method"] != "bin" {
		t.Errorf("method %v, want bin", m["method"])
	}
	before, ok := m["before"].(map[string]any)
	if !ok {
		t.Fatalf("no before object in %s", out)
	}
	assertNear(t, before, "cwece", 0.175)
	assertNear(t, before, "accuracy", 0.75)
	// Every probability 0.5: each class's equal-mass bins hold its two
	// "not j" then its two "j" rows, |0 − 1| + |2 − 1|, so the adaptive
	// cwECE is (2 + 2)/4/2; the KS sums are read only at the end of the
	// tied run, 2 − 2 = 0. Before: as in TestEvalJSON.
	cw, _ := m["classwise"].(map[string]any)
	bcw, _ := m["before_classwise"].(map[string]any)
	if cw == nil || bcw == nil {
		t.Fatalf("classwise %v, before_classwise %v", m["classwise"], m["before_classwise"])
	}
	assertNear(t, cw, "adaptive_cwece", 0.5)
	assertNear(t, cw, "cw_ks", 0)
	assertNear(t, bcw, "adaptive_cwece", 0.225)

	code, out, errs = fedcalib("eval", "--logits", path, "--calibrator", cpath, "--bins", "2")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"4 test examples, 2 classes, 2 bins", "cwECE", "uncalibrated", "17.500%", "2.500%", "75.00%", "bin", "0.000%", "50.00%",
		"adaptive cwECE 22.500% → 50.000%", "KS error 16.250% → 0.000%"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestEvalErrors(t *testing.T) {
	dir := t.TempDir()
	good := evalFile(t, true)
	noSplit := evalFile(t, false)

	writeRaw := func(name string, f *logits.File) string {
		var buf bytes.Buffer
		if err := logits.Encode(&buf, f); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	nan := writeRaw("nan.npz", &logits.File{Logits: []float32{0, float32(math.NaN())}, Labels: []int32{0}, Classes: 2})
	badLabel := writeRaw("label.npz", &logits.File{Logits: []float32{0, 1}, Labels: []int32{2}, Classes: 2})
	future := filepath.Join(dir, "future.json")
	os.WriteFile(future, []byte(`{"format":"fedcalib.calibrator/v9","method":"bin"}`), 0o644)
	three := filepath.Join(dir, "three.json")
	if err := calib.WriteFile(three, &calib.Histogram{Bins: 1, Table: []float64{0.2, 0.3, 0.5}}, nil, calib.Provenance{}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no logits", []string{"eval"}, "needs --logits"},
		{"missing file", []string{"eval", "--logits", filepath.Join(dir, "none.npz")}, "none.npz"},
		{"nan logits", []string{"eval", "--logits", nan}, "nan.npz: logits: row 0, class 1 is NaN"},
		{"bad label", []string{"eval", "--logits", badLabel}, "label.npz: labels: row 0 is 2, outside [0, 2)"},
		{"future sidecar", []string{"eval", "--logits", good, "--calibrator", future}, `future.json: unsupported calibrator format "fedcalib.calibrator/v9"`},
		{"class mismatch", []string{"eval", "--logits", good, "--calibrator", three}, "bin calibrator is for 3 classes but the data has 2"},
		{"bad split", []string{"eval", "--logits", good, "--split", "val"}, `--split "val"`},
		{"no split column", []string{"eval", "--logits", noSplit, "--split", "test"}, "has no split column"},
		{"zero bins", []string{"eval", "--logits", good, "--bins", "0"}, "--bins is 0"},
		{"extra argument", []string{"eval", "--logits", good, "x.npz"}, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := fedcalib(tt.args...)
			if code != ExitUsage {
				t.Errorf("exit %d, want %d", code, ExitUsage)
			}
			if out != "" {
				t.Errorf("printed %q on error", out)
			}
			if !strings.Contains(errs, tt.want) || strings.Count(errs, "\n") != 1 {
				t.Errorf("stderr %q, want one line containing %q", errs, tt.want)
			}
			if strings.Count(errs, ".npz:") > 1 {
				t.Errorf("stderr %q names the file more than once", errs)
			}
		})
	}
}

func TestEvalPlot(t *testing.T) {
	lf := overconfident(t, 400)
	good := calib.NewTemperature(4)
	good.T = 3
	dir := filepath.Join(t.TempDir(), "plots")
	code, stdout, stderr := fedcalib("eval", "--logits", lf, "--calibrator", writeCalibrator(t, good), "--plot", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, name := range []string{"top.png", "top.svg", "classes.png", "classes.svg"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(stdout, "reliability diagrams: ") {
		t.Errorf("stdout %q does not list the diagrams", stdout)
	}
}

func TestEvalCompare(t *testing.T) {
	lf := overconfident(t, 2000)
	good := calib.NewTemperature(4)
	good.T = 3
	swap := calib.NewMatrix(4)
	swap.A = []float64{0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}
	dir := t.TempDir()
	gp, sp := filepath.Join(dir, "good.json"), filepath.Join(dir, "swap.json")
	// A consistent record of a one-round FedTemp that spent ε = 1.
	plan, err := federation.PlanNoise(calib.MethodTemp, 4, &federation.Privacy{Epsilon: 1, Delta: 1e-5}, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	spent, err := dp.SpentBy(dp.ZCDP, plan.Multiplier, 1, 1, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	priv := &calib.Privacy{Epsilon: spent.Epsilon, Delta: 1e-5, Rho: spent.Rho, Sigma: plan.Sigma(), Clip: dp.DefaultClip, Accountant: "zcdp", Rounds: 1, SampleRate: 1}
	if err := calib.WriteFile(gp, good, priv, calib.Provenance{}); err != nil {
		t.Fatal(err)
	}
	if err := calib.WriteFile(sp, swap, nil, calib.Provenance{}); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := fedcalib("eval", "--logits", lf, "--calibrator", gp, "--calibrator", sp)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 6 {
		t.Fatalf("table %q: want a title, a blank line, a header and 3 rows", stdout)
	}
	// The good calibrator spent ε = 1 and keeps accuracy; the swap loses
	// accuracy and is starred.
	if f := strings.Fields(lines[4]); f[0] != "good" || f[len(f)-1] != "1" || strings.Contains(lines[4], "*") {
		t.Errorf("row %q", lines[4])
	}
	if f := strings.Fields(lines[5]); f[0] != "swap" || f[len(f)-1] != "-" || !strings.Contains(lines[5], "%*") {
		t.Errorf("row %q", lines[5])
	}
	code, stdout, _ = fedcalib("eval", "--logits", lf, "--calibrator", gp, "--calibrator", sp, "--json")
	var rep struct {
		Before      calib.Metrics
		Calibrators []calibratorRow
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil || len(rep.Calibrators) != 2 || math.Abs(*rep.Calibrators[0].Epsilon-1) > 1e-12 || rep.Calibrators[1].Epsilon != nil {
		t.Errorf("json exit %d: %s", code, stdout)
	}
	if rep.Calibrators[0].Accuracy != rep.Before.Accuracy {
		t.Errorf("temperature changed accuracy: %v vs %v", rep.Calibrators[0].Accuracy, rep.Before.Accuracy)
	}
}

// TestEvalBootstrap: --bootstrap gives the same intervals for the same
// seed, intervals that hold the point estimates of accuracy and of the
// signed gap, and the adaptive ECE; its flags are checked.
func TestEvalBootstrap(t *testing.T) {
	path := evalFile(t, true)
	run := func(seed string) map[string]any {
		code, stdout, stderr := fedcalib("eval", "--logits", path, "--json", "--bootstrap", "100", "--seed", seed, "--level", "0.9")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		return decodeReport(t, stdout)
	}
	a, b, c := run("5"), run("5"), run("6")
	if !reflect.DeepEqual(a, b) {
		t.Error("the same seed gave different intervals")
	}
	if reflect.DeepEqual(a["bootstrap"], c["bootstrap"]) {
		t.Error("another seed gave the same intervals")
	}
	bs := a["bootstrap"].(map[string]any)
	if bs["resamples"] != 100.0 || bs["level"] != 0.9 || bs["seed"] != 5.0 {
		t.Errorf("bootstrap record %v", bs)
	}
	iv := bs["intervals"].(map[string]any)
	if len(iv) != 14 {
		t.Errorf("%d intervals, want one per metric", len(iv))
	}
	top := a["top_label"].(map[string]any)
	for key, point := range map[string]float64{"accuracy": a["accuracy"].(float64), "signed_gap": top["signed_gap"].(float64)} {
		i := iv[key].(map[string]any)
		if lo, hi := i["lo"].(float64), i["hi"].(float64); !(lo <= point && point <= hi) {
			t.Errorf("%s: interval [%v, %v] misses the estimate %v", key, lo, hi, point)
		}
	}
	if ace, ok := top["adaptive_ece"].(float64); !ok || !(ace > 0) {
		t.Errorf("adaptive ECE %v", top["adaptive_ece"])
	}
	for _, args := range [][]string{
		{"--bootstrap", "0"}, {"--bootstrap", "-5"}, {"--bootstrap", "1000000"},
		{"--bootstrap", "10", "--level", "1"}, {"--bootstrap", "10", "--level", "NaN"},
		{"--seed", "3"}, {"--level", "0.9"},
	} {
		code, _, stderr := fedcalib(append([]string{"eval", "--logits", path}, args...)...)
		if code != ExitUsage || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
}
