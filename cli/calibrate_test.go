package cli

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// calibrateFile writes a logits file of 4 classes whose logits are twice
// too confident (labels follow softmax(z/2)). Rows alternate between the
// calibration and test splits, with a few training rows whose labels are
// all wrong, so fitting on the wrong rows shows. Without split, the file
// has no split column and no training rows.
func calibrateFile(t *testing.T, withSplit bool) (string, *logits.File) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	f := &logits.File{Classes: 4}
	p := make([]float64, 4)
	for i := range 600 {
		z := make([]float32, 4)
		for j := range z {
			z[j] = float32(3 * rng.NormFloat64())
			p[j] = float64(z[j]) / 2
		}
		calib.Softmax(p, p)
		y, u := 0, rng.Float64()
		for y < 3 && u > p[y] {
			u -= p[y]
			y++
		}
		split := uint8(logits.SplitCalibration + i%2)
		if i < 100 {
			split = logits.SplitTrain
			y = (calibFirstMax(z) + 1) % 4 // wrong
			for j := range z {
				z[j] *= 3 // and confident
			}
		}
		f.Logits = append(f.Logits, z...)
		f.Labels = append(f.Labels, int32(y))
		f.Split = append(f.Split, split)
	}
	if !withSplit {
		f.Logits, f.Labels = f.Logits[100*4:], f.Labels[100:]
		f.Split = nil
	}
	path := filepath.Join(t.TempDir(), "logits.npz")
	if err := logits.Write(path, f); err != nil {
		t.Fatal(err)
	}
	return path, f
}

func calibFirstMax(z []float32) int {
	k := 0
	for j, v := range z {
		if v > z[k] {
			k = j
		}
	}
	return k
}

