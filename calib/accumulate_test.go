package calib

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestAccumulatorMergeIsExact: statistics accumulated in chunks, in any
// grouping and order (clients of a federation), merge to exactly the
// statistics and metrics of the pooled examples, which match the naive
// float computation to 1e-12.
func TestAccumulatorMergeIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct{ n, c, bins int }{{500, 3, 15}, {1000, 10, 15}, {300, 7, 40}} {
		s := randomSet(rng, tc.n, tc.c, 3)
		p := make([]float64, len(s.Logits))
		SoftmaxRows(p, s.Logits, s.Classes)
		pooled, err := NewAccumulator(tc.c, tc.bins)
		if err != nil {
			t.Fatal(err)
		}
		if err := pooled.Add(p, s.Labels); err != nil {
			t.Fatal(err)
		}
		want, err := pooled.Metrics()
		if err != nil {
			t.Fatal(err)
		}
		assertMetrics(t, want, naiveMetrics(p, s.Labels, tc.c, tc.bins), 1e-12)

		// Random "clients", merged in reverse order of their rows.
		cuts := []int{0}
		for cuts[len(cuts)-1] < tc.n {
			cuts = append(cuts, min(tc.n, cuts[len(cuts)-1]+1+rng.IntN(tc.n/5)))
		}
		merged, _ := NewAccumulator(tc.c, tc.bins)
		for i := len(cuts) - 1; i > 0; i-- {
			client, _ := NewAccumulator(tc.c, tc.bins)
			lo, hi := cuts[i-1], cuts[i]
			if err := client.Add(p[lo*tc.c:hi*tc.c], s.Labels[lo:hi]); err != nil {
				t.Fatal(err)
			}
			if err := merged.Merge(client); err != nil {
				t.Fatal(err)
			}
		}
		got, err := merged.Metrics()
		if err != nil {
			t.Fatal(err)
		}
		if got != want || !reflect.DeepEqual(merged, pooled) {
			t.Errorf("n=%d c=%d: merged %+v, pooled %+v", tc.n, tc.c, got, want)
		}
		if !reflect.DeepEqual(merged.Reliability(), pooled.Reliability()) {
			t.Errorf("n=%d c=%d: reliability differs", tc.n, tc.c)
		}
	}
}

func TestAccumulatorErrors(t *testing.T) {
	a, err := NewAccumulator(3, 5)
	if err != nil {
		t.Fatal(err)
	}
	before := *a
	for _, tc := range []struct {
		name   string
		probs  []float64
		labels []int
	}{
		{"shape", []float64{0.5, 0.5}, []int{0}},
		{"label", []float64{0.2, 0.3, 0.5}, []int{3}},
		{"NaN", []float64{0.2, 0.3, 0.5, 0.1, 0.1, math.NaN()}, []int{0, 1}},
		{"not a probability", []float64{0.2, 0.3, 0.5, 2, -1, 0}, []int{0, 1}},
	} {
		if err := a.Add(tc.probs, tc.labels); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if !reflect.DeepEqual(*a, before) {
		t.Error("a refused Add changed the accumulator")
	}
	if _, err := a.Metrics(); err == nil {
		t.Error("metrics of no examples")
	}
	other, _ := NewAccumulator(3, 6)
	if err := a.Merge(other); err == nil {
		t.Error("merged statistics of other bins")
	}
	var zero Accumulator
	if err := zero.Add([]float64{0.5, 0.5}, []int{0}); err == nil {
		t.Error("the zero Accumulator accepted examples")
	}
	for _, tc := range []struct{ c, bins int }{{1, 15}, {3, -1}, {3, MaxMetricBins + 1}} {
		if _, err := NewAccumulator(tc.c, tc.bins); err == nil {
			t.Errorf("NewAccumulator(%d, %d): no error", tc.c, tc.bins)
		}
	}
}
