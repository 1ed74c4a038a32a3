package integration

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer"
)

// fedcalibBin builds the binary once per test run.
func fedcalibBin(t *testing.T) string {
	t.Helper()
	if _, err := infer.ResolveRuntime(""); err != nil {
		t.Skipf("ONNX Runtime not installed (run make setup): %v", err)
	}
	bin := filepath.Join(t.TempDir(), "fedcalib")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/fedcalib")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func run(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}

// writeIDX writes n 4×4 images with labels i%3 (the tiny model's input).
func writeIDX(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	var img, lab bytes.Buffer
	binary.Write(&img, binary.BigEndian, []uint32{0x803, uint32(n), 4, 4})
	binary.Write(&lab, binary.BigEndian, []uint32{0x801, uint32(n)})
	for i := 0; i < n; i++ {
		for p := 0; p < 16; p++ {
			img.WriteByte(byte((i*37 + p*11 + (i%3)*60) % 256))
		}
		lab.WriteByte(byte(i % 3))
	}
	images := filepath.Join(dir, "x-images-idx3-ubyte")
	os.WriteFile(images, img.Bytes(), 0o644)
	os.WriteFile(filepath.Join(dir, "x-labels-idx1-ubyte"), lab.Bytes(), 0o644)
	return images
}

// TestExportEveryMethodEndToEnd fits every method and weighting with the
// CLI on the tiny model's logits, exports each into the model, and checks
// each exported file in a fresh process: `fedcalib check` runs its
// probabilities output in ONNX Runtime, and its metrics must equal those
// of the calibrator file applied in Go to the same logits.
func TestExportEveryMethodEndToEnd(t *testing.T) {
	bin := fedcalibBin(t)
	dir := t.TempDir()
	images := writeIDX(t, 600)
	model := "../infer/testdata/tiny.onnx"
	lf := filepath.Join(dir, "logits.npz")
	if out, code := run(t, bin, "infer", "--model", model, "--data", "idx:"+images, "--out", lf, "--quiet"); code != 0 {
		t.Fatalf("infer: %s", out)
	}
	type cal struct{ name, method string }
	var cals []cal
	for _, m := range calib.Methods() { // every method of the registry
		if m.Family != calib.Binning {
			cals = append(cals, cal{m.Name, m.Name})
			continue
		}
		for _, w := range []string{"none", "all", "changed"} {
			cals = append(cals, cal{m.Name + "-" + w, m.Name})
		}
	}
	checker := onnxChecker(t)
	for _, c := range cals {
		cf := filepath.Join(dir, c.name+".json")
		args := []string{"calibrate", "--method", c.method, "--logits", lf, "--out", cf, "--quiet"}
		if m, _ := calib.LookupMethod(c.method); m.HasBins() {
			args = append(args, "--bins-exp", "4")
		}
		if strings.Contains(c.name, "-") {
			// Weighted binning is a federated protocol: 5 clients, 2 rounds.
			w := strings.SplitN(c.name, "-", 2)[1]
			args = append(args, "--clients", "5", "--beta", "1", "--rounds", "2", "--weighting", w, "--sample-rate", "0.6")
		} else {
			args = append(args, "--central")
		}
		if out, code := run(t, bin, args...); code != 0 {
			t.Fatalf("%s: calibrate: %s", c.name, out)
		}
		exported := filepath.Join(dir, c.name+".onnx")
		if out, code := run(t, bin, "export", "--model", model, "--calibrator", cf, "--out", exported); code != 0 {
			t.Fatalf("%s: export: %s", c.name, out)
		}
		var graph, gocal map[string]any
		for i, args := range [][]string{
			{"check", "--model", exported, "--data", "idx:" + images, "--json", "--min-cwece-improvement", "-1", "--max-accuracy-drop", "1"},
			{"check", "--model", model, "--calibrator", cf, "--data", "idx:" + images, "--json", "--min-cwece-improvement", "-1", "--max-accuracy-drop", "1"},
		} {
			out, code := run(t, bin, args...)
			if code != 0 {
				t.Fatalf("%s: %v: exit %d: %s", c.name, args, code, out)
			}
			m := map[string]any{}
			if err := json.Unmarshal([]byte(out), &m); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if i == 0 {
				graph = m
			} else {
				gocal = m
			}
		}
		ga, pa := graph["after"].(map[string]any), gocal["after"].(map[string]any)
		for _, k := range []string{"accuracy", "cwece", "ece", "nll", "brier"} {
			if d := ga[k].(float64) - pa[k].(float64); d > 1e-5 || d < -1e-5 {
				t.Errorf("%s: %s of the exported graph %v, of the Go calibrator %v", c.name, k, ga[k], pa[k])
			}
		}
		if checker != nil {
			checker(t, c.name, exported)
		}
	}
}

// onnxChecker returns a function running onnx.checker.check_model with
// full_check on a file, or nil when Debian's python3-onnx is missing.
func onnxChecker(t *testing.T) func(*testing.T, string, string) {
	py := "/usr/bin/python3"
	if runtime.GOOS != "linux" {
		return nil
	}
	probe := exec.Command(py, "-c", "import onnx.checker")
	probe.Dir = os.TempDir() // not the repository: its onnx/ folder would shadow the module
	if probe.Run() != nil {
		t.Log("python3-onnx not installed: skipping onnx.checker")
		return nil
	}
	return func(t *testing.T, name, path string) {
		abs, _ := filepath.Abs(path)
		cmd := exec.Command(py, "-c", "import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)", abs)
		cmd.Dir = os.TempDir()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: onnx.checker: %v\n%s", name, err, out)
		}
	}
}

