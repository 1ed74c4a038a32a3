package cli

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
)

func TestCalibrateFederated(t *testing.T) {
	in, _ := fedLogitsFile(t, 1200, 4, 5)
	dir := t.TempDir()
	t.Run("dirichlet bbq", func(t *testing.T) {
		out := filepath.Join(dir, "bbq.json")
		code, stdout, stderr := fedcalib("calibrate", "--method", "bbq", "--weighting", "all", "--logits", in,
			"--clients", "10", "--beta", "0.5", "--rounds", "3", "--clients-per-round", "4", "--seed", "2", "--out", out)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if !strings.Contains(stderr, "round 1/3:") || !strings.Contains(stderr, "round 3/3:") {
			t.Errorf("no per-round progress on stderr: %q", stderr)
		}
		for _, want := range []string{out + ": FedBBQ over 10 clients, 3 rounds, p = 0.4", "cwECE", "accuracy", "not private"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("summary %q lacks %q", stdout, want)
			}
		}
		if n := strings.Count(stdout, "\n"); n != 1 {
			t.Errorf("summary has %d lines", n)
		}
		c, f, err := calib.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if c.Method() != "bbq" || f.Provenance.Protocol != "FedBBQ" || f.Provenance.Clients != 10 || f.Provenance.Weighting != "all" || f.Privacy != nil {
			t.Errorf("sidecar %+v", f)
		}
	})
	t.Run("natural private temp", func(t *testing.T) {
		out := filepath.Join(dir, "temp.json")
		code, stdout, stderr := fedcalib("calibrate", "--method", "temp", "--logits", in, "--rounds", "4",
			"--sample-rate", "0.5", "--epsilon", "1", "--delta", "1e-6", "--quiet", "--out", out)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if stderr != "" {
			t.Errorf("--quiet printed %q", stderr)
		}
		if !strings.Contains(stdout, "FedTemp over 5 clients") || !strings.Contains(stdout, "ε = 1 spent (δ = 1e-06, zcdp") {
			t.Errorf("summary %q", stdout)
		}
		_, f, err := calib.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		pr := f.Privacy
		rho, _ := dp.ZCDPRho(1, 1e-6)
		if pr == nil || math.Abs(pr.Epsilon-1) > 1e-6 || pr.Delta != 1e-6 || pr.Clip != 0.5 || pr.Rounds != 4 || pr.SampleRate != 0.5 ||
			math.Abs(pr.Sigma-0.5*math.Sqrt(4/(2*rho))) > 1e-9 {
			t.Errorf("privacy record %+v", pr)
		}
	})
}

// TestCalibrateFederatedEqualsCentral: one round with every client is the
// central fit, through the command line too.
func TestCalibrateFederatedEqualsCentral(t *testing.T) {
	in, _ := fedLogitsFile(t, 900, 3, 5)
	dir := t.TempDir()
	fed, central := filepath.Join(dir, "fed.json"), filepath.Join(dir, "central.json")
	if code, _, stderr := fedcalib("calibrate", "--method", "bbq", "--bins-exp", "4", "--logits", in, "--quiet", "--out", fed); code != 0 {
		t.Fatal(stderr)
	}
	if code, _, stderr := fedcalib("calibrate", "--central", "--method", "bbq", "--bins-exp", "4", "--logits", in, "--out", central); code != 0 {
		t.Fatal(stderr)
	}
	params := func(path string) json.RawMessage {
		_, f, err := calib.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return f.Params
	}
	if a, b := params(fed), params(central); !reflect.DeepEqual(a, b) {
		t.Errorf("federated p = 1, T = 1 parameters differ from central:\n%s\n%s", a, b)
	}
}

