package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// exactGolden holds eval's --json output, to the last digit, on the file
// TestEvalBitForBit writes: work that makes eval cheaper must leave it
// unchanged bit for bit (rewrite it, after review, with -update).
const exactGolden = "testdata/eval-exact.json"

// updateExact rewrites exactGolden: go test ./cli -run TestEvalBitForBit -update-exact.
var updateExact = flag.Bool("update-exact", false, "rewrite "+exactGolden)

// TestEvalBitForBit runs eval --json on 20,000 rows of 10 classes (five
// blocks, every goroutine), uncalibrated, with a temperature and with a
// histogram calibrator, and compares every byte with exactGolden. The
// values depend on math.Exp and math.Log to the last bit, whose assembly
// differs between architectures, so the golden file is amd64's.
func TestEvalBitForBit(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the golden digits are amd64's (math.Exp and math.Log differ in the last bit elsewhere)")
	}
	dir := t.TempDir()
	f := chunkFile(20000, 10)
	path := filepath.Join(dir, "logits.npz")
	if err := logits.Write(path, f); err != nil {
		t.Fatal(err)
	}
	temp := calib.NewTemperature(10)
	temp.T = 1.7
	hist := &calib.Histogram{Bins: 10}
	if err := hist.Fit(f.Set(f.Rows(logits.SplitCalibration))); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for _, c := range []struct {
		name string
		cal  calib.Calibrator
	}{{"none", nil}, {"temp", temp}, {"bin", hist}} {
		args := []string{"eval", "--logits", path, "--split", "all", "--json"}
		if c.cal != nil {
			cpath := filepath.Join(dir, c.name+".json")
			if err := calib.WriteFile(cpath, c.cal, nil, calib.Provenance{}); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--calibrator", cpath)
		}
		code, stdout, stderr := fedcalib(args...)
		if code != ExitOK {
			t.Fatalf("%s: exit %d: %s", c.name, code, stderr)
		}
		out.WriteString("--- " + c.name + "\n" + strings.ReplaceAll(stdout, dir, "$TMP"))
	}
	if *updateExact {
		if err := os.WriteFile(exactGolden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(exactGolden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("eval's output differs from %s:\n%s", exactGolden, out.String())
	}
}
