package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

// TestScalingBinningEndToEnd fits scalbin centrally, federatedly and
// privately from the command line, reads the files back (the private
// one's record checked against its noise), evaluates them, exports the
// central one standalone (verified against Predict by export), and
// checks the usage errors particular to scalbin.
func TestScalingBinningEndToEnd(t *testing.T) {
	in, _ := fedLogitsFile(t, 800, 4, 5)
	dir := t.TempDir()
	central, fed, private := filepath.Join(dir, "central.json"), filepath.Join(dir, "fed.json"), filepath.Join(dir, "private.json")
	for _, args := range [][]string{
		{"calibrate", "--central", "--method", "scalbin", "--logits", in, "--out", central},
		{"calibrate", "--method", "scalbin", "--bins-exp", "6", "--logits", in, "--rounds", "2", "--sample-rate", "0.8", "--quiet", "--out", fed},
		{"calibrate", "--method", "scalbin", "--bins-exp", "6", "--logits", in, "--rounds", "2", "--epsilon", "2", "--clip-pos", "5", "--quiet", "--out", private},
		{"eval", "--logits", in, "--calibrator", central, "--calibrator", fed, "--calibrator", private},
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
	}{{central, calib.ScalingBinningMexp, "central"}, {fed, 6, "FedScalBin"}, {private, 6, "FedScalBin"}} {
		c, f, err := calib.ReadFile(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		sb, ok := c.(*calib.ScalingBinning)
		if !ok || f.Method != calib.MethodScalingBinning || sb.Mexp != tc.mexp || sb.Bins != calib.DefaultScalingBinningBins(tc.mexp, c.Classes()) || !strings.Contains(f.Provenance.Protocol, tc.protocol) {
			t.Errorf("%s: %T, method %q, %d bins of 2^%d, protocol %q: want scalbin with %d bins of 2^%d by %s",
				tc.path, c, f.Method, sb.Bins, sb.Mexp, f.Provenance.Protocol, calib.DefaultScalingBinningBins(tc.mexp, c.Classes()), tc.mexp, tc.protocol)
		}
		// ReadFile checked the privacy record against its noise.
		if p := f.Privacy; (tc.path == private) != (p != nil) || p != nil && (p.ClipPos != 5 || p.Rounds != 2 || p.Epsilon > 2+1e-9 || p.Epsilon < 1.99) {
			t.Errorf("%s: privacy %+v", tc.path, p)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"calibrate", "--method", "scalbin", "--logits", in, "--epsilon", "1", "--accountant", "rdp", "--ledger", filepath.Join(dir, "l.json"), "--out", filepath.Join(dir, "x.json")}, "make one only under zcdp"},
		{[]string{"calibrate", "--method", "scalbin", "--logits", in, "--epsilon", "1", "--clip-neg", "3", "--out", filepath.Join(dir, "x.json")}, "--clip-neg applies to binning methods"},
		{[]string{"calibrate", "--method", "scalbin", "--logits", in, "--weighting", "all", "--out", filepath.Join(dir, "x.json")}, "--weighting applies to binning methods"},
		{[]string{"calibrate", "--central", "--method", "scalbin", "--bins-exp", "17", "--logits", in, "--out", filepath.Join(dir, "x.json")}, "--bins-exp 17"},
		{[]string{"privacy", "--method", "scalbin", "--epsilon", "1"}, "needs --classes"},
	} {
		code, _, stderr := fedcalib(tc.args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q: want %d and %q", tc.args, code, stderr, ExitUsage, tc.want)
		}
	}
}
