package calib

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestRowSumsBlocks checks the partition: one block below
// 2·rowSumsBlockRows rows, then one per rowSumsBlockRows rows up to
// rowSumsMaxBlocks; and that a sum adds the blocks' values and
// accumulators exactly, by hand.
func TestRowSumsBlocks(t *testing.T) {
	for _, tc := range []struct{ n, want int }{
		{0, 1}, {1, 1}, {2*rowSumsBlockRows - 1, 1}, {2 * rowSumsBlockRows, 2},
		{5*rowSumsBlockRows + 3, 5}, {1 << 20, rowSumsMaxBlocks},
	} {
		if got := rowSumsBlocks(tc.n); got != tc.want {
			t.Errorf("rowSumsBlocks(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
	// Row i contributes i to the value and (1, i) to the accumulator.
	n := 3*rowSumsBlockRows + 17
	r := newRowSums(n)
	acc := []float64{-1, -1} // sum clears it
	f := r.sum(acc, func(lo, hi int, a []float64) float64 {
		var v float64
		for i := lo; i < hi; i++ {
			v += float64(i)
			a[0]++
			a[1] += float64(i)
		}
		return v
	})
	want := float64(n*(n-1)) / 2
	if f != want || acc[0] != float64(n) || acc[1] != want {
		t.Errorf("sum = %v, accumulator %v: want %v and [%d %v]", f, acc, want, n, want)
	}
}

// TestFitsDoNotDependOnThreads fits every scaler whose objective rowSums
// sums on a set of several blocks, with 1 and with 4 goroutines: the
// parameters must be the same to the bit.
func TestFitsDoNotDependOnThreads(t *testing.T) {
	s := scOverconfident(rand.New(rand.NewPCG(5, 29)), 5*rowSumsBlockRows+7, 6, 4, 2)
	if rowSumsBlocks(s.Len()) < 4 {
		t.Fatalf("%d rows make %d blocks: want several", s.Len(), rowSumsBlocks(s.Len()))
	}
	for _, tc := range []struct {
		name string
		new  func() Calibrator
	}{
		{"temp", func() Calibrator { return new(Temperature) }},
		{"vector", func() Calibrator { return new(Vector) }},
		{"matrix", func() Calibrator { return new(Matrix) }},
		{"dirichlet fixed", func() Calibrator { return &Dirichlet{Lambda: 1e-2, Mu: 1e-2} }},
		{"dirichlet cross-validated", func() Calibrator {
			return &Dirichlet{Folds: 2, Seed: 4, LambdaGrid: []float64{0, 1}, MuGrid: []float64{0.1}}
		}},
		{"opvector", func() Calibrator { return new(OPVector) }},
		{"fedcal", func() Calibrator { return &FedCalMLP{Seed: 3, Tolerance: 1e-3, MaxEpochs: 4} }},
	} {
		var params [2][]float64
		var reps [2]*FitReport
		for i, procs := range []int{1, 4} {
			old := runtime.GOMAXPROCS(procs)
			c := tc.new()
			err := c.Fit(s)
			runtime.GOMAXPROCS(old)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			params[i] = c.(Scaler).Params()
			reps[i] = c.(interface{ LastFit() *FitReport }).LastFit()
		}
		for k, v := range params[0] {
			if math.Float64bits(v) != math.Float64bits(params[1][k]) {
				t.Errorf("%s: parameter %d is %v with 1 goroutine, %v with 4", tc.name, k, v, params[1][k])
				break
			}
		}
		if math.Float64bits(reps[0].Objective) != math.Float64bits(reps[1].Objective) || reps[0].Iterations != reps[1].Iterations {
			t.Errorf("%s: report %+v with 1 goroutine, %+v with 4", tc.name, *reps[0], *reps[1])
		}
	}
}
