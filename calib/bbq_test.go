package calib

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// directBBQ evaluates BBQ for one class without logarithms: each scheme's
// score is the product of Gamma-function ratios, the weights are the
// scores over their sum, and each fine bin's value is the weighted
// average of the schemes' posterior means. Counts must be small enough
// for math.Gamma not to overflow. It returns the scores and the table.
func directBBQ(pos, neg []float64, mexp int) (scores, table []float64) {
	fine := 1 << mexp
	table = make([]float64, fine)
	preds := make([][]float64, mexp+1)
	for s := 1; s <= mexp; s++ {
		B := 1 << s
		width := fine / B
		prior := 2 / float64(B)
		score := 1.0
		preds[s] = make([]float64, B)
		for b := 0; b < B; b++ {
			var m, n float64
			for f := b * width; f < (b+1)*width; f++ {
				m += math.Max(pos[f], 0)
				n += math.Max(neg[f], 0)
			}
			mid := (float64(b) + 0.5) / float64(B)
			alpha, beta := prior*mid, prior*(1-mid)
			score *= math.Gamma(prior) / math.Gamma(m+n+prior) *
				math.Gamma(m+alpha) / math.Gamma(alpha) *
				math.Gamma(n+beta) / math.Gamma(beta)
			preds[s][b] = (m + alpha) / (m + n + prior)
		}
		scores = append(scores, score)
	}
	var total float64
	for _, s := range scores {
		total += s
	}
	for f := range table {
		for s := 1; s <= mexp; s++ {
			table[f] += scores[s-1] / total * preds[s][f/(fine>>s)]
		}
	}
	return scores, table
}

func TestBBQMatchesDirectEvaluation(t *testing.T) {
	tests := []struct {
		name     string
		mexp     int
		pos, neg []float64
	}{
		{"mexp 1", 1, []float64{1, 3}, []float64{2, 0}},
		{"mexp 2", 2, []float64{3, 0, 1, 2}, []float64{1, 4, 0, 0}},
		{"mexp 3", 3, []float64{0, 0, 1, 0, 2, 3, 5, 4}, []float64{6, 4, 3, 2, 1, 0, 1, 0}},
		{"empty", 3, make([]float64, 8), make([]float64, 8)},
		{"noisy", 3, []float64{-1.5, 0.3, 2.7, 0, 1, -0.2, 4.5, 3}, []float64{5.2, 3.1, -2, 1.5, 0.5, 0, -0.7, 0.1}},
		{"all positive", 2, []float64{1, 2, 3, 4}, make([]float64, 4)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantScores, wantTable := directBBQ(tt.pos, tt.neg, tt.mexp)

			w := newBBQWork(tt.mexp)
			w.scores(tt.pos, tt.neg)
			for s := range wantScores {
				if got, want := w.score[s], math.Log(wantScores[s]); math.Abs(got-want) > 1e-10*math.Max(1, math.Abs(want)) {
					t.Errorf("log score of scheme with %d bins = %.15g, want %.15g", 2<<s, got, want)
				}
			}

			// Two classes: the second has the roles of the counts swapped.
			h := &Histograms{Classes: 2, Bins: 1 << tt.mexp,
				Pos: slices.Concat(tt.pos, tt.neg), Neg: slices.Concat(tt.neg, tt.pos)}
			b, err := NewBBQ(h)
			if err != nil {
				t.Fatal(err)
			}
			_, swapped := directBBQ(tt.neg, tt.pos, tt.mexp)
			if b.Mexp != tt.mexp || b.Classes() != 2 {
				t.Errorf("Mexp, Classes = %d, %d", b.Mexp, b.Classes())
			}
			assertClose(t, "table", b.Table, slices.Concat(wantTable, swapped), 1e-12)
		})
	}
}

