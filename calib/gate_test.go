package calib

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestAccuracyDropped(t *testing.T) {
	for _, tc := range []struct {
		n, before, after int // correct predictions of n
		want             bool
	}{
		{1000, 900, 890, false}, // exactly 1 point
		{1000, 900, 889, true},
		{1000, 900, 950, false},
		{100, 98, 97, false},      // 0.98 − 0.97 is 0.010000000000000009 in float64
		{7003, 6500, 6430, false}, // 0.9996 points
		{7003, 6500, 6429, true},  // 1.0138 points
		{3, 3, 2, true},
		{10000, 5000, 4900, false},
		{10000, 5000, 4899, true},
	} {
		m := func(c int) Metrics { return Metrics{N: tc.n, Accuracy: float64(c) / float64(tc.n)} }
		if got := AccuracyDropped(m(tc.before), m(tc.after)); got != tc.want {
			t.Errorf("%d → %d of %d: dropped %v, want %v", tc.before, tc.after, tc.n, got, tc.want)
		}
		// The check command's default gate fails exactly on a drop.
		v := Gate{MaxAccuracyDrop: AccuracyDropMark, MinCWECEImprovement: -1}.Judge(m(tc.before), m(tc.after))
		if v.Pass == tc.want {
			t.Errorf("%d → %d of %d: default gate pass = %v, want %v", tc.before, tc.after, tc.n, v.Pass, !tc.want)
		}
	}
}

func TestGateJudge(t *testing.T) {
	before := Metrics{N: 1000, Classes: 4, Accuracy: 0.9, CWECE: 0.05, ECE: 0.04}
	after := func(acc, cwece float64) Metrics {
		return Metrics{N: 1000, Classes: 4, Accuracy: acc, CWECE: cwece, ECE: 0.01}
	}
	for _, tc := range []struct {
		name     string
		gate     Gate
		after    Metrics
		failures []string
	}{
		{"pass", Gate{MaxAccuracyDrop: 0.01}, after(0.9, 0.02), []string{}},
		{"zero gate, equal", Gate{}, after(0.9, 0.05), []string{}},
		{"zero gate, one example lost", Gate{}, after(0.899, 0.02), []string{
			"accuracy dropped by 0.10 points (90.00% → 89.90%), more than the allowed 0.00"}},
		{"exactly the allowed drop", Gate{MaxAccuracyDrop: 0.02}, after(0.88, 0.02), []string{}},
		{"accuracy", Gate{MaxAccuracyDrop: 0.01}, after(0.85, 0.02), []string{
			"accuracy dropped by 5.00 points (90.00% → 85.00%), more than the allowed 1.00"}},
		{"cwECE worse", Gate{MaxAccuracyDrop: 0.01}, after(0.9, 0.06), []string{
			"cwECE improved by -1.000 points (5.000% → 6.000%), less than the required 0.000"}},
		{"cwECE worse, allowed", Gate{MaxAccuracyDrop: 0.01, MinCWECEImprovement: -0.02}, after(0.9, 0.06), []string{}},
		{"bar too high", Gate{MaxAccuracyDrop: 0.01, MinCWECEImprovement: 0.5}, after(0.9, 0.02), []string{
			"cwECE improved by 3.000 points (5.000% → 2.000%), less than the required 50.000"}},
		{"both", Gate{MaxAccuracyDrop: 0.01, MinCWECEImprovement: 0.01}, after(0.7, 0.07), []string{
			"accuracy dropped by 20.00 points (90.00% → 70.00%), more than the allowed 1.00",
			"cwECE improved by -2.000 points (5.000% → 7.000%), less than the required 1.000"}},
	} {
		v := tc.gate.Judge(before, tc.after)
		if !slices.Equal(v.Failures, tc.failures) || v.Pass != (len(tc.failures) == 0) || v.Failures == nil {
			t.Errorf("%s: pass %v, failures %q; want %q", tc.name, v.Pass, v.Failures, tc.failures)
		}
		if v.Before != before || v.After != tc.after ||
			v.AccuracyDrop != before.Accuracy-tc.after.Accuracy || v.CWECEImprovement != before.CWECE-tc.after.CWECE ||
			v.MaxAccuracyDrop != tc.gate.MaxAccuracyDrop || v.MinCWECEImprovement != tc.gate.MinCWECEImprovement {
			t.Errorf("%s: verdict numbers %+v", tc.name, v)
		}
	}
}

