package cli

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
)

// privacyJSON runs privacy --json with args and decodes its object.
func privacyJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	code, out, errs := fedcalib(append(append([]string{"privacy"}, args...), "--json")...)
	if code != ExitOK {
		t.Fatalf("privacy %v: exit %d: %s", args, code, errs)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("privacy %v: output is not JSON: %v\n%s", args, err, out)
	}
	return m
}

func wantNumber(t *testing.T, m map[string]any, key string, want, rel float64) {
	t.Helper()
	v, ok := m[key].(float64)
	if !ok {
		t.Errorf("key %q missing or not a number in %v", key, m)
		return
	}
	if math.Abs(v-want) > rel*math.Abs(want) {
		t.Errorf("%s = %.15g, want %.15g", key, v, want)
	}
}

// rho1 is ρ for (ε, δ) = (1, 1e-5), computed with 40-digit arithmetic.
const rho1 = 0.030556595197639565613

func TestPrivacyRho(t *testing.T) {
	m := privacyJSON(t, "--epsilon", "1", "--delta", "1e-5")
	wantNumber(t, m, "rho", rho1, 1e-12)
	wantNumber(t, m, "epsilon", 1, 0)
	wantNumber(t, m, "delta", 1e-5, 0)
	if _, ok := m["noise_multiplier"]; ok {
		t.Errorf("noise_multiplier reported for a plain conversion: %v", m)
	}
	code, out, _ := fedcalib("privacy", "--epsilon", "1")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, line := range []string{"rho         0.0305565952\n", "delta       1e-05\n"} {
		if !strings.Contains(out, line) {
			t.Errorf("text output lacks %q (default δ = 1e-5):\n%s", line, out)
		}
	}
}

func TestPrivacyNoiseZCDP(t *testing.T) {
	// SPEC §7: scaling σ/C = √(T/(2ρ)), binning σ/C = √(2cT/(2ρ)); values
	// from 40-digit arithmetic.
	m := privacyJSON(t, "--method", "temp", "--rounds", "12", "--epsilon", "1", "--delta", "1e-5", "--clip", "0.5")
	wantNumber(t, m, "noise_multiplier", 14.01274260760362030, 1e-12)
	wantNumber(t, m, "sigma", 0.5*14.01274260760362030, 1e-12)
	wantNumber(t, m, "rho", rho1, 1e-12)

	m = privacyJSON(t, "--method", "bbq", "--classes", "10", "--rounds", "30", "--epsilon", "1", "--delta", "1e-5")
	wantNumber(t, m, "noise_multiplier", 99.085053208581845185, 1e-12)
	wantNumber(t, m, "sigma_pos", dp.DefaultClipPos*99.085053208581845185, 1e-12)
	wantNumber(t, m, "sigma_neg", dp.DefaultClipNeg*99.085053208581845185, 1e-12)
	wantNumber(t, m, "mechanisms_per_round", 20, 0)
	if _, ok := m["sigma"]; ok {
		t.Errorf("binning reports a scaling sigma: %v", m)
	}
}

func TestPrivacyNoiseRDP(t *testing.T) {
	m := privacyJSON(t, "--method", "vector", "--rounds", "12", "--epsilon", "1", "--sample-rate", "0.1", "--accountant", "rdp")
	z, ok := m["noise_multiplier"].(float64)
	if !ok {
		t.Fatalf("no noise_multiplier in %v", m)
	}
	if _, ok := m["rho"]; ok {
		t.Errorf("rdp reports a zCDP rho: %v", m)
	}
	// The noise meets the target under an independent RDP composition, and
	// is below what zCDP (no credit for sampling) asks for.
	var acc dp.RDPAccountant
	if err := acc.ComposePoissonGaussian(0.1, z, 12); err != nil {
		t.Fatal(err)
	}
	if eps, _, _ := acc.Epsilon(1e-5); eps > 1 || eps < 1-1e-9 {
		t.Errorf("noise multiplier %v spends ε = %v, want 1", z, eps)
	}
	if z >= 14.01274260760362030 {
		t.Errorf("rdp with q = 0.1 asks z = %v, not below zCDP's 14.01", z)
	}
}

