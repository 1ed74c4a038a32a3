package cli

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer/logits"
)

func TestCheckOut(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.json")
	if err := os.WriteFile(in, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		out  string
		kind outKind
		want string // "" for no error
	}{
		{"model", filepath.Join(dir, "m.onnx"), modelOut, ""},
		{"upper-case extension", filepath.Join(dir, "M.ONNX"), modelOut, ""},
		{"logits", filepath.Join(dir, "l.npz"), logitsOut, ""},
		{"empty", " ", modelOut, "--out is empty: name the .onnx file to write"},
		{"model as json", filepath.Join(dir, "m.json"), modelOut, "an ONNX model must end in .onnx"},
		{"sidecar as onnx", filepath.Join(dir, "s.onnx"), sidecarOut, "a sidecar (calibrator) file must end in .json"},
		{"calibrator without extension", filepath.Join(dir, "c"), calibratorOut, "a calibrator file must end in .json"},
		{"partition as npz", filepath.Join(dir, "p.npz"), partitionOut, "a partition file must end in .json"},
		{"logits as csv", filepath.Join(dir, "l.csv"), logitsOut, "a logits file must end in .npz"},
		{"an input", in, calibratorOut, "is an input"},
		{"missing directory", filepath.Join(dir, "no", "c.json"), calibratorOut, "does not exist: create it first"},
		{"a directory", filepath.Join(dir, "d.json"), calibratorOut, "is a directory"},
	}
	if err := os.Mkdir(filepath.Join(dir, "d.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		err := checkOut("--out", tt.out, tt.kind, in)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.want)
		case err != nil && !strings.HasPrefix(err.Error(), "--out "):
			t.Errorf("%s: error %q does not name --out first", tt.name, err)
		}
	}
}

func TestCheckOutDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cfg.yaml")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, out, want string
	}{
		{"existing", dir, ""},
		{"new, nested", filepath.Join(dir, "a", "b"), ""},
		{"empty", "", "--out is empty"},
		{"the input", file, "is an input"},
		{"under a file", filepath.Join(file, "x"), "not a directory"},
	}
	for _, tt := range tests {
		err := checkOutDir("--out", tt.out, file)
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); err == nil {
		t.Error("checkOutDir created the directory")
	}
}

// TestNoOutputOverAnyInput runs every command that writes with --out (or
// --plot) naming one of its inputs, with the wrong extension, or in a
// missing directory: each must exit 2 saying so, leave the inputs as they
// were, and write nothing. The export cases are the issue's: --out equal
// to --calibrator replaced the calibrator with ONNX; a missing directory
// was found only after the verification, naming the temporary file.
func TestNoOutputOverAnyInput(t *testing.T) {
	dir := t.TempDir()
	lf := evalFile(t, true)
	cf := filepath.Join(dir, "temp.json")
	if err := calib.WriteFile(cf, calib.NewTemperature(3), nil, calib.Provenance{}); err != nil {
		t.Fatal(err)
	}
	pf := filepath.Join(dir, "p.json")
	if err := os.WriteFile(pf, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "exp.yaml")
	if err := os.WriteFile(cfg, []byte("name: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	model := "../infer/testdata/tiny.onnx"
	missing := filepath.Join(dir, "missing")
	inputs := []string{lf, cf, pf, cfg, model}
	sums := map[string][]byte{}
	for _, p := range inputs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sums[p] = b
	}
	before := dirNames(t, dir)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"export over the calibrator", []string{"export", "--model", model, "--calibrator", cf, "--out", cf}, "an ONNX model must end in .onnx"},
		{"export sidecar over the calibrator", []string{"export", "--model", model, "--calibrator", cf, "--sidecar", "--out", cf}, "is an input"},
		{"export over the model", []string{"export", "--model", model, "--calibrator", cf, "--out", model}, "is an input"},
		{"export sidecar as onnx", []string{"export", "--model", model, "--calibrator", cf, "--sidecar", "--out", filepath.Join(dir, "s.onnx")}, "must end in .json"},
		// --ort-lib names no library: the check comes before ONNX Runtime loads.
		{"export into a missing directory", []string{"export", "--model", model, "--calibrator", cf, "--out", filepath.Join(missing, "m.onnx"), "--ort-lib", filepath.Join(dir, "none.so")}, "directory " + missing + " does not exist"},
		{"standalone as json", []string{"export", "--calibrator", cf, "--standalone", "--out", filepath.Join(dir, "t.json")}, "must end in .onnx"},
		{"calibrate over the partition", []string{"calibrate", "--method", "temp", "--logits", lf, "--partition", pf, "--out", pf}, "is an input"},
		{"calibrate as npz", []string{"calibrate", "--central", "--method", "temp", "--logits", lf, "--out", lf}, "a calibrator file must end in .json"},
		{"calibrate into a missing directory", []string{"calibrate", "--central", "--method", "temp", "--logits", lf, "--out", filepath.Join(missing, "c.json")}, "does not exist"},
		{"partition as npz", []string{"partition", "--data-or-logits", lf, "--scheme", "iid", "--clients", "2", "--out", lf}, "a partition file must end in .json"},
		{"partition into a missing directory", []string{"partition", "--data-or-logits", lf, "--scheme", "iid", "--clients", "2", "--out", filepath.Join(missing, "p.json")}, "does not exist"},
		{"infer as json", []string{"infer", "--model", model, "--data", "idx:" + pf, "--out", pf}, "a logits file must end in .npz"},
		{"infer into a missing directory", []string{"infer", "--model", model, "--data", "idx:" + pf, "--out", filepath.Join(missing, "l.npz")}, "does not exist"},
		{"eval plots over the logits", []string{"eval", "--logits", lf, "--plot", lf}, "is an input"},
		{"experiment over its config", []string{"experiment", "--config", cfg, "--out", cfg}, "is an input"},
	}
	for _, tt := range tests {
		code, _, stderr := fedcalib(tt.args...)
		if code != ExitUsage || !strings.Contains(stderr, tt.want) || strings.Count(stderr, "\n") != 1 || strings.Contains(stderr, ".tmp") {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and one line containing %q", tt.name, code, stderr, ExitUsage, tt.want)
		}
	}
	for _, p := range inputs {
		if b, err := os.ReadFile(p); err != nil || string(b) != string(sums[p]) {
			t.Errorf("%s changed", p)
		}
	}
	if after := dirNames(t, dir); !slices.Equal(after, before) {
		t.Errorf("directory holds %v, want %v", after, before)
	}
}

