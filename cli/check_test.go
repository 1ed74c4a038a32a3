package cli

import (
	"encoding/json"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// overconfident writes a logits file whose logits are three times those
// of the model that drew the labels, with a calibration and a test half.
func overconfident(t *testing.T, n int) string {
	t.Helper()
	const c = 4
	rng := rand.New(rand.NewPCG(11, 12))
	f := &logits.File{Classes: c, Logits: make([]float32, n*c), Labels: make([]int32, n), Split: make([]uint8, n)}
	p := make([]float64, c)
	for i := 0; i < n; i++ {
		for j := range p {
			p[j] = rng.NormFloat64()
			f.Logits[i*c+j] = float32(3 * p[j])
		}
		calib.Softmax(p, p)
		u, acc := rng.Float64(), 0.0
		f.Labels[i] = c - 1
		for j, v := range p {
			if acc += v; u < acc {
				f.Labels[i] = int32(j)
				break
			}
		}
		f.Split[i] = uint8(1 + i%2)
	}
	path := filepath.Join(t.TempDir(), "over.npz")
	if err := logits.Write(path, f); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeCalibrator(t *testing.T, c calib.Calibrator) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), c.Method()+".json")
	if err := calib.WriteFile(path, c, nil, calib.Provenance{}); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckExitCodes(t *testing.T) {
	lf := overconfident(t, 4000)
	good := calib.NewTemperature(4)
	good.T = 3 // the true temperature
	worse := calib.NewTemperature(4)
	worse.T = 0.5
	swap := calib.NewMatrix(4) // swaps classes 0 and 1: accuracy falls
	swap.A = []float64{0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"pass", []string{"--logits", lf, "--calibrator", writeCalibrator(t, good)}, ExitOK, "PASS: temp"},
		{"worse cwECE", []string{"--logits", lf, "--calibrator", writeCalibrator(t, worse)}, ExitFailed, "cwECE improved by -"},
		{"accuracy drop", []string{"--logits", lf, "--calibrator", writeCalibrator(t, swap), "--min-cwece-improvement", "-1"}, ExitFailed, "accuracy dropped by"},
		{"bar too high", []string{"--logits", lf, "--calibrator", writeCalibrator(t, good), "--min-cwece-improvement", "0.5"}, ExitFailed, "less than the required 50.000"},
		{"missing logits", []string{"--logits", filepath.Join(t.TempDir(), "no.npz"), "--calibrator", writeCalibrator(t, good)}, ExitUsage, "no.npz"},
		{"no calibrator", []string{"--logits", lf}, ExitUsage, "--logits needs --calibrator"},
		{"nothing", nil, ExitUsage, "check needs --model"},
		{"both", []string{"--logits", lf, "--model", "m.onnx"}, ExitUsage, "not both"},
		{"model without data", []string{"--model", "m.onnx"}, ExitUsage, "--model needs --data"},
		{"wrong classes", []string{"--logits", lf, "--calibrator", writeCalibrator(t, calib.NewTemperature(3))}, ExitUsage, "is for 3 classes"},
		{"NLL bar met", []string{"--logits", lf, "--calibrator", writeCalibrator(t, good), "--max-nll-increase", "0"}, ExitOK, "PASS: temp"},
		{"NLL worse", []string{"--logits", lf, "--calibrator", writeCalibrator(t, worse), "--min-cwece-improvement", "-1", "--max-nll-increase", "0.01"}, ExitFailed, "NLL rose by"},
		{"NLL bar negative", []string{"--logits", lf, "--calibrator", writeCalibrator(t, good), "--max-nll-increase", "-1"}, ExitUsage, "--max-nll-increase is -1"},
		{"confidence, pass", []string{"--logits", lf, "--calibrator", writeCalibrator(t, good), "--confidence", "0.9", "--bootstrap", "200"}, ExitOK, "paired bootstrap, 90% intervals"},
		{"confidence, real drop", []string{"--logits", lf, "--calibrator", writeCalibrator(t, swap), "--min-cwece-improvement", "-1", "--confidence", "0.95", "--bootstrap", "200"}, ExitFailed, "surely more than the allowed 1.00"},
		{"confidence out of range", []string{"--logits", lf, "--calibrator", writeCalibrator(t, good), "--confidence", "1.5"}, ExitUsage, "--confidence is 1.5"},
		{"bootstrap out of range", []string{"--logits", lf, "--calibrator", writeCalibrator(t, good), "--confidence", "0.9", "--bootstrap", "0"}, ExitUsage, "--bootstrap is 0"},
	}
	for _, tt := range tests {
		code, stdout, stderr := fedcalib(append([]string{"check"}, tt.args...)...)
		if code != tt.code || !strings.Contains(stdout+stderr, tt.want) {
			t.Errorf("%s: exit %d, output %q%q; want exit %d and %q", tt.name, code, stdout, stderr, tt.code, tt.want)
		}
		if tt.code == ExitUsage && strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("%s: error is not one line: %q", tt.name, stderr)
		}
	}
}