func TestPrivacyEpsilon(t *testing.T) {
	// RDP: q = 0.01, z = 1.1, 1000 steps, δ = 1e-5; ε from an independent
	// 30-digit evaluation of the same bound over dp_accounting's orders.
	m := privacyJSON(t, "--noise-multiplier", "1.1", "--sample-rate", "0.01", "--steps", "1000", "--delta", "1e-5", "--accountant", "rdp")
	wantNumber(t, m, "epsilon", 1.71177016624896396549877, 1e-9)
	wantNumber(t, m, "noise_multiplier", 1.1, 0)
	wantNumber(t, m, "rdp_order", 9.6, 0)
	// zCDP: 12 steps at z = 4 are ρ = 12/32 = 0.375.
	m = privacyJSON(t, "--noise-multiplier", "4", "--steps", "12")
	wantNumber(t, m, "rho", 0.375, 1e-15)
	wantNumber(t, m, "epsilon", 4.011310056657948295669, 1e-12)
}

func TestPrivacyBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error line
	}{
		{[]string{"--epsilon", "0"}, "--epsilon"},
		{[]string{"--epsilon", "-1"}, "--epsilon"},
		{[]string{"--epsilon", "NaN"}, "--epsilon"},
		{[]string{}, "--epsilon"},
		{[]string{"--epsilon", "1", "--delta", "0"}, "--delta"},
		{[]string{"--epsilon", "1", "--delta", "1"}, "--delta"},
		{[]string{"--epsilon", "1", "--delta", "-1e-5"}, "--delta"},
		{[]string{"--method", "temp", "--epsilon", "1", "--sample-rate", "0"}, "--sample-rate"},
		{[]string{"--method", "temp", "--epsilon", "1", "--sample-rate", "1.5"}, "--sample-rate"},
		{[]string{"--method", "temp", "--epsilon", "1", "--rounds", "0"}, "--rounds"},
		{[]string{"--method", "temp", "--epsilon", "1", "--clip", "0"}, "--clip"},
		{[]string{"--method", "temp", "--epsilon", "1", "--clip", "-0.5"}, "--clip"},
		{[]string{"--method", "bin", "--classes", "10", "--epsilon", "1", "--clip-pos", "0"}, "--clip-pos"},
		{[]string{"--method", "bin", "--classes", "10", "--epsilon", "1", "--clip-neg", "-1"}, "--clip-neg"},
		{[]string{"--method", "bbq", "--epsilon", "1"}, "--classes"},
		{[]string{"--method", "bbq", "--classes", "1", "--epsilon", "1"}, "--classes"},
		// Beyond what any fit takes: refused, not computed for a fit that cannot run.
		{[]string{"--method", "temp", "--epsilon", "1", "--rounds", "1000000000"}, "--rounds 1000000000: want T from 1 to 10000"},
		{[]string{"--method", "bbq", "--classes", "1000000000", "--epsilon", "1"}, "--classes 1000000000: want c from 2 to 8388608"},
		{[]string{"--epsilon", "+Inf"}, "--epsilon +Inf: want a finite ε > 0"},
		{[]string{"--noise-multiplier", "NaN"}, "--noise-multiplier NaN"},
		{[]string{"--method", "temp", "--epsilon", "1", "--clip", "+Inf"}, "--clip +Inf"},
		{[]string{"--method", "no-such-method", "--epsilon", "1"}, "--method"},
		{[]string{"--method", "temp", "--epsilon", "1", "--accountant", "pld"}, "--accountant"},
		{[]string{"--noise-multiplier", "1", "--steps", "0"}, "--steps"},
		{[]string{"--noise-multiplier", "0"}, "--noise-multiplier"},
		{[]string{"--noise-multiplier", "1", "--sample-rate", "0", "--accountant", "rdp"}, "--sample-rate"},
		{[]string{"--noise-multiplier", "1", "--epsilon", "1"}, "--epsilon"},
		{[]string{"--noise-multiplier", "1", "--method", "temp"}, "--method"},
		{[]string{"--epsilon", "1", "--rounds", "3"}, "--rounds"},
		{[]string{"--epsilon", "1", "--accountant", "rdp"}, "--accountant rdp"},
		{[]string{"--method", "temp", "--epsilon", "1", "--clip-pos", "3"}, "--clip-pos"},
		{[]string{"--epsilon", "1", "extra"}, "extra"},
	} {
		code, out, errs := fedcalib(append([]string{"privacy"}, tc.args...)...)
		if code != ExitUsage {
			t.Errorf("privacy %v: exit %d, want %d", tc.args, code, ExitUsage)
		}
		if out != "" {
			t.Errorf("privacy %v: printed %q despite the error", tc.args, out)
		}
		if strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.want) {
			t.Errorf("privacy %v: error %q, want one line naming %s", tc.args, errs, tc.want)
		}
	}
}

