package cli_test

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/cli"
	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/export"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/onnx"
)

// update rewrites the golden outputs: go test ./cli -run TestGolden -update.
var update = flag.Bool("update", false, "rewrite the golden outputs under testdata/golden")

// goldenDir holds one file per command of TestGoldenCLI: the command, its
// standard output, its standard error when not empty, and its exit
// status, with the test's temporary directory written as $TMP and long
// numbers rounded (see normalise).
const goldenDir = "testdata/golden"

// sidecars are calib's golden calibrator files, fitted on 4 classes.
const sidecars = "../calib/testdata/sidecar"

// goldenCase is one command of TestGoldenCLI. $TMP in its arguments
// stands for the directory holding the inputs the test writes.
type goldenCase struct {
	name string
	args []string
}

// computes reports whether the command prints numbers it computed (eval
// and privacy do, inspect prints what the model holds), whose last
// digits normalise rounds.
func (gc goldenCase) computes() bool { return gc.args[0] != "inspect" }

func goldenCases() []goldenCase {
	cases := []goldenCase{
		{"eval", []string{"eval", "--logits", "$TMP/logits.npz"}},
		{"eval-json", []string{"eval", "--logits", "$TMP/logits.npz", "--json"}},
		{"eval-all-bins-10-json", []string{"eval", "--logits", "$TMP/logits.npz", "--split", "all", "--bins", "10", "--json"}},
		{"eval-calibrated", []string{"eval", "--logits", "$TMP/logits.npz", "--calibrator", sidecars + "/bbq-all.json"}},
		{"eval-calibrated-json", []string{"eval", "--logits", "$TMP/logits.npz", "--calibrator", sidecars + "/temp-none.json", "--json"}},
		{"eval-compare", []string{"eval", "--logits", "$TMP/logits.npz", "--calibrator", sidecars + "/temp-none.json", "--calibrator", sidecars + "/bin-changed.json"}},
		{"eval-compare-json", []string{"eval", "--logits", "$TMP/logits.npz", "--calibrator", sidecars + "/temp-none.json", "--calibrator", sidecars + "/bin-changed.json", "--json"}},
		{"eval-wrong-classes", []string{"eval", "--logits", "$TMP/logits3.npz", "--calibrator", sidecars + "/temp-none.json"}},
		{"privacy-json", []string{"privacy", "--epsilon", "1", "--delta", "1e-5", "--json"}},
		{"privacy-rdp-json", []string{"privacy", "--method", "temp", "--rounds", "12", "--epsilon", "1", "--sample-rate", "0.1", "--accountant", "rdp", "--json"}},
		{"privacy-noise-multiplier-json", []string{"privacy", "--noise-multiplier", "1.1", "--sample-rate", "0.01", "--steps", "1000", "--delta", "1e-5", "--accountant", "rdp", "--json"}},
		{"privacy-unknown-method", []string{"privacy", "--method", "nope", "--epsilon", "1", "--json"}},
		{"inspect", []string{"inspect", "../infer/testdata/tiny.onnx"}},
		{"inspect-json", []string{"inspect", "--json", "../infer/testdata/tiny.onnx"}},
		{"inspect-calibrated", []string{"inspect", "$TMP/calibrated.onnx"}},
		{"inspect-calibrated-json", []string{"inspect", "--json", "$TMP/calibrated.onnx"}},
	}
	// One privacy --json per method of the registry, so that a new
	// method gets its golden output.
	for _, m := range calib.MethodNames() {
		cases = append(cases, goldenCase{"privacy-" + m + "-json", []string{"privacy", "--method", m, "--classes", "4", "--rounds", "3", "--epsilon", "1", "--delta", "1e-5", "--json"}})
	}
	return cases
}

