package calib

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestBin(t *testing.T) {
	tests := []struct {
		v    float64
		bins int
		want int
	}{
		{0, 15, 0},
		{1, 15, 14}, // 1.0 falls in the last bin, not an extra one
		{math.Nextafter(1, 0), 15, 14},
		{1.0 / 15, 15, 1},
		{math.Nextafter(1.0/15, 0), 15, 0},
		{0.5, 2, 1},
		{0.49999, 2, 0},
		{0.999, 1, 0},
		{-0.1, 15, 0},
		{1.5, 15, 14},
		{math.NaN(), 4, 0},
		{math.Inf(1), 4, 3},
		{0.75, 128, 96},
		{1, 1 << 16, 1<<16 - 1},
	}
	for _, tt := range tests {
		if got := Bin(tt.v, tt.bins); got != tt.want {
			t.Errorf("Bin(%v, %d) = %d, want %d", tt.v, tt.bins, got, tt.want)
		}
	}
}

func TestBinPanicsOnNoBins(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Bin(0.5, 0) did not panic")
		}
	}()
	Bin(0.5, 0)
}

// tiny is a 4-example, 2-class input whose metrics are worked out by hand
// in TestEvaluateByHand.
var tiny = struct {
	probs  []float64
	labels []int
}{
	probs: []float64{
		0.9, 0.1,
		0.8, 0.2,
		0.3, 0.7,
		0.5, 0.5, // a tie: the predicted class is the first, 0
	},
	labels: []int{0, 1, 1, 0},
}

func TestEvaluateByHand(t *testing.T) {
	tests := []struct {
		name   string
		probs  []float64
		labels []int
		bins   int
		want   Metrics
	}{{
		// 2 bins, [0, 0.5) and [0.5, 1]. Class 0: bin 0 holds 0.3 (y≠0):
		// |0.3−0| = 0.3; bin 1 holds 0.9, 0.8, 0.5 (two with y=0):
		// |2.2−2| = 0.2. Class 1: bin 0 holds 0.1, 0.2 (one y=1):
		// |0.3−1| = 0.7; bin 1 holds 0.7, 0.5 (one y=1): |1.2−1| = 0.2.
		// cwECE = (0.3+0.2+0.7+0.2)/(4·2) = 0.175. Top label: all four
		// tops (0.9, 0.8, 0.7, 0.5) in bin 1, 3 correct: |2.9−3|/4.
		name: "two bins", probs: tiny.probs, labels: tiny.labels, bins: 2,
		want: Metrics{
			N: 4, Classes: 2, Accuracy: 0.75, CWECE: 0.175, ECE: 0.025,
			NLL:   0.6911551381476511,             // −(ln .9 + ln .2 + ln .7 + ln .5)/4
			Brier: (0.02 + 1.28 + 0.18 + 0.5) / 4, // per row: .1²+.1², .8²+.8², .3²+.3², .5²+.5²
		},
	}, {
		// Default 15 bins; probability 1 lands in bin 14 and 0 in bin 0.
		// Class 0: bin 14 {1, y=0}: 0; bin 0 {0, y=0}: |0−1| = 1.
		// Class 1: bin 0 {0, y≠1}: 0; bin 14 {1, y≠1}: 1. cwECE = 2/(2·2).
		// Top: both tops 1 in bin 14, one correct: |2−1|/2.
		// NLL: −(ln 1 + ln 1e-12)/2. Brier: (0 + 2)/2.
		name:   "saturated",
		probs:  []float64{1, 0, 0, 1},
		labels: []int{0, 0},
		want: Metrics{
			N: 2, Classes: 2, Accuracy: 0.5, CWECE: 0.5, ECE: 0.5,
			NLL: 13.815510557964274, Brier: 1,
		},
	}, {
		// One example, 3 classes, 3 bins: p = (0.2, 0.3, 0.5), y = 2.
		// Class 0: |0.2−0|, class 1: |0.3−0|, class 2: |0.5−1|;
		// cwECE = 1.0/3. Top 0.5 correct: |0.5−1| = 0.5.
		// Brier: .04 + .09 + .25 = 0.38.
		name:   "single example",
		probs:  []float64{0.2, 0.3, 0.5},
		labels: []int{2},
		bins:   3,
		want: Metrics{
			N: 1, Classes: 3, Accuracy: 1, CWECE: 1.0 / 3, ECE: 0.5,
			NLL: -math.Log(0.5), Brier: 0.38,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Evaluate(tt.probs, tt.labels, len(tt.probs)/len(tt.labels), tt.bins)
			if err != nil {
				t.Fatal(err)
			}
			assertMetrics(t, got, tt.want, 1e-12)
		})
	}
}