func TestCheckJSON(t *testing.T) {
	lf := overconfident(t, 2000)
	good := calib.NewTemperature(4)
	good.T = 3
	code, stdout, stderr := fedcalib("check", "--logits", lf, "--calibrator", writeCalibrator(t, good), "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep checkReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	// Temperature scaling keeps every argmax, so accuracy is unchanged, and
	// the true temperature must lower cwECE.
	if !rep.Pass || rep.AccuracyDrop != 0 || rep.After.CWECE >= rep.Before.CWECE || rep.After.N != 1000 {
		t.Errorf("report %+v", rep)
	}
}

// TestCheckConfidenceJSON checks that --confidence reports the paired
// intervals, that they bracket the point changes, and that the same seed
// gives the same report.
func TestCheckConfidenceJSON(t *testing.T) {
	lf := overconfident(t, 600)
	good := calib.NewTemperature(4)
	good.T = 3
	cf := writeCalibrator(t, good)
	run := func() (checkReport, string) {
		code, stdout, stderr := fedcalib("check", "--logits", lf, "--calibrator", cf, "--json",
			"--confidence", "0.95", "--bootstrap", "300", "--seed", "4", "--max-nll-increase", "0")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var rep checkReport
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatal(err)
		}
		return rep, stdout
	}
	rep, out1 := run()
	if rep.Confidence != 0.95 || len(rep.Intervals) != 3 || rep.NLLIncrease == nil || *rep.MaxNLLIncrease != 0 {
		t.Fatalf("report %+v", rep)
	}
	for name, point := range map[string]float64{"accuracy_drop": rep.AccuracyDrop, "cwece_improvement": rep.CWECEImprovement, "nll_increase": *rep.NLLIncrease} {
		iv := rep.Intervals[name]
		if !(iv.Lo <= point+1e-12 && point-1e-12 <= iv.Hi) {
			t.Errorf("%s: point %v outside its interval %+v", name, point, iv)
		}
	}
	// Temperature scaling keeps every argmax: every resample's drop is 0.
	if iv := rep.Intervals["accuracy_drop"]; iv != (calib.Interval{}) {
		t.Errorf("accuracy drop interval %+v, want [0, 0]", iv)
	}
	if _, out2 := run(); out2 != out1 {
		t.Errorf("same seed, different reports:\n%s\n%s", out1, out2)
	}
}

// TestCheckCalibratedModel exports a calibrator into the tiny model and
// checks the exported graph's own probabilities output through ONNX
// Runtime against the plain model with the calibrator file applied in Go.
func TestCheckCalibratedModel(t *testing.T) {
	requireORT(t)
	images, _ := writeIDX(t, 200, 4, 4)
	tc := calib.NewTemperature(3)
	tc.T = 1.7
	cf := writeCalibrator(t, tc)
	out := filepath.Join(t.TempDir(), "tiny.calibrated.onnx")
	if code, _, stderr := fedcalib("export", "--model", "../infer/testdata/tiny.onnx", "--calibrator", cf, "--out", out); code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	g, p := checkTwice(t, images, nil, []string{"--model", out}, []string{"--model", "../infer/testdata/tiny.onnx", "--calibrator", cf})
	if g.Method != "temp" || g.Before != p.Before || g.After.Accuracy != p.After.Accuracy || abs(g.After.CWECE-p.After.CWECE) > 1e-6 || abs(g.After.NLL-p.After.NLL) > 1e-5 {
		t.Errorf("calibrated graph %+v\nGo calibrator  %+v", g, p)
	}
	if code, _, stderr := fedcalib("check", "--model", out, "--calibrator", cf, "--data", "idx:"+images); code != ExitUsage || !strings.Contains(stderr, "already calibrated") {
		t.Errorf("double calibration: exit %d, %q", code, stderr)
	}
}