func TestBBQOneSchemeByHand(t *testing.T) {
	// Mexp = 1: a single scheme of 2 bins with N′/B = 1, α = (0.25, 0.75).
	// Bin 0: (1 + 0.25)/(3 + 1); bin 1: (3 + 0.75)/(3 + 1).
	b, err := NewBBQ(&Histograms{Classes: 2, Bins: 2, Pos: []float64{1, 3, 0, 0}, Neg: []float64{2, 0, 0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	// Class 1 is empty: the prior means, the midpoints 0.25 and 0.75.
	assertClose(t, "table", b.Table, []float64{0.3125, 0.9375, 0.25, 0.75}, 1e-15)
	got := make([]float64, 2)
	b.Predict(got, logitsOf(0.2, 0.8)) // g = (0.3125, 0.75)
	assertClose(t, "prediction", got, []float64{0.3125 / 1.0625, 0.75 / 1.0625}, 1e-15)
}

func TestBBQLargeCounts(t *testing.T) {
	// Counts far beyond math.Gamma's range stay finite in log space, and
	// a strongly supported fine scheme dominates: the table tracks the
	// fine bins' frequencies.
	pos, neg := make([]float64, 16), make([]float64, 16)
	for m := range pos {
		freq := (float64(m) + 0.5) / 16
		pos[m], neg[m] = 1e6*freq, 1e6*(1-freq)
	}
	b, err := NewBBQ(&Histograms{Classes: 2, Bins: 16, Pos: slices.Concat(pos, pos), Neg: slices.Concat(neg, neg)})
	if err != nil {
		t.Fatal(err)
	}
	for m, v := range b.Table[:16] {
		if want := (float64(m) + 0.5) / 16; math.Abs(v-want) > 1e-5 {
			t.Errorf("bin %d: %v, want %v", m, v, want)
		}
	}
	// Mexp = 16 with tiny priors: still finite.
	if b, err := NewBBQ(NewHistograms(2, 1<<16)); err != nil || slices.ContainsFunc(b.Table, func(v float64) bool { return !(v > 0 && v < 1) }) {
		t.Errorf("empty 2^16-bin BBQ: err %v or a value outside (0, 1)", err)
	}
}

func TestBBQFitEqualsAggregatedHistograms(t *testing.T) {
	// A federation of three clients whose summed histograms build the BBQ
	// equals the central fit on the pooled data (FedBBQ, one round, all
	// clients).
	rng := rand.New(rand.NewPCG(11, 12))
	s := randomSet(rng, 210, 10, 3)
	central := &BBQ{}
	if err := central.Fit(s); err != nil {
		t.Fatal(err)
	}
	sum := NewHistograms(10, 1<<DefaultMexp)
	for k := 0; k < 3; k++ {
		idx := []int{}
		for i := k; i < s.Len(); i += 3 {
			idx = append(idx, i)
		}
		client := NewHistograms(10, 1<<DefaultMexp)
		if err := client.Accumulate(s.Subset(idx)); err != nil {
			t.Fatal(err)
		}
		if err := sum.Add(client); err != nil {
			t.Fatal(err)
		}
	}
	fed, err := NewBBQ(sum)
	if err != nil {
		t.Fatal(err)
	}
	if central.Mexp != DefaultMexp {
		t.Errorf("zero-value Mexp fitted as %d, want %d", central.Mexp, DefaultMexp)
	}
	assertClose(t, "table", fed.Table, central.Table, 1e-14)
}

func TestBBQErrors(t *testing.T) {
	for _, mexp := range []int{-1, 17, 40} {
		b := &BBQ{Mexp: mexp}
		err := b.Fit(tinySet())
		if err == nil || !strings.Contains(err.Error(), "want 1 to 16") {
			t.Errorf("Mexp %d: error %v", mexp, err)
		}
	}
	for _, bins := range []int{1, 3, 12} {
		if _, err := NewBBQ(NewHistograms(2, bins)); err == nil || !strings.Contains(err.Error(), "2^Mexp bins") {
			t.Errorf("%d bins: error %v", bins, err)
		}
	}
	var b BBQ
	if err := b.Fit(&Set{Classes: 3}); err == nil {
		t.Error("empty set accepted")
	}
	if b.Classes() != 0 {
		t.Errorf("unfitted BBQ has %d classes", b.Classes())
	}
	defer func() {
		if recover() == nil {
			t.Error("Predict on an unfitted BBQ did not panic")
		}
	}()
	b.Predict(make([]float64, 2), make([]float64, 2))
}
