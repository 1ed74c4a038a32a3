package calib

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// dirichletQNCase is a cross-validation above DirichletNewtonMaxClasses
// classes: generated rows (dirBenchSet's) and grids small enough to run
// the reference path (crossValidateLBFGS) in a test.
type dirichletQNCase struct {
	name        string
	n, c, folds int
	seed        uint64
	lambdas     []float64 // per-entry weights κ: λ = κ·C(C−1)
	mus         []float64 // μ = κ·C
}

func (tc dirichletQNCase) setUp() (*Set, *Dirichlet) {
	s := dirBenchSet(rand.New(rand.NewPCG(tc.seed, uint64(tc.c))), tc.n, tc.c)
	d := &Dirichlet{Folds: tc.folds, Seed: int64(tc.seed)}
	for _, k := range tc.lambdas {
		d.LambdaGrid = append(d.LambdaGrid, k*float64(tc.c*(tc.c-1)))
	}
	for _, k := range tc.mus {
		d.MuGrid = append(d.MuGrid, k*float64(tc.c))
	}
	return s, d
}

// TestDirichletCVNewtonCGChoosesAsLBFGS checks the cross-validation beyond
// DirichletNewtonMaxClasses classes (Newton–CG, dirichletNewtonCG; the
// kept-history L-BFGS before it, dirichletQN) against the path before
// both (crossValidateLBFGS) at 40 and 100 classes: the same pair, every
// pair's held-out NLL within what the stop at DirichletCVGradientTol
// leaves (1e-3 relative: with fewer training rows than parameters the
// weakly regularised pairs' optima lie in flat valleys, and the two
// paths' stops differed by up to 7.4e-4, where the chosen pair led the
// next by 2.4e-3 at 40 classes), and the
// cross-validated Fit ends at the optimum of the fit with the chosen λ
// and μ fixed (objectives within 1e-10 relative, parameters within 1e-3,
// as TestDirichletCrossValidation's Newton refit).
func TestDirichletCVNewtonCGChoosesAsLBFGS(t *testing.T) {
	for _, tc := range []dirichletQNCase{
		{"600 × 40, 3 folds, 3 × 3 pairs", 600, 40, 3, 1, []float64{0, 1e-2, 1e2}, []float64{0, 1e-2, 1e2}},
		{"400 × 100, 3 folds, 2 × 2 pairs", 400, 100, 3, 2, []float64{1e-4, 1}, []float64{0, 1}},
	} {
		if testing.Short() && tc.c > 40 {
			t.Logf("%s: skipped in -short", tc.name)
			continue
		}
		s, d := tc.setUp()
		ls := logProbSet(s)
		lambdas, mus := d.grids(tc.c)
		if dirichletCVSolverFor(tc.c) != dirichletCVNewtonCG {
			t.Fatalf("%s: the cross-validation does not use Newton–CG", tc.name)
		}
		qn, _, _, err := d.heldOut(ls, tc.folds, lambdas, mus, dirichletCVNewtonCG)
		if err != nil {
			t.Fatal(err)
		}
		kept, _, _, err := d.heldOut(ls, tc.folds, lambdas, mus, dirichletCVKeptLBFGS)
		if err != nil {
			t.Fatal(err)
		}
		lbfgs, err := d.heldOutLBFGS(ls, tc.folds, lambdas, mus)
		if err != nil {
			t.Fatal(err)
		}
		var worst float64
		wp := 0
		for p := range qn {
			if e := math.Abs(qn[p]-lbfgs[p]) / lbfgs[p]; e > worst {
				worst, wp = e, p
			}
		}
		bq, bl, bk := bestPair(qn), bestPair(lbfgs), bestPair(kept)
		margin := math.Inf(1) // the reference's runner-up, relative to its best
		for p, v := range lbfgs {
			if p != bl {
				margin = min(margin, (v-lbfgs[bl])/lbfgs[bl])
			}
		}
		t.Logf("%s: Newton–CG chose pair %d (λ %g, μ %g), kept-history L-BFGS pair %d, L-BFGS pair %d, by %.2g (relative) over its runner-up; held-out NLLs differ by at most %.2g (relative, pair %d: %.8g against %.8g)",
			tc.name, bq, lambdas[bq/len(mus)], mus[bq%len(mus)], bk, bl, margin, worst, wp, qn[wp], lbfgs[wp])
		if bq != bl || bk != bl {
			t.Errorf("%s: Newton–CG chose pair %d, kept-history L-BFGS pair %d, L-BFGS pair %d", tc.name, bq, bk, bl)
		}
		if worst > 1e-3 {
			t.Errorf("%s: held-out NLLs of the two paths differ by %.2g (relative)", tc.name, worst)
		}
		if err := d.Fit(s); err != nil {
			t.Fatal(err)
		}
		if d.Lambda != lambdas[bl/len(mus)] || d.Mu != mus[bl%len(mus)] {
			t.Errorf("%s: Fit chose λ = %v, μ = %v, the reference pair %d", tc.name, d.Lambda, d.Mu, bl)
		}
		fixed := &Dirichlet{Lambda: d.Lambda, Mu: d.Mu}
		if err := fixed.Fit(s); err != nil {
			t.Fatal(err)
		}
		var dx float64
		for i, v := range fixed.Params() {
			dx = max(dx, math.Abs(v-d.Params()[i]))
		}
		fa, ff := d.LastFit().Objective, fixed.LastFit().Objective
		t.Logf("%s: final fit %d steps (%s); the fixed fit %d L-BFGS iterations; objectives differ by %.2g (relative), parameters by %.2g",
			tc.name, d.LastFit().Iterations, d.LastFit().Stop, fixed.LastFit().Iterations, math.Abs(fa-ff)/ff, dx)
		if !d.LastFit().Converged || math.Abs(fa-ff) > 1e-10*ff || dx > 1e-3 {
			t.Errorf("%s: the cross-validated fit (objective %v) differs from the fit with the chosen λ and μ fixed (%v): parameters by %.2g",
				tc.name, fa, ff, dx)
		}
	}
}

// TestDirichletCVNewtonCGThreads checks that the cross-validation beyond
// DirichletNewtonMaxClasses classes gives the same held-out NLLs and the
// same final parameters, to the bit, with 1, 2 or 4 threads, on a set
// whose training folds are several row blocks.
func TestDirichletCVNewtonCGThreads(t *testing.T) {
	tc := dirichletQNCase{"1,100 × 34", 1100, 34, 3, 3, []float64{0, 1}, []float64{1e-2, 1e2}}
	var want, wantParams []float64
	for _, procs := range []int{1, 2, 4} {
		s, d := tc.setUp()
		ls := logProbSet(s)
		if blocks := rowSumsBlocks(ls.Len() * (tc.folds - 1) / tc.folds); blocks < 2 {
			t.Fatalf("training folds of %d row block(s): the test cannot tell", blocks)
		}
		lambdas, mus := d.grids(tc.c)
		prev := runtime.GOMAXPROCS(procs)
		got, _, _, err := d.heldOut(ls, tc.folds, lambdas, mus, dirichletCVSolverFor(tc.c))
		if err == nil {
			err = d.Fit(s)
		}
		runtime.GOMAXPROCS(prev)
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want, wantParams = got, d.Params()
			continue
		}
		if !equalFloats(got, want) {
			t.Errorf("GOMAXPROCS %d: held-out NLLs %v differ from GOMAXPROCS 1's %v", procs, got, want)
		}
		if !equalFloats(d.Params(), wantParams) {
			t.Errorf("GOMAXPROCS %d: the cross-validated fit's parameters differ from GOMAXPROCS 1's", procs)
		}
	}
}