// TestSoftmaxModelEndToEnd runs the path of a model that ends in a
// Softmax: infer writes its probabilities, calibrate --input
// probabilities fits vector scaling on their log, export detects the
// Softmax, and check judges the calibrated graph (which records
// fedcalib.calibration.input = probabilities) equal to the plain model
// with the calibrator applied in Go under --input probabilities.
func TestSoftmaxModelEndToEnd(t *testing.T) {
	requireORT(t)
	const model = "../infer/testdata/tiny_softmax.onnx"
	images, cf, out, _ := inferCalibrateExport(t, model, "--method", "vector", "--input", "probabilities")
	dir := filepath.Dir(out)
	g, p := checkTwice(t, images, []string{"--max-accuracy-drop", "1"}, []string{"--model", out}, []string{"--model", model, "--calibrator", cf, "--input", "probabilities"})
	if abs(g.Before.NLL-p.Before.NLL) > 1e-9 || g.Before.Accuracy != p.Before.Accuracy || g.After.Accuracy != p.After.Accuracy ||
		abs(g.After.CWECE-p.After.CWECE) > 1e-6 || abs(g.After.NLL-p.After.NLL) > 1e-5 {
		t.Errorf("calibrated graph %+v\nGo calibrator  %+v", g, p)
	}
	if code, _, stderr := fedcalib("export", "--model", model, "--calibrator", cf, "--out", filepath.Join(dir, "x.onnx"), "--input", "odds"); code != ExitUsage || !strings.Contains(stderr, "--input is \"odds\"") {
		t.Errorf("--input odds: exit %d, %q", code, stderr)
	}
}