func TestCalibrateFederatedPartitionFile(t *testing.T) {
	in, _ := fedLogitsFile(t, 600, 4, 0)
	other, _ := fedLogitsFile(t, 601, 4, 0)
	dir := t.TempDir()
	part := filepath.Join(dir, "p.json")
	if code, _, stderr := fedcalib("partition", "--data-or-logits", in, "--clients", "5", "--beta", "1", "--out", part); code != 0 {
		t.Fatal(stderr)
	}
	out := filepath.Join(dir, "c.json")
	if code, stdout, stderr := fedcalib("calibrate", "--method", "vector", "--logits", in, "--partition", part, "-q", "--out", out); code != 0 || !strings.Contains(stdout, "FedVector over 5 clients") {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	code, _, stderr := fedcalib("calibrate", "--method", "vector", "--logits", other, "--partition", part, "--out", filepath.Join(dir, "d.json"))
	if code != 2 || !strings.Contains(stderr, "does not fit") || !strings.Contains(stderr, "made for 600 examples, the data has 601") {
		t.Errorf("mismatched partition: exit %d, %q", code, stderr)
	}
}

func TestCalibrateFederatedErrors(t *testing.T) {
	in, _ := fedLogitsFile(t, 100, 4, 0)
	out := filepath.Join(t.TempDir(), "c.json")
	base := []string{"calibrate", "--logits", in, "--out", out}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--method", "bbq"}, "no client column"},
		{[]string{"--method", "bbq", "--clients", "4"}, "needs --beta"},
		{[]string{"--method", "bbq", "--beta", "0.1"}, "needs --clients"},
		{[]string{"--method", "bbq", "--clients", "4", "--beta", "0"}, "--beta is 0: want a finite Dirichlet concentration β > 0"},
		{[]string{"--method", "bbq", "--clients", "0", "--beta", "1"}, "--clients is 0"},
		{[]string{"--method", "bbq", "--clients", "4", "--beta", "1", "--rounds", "0"}, "--rounds is 0: want a number of rounds T from 1 to 10000"},
		{[]string{"--method", "bbq", "--clients", "4", "--beta", "1", "--rounds", "1000000000"}, "--rounds is 1000000000: want a number of rounds T from 1 to 10000"},
		{[]string{"--method", "bbq", "--clients", "4", "--beta", "1", "--workers", "1000000000"}, "--workers is 1000000000: want a number of goroutines (0: one per CPU) from 0 to 1024"},
		{[]string{"--method", "bbq", "--clients", "4", "--beta", "1", "--sample-rate", "0"}, "--sample-rate is 0"},
		{[]string{"--method", "bbq", "--clients", "4", "--beta", "1", "--sample-rate", "1.5"}, "--sample-rate is 1.5"},
		{[]string{"--method", "bbq", "--clients", "4", "--beta", "1", "--clients-per-round", "5"}, "clients per round is 5"},
		{[]string{"--method", "bbq", "--clients", "4", "--beta", "1", "--epsilon", "0"}, "--epsilon is 0"},
		{[]string{"--method", "bbq", "--clients", "4", "--beta", "1", "--epsilon", "1", "--delta", "1"}, "--delta is 1: want δ in (0, 1)"},
		// An explicit value is used or refused, never replaced by a default.
		{[]string{"--method", "temp", "--clients", "4", "--beta", "1", "--server-lr", "0"}, "--server-lr is 0: want a finite server learning rate η_S > 0; drop --server-lr for the default 1"},
		{[]string{"--method", "temp", "--clients", "4", "--beta", "1", "--server-lr", "NaN"}, "--server-lr is NaN"},
		{[]string{"--method", "temp", "--clients", "4", "--beta", "1", "--clip", "0"}, "--clip is 0: want a finite clip norm C > 0; drop --clip to fit without clipping"},
		{[]string{"--method", "temp", "--clients", "4", "--beta", "1", "--clip", "0", "--epsilon", "1"}, "--clip is 0: want a finite clip norm C > 0; drop --clip for the default 0.5"},
		{[]string{"--method", "temp", "--clients", "4", "--beta", "1", "--clip", "+Inf"}, "--clip is +Inf"},
		{[]string{"--method", "bbq", "--clients", "4", "--beta", "1", "--clip-pos", "0", "--epsilon", "1"}, "--clip-pos is 0: want a finite clip norm C₊ > 0; drop --clip-pos for the default 10"},
		{[]string{"--method", "bbq", "--clients", "4", "--beta", "1", "--clip-neg", "-1", "--epsilon", "1"}, "--clip-neg is -1"},
		{[]string{"--method", "temp", "--clients", "4", "--beta", "1", "--epsilon", "Inf"}, "--epsilon is +Inf: want a finite ε > 0; to fit without privacy, drop --epsilon"},
		{[]string{"--method", "bbq", "--clients", "4", "--beta", "1", "--weighting", "all", "--dp-alpha-z", "2"}, "--dp-alpha-z sets up privacy and needs --epsilon"},
		{[]string{"--method", "bbq", "--clients", "4", "--beta", "1", "--epsilon", "1", "--dp-alpha-z", "2"}, "--dp-alpha-z sets the weighting's class weights and needs --weighting all or changed, not none"},
		{[]string{"--method", "temp", "--clients", "4", "--beta", "1", "--epsilon", "1", "--dp-alpha-z", "2"}, "--dp-alpha-z applies to binning methods"},
		{[]string{"--method", "temp", "--clients", "4", "--beta", "1", "--epsilon", "1", "--accountant", "gdp"}, `--accountant "gdp": want zcdp or rdp`},
		{[]string{"--method", "bbq", "--clients", "4", "--beta", "1", "--delta", "0.1"}, "needs --epsilon"},
		{[]string{"--method", "bbq", "--clients", "4", "--beta", "1", "--weighting", "most"}, "unknown weighting"},
		{[]string{"--method", "temp", "--clients", "4", "--beta", "1", "--weighting", "all"}, "--weighting applies to binning methods"},
		{[]string{"--method", "bbq", "--clients", "4", "--beta", "1", "--server-lr", "2"}, "--server-lr applies to scaling"},
		{[]string{"--method", "temp", "--central", "--rounds", "3"}, "--rounds applies to federated runs"},
		{[]string{"--method", "bbq", "--partition", "p.json", "--clients", "3"}, "drop --clients and --beta"},
	} {
		code, _, stderr := fedcalib(append(base, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line with %q", tc.args, code, stderr, tc.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed run wrote its output")
	}
}

func TestCalibrateHelpShowsFederation(t *testing.T) {
	code, stdout, _ := fedcalib("calibrate", "--help")
	if code != 0 {
		t.Fatal(code)
	}
	for _, want := range []string{"--partition", "--clients-per-round", "--epsilon", "--clip-pos", "--weighting", "Dirichlet", "fedcalib calibrate --method bbq --weighting all"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// TestCalibrateDPAlphaZ checks that --dp-alpha-z reaches the weighting: with
// ε = 0.5 on 1,200 examples the noise swamps every class's count, so a
// 3-standard-deviation lower bound gives every class weight 0 while the
// paper's rule (z = 0) trusts some class on some seed.
func TestCalibrateDPAlphaZ(t *testing.T) {
	in, _ := fedLogitsFile(t, 1200, 4, 5)
	dir := t.TempDir()
	sum := map[string]float64{}
	for seed := 1; seed <= 6; seed++ {
		for _, z := range []string{"0", "3"} {
			out := filepath.Join(dir, "bbq"+z+".json")
			code, _, stderr := fedcalib("calibrate", "--method", "bbq", "--weighting", "all", "--logits", in, "--rounds", "3",
				"--epsilon", "0.5", "--dp-alpha-z", z, "--seed", fmt.Sprint(seed), "--quiet", "--out", out)
			if code != 0 {
				t.Fatalf("z = %s: exit %d: %s", z, code, stderr)
			}
			c, _, err := calib.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range c.(*calib.BBQ).Alpha {
				sum[z] += a
			}
		}
	}
	if sum["3"] != 0 || !(sum["0"] > 0) {
		t.Errorf("Σα over 6 seeds with z = 0: %v, with z = 3: %v; want > 0 and 0", sum["0"], sum["3"])
	}
	if code, _, stderr := fedcalib("calibrate", "--method", "bbq", "--weighting", "all", "--logits", in,
		"--epsilon", "1", "--dp-alpha-z", "-1", "--out", filepath.Join(dir, "bad.json")); code != 2 || !strings.Contains(stderr, "--dp-alpha-z is -1: want a finite z ≥ 0") {
		t.Errorf("negative z: exit %d, %q", code, stderr)
	}
}