// writeGoldenInputs writes the inputs of the golden commands into dir:
// logits.npz, 300 rows of 4 classes from an over-confident model, every
// other row in the calibration split and the rest in the test split;
// logits3.npz, the same shape with 3 classes; and calibrated.onnx,
// infer's tiny model with temperature scaling (T = 1.5) appended.
func writeGoldenInputs(t *testing.T, dir string) {
	t.Helper()
	for _, c := range []int{4, 3} {
		rng := rand.New(rand.NewPCG(uint64(c), 0x676f6c64)) // "gold"
		f := &logits.File{Classes: c}
		for i := range 300 {
			y := rng.IntN(c)
			for j := range c {
				v := 2 * rng.NormFloat64()
				if j == y || rng.IntN(4) == 0 { // a confident model, wrong a quarter of the time
					v += 4
				}
				f.Logits = append(f.Logits, float32(v))
			}
			f.Labels = append(f.Labels, int32(y))
			f.Split = append(f.Split, uint8(logits.SplitCalibration+i%2))
		}
		name := "logits.npz"
		if c != 4 {
			name = fmt.Sprintf("logits%d.npz", c)
		}
		if err := logits.Write(filepath.Join(dir, name), f); err != nil {
			t.Fatal(err)
		}
	}

	m, err := onnx.ReadFile("../infer/testdata/tiny.onnx")
	if err != nil {
		t.Fatal(err)
	}
	temp := calib.NewTemperature(3)
	if err := temp.SetParams([]float64{1.5}); err != nil {
		t.Fatal(err)
	}
	plan, err := federation.PlanNoise(calib.MethodTemp, 3, &federation.Privacy{Epsilon: 1, Delta: 1e-5, Clip: 0.5}, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	spent, err := dp.SpentBy(dp.ZCDP, plan.Multiplier, 2, 1, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	file := &calib.File{
		Privacy: &calib.Privacy{Epsilon: spent.Epsilon, Delta: 1e-5, Rho: spent.Rho, Sigma: plan.Sigma(), Clip: 0.5,
			Accountant: "zcdp", Rounds: 2, SampleRate: 1},
		Provenance: calib.Provenance{Protocol: "FedTemp", Clients: 5, Seed: 7, Tool: "golden"},
	}
	if _, _, err := export.Append(m, temp, file, export.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteFile(filepath.Join(dir, "calibrated.onnx")); err != nil {
		t.Fatal(err)
	}
}

// longNumber matches a decimal number with a fraction or an exponent.
var longNumber = regexp.MustCompile(`-?[0-9]+\.[0-9]+(?:[eE][-+]?[0-9]+)?`)

// normalise makes an output independent of the machine: the temporary
// directory becomes $TMP and, when round is set, numbers given to more
// than 12 significant digits are rounded to 12, since the last digits of
// float64 arithmetic may differ where the compiler fuses multiply-adds
// or the math package has assembly (amd64 versus arm64).
func normalise(s, tmp string, round bool) string {
	s = strings.ReplaceAll(s, tmp, "$TMP")
	if !round {
		return s
	}
	return longNumber.ReplaceAllStringFunc(s, func(num string) string {
		mant := num
		if i := strings.IndexAny(mant, "eE"); i >= 0 {
			mant = mant[:i]
		}
		digits := strings.TrimLeft(strings.NewReplacer("-", "", ".", "").Replace(mant), "0")
		if len(digits) <= 12 {
			return num
		}
		v, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return num
		}
		return strconv.FormatFloat(v, 'g', 12, 64)
	})
}

// TestGoldenCLI runs fedcalib eval, privacy --json and inspect in-process
// on fixed inputs and compares what they print with the golden files.
// With -update it rewrites them.
func TestGoldenCLI(t *testing.T) {
	tmp := t.TempDir()
	writeGoldenInputs(t, tmp)
	want := map[string]bool{}
	for _, gc := range goldenCases() {
		want[gc.name+".golden"] = true
		t.Run(gc.name, func(t *testing.T) {
			args := make([]string, len(gc.args))
			for i, a := range gc.args {
				args[i] = strings.ReplaceAll(a, "$TMP", tmp)
			}
			var stdout, stderr bytes.Buffer
			code := cli.Main(args, &stdout, &stderr)
			var b strings.Builder
			fmt.Fprintf(&b, "$ fedcalib %s\n%s", strings.Join(gc.args, " "), stdout.String())
			if stderr.Len() > 0 {
				fmt.Fprintf(&b, "--- stderr\n%s", stderr.String())
			}
			fmt.Fprintf(&b, "--- exit %d\n", code)
			got := normalise(b.String(), tmp, gc.computes())

			path := filepath.Join(goldenDir, gc.name+".golden")
			if *update {
				if err := os.MkdirAll(goldenDir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			golden, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (write the golden outputs with: go test ./cli -run TestGoldenCLI -update)", err)
			}
			if got != string(golden) {
				t.Errorf("output differs from %s (rerun with -update if the change is intended):\n%s", path, lineDiff(string(golden), got))
			}
		})
	}
	entries, err := os.ReadDir(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !want[e.Name()] {
			t.Errorf("%s: stale golden file, of no command of TestGoldenCLI", filepath.Join(goldenDir, e.Name()))
		}
	}
}

// lineDiff lists the lines where want and got differ, up to ten.
func lineDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	n := 0
	for i := 0; i < max(len(wl), len(gl)) && n < 10; i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			fmt.Fprintf(&b, "line %d:\n  golden: %q\n  got:    %q\n", i+1, w, g)
			n++
		}
	}
	return b.String()
}