func TestCalibrateEveryMethod(t *testing.T) {
	path, f := calibrateFile(t, true)
	for _, method := range calib.MethodNames() {
		out := filepath.Join(t.TempDir(), method+".json")
		code, stdout, stderr := fedcalib("calibrate", "--central", "--method", method, "--logits", path, "--out", out, "--seed", "5")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", method, code, stderr)
		}
		if n := strings.Count(stdout, "\n"); n != 1 || !strings.Contains(stdout, "250 calibration rows") || !strings.HasPrefix(stdout, out+": "+method) {
			t.Errorf("%s: summary %q, want one line naming the output, method and 250 calibration rows", method, stdout)
		}
		c, file, err := calib.ReadFile(out)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if c.Method() != method || file.Classes != 4 {
			t.Errorf("%s: wrote method %q with %d classes", method, c.Method(), file.Classes)
		}
		prov := file.Provenance
		if prov.Protocol != "central" || prov.Seed != 5 || prov.Tool != Version() || !strings.Contains(prov.Data, "logits.npz") {
			t.Errorf("%s: provenance %+v", method, prov)
		}
		if file.Privacy != nil {
			t.Errorf("%s: a central fit records privacy %+v", method, file.Privacy)
		}
		// The calibrator is the one fitted directly on the calibration rows.
		want, err := calib.New(method, calib.Settings{Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		s := f.Set(f.Rows(logits.SplitCalibration))
		if err := want.Fit(s); err != nil {
			t.Fatal(err)
		}
		got, exp := make([]float64, len(s.Logits)), make([]float64, len(s.Logits))
		c.Predict(got, s.Logits)
		want.Predict(exp, s.Logits)
		for k := range got {
			if math.Abs(got[k]-exp[k]) > 1e-12 {
				t.Fatalf("%s: the written calibrator predicts %v, a direct fit on the calibration rows %v", method, got[k], exp[k])
			}
		}
	}
}

func TestCalibrateTemperatureValue(t *testing.T) {
	path, f := calibrateFile(t, true)
	out := filepath.Join(t.TempDir(), "temp.json")
	if code, _, stderr := fedcalib("calibrate", "--central", "--method", "temp", "--logits", path, "--out", out); code != 0 {
		t.Fatal(stderr)
	}
	c, _, err := calib.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	direct := new(calib.Temperature)
	if err := direct.Fit(f.Set(f.Rows(logits.SplitCalibration))); err != nil {
		t.Fatal(err)
	}
	if got := c.(*calib.Temperature).T; got != direct.T {
		t.Errorf("T = %v, direct fit on the calibration rows gives %v", got, direct.T)
	}
	// The training rows are confidently wrong: fitting on them too would
	// give a far larger temperature.
	all := new(calib.Temperature)
	if err := all.Fit(f.Set(nil)); err != nil {
		t.Fatal(err)
	}
	if all.T < direct.T*1.5 {
		t.Fatalf("test data cannot tell calibration rows from all rows: T %v vs %v", all.T, direct.T)
	}
}

func TestCalibrateWithoutSplitUsesAllRows(t *testing.T) {
	path, _ := calibrateFile(t, false)
	out := filepath.Join(t.TempDir(), "op.json")
	code, stdout, stderr := fedcalib("calibrate", "--central", "--method", "opvector", "--logits", path, "--out", out)
	if code != 0 {
		t.Fatal(stderr)
	}
	if !strings.Contains(stdout, "all 500 rows") {
		t.Errorf("summary %q does not say it used all 500 rows", stdout)
	}
}

func TestCalibrateBinsExp(t *testing.T) {
	path, _ := calibrateFile(t, true)
	for _, tc := range []struct {
		method, exp string
		bins        int
	}{{"bin", "", 128}, {"bin", "3", 8}, {"bbq", "", 128}, {"bbq", "5", 32}, {"isotonic", "", 0}, {"isotonic", "3", 8}} { // isotonic: exact (no bins) without --bins-exp
		out := filepath.Join(t.TempDir(), "c.json")
		args := []string{"--central", "--method", tc.method, "--logits", path, "--out", out}
		if tc.exp != "" {
			args = append(args, "--bins-exp", tc.exp)
		}
		code, stdout, stderr := fedcalib(append([]string{"calibrate"}, args...)...)
		if code != 0 {
			t.Fatal(stderr)
		}
		c, _, err := calib.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if iso, ok := c.(*calib.Isotonic); ok {
			want := fmt.Sprintf(", exact, %d breakpoints;", iso.Breakpoints())
			if !iso.Exact() {
				want = fmt.Sprintf(", %d bins per class;", iso.Bins)
			}
			if !strings.Contains(stdout, want) {
				t.Errorf("isotonic --bins-exp %q: summary %q does not say %q", tc.exp, stdout, want)
			}
		}
		var bins int
		switch c := c.(type) {
		case *calib.Histogram:
			bins = c.Bins
		case *calib.BBQ:
			bins = 1 << c.Mexp
		case *calib.Isotonic:
			bins = c.Bins
		}
		if bins != tc.bins {
			t.Errorf("%s --bins-exp %q: %d bins, want %d", tc.method, tc.exp, bins, tc.bins)
		}
	}
}

func TestCalibrateErrors(t *testing.T) {
	path, _ := calibrateFile(t, true)
	dir := t.TempDir()
	noCal := filepath.Join(dir, "nocal.npz")
	if err := logits.Write(noCal, &logits.File{Logits: []float32{1, 2}, Labels: []int32{0}, Split: []uint8{logits.SplitTest}, Classes: 2}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "c.json")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no --central", []string{"--method", "temp", "--logits", path, "--out", out}, "needs --central"},
		{"no --method", []string{"--central", "--logits", path, "--out", out}, "needs --method"},
		{"unknown method", []string{"--central", "--method", "no-such-method", "--logits", path, "--out", out}, `--method "no-such-method"`},
		{"no --logits", []string{"--central", "--method", "temp", "--out", out}, "needs --logits"},
		{"no --out", []string{"--central", "--method", "temp", "--logits", path}, "needs --out"},
		{"bins-exp 0", []string{"--central", "--method", "bbq", "--bins-exp", "0", "--logits", path, "--out", out}, "--bins-exp 0"},
		{"bins-exp 17", []string{"--central", "--method", "bin", "--bins-exp", "17", "--logits", path, "--out", out}, "want M in [1, 16]"},
		{"bins-exp for temp", []string{"--central", "--method", "temp", "--bins-exp", "5", "--logits", path, "--out", out}, "not of temp"},
		{"missing logits", []string{"--central", "--method", "temp", "--logits", filepath.Join(dir, "none.npz"), "--out", out}, "none.npz"},
		{"no calibration rows", []string{"--central", "--method", "temp", "--logits", noCal, "--out", out}, "no calibration rows"},
		{"out is the input", []string{"--central", "--method", "temp", "--logits", path, "--out", path}, "a calibrator file must end in .json"},
		{"out directory missing", []string{"--central", "--method", "temp", "--logits", path, "--out", filepath.Join(dir, "no", "c.json")}, "does not exist: create it first"},
		{"stray argument", []string{"--central", "--method", "temp", "--logits", path, "--out", out, "extra"}, "unknown command"},
	} {
		code, stdout, stderr := fedcalib(append([]string{"calibrate"}, tc.args...)...)
		if code != ExitUsage {
			t.Errorf("%s: exit %d, want %d", tc.name, code, ExitUsage)
		}
		if !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%s: stderr %q, want one line containing %q", tc.name, stderr, tc.want)
		}
		if stdout != "" {
			t.Errorf("%s: stdout %q", tc.name, stdout)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%s: wrote %s", tc.name, out)
		}
	}
	if _, err := logits.Read(path); err != nil {
		t.Errorf("the input was damaged: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("left a temporary file %s", e.Name())
		}
	}
}

func TestCalibrateHelp(t *testing.T) {
	code, stdout, _ := fedcalib("calibrate", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, flag := range []string{"--central", "--method", "--logits", "--out", "--bins-exp", "--seed", "Examples:"} {
		if !strings.Contains(stdout, flag) {
			t.Errorf("help does not mention %s", flag)
		}
	}
}
