package calib_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/federation"
)

// privateFit fits method federatedly with (ε, δ) = (1, 1e-5) under acc
// over six clients of an overconfident 3-class model, four rounds with
// sample rate 0.5, and returns its sidecar file.
func privateFit(t *testing.T, method string, acc dp.Accountant) []byte {
	t.Helper()
	const classes, clients, rows = 3, 6, 60
	rng := rand.New(rand.NewPCG(5, 8))
	pop := make(federation.Slices, clients)
	for k := range pop {
		s := &calib.Set{Logits: make([]float64, rows*classes), Labels: make([]int, rows), Classes: classes}
		for i := range rows {
			y := rng.IntN(classes)
			s.Labels[i] = y
			for j := range classes {
				v := rng.NormFloat64()
				if j == y {
					v += 1.5
				}
				s.Logits[i*classes+j] = 3 * v
			}
		}
		pop[k] = s
	}
	o := federation.Options{Privacy: &federation.Privacy{Epsilon: 1, Delta: 1e-5, Accountant: acc}}
	switch method {
	case calib.MethodBin:
		o.Bins = 8
	case calib.MethodBBQ, calib.MethodScalingBinning:
		o.Mexp = 3
	}
	fit, err := federation.New(method, o)
	if err != nil {
		t.Fatal(err)
	}
	res, err := fit.Fit(context.Background(), pop, federation.Rounds{T: 4, SampleRate: 0.5, Seed: 9})
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	if res.Privacy == nil {
		t.Fatalf("%s: a private fit recorded no privacy", method)
	}
	var buf bytes.Buffer
	if err := calib.Encode(&buf, res.Calibrator, res.Privacy, calib.Provenance{Protocol: res.Protocol, Seed: 9}); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return buf.Bytes()
}

// editJSON decodes a sidecar file into generic JSON, lets edit change it
// as a person editing the file would, and encodes it again.
func editJSON(t *testing.T, file []byte, edit func(top, privacy map[string]any)) []byte {
	t.Helper()
	var top map[string]any
	if err := json.Unmarshal(file, &top); err != nil {
		t.Fatal(err)
	}
	edit(top, top["privacy"].(map[string]any))
	b, err := json.MarshalIndent(top, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPrivateFitsRoundTrip fits every method privately under both
// accountants: each file decodes with its record intact, and the same file
// edited by hand (ε halved, σ doubled, a key added) is refused with an
// error naming what was edited.
func TestPrivateFitsRoundTrip(t *testing.T) {
	edits := []struct {
		name string
		edit func(top, privacy map[string]any)
		want string
	}{
		{"epsilon halved", func(_, p map[string]any) { p["epsilon"] = p["epsilon"].(float64) / 2 }, "privacy.epsilon is"},
		{"sigma doubled", func(_, p map[string]any) { p["sigma"] = p["sigma"].(float64) * 2 }, "privacy.rho is"},
		{"sigma and rho edited together", func(_, p map[string]any) {
			p["sigma"] = p["sigma"].(float64) * 2
			p["rho"] = p["rho"].(float64) / 4
		}, "privacy.epsilon is"},
		{"accountant removed", func(_, p map[string]any) { delete(p, "accountant") }, "privacy.accountant is missing"},
		{"unknown top-level key", func(top, _ map[string]any) { top["verified"] = true }, `unknown key "verified"`},
		{"unknown privacy key", func(_, p map[string]any) { p["audited"] = true }, `privacy: json: unknown field "audited"`},
	}
	for _, m := range calib.Methods() {
		for _, acc := range []dp.Accountant{dp.ZCDP, dp.RDP} {
			t.Run(m.Name+"/"+acc.String(), func(t *testing.T) {
				file := privateFit(t, m.Name, acc)
				_, f, err := calib.Decode(bytes.NewReader(file))
				if err != nil {
					t.Fatalf("a real private fit is refused: %v\n%s", err, file)
				}
				p := f.Privacy
				if p == nil || p.Accountant != acc.String() || p.Rounds != 4 || p.SampleRate != 0.5 || p.Delta != 1e-5 {
					t.Fatalf("privacy record %+v", p)
				}
				// The fit spends its whole budget, to rounding.
				if p.Epsilon > 1+1e-9 || p.Epsilon < 0.999 {
					t.Errorf("ε spent %v, want 1", p.Epsilon)
				}
				// Under RDP, ε depends on the sample rate; zCDP takes no
				// credit for sampling, so there the edit changes nothing.
				lowered := editJSON(t, file, func(_, p map[string]any) { p["sample_rate"] = 0.01 })
				_, _, err = calib.Decode(bytes.NewReader(lowered))
				if acc == dp.RDP && (err == nil || !strings.Contains(err.Error(), "privacy.epsilon is")) {
					t.Errorf("sample rate lowered under rdp: error %v, want one on privacy.epsilon", err)
				}
				if acc == dp.ZCDP && err != nil {
					t.Errorf("sample rate lowered under zcdp: %v", err)
				}
				for _, e := range edits {
					_, _, err := calib.Decode(bytes.NewReader(editJSON(t, file, e.edit)))
					if err == nil || !strings.Contains(err.Error(), e.want) {
						t.Errorf("%s: error %v, want one containing %q", e.name, err, e.want)
					}
				}
			})
		}
	}
}

// privacyRecord returns the consistent privacy record of a one-round fit
// of method over classes classes at (ε, δ) = (1, 1e-5) under zcdp with the
// default clip norms, as a federated fit would write it.
func privacyRecord(t *testing.T, method string, classes int) *calib.Privacy {
	t.Helper()
	plan, err := federation.PlanNoise(method, classes, &federation.Privacy{Epsilon: 1, Delta: 1e-5}, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	spent, err := dp.SpentBy(dp.ZCDP, plan.Multiplier/math.Sqrt(float64(plan.PerRound())), 1, 1, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	p := &calib.Privacy{Epsilon: spent.Epsilon, Delta: 1e-5, Rho: spent.Rho, Sigma: plan.Sigma(), Accountant: "zcdp", Rounds: 1, SampleRate: 1}
	switch plan.Family {
	case calib.Binning:
		p.ClipPos, p.ClipNeg = plan.Mechanisms[0].Sensitivity, plan.Mechanisms[1].Sensitivity
	case calib.Hybrid:
		p.Clip, p.ClipPos = plan.Mechanisms[0].Sensitivity, plan.Mechanisms[1].Sensitivity
	default:
		p.Clip = plan.Mechanisms[0].Sensitivity
	}
	if err := p.Check(method, classes); err != nil {
		t.Fatal(err)
	}
	return p
}