// dirNames lists the entries of dir.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, e := range entries {
		s = append(s, e.Name())
	}
	return s
}

func TestDropWarning(t *testing.T) {
	m := func(acc float64) calib.Metrics { return calib.Metrics{N: 1000, Accuracy: acc} }
	tests := []struct {
		before, after float64
		want          string
	}{
		{0.90, 0.85, "; WARNING: accuracy on the test rows drops from 90.00% to 85.00%, by more than 1 point"},
		{0.90, 0.889, "; WARNING: accuracy on the test rows drops from 90.00% to 88.90%, by more than 1 point"},
		{0.90, 0.89, ""}, // exactly one point: not a drop
		{0.90, 0.95, ""},
		{0.90, 0.90, ""},
	}
	for _, tt := range tests {
		if got := dropWarning(m(tt.before), m(tt.after), "the test rows"); got != tt.want {
			t.Errorf("%v → %v: %q, want %q", tt.before, tt.after, got, tt.want)
		}
	}
}

// TestCalibrateWarnsOnAccuracyDrop fits histogram binning with 2 bins on
// calibration rows that teach it to flip the test rows' predictions: the
// summary line must warn that test accuracy fell from 100% to 0%.
func TestCalibrateWarnsOnAccuracyDrop(t *testing.T) {
	f := &logits.File{Classes: 2}
	add := func(p0 float64, y int32, split uint8, n int) {
		for range n {
			f.Logits = append(f.Logits, float32(math.Log(p0)), float32(math.Log(1-p0)))
			f.Labels = append(f.Labels, y)
			f.Split = append(f.Split, split)
		}
	}
	add(0.6, 1, logits.SplitCalibration, 10) // p0 ≥ 0.5 means class 1
	add(0.3, 0, logits.SplitCalibration, 10) // p0 < 0.5 means class 0
	add(0.6, 0, logits.SplitTest, 10)        // right before, wrong after
	dir := t.TempDir()
	lf := filepath.Join(dir, "l.npz")
	if err := logits.Write(lf, f); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := fedcalib("calibrate", "--central", "--method", "bin", "--bins-exp", "1", "--logits", lf, "--out", filepath.Join(dir, "bin.json"))
	want := "; WARNING: accuracy on the test rows drops from 100.00% to 0.00%, by more than 1 point"
	if code != ExitOK || !strings.Contains(stdout, want) || strings.Count(stdout, "\n") != 1 {
		t.Errorf("exit %d, stdout %q, stderr %q; want one line with %q", code, stdout, stderr, want)
	}
	// Temperature scaling keeps every prediction: no accuracy warning
	// (its T ends at a bound and its test NLL rises, which it says).
	code, stdout, _ = fedcalib("calibrate", "--central", "--method", "temp", "--logits", lf, "--out", filepath.Join(dir, "temp.json"))
	if code != ExitOK || strings.Contains(stdout, "WARNING: accuracy") {
		t.Errorf("temp: exit %d, stdout %q; want no accuracy warning", code, stdout)
	}
}

func TestCheckApart(t *testing.T) {
	dir := t.TempDir()
	vec := filepath.Join(dir, "vectors")
	model := filepath.Join(dir, "model.onnx")
	if err := os.WriteFile(model, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.onnx")
	if err := os.Symlink(model, link); err != nil {
		t.Fatal(err)
	}
	vecLink := filepath.Join(dir, "veclink")
	if err := os.Symlink("vectors", vecLink); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(vec, 0o755); err != nil {
		t.Fatal(err)
	}
	out := func(flag, p string) anOutput { return anOutput{flag: flag, path: p} }
	tvec := func(p string) anOutput { return anOutput{flag: "--test-vectors", path: p, dir: true} }
	for _, tc := range []struct {
		name string
		outs []anOutput
		want string // "" for none
	}{
		{"apart", []anOutput{out("--out", model), tvec(vec)}, ""},
		{"beside, same prefix", []anOutput{out("--out", vec+"2.onnx"), tvec(vec)}, ""},
		{"inside", []anOutput{out("--out", filepath.Join(vec, "model.onnx")), tvec(vec)}, "--out " + filepath.Join(vec, "model.onnx") + " is inside --test-vectors " + vec},
		{"inside, given second", []anOutput{tvec(vec), out("--out", filepath.Join(vec, "m.onnx"))}, "is inside --test-vectors"},
		{"inside through a link", []anOutput{out("--out", filepath.Join(vecLink, "m.onnx")), tvec(vec)}, "is inside --test-vectors"},
		{"the directory itself", []anOutput{out("--out", vec), tvec(vec)}, "name the same file"},
		{"one file by a link", []anOutput{out("--out", model), out("--sidecar", link)}, "name the same file"},
		{"empty skipped", []anOutput{out("--out", model), tvec("")}, ""},
	} {
		err := checkApart(tc.outs...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