func TestGateValidate(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		gate Gate
		want string // "" for valid
	}{
		{Gate{}, ""},
		{Gate{MaxAccuracyDrop: 1, MinCWECEImprovement: -1}, ""},
		{Gate{MaxAccuracyDrop: -0.01}, "max accuracy drop -0.01"},
		{Gate{MaxAccuracyDrop: nan}, "max accuracy drop NaN"},
		{Gate{MinCWECEImprovement: -1.5}, "min cwECE improvement -1.5"},
		{Gate{MinCWECEImprovement: nan}, "min cwECE improvement NaN"},
		{Gate{MaxAccuracyDrop: 1.01}, "max accuracy drop 1.01: want a fraction in [0, 1]"},
		{Gate{MaxAccuracyDrop: math.Inf(1)}, "max accuracy drop +Inf"},
		{Gate{MinCWECEImprovement: 1.5}, "min cwECE improvement 1.5: want a fraction in [-1, 1]"},
		{Gate{MinCWECEImprovement: math.Inf(1)}, "min cwECE improvement +Inf"},
		{Gate{CheckNLL: true}, ""},
		{Gate{CheckNLL: true, MaxNLLIncrease: 0.05}, ""},
		{Gate{CheckNLL: true, MaxNLLIncrease: -0.1}, "max NLL increase -0.1"},
		{Gate{CheckNLL: true, MaxNLLIncrease: nan}, "max NLL increase NaN"},
		{Gate{CheckNLL: true, MaxNLLIncrease: math.Inf(1)}, "max NLL increase +Inf"},
		{Gate{MaxNLLIncrease: -0.1}, ""}, // no NLL bar: not looked at
	} {
		err := tc.gate.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: Validate() = %v, want %q", tc.gate, err, tc.want)
		}
	}
}

