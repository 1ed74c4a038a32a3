package cli

import (
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/network"
)

// softmaxFiles writes a logits file of n rows of 4 classes and the same
// rows as softmax probabilities, and returns both paths.
func softmaxFiles(t *testing.T, n int) (logitsPath, probsPath string) {
	t.Helper()
	const c = 4
	lf := &logits.File{Logits: make([]float32, n*c), Labels: make([]int32, n), Split: make([]uint8, n), Classes: c}
	pf := &logits.File{Logits: make([]float32, n*c), Labels: lf.Labels, Split: lf.Split, Classes: c}
	for i := range n {
		row := lf.Logits[i*c : (i+1)*c]
		sum := 0.0
		for j := range row {
			row[j] = float32(3 * math.Sin(float64(7*i+3*j+1)))
			sum += math.Exp(float64(row[j]))
		}
		for j := range row {
			pf.Logits[i*c+j] = float32(math.Exp(float64(row[j])) / sum)
		}
		lf.Labels[i] = int32((i * 5) % c)
		lf.Split[i] = uint8(1 + i%2) // calibration and test rows
	}
	dir := t.TempDir()
	logitsPath, probsPath = filepath.Join(dir, "logits.npz"), filepath.Join(dir, "probs.npz")
	if err := logits.Write(logitsPath, lf); err != nil {
		t.Fatal(err)
	}
	if err := logits.Write(probsPath, pf); err != nil {
		t.Fatal(err)
	}
	return logitsPath, probsPath
}

// TestInputProbabilities checks --input probabilities: softmax of the
// log-probabilities is the softmax of the logits, so eval's metrics and
// the temperature that calibrate fits (softmax((z − c)/T) = softmax(z/T)
// for a per-row shift c) equal those from the logits themselves.
func TestInputProbabilities(t *testing.T) {
	lp, pp := softmaxFiles(t, 400)
	evalJSON := func(args ...string) map[string]any {
		t.Helper()
		code, stdout, stderr := fedcalib(append([]string{"eval", "--json", "--split", "all"}, args...)...)
		if code != 0 {
			t.Fatalf("eval %v: exit %d: %s", args, code, stderr)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(stdout), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	want, got := evalJSON("--logits", lp), evalJSON("--logits", pp, "--input", "probabilities")
	for _, k := range []string{"accuracy", "cwece", "ece", "nll", "brier"} {
		w, g := want[k].(float64), got[k].(float64)
		if math.Abs(w-g) > 1e-5 {
			t.Errorf("eval %s: %v from probabilities, %v from logits", k, g, w)
		}
	}

	dir := t.TempDir()
	temp := func(in string, args ...string) float64 {
		t.Helper()
		out := filepath.Join(dir, filepath.Base(in)+".json")
		if code, _, stderr := fedcalib(append([]string{"calibrate", "--central", "--method", "temp", "--logits", in, "--out", out}, args...)...); code != 0 {
			t.Fatalf("calibrate %s: exit %d: %s", in, code, stderr)
		}
		c, _, err := calib.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*calib.Temperature).T
	}
	if tl, tp := temp(lp), temp(pp, "--input", "probabilities"); math.Abs(tl-tp) > 1e-4*tl {
		t.Errorf("temperature %v from probabilities, %v from logits", tp, tl)
	}
}

// TestInputProbabilitiesErrors checks that rows that are not
// distributions, and unknown input kinds, exit 2 with a clear message.
func TestInputProbabilitiesErrors(t *testing.T) {
	lp, pp := softmaxFiles(t, 10)
	cal := filepath.Join(t.TempDir(), "t.json")
	if err := calib.WriteFile(cal, calib.NewTemperature(4), nil, calib.Provenance{}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out.json")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"eval", "--logits", lp, "--input", "probabilities"}, lp + ": --input probabilities: not probabilities: row 0, class "},
		{[]string{"calibrate", "--central", "--method", "temp", "--logits", lp, "--input", "probabilities", "--out", out}, "outside [0, 1]"},
		{[]string{"calibrate", "--method", "temp", "--logits", lp, "--clients", "2", "--beta", "1", "--input", "probabilities", "--out", out}, "not probabilities"},
		{[]string{"check", "--logits", lp, "--calibrator", cal, "--input", "probabilities"}, "not probabilities"},
		{[]string{"eval", "--logits", pp, "--input", "softmax"}, `invalid argument "softmax" for "--input" flag: want logits or probabilities`},
	} {
		code, _, stderr := fedcalib(tt.args...)
		if code != ExitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tt.args, code, stderr, ExitUsage, tt.want)
		}
	}
}

