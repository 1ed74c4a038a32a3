package calib

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// TestTopLabelByHand: four examples whose top-label bins are worked out by
// hand (in the comments).
func TestTopLabelByHand(t *testing.T) {
	probs := []float64{
		0.9, 0.1, // y = 0: top 0.9, right
		0.8, 0.2, // y = 1: top 0.8, wrong
		0.3, 0.7, // y = 1: top 0.7, right
		0.4, 0.6, // y = 1: top 0.6, right
	}
	labels := []int{0, 1, 1, 1}
	// 4 bins: [0.75, 1] holds 0.9 and 0.8 (acc 1/2, conf 0.85, gap −0.35);
	// [0.5, 0.75) holds 0.7 and 0.6 (acc 1, conf 0.65, gap 0.35).
	got, err := TopLabelErrors(probs, labels, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	// Debiased: ½(0.35² − ½·½/1) + ½(0.35² − 0) = −0.0025 → 0.
	// Adaptive, 4 equal-mass bins of one: (0.4 + 0.3 + 0.8 + 0.1)/4.
	// KS: sorted 0.6 ✓, 0.7 ✓, 0.8 ✗, 0.9 ✓ give running Σ (c − a) of
	// −0.4, −0.7, 0.1, 0: max 0.7, over 4.
	want := TopLabel{ECE: 0.35, AdaptiveECE: ptr(0.4), KS: ptr(0.175), MCE: 0.35, RMSCE: 0.35, DebiasedCE: 0, SignedGap: 0}
	assertTopLabel(t, got, want, 1e-12)
	// 2 equal-mass bins: {0.6, 0.7} (2 right, Σ conf 1.3), {0.8, 0.9}
	// (1 right, Σ conf 1.7): (0.7 + 0.7)/4.
	got, _ = TopLabelErrors(probs, labels, 2, 2)
	if math.Abs(*got.AdaptiveECE-0.35) > 1e-12 {
		t.Errorf("adaptive ECE with 2 bins = %v, want 0.35", *got.AdaptiveECE)
	}
}

func ptr(v float64) *float64 { return &v }

// TestAdaptiveECETies checks the tie rule of the adaptive ECE: with
// every confidence equal to 0.5, two right and two wrong, 2 equal-mass
// bins hold the two wrong (|0 − 1|) and the two right (|2 − 1|), 0.5, in
// whatever order the rows come; the streaming accumulator agrees, and an
// exactly calibrated set reports an exact 0 that JSON keeps.
func TestAdaptiveECETies(t *testing.T) {
	probs := []float64{0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5}
	for _, labels := range [][]int{{0, 0, 1, 1}, {1, 1, 0, 0}, {0, 1, 0, 1}, {1, 0, 1, 0}} {
		got, err := TopLabelErrors(probs, labels, 2, 2)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := NewAccumulator(2, 2)
		a.KeepTopConfidences()
		for i := range labels {
			if err := a.Add(probs[2*i:2*i+2], labels[i:i+1]); err != nil {
				t.Fatal(err)
			}
		}
		stream := a.TopLabel()
		if *got.AdaptiveECE != 0.5 || stream.AdaptiveECE == nil || *stream.AdaptiveECE != 0.5 {
			t.Errorf("labels %v: adaptive ECE %v, streaming %v; want 0.5", labels, *got.AdaptiveECE, stream.AdaptiveECE)
		}
	}
	// One example per bin, each right with its confidence 1: exactly 0.
	got, _ := TopLabelErrors([]float64{1, 0, 0, 1}, []int{0, 1}, 2, 15)
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if *got.AdaptiveECE != 0 || !strings.Contains(string(b), `"adaptive_ece":0`) {
		t.Errorf("exact calibration: adaptive ECE %v, JSON %s: want an exact 0, kept", *got.AdaptiveECE, b)
	}
	// An accumulator that did not keep its rows reports none.
	a, _ := NewAccumulator(2, 2)
	_ = a.Add(probs, []int{0, 0, 1, 1})
	if a.TopLabel().AdaptiveECE != nil {
		t.Error("an accumulator without KeepTopConfidences reported an adaptive ECE")
	}
}

func assertTopLabel(t *testing.T, got, want TopLabel, tol float64) {
	t.Helper()
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	val := func(v reflect.Value) float64 {
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return math.NaN()
			}
			v = v.Elem()
		}
		return v.Float()
	}
	for i := range g.NumField() {
		gv, wv := val(g.Field(i)), val(w.Field(i))
		if d := math.Abs(gv - wv); d > tol || math.IsNaN(gv) != math.IsNaN(wv) {
			t.Errorf("%s = %v, want %v", g.Type().Field(i).Name, gv, wv)
		}
	}
}

// naiveTopLabel computes the binned fields of TopLabel directly from
// their formulas, as a second method.
func naiveTopLabel(probs []float64, labels []int, c, bins int) TopLabel {
	n := len(labels)
	cnt, acc, conf := make([]float64, bins), make([]float64, bins), make([]float64, bins)
	var confSum, right float64
	for i, y := range labels {
		row := probs[i*c : (i+1)*c]
		arg := 0
		for j := range row {
			if row[j] > row[arg] {
				arg = j
			}
		}
		m := Bin(row[arg], bins)
		cnt[m]++
		conf[m] += row[arg]
		confSum += row[arg]
		if arg == y {
			acc[m]++
			right++
		}
	}
	var t TopLabel
	var sq, deb float64
	for m := range bins {
		if cnt[m] == 0 {
			continue
		}
		a, p, w := acc[m]/cnt[m], conf[m]/cnt[m], cnt[m]/float64(n)
		t.ECE += w * math.Abs(a-p)
		t.MCE = math.Max(t.MCE, math.Abs(a-p))
		sq += w * (a - p) * (a - p)
		if cnt[m] >= 2 {
			deb += w * ((a-p)*(a-p) - a*(1-a)/(cnt[m]-1))
		}
	}
	t.RMSCE, t.DebiasedCE = math.Sqrt(sq), math.Sqrt(math.Max(0, deb))
	t.SignedGap = (confSum - right) / float64(n)
	return t
}

func TestTopLabelMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct{ n, c, bins int }{{300, 3, 15}, {2000, 10, 15}, {500, 4, 40}} {
		s := randomSet(rng, tc.n, tc.c, 3)
		p := make([]float64, len(s.Logits))
		SoftmaxRows(p, s.Logits, s.Classes)
		got, err := TopLabelErrors(p, s.Labels, tc.c, tc.bins)
		if err != nil {
			t.Fatal(err)
		}
		want := naiveTopLabel(p, s.Labels, tc.c, tc.bins)
		want.AdaptiveECE, want.KS = got.AdaptiveECE, got.KS // checked by hand above, in TestAdaptiveECETies and against NumPy
		assertTopLabel(t, got, want, 1e-12)
		m, _ := Evaluate(p, s.Labels, tc.c, tc.bins)
		if got.ECE != m.ECE {
			t.Errorf("ECE %v differs from Evaluate's %v", got.ECE, m.ECE)
		}
		if got.DebiasedCE > got.RMSCE {
			t.Errorf("debiased %v above the plug-in %v", got.DebiasedCE, got.RMSCE)
		}
	}
}

// calibratedSample draws n examples of a perfectly calibrated 3-class
// model: probabilities from a Dirichlet-like draw, the label from them.
func calibratedSample(rng *rand.Rand, n int) ([]float64, []int) {
	const c = 3
	p := make([]float64, n*c)
	y := make([]int, n)
	for i := range n {
		row := p[i*c : (i+1)*c]
		var sum float64
		for j := range row {
			row[j] = -math.Log(rng.Float64()) * (1 + float64(j))
			sum += row[j]
		}
		for j := range row {
			row[j] /= sum
		}
		u, k := rng.Float64(), 0
		for k < c-1 && u >= row[k] {
			u -= row[k]
			k++
		}
		y[i] = k
	}
	return p, y
}

// TestBootstrapCoverage: on a perfectly calibrated model, 90% intervals of
// the accuracy and of the signed gap (true value 0) cover the true value
// in about 90% of repeated experiments. Measured (seed 1, 300
// experiments of 400 examples, 200 resamples each): accuracy 0.887, signed
// gap 0.890.
func TestBootstrapCoverage(t *testing.T) {
	if testing.Short() {
		t.Skip("repeated bootstrap")
	}
	rng := rand.New(rand.NewPCG(1, 1))
	// The true accuracy E[max_j p_j] of the model, by a large sample.
	bigP, _ := calibratedSample(rng, 400000)
	var trueAcc float64
	for i := range 400000 {
		trueAcc += math.Max(bigP[3*i], math.Max(bigP[3*i+1], bigP[3*i+2]))
	}
	trueAcc /= 400000
	const experiments = 300
	var coverAcc, coverGap int
	for e := range experiments {
		p, y := calibratedSample(rng, 400)
		b, err := BootstrapIntervals(p, y, 3, 10, 200, 0.9, uint64(e))
		if err != nil {
			t.Fatal(err)
		}
		if a := b["accuracy"]; a.Lo <= trueAcc && trueAcc <= a.Hi {
			coverAcc++
		}
		if g := b["signed_gap"]; g.Lo <= 0 && 0 <= g.Hi {
			coverGap++
		}
	}
	ca, cg := float64(coverAcc)/experiments, float64(coverGap)/experiments
	t.Logf("90%% bootstrap coverage over %d experiments: accuracy %.3f, signed gap %.3f", experiments, ca, cg)
	for name, c := range map[string]float64{"accuracy": ca, "signed gap": cg} {
		if c < 0.84 || c > 0.96 {
			t.Errorf("%s: coverage %.3f, want about 0.90", name, c)
		}
	}
}

func TestBootstrapDeterministicAndErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	p, y := calibratedSample(rng, 200)
	a, err := BootstrapIntervals(p, y, 3, 15, 50, 0, 9)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := BootstrapIntervals(p, y, 3, 15, 50, 0.95, 9)
	if !reflect.DeepEqual(a, b) || len(a) != 14 {
		t.Errorf("same seed and level, different intervals (%d metrics)", len(a))
	}
	m, _ := Evaluate(p, y, 3, 15)
	if iv := a["cwece"]; !(iv.Lo <= iv.Hi) || iv.Hi <= 0 || m.CWECE < iv.Lo/2 {
		t.Errorf("cwECE interval %+v around %v", iv, m.CWECE)
	}
	for _, tc := range []struct {
		n     int
		level float64
	}{{0, 0.9}, {MaxBootstrap + 1, 0.9}, {10, 1}, {10, -0.5}, {10, math.NaN()}} {
		if _, err := BootstrapIntervals(p, y, 3, 15, tc.n, tc.level, 1); err == nil {
			t.Errorf("BootstrapIntervals(%d, %v): no error", tc.n, tc.level)
		}
	}
}
