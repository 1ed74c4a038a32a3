package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

// TestScalingBinningEndToEnd fits scalbin centrally and federatedly from
// the command line, reads both files back, evaluates them and exports
// the central one standalone (verified against Predict by export), and
// checks the usage errors particular to scalbin.
func TestScalingBinningEndToEnd(t *testing.T) {
	in, _ := fedLogitsFile(t, 800, 4, 5)
	dir := t.TempDir()
	central, fed := filepath.Join(dir, "central.json"), filepath.Join(dir, "fed.json")
	for _, args := range [][]string{
		{"calibrate", "--central", "--method", "scalbin", "--logits", in, "--out", central},
		{"calibrate", "--method", "scalbin", "--bins-exp", "6", "--logits", in, "--rounds", "2", "--sample-rate", "0.8", "--quiet", "--out", fed},
		{"eval", "--logits", in, "--calibrator", central, "--calibrator", fed},
		{"export", "--standalone", "--calibrator", central, "--out", filepath.Join(dir, "central.onnx")},
	} {
		if code, stdout, stderr := fedcalib(args...); code != ExitOK {
			t.Fatalf("%v: exit %d\n%s%s", args, code, stdout, stderr)
		}
	}
	for _, tc := range []struct {
		path     string
		mexp     int
		protocol string
	}{{central, calib.ScalingBinningMexp, "central"}, {fed, 6, "FedScalBin"}} {
		c, f, err := calib.ReadFile(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		sb, ok := c.(*calib.ScalingBinning)
		if !ok || f.Method != calib.MethodScalingBinning || sb.Mexp != tc.mexp || sb.Bins != calib.DefaultScalingBinningBins(tc.mexp) || !strings.Contains(f.Provenance.Protocol, tc.protocol) {
			t.Errorf("%s: %T, method %q, %d bins of 2^%d, protocol %q: want scalbin with %d bins of 2^%d by %s",
				tc.path, c, f.Method, sb.Bins, sb.Mexp, f.Provenance.Protocol, calib.DefaultScalingBinningBins(tc.mexp), tc.mexp, tc.protocol)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"calibrate", "--method", "scalbin", "--logits", in, "--epsilon", "1", "--out", filepath.Join(dir, "x.json")}, "no private federated fit"},
		{[]string{"calibrate", "--method", "scalbin", "--logits", in, "--weighting", "all", "--out", filepath.Join(dir, "x.json")}, "--weighting applies to binning methods"},
		{[]string{"calibrate", "--central", "--method", "scalbin", "--bins-exp", "17", "--logits", in, "--out", filepath.Join(dir, "x.json")}, "--bins-exp 17"},
		{[]string{"privacy", "--method", "scalbin", "--epsilon", "1", "--classes", "4"}, "no private federated fit"},
	} {
		code, _, stderr := fedcalib(tc.args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q: want %d and %q", tc.args, code, stderr, ExitUsage, tc.want)
		}
	}
}
