package calib

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// statsProbs returns n rows of c random class probabilities (softmax of
// sharp Gaussian logits) and their labels.
func statsProbs(n, c int, seed uint64) ([]float64, []int) {
	rng := rand.New(rand.NewPCG(seed, 2))
	probs, labels := make([]float64, n*c), make([]int, n)
	for i := range n {
		labels[i] = rng.IntN(c)
		row := probs[i*c : (i+1)*c]
		var sum float64
		for j := range row {
			row[j] = math.Exp(4 * rng.NormFloat64())
			sum += row[j]
		}
		for j := range row {
			row[j] /= sum
		}
	}
	return probs, labels
}

// TestMergeEncoded checks that merging the exact encodings of parts
// equals accumulating all rows at once, bit for bit.
func TestMergeEncoded(t *testing.T) {
	const c, bins = 4, 9
	probs, labels := statsProbs(500, c, 1)
	whole, _ := NewAccumulator(c, bins)
	if err := whole.Add(probs, labels); err != nil {
		t.Fatal(err)
	}
	sum, _ := NewAccumulator(c, bins)
	for _, cut := range [][2]int{{0, 7}, {7, 7}, {7, 300}, {300, 500}} {
		part, _ := NewAccumulator(c, bins)
		if err := part.Add(probs[cut[0]*c:cut[1]*c], labels[cut[0]:cut[1]]); err != nil {
			t.Fatal(err)
		}
		u := part.AppendEncoded(nil)
		if len(u) != EncodedLen(c, bins) {
			t.Fatalf("encoding has %d values, EncodedLen says %d", len(u), EncodedLen(c, bins))
		}
		if err := sum.MergeEncoded(u); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(sum.AppendEncoded(nil), whole.AppendEncoded(nil)) {
		t.Error("merged encodings differ from the whole's")
	}
	want, _ := Evaluate(probs, labels, c, bins)
	got, err := sum.Metrics()
	if err != nil || got != want {
		t.Errorf("metrics of merged encodings %+v (%v), want %+v", got, err, want)
	}
}

func TestCheckEncoded(t *testing.T) {
	a, _ := NewAccumulator(2, 3)
	good := make([]float64, EncodedLen(2, 3))
	set := func(i int, v float64) []float64 { u := slices.Clone(good); u[i] = v; return u }
	for _, tc := range []struct {
		name string
		u    []float64
		ok   bool
	}{
		{"zeros", good, true},
		{"largest limb", set(2, 0x1p32-1), true},
		{"largest count", set(0, 0x1p53-1), true},
		{"short", good[1:], false},
		{"limb 2³²", set(9, 0x1p32), false},
		{"bin limb 2³²", set(10, 0x1p32), false},
		{"count 2⁵³", set(15, 0x1p53), false},
		{"fraction", set(14, 0.5), false},
		{"negative", set(1, -1), false},
		{"NaN", set(0, math.NaN()), false},
	} {
		err := a.CheckEncoded(tc.u)
		if tc.ok != (err == nil) {
			t.Errorf("%s: CheckEncoded gives %v", tc.name, err)
		}
		if !tc.ok && a.MergeEncoded(tc.u) == nil {
			t.Errorf("%s: MergeEncoded accepts it", tc.name)
		}
	}
	if a.N() != 0 {
		t.Errorf("refused merges changed the accumulator: N = %d", a.N())
	}
}

// TestMetricsFromStatsNoNoise checks that without noise the statistics
// vector gives Metrics up to rounding.
func TestMetricsFromStatsNoNoise(t *testing.T) {
	for _, tc := range []struct{ n, c, bins int }{{200, 2, 15}, {1000, 10, 15}, {50, 5, 3}} {
		probs, labels := statsProbs(tc.n, tc.c, uint64(tc.n))
		a, _ := NewAccumulator(tc.c, tc.bins)
		if err := a.Add(probs, labels); err != nil {
			t.Fatal(err)
		}
		want, _ := a.Metrics()
		s := a.AppendStats(nil)
		if len(s) != StatsLen(tc.c, tc.bins) {
			t.Fatalf("statistics vector has %d values, StatsLen says %d", len(s), StatsLen(tc.c, tc.bins))
		}
		got, err := MetricsFromStats(s, tc.c, tc.bins)
		if err != nil {
			t.Fatal(err)
		}
		if got.N != want.N || got.Classes != want.Classes {
			t.Errorf("N %d classes %d, want %d, %d", got.N, got.Classes, want.N, want.Classes)
		}
		for _, v := range [][2]float64{{got.CWECE, want.CWECE}, {got.ECE, want.ECE}, {got.Accuracy, want.Accuracy}, {got.NLL, want.NLL}, {got.Brier, want.Brier}} {
			if math.Abs(v[0]-v[1]) > 1e-12 {
				t.Errorf("%d×%d×%d: %v from the statistics vector, %v from the accumulator", tc.n, tc.c, tc.bins, v[0], v[1])
			}
		}
	}
}

// TestMetricsFromStatsClamps checks the clamping on a hand-made noisy
// vector of 2 classes × 2 bins, worked out by hand:
//
//	class 0, bin 0: count −1 → 0, conf 0.3 → 0, freq 0.2 → 0: gap 0
//	class 0, bin 1: count 4, conf 1 → [2, 4] → 2, freq 5 → 4: gap 2
//	class 1, bin 0: count 3, conf 0.5, freq −1 → 0: gap 0.5
//	class 1, bin 1: count 1, conf 0.9, freq 1: gap 0.1
//	top, bin 0: count 0.5, conf 0.1, correct 0.2: gap 0.1
//	top, bin 1: count 3.5, conf 3, correct 3: gap 0
//	N̂ = (3 + 4 + 4)/3 = 11/3; NLL sum 0.1·(−log 1e-12), Brier sum 15·2
//	(the vector holds them divided by those largest terms).
func TestMetricsFromStatsClamps(t *testing.T) {
	s := []float64{
		-1, 0.3, 0.2, 4, 1, 5,
		3, 0.5, -1, 1, 0.9, 1,
		0.5, 0.1, 0.2, 3.5, 3, 3,
		0.1, 15,
	}
	got, err := MetricsFromStats(s, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	n := 11.0 / 3
	want := Metrics{N: 4, Classes: 2, CWECE: 2.6 / n / 2, ECE: 0.1 / n, Accuracy: 3.2 / n, NLL: 0.1 * -math.Log(1e-12) / n, Brier: 2}
	for _, v := range [][3]any{
		{"cwece", got.CWECE, want.CWECE}, {"ece", got.ECE, want.ECE}, {"accuracy", got.Accuracy, want.Accuracy},
		{"nll", got.NLL, want.NLL}, {"brier", got.Brier, want.Brier},
	} {
		if g, w := v[1].(float64), v[2].(float64); math.Abs(g-w) > 1e-12 {
			t.Errorf("%s = %v, want %v", v[0], g, w)
		}
	}
	if got.N != 4 || got.Classes != 2 {
		t.Errorf("N %d, classes %d: want 4, 2", got.N, got.Classes)
	}
}

func TestMetricsFromStatsErrors(t *testing.T) {
	zero := make([]float64, StatsLen(2, 2))
	if _, err := MetricsFromStats(zero, 2, 2); !errors.Is(err, ErrEmpty) {
		t.Errorf("all-zero statistics: %v, want ErrEmpty", err)
	}
	if _, err := MetricsFromStats(zero[1:], 2, 2); err == nil {
		t.Error("short vector accepted")
	}
	inf := slices.Clone(zero)
	inf[3] = math.Inf(1)
	if _, err := MetricsFromStats(inf, 2, 2); err == nil {
		t.Error("infinite statistic accepted")
	}
	// Noise that makes every count negative still gives valid metrics.
	neg := slices.Clone(zero)
	for i := 0; i < 18; i += 3 {
		neg[i] = -5
	}
	m, err := MetricsFromStats(neg, 2, 2)
	if err != nil || m.N != 1 || m.CWECE != 0 || m.Accuracy != 0 {
		t.Errorf("negative counts: %+v, %v; want N 1 (the floor) and zero errors", m, err)
	}
}