func assertMetrics(t *testing.T, got, want Metrics, tol float64) {
	t.Helper()
	if got.N != want.N || got.Classes != want.Classes {
		t.Errorf("N, Classes = %d, %d, want %d, %d", got.N, got.Classes, want.N, want.Classes)
	}
	for _, f := range []struct {
		name      string
		got, want float64
	}{
		{"accuracy", got.Accuracy, want.Accuracy},
		{"cwece", got.CWECE, want.CWECE},
		{"ece", got.ECE, want.ECE},
		{"nll", got.NLL, want.NLL},
		{"brier", got.Brier, want.Brier},
	} {
		if !(math.Abs(f.got-f.want) <= tol) {
			t.Errorf("%s = %.15g, want %.15g", f.name, f.got, f.want)
		}
	}
}

// naiveMetrics computes the metrics straight from their definitions:
// members of each bin are collected and their means compared.
func naiveMetrics(probs []float64, labels []int, c, bins int) Metrics {
	n := len(labels)
	var cw float64
	for j := 0; j < c; j++ {
		for m := 0; m < bins; m++ {
			var members []int
			for i := 0; i < n; i++ {
				if Bin(probs[i*c+j], bins) == m {
					members = append(members, i)
				}
			}
			if len(members) == 0 {
				continue
			}
			var conf, freq float64
			for _, i := range members {
				conf += probs[i*c+j]
				if labels[i] == j {
					freq++
				}
			}
			size := float64(len(members))
			cw += size / float64(n) * math.Abs(conf/size-freq/size)
		}
	}
	var ece, acc, nll, brier float64
	for m := 0; m < bins; m++ {
		var conf, correct, size float64
		for i := 0; i < n; i++ {
			row := probs[i*c : (i+1)*c]
			k := topIndex(row)
			if Bin(row[k], bins) != m {
				continue
			}
			size++
			conf += row[k]
			if k == labels[i] {
				correct++
			}
		}
		if size > 0 {
			ece += size / float64(n) * math.Abs(correct/size-conf/size)
		}
	}
	for i := 0; i < n; i++ {
		row := probs[i*c : (i+1)*c]
		if topIndex(row) == labels[i] {
			acc++
		}
		nll -= math.Log(math.Max(row[labels[i]], 1e-12))
		for j, p := range row {
			y := 0.0
			if j == labels[i] {
				y = 1
			}
			brier += (p - y) * (p - y)
		}
	}
	return Metrics{N: n, Classes: c, Accuracy: acc / float64(n), CWECE: cw / float64(c), ECE: ece, NLL: nll / float64(n), Brier: brier / float64(n)}
}

// randomSet returns n examples of c classes whose logits are scaled
// Gaussians, the label drawn from a tempered softmax so the model is
// informative but miscalibrated.
func randomSet(rng *rand.Rand, n, c int, scale float64) *Set {
	s := &Set{Logits: make([]float64, n*c), Labels: make([]int, n), Classes: c}
	p := make([]float64, c)
	for i := 0; i < n; i++ {
		row := s.Row(i)
		for j := range row {
			row[j] = scale * rng.NormFloat64()
		}
		for j := range p {
			p[j] = row[j] / 2
		}
		Softmax(p, p)
		u, y := rng.Float64(), 0
		for y < c-1 && u > p[y] {
			u -= p[y]
			y++
		}
		s.Labels[i] = y
	}
	return s
}

func TestEvaluateMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ n, c, bins int }{{1, 2, 15}, {50, 3, 15}, {200, 10, 15}, {300, 4, 7}, {100, 200, 10}} {
		s := randomSet(rng, tc.n, tc.c, 3)
		p := make([]float64, len(s.Logits))
		SoftmaxRows(p, s.Logits, s.Classes)
		got, err := Evaluate(p, s.Labels, s.Classes, tc.bins)
		if err != nil {
			t.Fatal(err)
		}
		assertMetrics(t, got, naiveMetrics(p, s.Labels, s.Classes, tc.bins), 1e-12)
	}
}

func TestEvaluateExtremeLogits(t *testing.T) {
	// ±1e4 logits, C = 2 and C = 200, classes missing from the labels.
	for _, c := range []int{2, 200} {
		s := &Set{Classes: c}
		for i := 0; i < 5; i++ {
			row := make([]float64, c)
			for j := range row {
				row[j] = -1e4
			}
			row[i%c] = 1e4
			s.Logits = append(s.Logits, row...)
			s.Labels = append(s.Labels, 0)
		}
		m, err := EvaluateSet(s, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []float64{m.Accuracy, m.CWECE, m.ECE, m.NLL, m.Brier} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("C=%d: non-finite metric in %+v", c, m)
			}
		}
		if want := naiveMetricsOfSet(s, 15); math.Abs(m.CWECE-want.CWECE) > 1e-12 || math.Abs(m.NLL-want.NLL) > 1e-9 {
			t.Errorf("C=%d: got %+v, want %+v", c, m, want)
		}
	}
}