// TestVerdictJSON pins the field names of `fedcalib check --json`.
func TestVerdictJSON(t *testing.T) {
	v := Gate{MaxAccuracyDrop: 0.01}.Judge(Metrics{N: 2, Classes: 2, Accuracy: 1}, Metrics{N: 2, Classes: 2, Accuracy: 1})
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"pass":true,"failures":[],` +
		`"before":{"n":2,"classes":2,"accuracy":1,"cwece":0,"ece":0,"nll":0,"brier":0},` +
		`"after":{"n":2,"classes":2,"accuracy":1,"cwece":0,"ece":0,"nll":0,"brier":0},` +
		`"accuracy_drop":0,"cwece_improvement":0,"max_accuracy_drop":0.01,"min_cwece_improvement":0}`
	if string(b) != want {
		t.Errorf("JSON\n%s\nwant\n%s", b, want)
	}
}

func TestGateNLL(t *testing.T) {
	before := Metrics{N: 100, Classes: 2, Accuracy: 0.9, CWECE: 0.05, NLL: 0.30}
	for _, tc := range []struct {
		name     string
		gate     Gate
		nll      float64
		failures []string
	}{
		{"not checked", Gate{MinCWECEImprovement: -1}, 0.90, []string{}},
		{"better", Gate{CheckNLL: true, MinCWECEImprovement: -1}, 0.25, []string{}},
		{"worse", Gate{CheckNLL: true, MinCWECEImprovement: -1}, 0.31, []string{
			"NLL rose by 0.0100 nats (0.3000 → 0.3100), more than the allowed 0.0000"}},
		{"worse, tolerated", Gate{CheckNLL: true, MaxNLLIncrease: 0.02, MinCWECEImprovement: -1}, 0.31, []string{}},
	} {
		after := before
		after.NLL = tc.nll
		v := tc.gate.Judge(before, after)
		if !slices.Equal(v.Failures, tc.failures) || v.Pass != (len(tc.failures) == 0) {
			t.Errorf("%s: failures %q, want %q", tc.name, v.Failures, tc.failures)
		}
		if tc.gate.CheckNLL != (v.NLLIncrease != nil) || (v.NLLIncrease != nil && math.Abs(*v.NLLIncrease-(tc.nll-0.30)) > 1e-15) {
			t.Errorf("%s: NLL increase %v", tc.name, v.NLLIncrease)
		}
	}
}

// pairedFixture returns n examples of two classes, all labelled 0, whose
// uncalibrated probabilities get every one right with confidence 0.8, and
// calibrated probabilities that get the first lost of them wrong.
func pairedFixture(n, lost int) (before, after []float64, labels []int) {
	before, after = make([]float64, 2*n), make([]float64, 2*n)
	labels = make([]int, n)
	for i := range n {
		before[2*i], before[2*i+1] = 0.8, 0.2
		after[2*i], after[2*i+1] = 0.8, 0.2
		if i < lost {
			after[2*i], after[2*i+1] = 0.3, 0.7
		}
	}
	return before, after, labels
}

func TestJudgePaired(t *testing.T) {
	gate := Gate{MaxAccuracyDrop: AccuracyDropMark, MinCWECEImprovement: -1}
	t.Run("one example of 50", func(t *testing.T) {
		// A 2-point drop fails the point gate; but the lost example is
		// missing from a resample with probability (1 − 1/50)^50 ≈ 0.364,
		// far above 2.5%, so the interval's lower end is 0 and the paired
		// gate passes.
		before, after, labels := pairedFixture(50, 1)
		mb, _ := Evaluate(before, labels, 2, 0)
		ma, _ := Evaluate(after, labels, 2, 0)
		if gate.Judge(mb, ma).Pass {
			t.Fatal("point gate passes a 2-point drop")
		}
		v, err := gate.JudgePaired(before, after, labels, 2, 0, PairedBootstrap{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		iv := v.Intervals["accuracy_drop"]
		if !v.Pass || iv.Lo != 0 || v.Confidence != DefaultBootstrapLevel || math.Abs(v.AccuracyDrop-0.02) > 1e-15 {
			t.Errorf("verdict %+v", v)
		}
		// The upper end: 3 or more of 50 draws hit the lost example with
		// probability 1 − Σ_{k<3} C(50,k)(1/50)^k(49/50)^(50−k) ≈ 0.078,
		// 4 or more ≈ 0.018: the 97.5% quantile is 3/50 or 4/50, about.
		if iv.Hi < 0.06-1e-12 || iv.Hi > 0.08+1e-12 {
			t.Errorf("interval %+v: want its upper end in [0.06, 0.08]", iv)
		}
	})
	t.Run("a fifth of 200", func(t *testing.T) {
		// 40 of 200 lost: the drop is about Binomial(200, 0.2)/200, mean
		// 0.2, standard deviation 0.028, so the 95% interval is about
		// [0.145, 0.255]: a real loss, which the paired gate fails.
		before, after, labels := pairedFixture(200, 40)
		v, err := gate.JudgePaired(before, after, labels, 2, 0, PairedBootstrap{Seed: 2, Resamples: 2000})
		if err != nil {
			t.Fatal(err)
		}
		iv := v.Intervals["accuracy_drop"]
		if v.Pass || len(v.Failures) != 1 || !strings.Contains(v.Failures[0], "surely more than the allowed 1.00") {
			t.Errorf("verdict %+v", v)
		}
		if math.Abs(iv.Lo-0.145) > 0.02 || math.Abs(iv.Hi-0.255) > 0.02 {
			t.Errorf("interval %+v: want about [0.145, 0.255]", iv)
		}
		if _, ok := v.Intervals["nll_increase"]; ok {
			t.Error("an NLL interval without CheckNLL")
		}
	})
	t.Run("deterministic, and equal inputs give zero intervals", func(t *testing.T) {
		before, after, labels := pairedFixture(30, 0)
		g := Gate{CheckNLL: true}
		v1, err := g.JudgePaired(before, after, labels, 2, 0, PairedBootstrap{Seed: 9, Resamples: 50})
		if err != nil {
			t.Fatal(err)
		}
		v2, _ := g.JudgePaired(before, after, labels, 2, 0, PairedBootstrap{Seed: 9, Resamples: 50})
		for name, iv := range v1.Intervals {
			if iv != (Interval{}) || v2.Intervals[name] != iv {
				t.Errorf("%s: %+v and %+v, want zero twice", name, iv, v2.Intervals[name])
			}
		}
		if !v1.Pass || len(v1.Intervals) != 3 {
			t.Errorf("verdict %+v", v1)
		}
	})
	for _, tc := range []struct {
		name string
		gate Gate
		pb   PairedBootstrap
		want string
	}{
		{"resamples", gate, PairedBootstrap{Resamples: MaxBootstrap + 1}, "bootstrap resamples"},
		{"level", gate, PairedBootstrap{Level: 1}, "confidence level 1"},
		{"gate", Gate{MaxAccuracyDrop: 2}, PairedBootstrap{}, "max accuracy drop 2"},
	} {
		before, after, labels := pairedFixture(5, 0)
		if _, err := tc.gate.JudgePaired(before, after, labels, 2, 0, tc.pb); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	before, after, labels := pairedFixture(5, 0)
	if _, err := gate.JudgePaired(before, after[:8], labels, 2, 0, PairedBootstrap{}); err == nil {
		t.Error("no error for mismatched lengths")
	}
}