// inferCalibrateExport runs the commands a user runs on model: infer
// over 300 generated 4×4 IDX images, calibrate --central with the given
// arguments on the logits, and export of the calibrated model. It
// returns the images, the calibrator file, the exported model and
// calibrate's standard output.
func inferCalibrateExport(t *testing.T, model string, calibrate ...string) (images, cf, out, stdout string) {
	t.Helper()
	images, _ = writeIDX(t, 300, 4, 4)
	dir := t.TempDir()
	lf := filepath.Join(dir, "z.npz")
	cf, out = filepath.Join(dir, "calibrator.json"), filepath.Join(dir, "calibrated.onnx")
	for _, args := range [][]string{
		{"infer", "--model", model, "--data", "idx:" + images, "--out", lf, "--quiet"},
		append([]string{"calibrate", "--central", "--logits", lf, "--out", cf}, calibrate...),
		{"export", "--model", model, "--calibrator", cf, "--out", out},
	} {
		code, o, stderr := fedcalib(args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", args[0], code, stderr)
		}
		if args[0] == "calibrate" {
			stdout = o
		}
	}
	return images, cf, out, stdout
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestCheckRunsModelOnce counts the sessions `check --model` opens and the
// batches it runs: one session and one pass over the data, for a
// calibrated model (logits and probabilities from the same runs) and for
// a plain one with a calibrator file.
func TestCheckRunsModelOnce(t *testing.T) {
	requireORT(t)
	const records, batch = 200, 64
	images, _ := writeIDX(t, records, 4, 4)
	tc := calib.NewTemperature(3)
	tc.T = 1.7
	cf := writeCalibrator(t, tc)
	out := filepath.Join(t.TempDir(), "tiny.calibrated.onnx")
	if code, _, stderr := fedcalib("export", "--model", "../infer/testdata/tiny.onnx", "--calibrator", cf, "--out", out); code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	var sessions, runs, done int
	defer func(f func(string, infer.Options) (*infer.Session, error)) { openSession = f }(openSession)
	openSession = func(model string, opt infer.Options) (*infer.Session, error) {
		sessions++
		opt.Progress = func(p infer.Progress) {
			if p.Done > 0 {
				runs++
			}
			done = p.Done
		}
		return infer.OpenSession(model, opt)
	}
	for _, args := range [][]string{
		{"--model", out},
		{"--model", "../infer/testdata/tiny.onnx", "--calibrator", cf},
	} {
		sessions, runs, done = 0, 0, 0
		args = append([]string{"check", "--data", "idx:" + images, "--threads", "1", "--batch", "64", "--min-cwece-improvement", "-1"}, args...)
		if code, _, stderr := fedcalib(args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		if wantRuns := (records + batch - 1) / batch; sessions != 1 || runs != wantRuns || done != records {
			t.Errorf("%v: %d sessions, %d runs over %d records; want 1 session, %d runs over %d", args, sessions, runs, done, wantRuns, records)
		}
	}
}

// TestInputKindRecorded checks that infer records that a Softmax model's
// outputs are probabilities (the logits file's input array), that
// calibrate reads them so and records what it fitted on
// (provenance.input), and that check and export honour it: check without
// --input reads the Softmax model's output as the calibrator was fitted,
// a contradicting --input is refused in one line, export refuses a
// calibrator fitted on logits for an output a Softmax makes (it used to
// feed it log-probabilities and call that verified), and the sidecar
// says it reads probabilities.
func TestInputKindRecorded(t *testing.T) {
	requireORT(t)
	const model = "../infer/testdata/tiny_softmax.onnx"
	images, _ := writeIDX(t, 200, 4, 4)
	dir := t.TempDir()
	lf, raw := filepath.Join(dir, "p.npz"), filepath.Join(dir, "raw.npz")
	cp, cr, cl, sc := filepath.Join(dir, "probs.json"), filepath.Join(dir, "recorded.json"), filepath.Join(dir, "logits.json"), filepath.Join(dir, "sidecar.json")
	if code, _, stderr := fedcalib("infer", "--model", model, "--data", "idx:"+images, "--out", lf, "--quiet"); code != 0 {
		t.Fatalf("infer: exit %d: %s", code, stderr)
	}
	// infer records that the Softmax model's outputs are probabilities;
	// a copy without the record stands for a file of unknown origin.
	f, err := logits.Read(lf)
	if err != nil {
		t.Fatal(err)
	}
	if f.Input != logits.InputProbabilities {
		t.Errorf("infer on a Softmax model records input %q, want probabilities", f.Input)
	}
	f.Input = ""
	if err := logits.Write(raw, f); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"calibrate", "--central", "--method", "temp", "--input", "probabilities", "--logits", lf, "--out", cp},
		{"calibrate", "--central", "--method", "temp", "--logits", lf, "--out", cr},
		{"calibrate", "--central", "--method", "temp", "--logits", raw, "--out", cl},
		{"export", "--model", model, "--calibrator", cp, "--sidecar", "--out", sc},
	} {
		if code, _, stderr := fedcalib(args...); code != 0 {
			t.Fatalf("%s: exit %d: %s", args[0], code, stderr)
		}
	}
	for path, want := range map[string]string{cp: "probabilities", cr: "probabilities", cl: "logits", sc: "probabilities"} {
		_, f, err := calib.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if f.Provenance.Input != want {
			t.Errorf("%s: provenance.input %q, want %q", filepath.Base(path), f.Provenance.Input, want)
		}
	}
	for _, args := range [][]string{
		{"eval", "--logits", lf, "--calibrator", cp},
		{"eval", "--logits", raw, "--calibrator", cl},
		{"check", "--logits", raw, "--calibrator", cp, "--min-cwece-improvement", "-1", "--max-accuracy-drop", "1"}, // read as the calibrator was fitted
	} {
		if code, _, stderr := fedcalib(args...); code != 0 {
			t.Errorf("%v: exit %d: %s", args, code, stderr)
		}
	}
	gate := []string{"check", "--data", "idx:" + images, "--json", "--threads", "1", "--min-cwece-improvement", "-1", "--max-accuracy-drop", "1", "--model", model, "--calibrator", cp}
	_, recorded, _ := fedcalib(gate...)
	_, explicit, _ := fedcalib(append(gate, "--input", "probabilities")...)
	if recorded == "" || recorded != explicit {
		t.Errorf("check without --input:\n%s\nwith --input probabilities:\n%s", recorded, explicit)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "--logits", raw, "--calibrator", cp, "--input", "logits"}, "was fitted on probabilities"},
		{[]string{"check", "--logits", lf, "--calibrator", cl}, "is read as probabilities"},
		{[]string{"eval", "--logits", raw, "--calibrator", cp}, "is read as logits: pass --input probabilities"},
		{[]string{"eval", "--logits", raw, "--calibrator", cl, "--calibrator", cp}, "is read as logits"},
		{[]string{"calibrate", "--central", "--method", "temp", "--logits", lf, "--input", "logits", "--out", filepath.Join(dir, "z.json")}, "the file records that it holds probabilities"},
		{[]string{"check", "--model", model, "--data", "idx:" + images, "--calibrator", cl}, "made by a Softmax"},
		{[]string{"export", "--model", model, "--calibrator", cl, "--out", filepath.Join(dir, "x.onnx")}, "made by a Softmax"},
		{[]string{"export", "--model", model, "--calibrator", cl, "--sidecar", "--out", filepath.Join(dir, "x.json")}, "made by a Softmax"},
		{[]string{"export", "--model", model, "--calibrator", cp, "--input", "logits", "--out", filepath.Join(dir, "y.onnx")}, "was fitted on probabilities"},
	} {
		code, _, stderr := fedcalib(tc.args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%v: exit %d, %q; want %d and one line with %q", tc.args, code, stderr, ExitUsage, tc.want)
		}
	}
}

// checkTwice runs `fedcalib check --json` over the IDX images once per
// argument set (after the common flags and extra) and returns the two
// reports: the calibrated graph's and the model-plus-calibrator's.
func checkTwice(t *testing.T, images string, extra []string, graph, sidecar []string) (g, p checkReport) {
	t.Helper()
	reports := make([]checkReport, 2)
	for i, set := range [][]string{graph, sidecar} {
		args := append([]string{"check", "--data", "idx:" + images, "--json", "--threads", "1", "--min-cwece-improvement", "-1"}, extra...)
		args = append(args, set...)
		code, stdout, stderr := fedcalib(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		if err := json.Unmarshal([]byte(stdout), &reports[i]); err != nil {
			t.Fatal(err)
		}
	}
	return reports[0], reports[1]
}