func naiveMetricsOfSet(s *Set, bins int) Metrics {
	p := make([]float64, len(s.Logits))
	SoftmaxRows(p, s.Logits, s.Classes)
	return naiveMetrics(p, s.Labels, s.Classes, bins)
}

func TestEvaluateErrors(t *testing.T) {
	tests := []struct {
		name    string
		probs   []float64
		labels  []int
		classes int
		bins    int
		want    string
	}{
		{"one class", []float64{1}, []int{0}, 1, 0, "at least 2 classes"},
		{"negative bins", []float64{0.5, 0.5}, []int{0}, 2, -1, "number of bins"},
		{"too many bins", []float64{0.5, 0.5}, []int{0}, 2, 1_000_000_000, "number of bins is 1000000000: want 1 to 1000"},
		{"lengths", []float64{0.5, 0.5, 1}, []int{0}, 2, 0, "lengths do not match"},
		{"empty", nil, nil, 2, 0, "no examples"},
		{"label", []float64{0.5, 0.5}, []int{2}, 2, 0, "label of example 0 is 2"},
		{"negative label", []float64{0.5, 0.5}, []int{-1}, 2, 0, "outside [0, 2)"},
		{"nan", []float64{math.NaN(), 0.5}, []int{0}, 2, 0, "class 0 is NaN"},
		{"logits", []float64{3.2, -1}, []int{0}, 2, 0, "want a probability"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Evaluate(tt.probs, tt.labels, tt.classes, tt.bins)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, err := Evaluate(nil, nil, 2, 0); !errors.Is(err, ErrEmpty) {
		t.Errorf("empty input: error %v does not wrap ErrEmpty", err)
	}
}

func TestProbabilitiesErrors(t *testing.T) {
	s := &Set{Logits: []float64{0, 1, 2}, Labels: []int{1}, Classes: 3}
	b := &Histogram{Bins: 1, Table: []float64{0.5, 0.5}}
	if _, err := Probabilities(s, b); err == nil || !strings.Contains(err.Error(), "for 2 classes but the data has 3") {
		t.Errorf("class mismatch: error %v", err)
	}
	s.Logits[1] = math.Inf(1)
	if _, err := Probabilities(s, nil); err == nil {
		t.Error("infinite logit accepted")
	}
}

func TestReliability(t *testing.T) {
	r, err := NewReliability(tiny.probs, tiny.labels, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	// The bins worked out in TestEvaluateByHand.
	want := [][]ReliabilityBin{
		{{Confidence: 0.3, Frequency: 0, Count: 1}, {Confidence: 2.2 / 3, Frequency: 2.0 / 3, Count: 3}},
		{{Confidence: 0.15, Frequency: 0.5, Count: 2}, {Confidence: 0.6, Frequency: 0.5, Count: 2}},
	}
	wantTop := []ReliabilityBin{{}, {Confidence: 2.9 / 4, Frequency: 0.75, Count: 4}}
	if r.N != 4 || r.Bins != 2 || len(r.Class) != 2 {
		t.Fatalf("N, Bins, classes = %d, %d, %d", r.N, r.Bins, len(r.Class))
	}
	for j := range want {
		for m := range want[j] {
			assertBin(t, r.Class[j][m], want[j][m])
		}
	}
	for m := range wantTop {
		assertBin(t, r.Top[m], wantTop[m])
	}
}

func assertBin(t *testing.T, got, want ReliabilityBin) {
	t.Helper()
	if got.Count != want.Count || math.Abs(got.Confidence-want.Confidence) > 1e-12 || math.Abs(got.Frequency-want.Frequency) > 1e-12 {
		t.Errorf("bin %+v, want %+v", got, want)
	}
}

func TestReliabilityGivesMetrics(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	s := randomSet(rng, 500, 5, 2)
	p := make([]float64, len(s.Logits))
	SoftmaxRows(p, s.Logits, s.Classes)
	r, err := NewReliability(p, s.Labels, s.Classes, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := Evaluate(p, s.Labels, s.Classes, 0)
	var cw, ece float64
	total := 0
	for j := range r.Class {
		for _, b := range r.Class[j] {
			cw += float64(b.Count) / float64(r.N) * math.Abs(b.Confidence-b.Frequency)
			total += b.Count
		}
	}
	for _, b := range r.Top {
		ece += float64(b.Count) / float64(r.N) * math.Abs(b.Confidence-b.Frequency)
	}
	cw /= float64(len(r.Class))
	if r.Bins != DefaultMetricBins || total != r.N*s.Classes {
		t.Errorf("bins %d, total count %d, want %d, %d", r.Bins, total, DefaultMetricBins, r.N*s.Classes)
	}
	if math.Abs(cw-m.CWECE) > 1e-12 || math.Abs(ece-m.ECE) > 1e-12 {
		t.Errorf("from reliability: cwECE %v, ECE %v; Evaluate: %v, %v", cw, ece, m.CWECE, m.ECE)
	}
}
