package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/report"
)

// TestDemo runs `make demo`'s script (integration/demo.sh) end to end with
// a freshly built binary, writing into a temporary folder, and checks
// that it exports a calibrator the table named and finishes: the demo is
// one of the README's two commands, so a change of any command's output
// that the script parses must fail here, not on a user's machine.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo end to end (seconds, with ONNX Runtime and MNIST)")
	}
	bin := fedcalibBin(t)
	out := filepath.Join(t.TempDir(), "demo-out")
	cmd := exec.Command("bash", "demo.sh")
	cmd.Env = append(os.Environ(), "FEDCALIB="+bin, "OUT="+out)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo.sh: %v\n%s", err, b)
	}
	log := string(b)
	for _, want := range []string{"== 5. Export the best private calibrator (", "demo finished in", "serve + 5 joins: parameters and privacy record identical"} {
		if !strings.Contains(log, want) {
			t.Errorf("demo output lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "Export the best private calibrator (calibrator)") {
		t.Error("the demo took the table's header for a calibrator")
	}
	if _, err := os.Stat(filepath.Join(out, "mnist.calibrated.onnx")); err != nil {
		t.Errorf("no calibrated model: %v", err)
	}
	if page, err := os.ReadFile(filepath.Join(out, "report.html")); err != nil {
		t.Errorf("no calibration report: %v", err)
	} else if err := report.Check(page); err != nil {
		t.Errorf("the demo's report: %v", err)
	}
}