func TestPrivacyHelp(t *testing.T) {
	code, out, _ := fedcalib("privacy", "--help")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, s := range []string{"Examples:", "--noise-multiplier", "--accountant", "--sample-rate", "--clip-pos", "√(2cT/(2ρ))"} {
		if !strings.Contains(out, s) {
			t.Errorf("help lacks %q", s)
		}
	}
}

// TestPrivacyAgreesWithFit: for every method of the registry, the σ that
// "fedcalib privacy" prints equals the σ recorded in the calibrator file
// of a private fit with the same settings, for both accountants. Both come
// from federation.PlanNoise; this test fails if either path stops using
// it.
func TestPrivacyAgreesWithFit(t *testing.T) {
	const classes, clients = 4, 5
	in, _ := fedLogitsFile(t, 600, classes, clients)
	dir := t.TempDir()
	for _, m := range calib.Methods() {
		for _, acc := range []string{"zcdp", "rdp"} {
			t.Run(m.Name+"/"+acc, func(t *testing.T) {
				out := filepath.Join(dir, m.Name+"-"+acc+".json")
				common := []string{"--method", m.Name, "--rounds", "3", "--sample-rate", "0.4", "--epsilon", "2",
					"--delta", "1e-6", "--accountant", acc}
				clip := []string{"--clip", "0.7"}
				switch m.Family {
				case calib.Binning:
					clip = []string{"--clip-pos", "3", "--clip-neg", "20"}
				case calib.Hybrid:
					clip = []string{"--clip", "0.7", "--clip-pos", "3"}
				}
				args := append(append([]string{"calibrate", "--logits", in, "--quiet", "--out", out}, common...), clip...)
				if code, _, stderr := fedcalib(args...); code != 0 {
					t.Fatalf("calibrate: exit %d: %s", code, stderr)
				}
				_, f, err := calib.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				pargs := append(append([]string{}, common...), clip...)
				if m.Family != calib.Scaling {
					pargs = append(pargs, "--classes", fmt.Sprint(classes))
				}
				rep := privacyJSON(t, pargs...)
				key := "sigma"
				if m.Family == calib.Binning {
					key = "sigma_pos"
				}
				sigma, ok := rep[key].(float64)
				if !ok || f.Privacy == nil || sigma != f.Privacy.Sigma || sigma <= 0 {
					t.Errorf("privacy prints %s = %v; the fit records %+v", key, rep[key], f.Privacy)
				}
				if m.Family == calib.Binning {
					// σ₋/σ₊ = C₋/C₊ and 2c mechanisms a round.
					if neg, _ := rep["sigma_neg"].(float64); math.Abs(neg/sigma-20.0/3) > 1e-12 || rep["mechanisms_per_round"] != float64(2*classes) {
						t.Errorf("binning plan %v", rep)
					}
				} else if m.Family == calib.Hybrid {
					// σ₊/σ = C₊/C and 1 + 2c mechanisms a pair of rounds.
					if pos, _ := rep["sigma_pos"].(float64); math.Abs(pos/sigma-3/0.7) > 1e-12 || rep["mechanisms_per_round"] != float64(1+2*classes) {
						t.Errorf("hybrid plan %v", rep)
					}
				} else if rep["mechanisms_per_round"] != 1.0 {
					t.Errorf("scaling plan %v", rep)
				}
			})
		}
	}
}
