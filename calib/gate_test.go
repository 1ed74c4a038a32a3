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