// TestCheckModelInputProbabilities checks check --model --input
// probabilities: tiny_softmax.onnx is tiny.onnx followed by Softmax, so
// with its outputs read as probabilities, the metrics before and after a
// temperature calibrator equal those of tiny.onnx's logits.
func TestCheckModelInputProbabilities(t *testing.T) {
	requireORT(t)
	images, _ := writeIDX(t, 90, 4, 4)
	cal := filepath.Join(t.TempDir(), "t.json")
	c := calib.NewTemperature(3)
	c.T = 1.7
	if err := calib.WriteFile(cal, c, nil, calib.Provenance{}); err != nil {
		t.Fatal(err)
	}
	report := func(model string, args ...string) map[string]map[string]any {
		t.Helper()
		code, stdout, stderr := fedcalib(append([]string{"check", "--model", model, "--calibrator", cal, "--data", "idx:" + images, "--threads", "1", "--json"}, args...)...)
		if code != ExitOK && code != ExitFailed {
			t.Fatalf("check %s: exit %d: %s", model, code, stderr)
		}
		var rep map[string]any
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("%v: %s", err, stdout)
		}
		return map[string]map[string]any{"before": rep["before"].(map[string]any), "after": rep["after"].(map[string]any)}
	}
	want := report("../infer/testdata/tiny.onnx")
	got := report("../infer/testdata/tiny_softmax.onnx", "--input", "probabilities")
	for _, when := range []string{"before", "after"} {
		for _, k := range []string{"accuracy", "cwece", "nll"} {
			if w, g := want[when][k].(float64), got[when][k].(float64); math.Abs(w-g) > 1e-5 {
				t.Errorf("%s %s: %v from probabilities, %v from logits", when, k, g, w)
			}
		}
	}
	code, _, stderr := fedcalib("check", "--model", "../infer/testdata/tiny.onnx", "--calibrator", cal, "--data", "idx:"+images, "--input", "probabilities")
	if code != ExitUsage || !strings.Contains(stderr, "tiny.onnx: --input probabilities: not probabilities: row 0") {
		t.Errorf("logits read as probabilities: exit %d, %s", code, stderr)
	}
}

// joinData returns the calibration rows join reads with fl.
func joinData(cmd *cobra.Command, fl *joinFlags, w network.Welcome) (*calib.Set, error) {
	pre, err := joinPrecheck(context.Background(), fl)
	if err != nil {
		return nil, err
	}
	return joinRows(cmd, fl, pre, w, federation.Calibration)
}

// TestJoinInputProbabilities checks join's --input: the calibration rows
// a client sends updates from, read from probabilities, have the softmax
// of the rows read from the logits.
func TestJoinInputProbabilities(t *testing.T) {
	lp, pp := softmaxFiles(t, 20)
	want, err := joinData(nil, &joinFlags{logits: lp}, network.Welcome{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := joinData(nil, &joinFlags{logits: pp, input: logits.InputProbabilities}, network.Welcome{})
	if err != nil {
		t.Fatal(err)
	}
	pw, err := calib.Probabilities(want, nil)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := calib.Probabilities(got, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(pw) != len(pg) || len(pw) != 10*4 {
		t.Fatalf("%d and %d probabilities, want %d calibration rows of 4", len(pg), len(pw), 10)
	}
	for i := range pw {
		if math.Abs(pw[i]-pg[i]) > 1e-6 {
			t.Errorf("probability %d: %v from probabilities, %v from logits", i, pg[i], pw[i])
		}
	}
	if _, err := joinData(nil, &joinFlags{logits: lp, input: logits.InputProbabilities}, network.Welcome{}); err == nil || !strings.Contains(err.Error(), "not probabilities") {
		t.Errorf("logits read as probabilities: %v", err)
	}
}