// TestTestVectorsReadByPythonONNX exports temperature scaling with
// --test-vectors and reads the tensors back with Python's onnx
// (numpy_helper), an implementation independent of ours: the names and
// shapes must be the graph's, and the probabilities output must equal
// softmax(logits / T) computed in NumPy from the logits output, with T read
// from the calibrator file. Skipped without Debian's python3-onnx.
func TestTestVectorsReadByPythonONNX(t *testing.T) {
	const py = "/usr/bin/python3"
	probe := exec.Command(py, "-c", "import onnx.numpy_helper, numpy")
	probe.Dir = os.TempDir() // not the repository: its onnx/ folder would shadow the module
	if runtime.GOOS != "linux" || probe.Run() != nil {
		t.Skip("python3-onnx not installed")
	}
	bin := fedcalibBin(t)
	dir := t.TempDir()
	images := writeIDX(t, 300)
	model := "../infer/testdata/tiny.onnx"
	lf, cf, vec := filepath.Join(dir, "logits.npz"), filepath.Join(dir, "temp.json"), filepath.Join(dir, "vectors")
	for _, args := range [][]string{
		{"infer", "--model", model, "--data", "idx:" + images, "--out", lf, "--quiet"},
		{"calibrate", "--central", "--method", "temp", "--logits", lf, "--out", cf},
		{"export", "--model", model, "--calibrator", cf, "--test-vectors", vec},
		{"check", "--test-vectors", vec},
	} {
		if out, code := run(t, bin, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args[0], code, out)
		}
	}
	script := `
import json, sys, onnx, numpy as np
from onnx import numpy_helper
vec, cal = sys.argv[1], sys.argv[2]
m = onnx.load(vec + "/model.onnx")
def load(name):
    t = onnx.TensorProto()
    with open(vec + "/test_data_set_0/" + name, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, numpy_helper.to_array(t)
iname, x = load("input_0.pb")
names = [load("output_%d.pb" % i) for i in range(len(m.graph.output))]
assert iname == m.graph.input[0].name, (iname, m.graph.input[0].name)
assert [n for n, _ in names] == [o.name for o in m.graph.output], names
z, p = names[0][1].astype(np.float64), names[1][1].astype(np.float64)
T = json.load(open(cal))["params"]["t"]
e = np.exp(z / T - (z / T).max(axis=1, keepdims=True))
want = e / e.sum(axis=1, keepdims=True)
print(json.dumps({"rows": int(x.shape[0]), "max_err": float(np.abs(p - want).max())}))
`
	cmd := exec.Command(py, "-c", script, vec, cf)
	cmd.Dir = os.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	var got struct {
		Rows   int     `json:"rows"`
		MaxErr float64 `json:"max_err"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("python output %q: %v", out, err)
	}
	t.Logf("Python's onnx read %d rows; probabilities vs NumPy's softmax(z/T): max error %g", got.Rows, got.MaxErr)
	// float32 outputs of a float64 computation: within float32 rounding.
	if got.Rows < 1 || got.MaxErr > 1e-6 {
		t.Errorf("Python read %d rows; probabilities differ from NumPy's softmax(z/T) by %g", got.Rows, got.MaxErr)
	}
}
