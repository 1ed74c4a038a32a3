package calib

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// dirBenchSet returns n rows of c-class logits drawn as
// bench/dirichlet_peer.py's gen draws them: z = 2·N(0, 1), plus 5 on the
// label 80 % of the time and on a uniform class otherwise; the label
// uniform.
func dirBenchSet(rng *rand.Rand, n, c int) *Set {
	s := &Set{Logits: make([]float64, n*c), Labels: make([]int, n), Classes: c}
	for i := range n {
		y := rng.IntN(c)
		s.Labels[i] = y
		z := s.Row(i)
		for j := range z {
			z[j] = float64(float32(2 * rng.NormFloat64()))
		}
		k := y
		if rng.Float64() >= 0.8 {
			k = rng.IntN(c)
		}
		z[k] += 5
	}
	return s
}

// TestMatrixHessian checks matrixHessian against central differences of
// the analytic gradient (matrixNLL) at a point away from the identity,
// for several class counts and on a set of more than one row block.
func TestMatrixHessian(t *testing.T) {
	for _, tc := range []struct{ n, c int }{{7, 2}, {50, 3}, {600, 5}} {
		rng := rand.New(rand.NewPCG(uint64(tc.n), 7))
		s := logProbSet(dirBenchSet(rng, tc.n, tc.c))
		np := tc.c*tc.c + tc.c
		x := NewMatrix(tc.c).Params()
		for i := range x {
			x[i] += 0.3 * rng.NormFloat64()
		}
		h := make([]float64, np*np)
		matrixHessian(h, x, s, nil)
		gp, gm := make([]float64, np), make([]float64, np)
		xt := slices.Clone(x)
		var worst float64
		for j := range np {
			const d = 1e-5
			xt[j] = x[j] + d
			matrixNLL(gp, xt, s, nil)
			xt[j] = x[j] - d
			matrixNLL(gm, xt, s, nil)
			xt[j] = x[j]
			for i := range np {
				fd := (gp[i] - gm[i]) / (2 * d)
				if e := math.Abs(fd-h[i*np+j]) / (1 + math.Abs(fd)); e > worst {
					worst = e
				}
				if h[i*np+j] != h[j*np+i] {
					t.Fatalf("C = %d: H[%d,%d] = %v ≠ H[%d,%d] = %v", tc.c, i, j, h[i*np+j], j, i, h[j*np+i])
				}
			}
		}
		t.Logf("%d rows, C = %d: largest difference from central differences %.2g", tc.n, tc.c, worst)
		if worst > 1e-6 {
			t.Errorf("%d rows, C = %d: Hessian differs from central differences of the gradient by %.2g", tc.n, tc.c, worst)
		}
	}
}

// dirichletSolver is a fitter of the Dirichlet objective that the
// cross-validation uses (dirichletNewton up to DirichletNewtonMaxClasses
// classes, dirichletQN above), with a check of its own on a fit from the
// identity.
type dirichletSolver struct {
	name  string
	c     int
	seed  uint64
	fit   func(v string, c int) func(ls *Set, u0 []float64, lambda, mu float64) ([]float64, FitReport, error)
	check func(t *testing.T, fit func(ls *Set, u0 []float64, lambda, mu float64) ([]float64, FitReport, error), s *Set, u []float64, reg ODIR, rep FitReport)
}

// TestDirichletSolversMatchLBFGS checks each cross-validation solver
// against dirichletFit's L-BFGS, both from the identity to
// DefaultGradientTol: the same optimum of the same objective, for every
// variant and for weak and strong regularisation. Newton takes at most 15
// steps from the identity; the kept-history L-BFGS (the full variant
// through the Kronecker model, the others through the diagonal) takes
// none in a second fit from the first's optimum, with the history kept;
// Newton–CG (the same preconditioners) at most 30 Newton steps from the
// identity and none from the optimum.
func TestDirichletSolversMatchLBFGS(t *testing.T) {
	o := FitOptions{}
	for _, sv := range []dirichletSolver{
		{
			name: "Newton", c: 4, seed: 5,
			fit: func(v string, c int) func(*Set, []float64, float64, float64) ([]float64, FitReport, error) {
				return newDirichletNewton(v, c, o).fit
			},
			check: func(t *testing.T, _ func(*Set, []float64, float64, float64) ([]float64, FitReport, error), _ *Set, _ []float64, reg ODIR, rep FitReport) {
				if rep.Iterations > 15 {
					t.Errorf("%+v: Newton took %d steps from the identity, want at most 15", reg, rep.Iterations)
				}
			},
		},
		{
			name: "kept-history L-BFGS", c: 5, seed: 6,
			fit: func(v string, c int) func(*Set, []float64, float64, float64) ([]float64, FitReport, error) {
				return newDirichletQN(v, c, o).fit
			},
			check: func(t *testing.T, fit func(*Set, []float64, float64, float64) ([]float64, FitReport, error), s *Set, u []float64, reg ODIR, _ FitReport) {
				if _, again, err := fit(s, u, reg.Lambda, reg.Mu); err != nil || again.Iterations != 0 {
					t.Errorf("%+v: a fit from the optimum took %d steps (%v)", reg, again.Iterations, err)
				}
			},
		},
		{
			name: "Newton–CG", c: 6, seed: 7,
			fit: func(v string, c int) func(*Set, []float64, float64, float64) ([]float64, FitReport, error) {
				return newDirichletNewtonCG(v, c, o).fit
			},
			check: func(t *testing.T, fit func(*Set, []float64, float64, float64) ([]float64, FitReport, error), s *Set, u []float64, reg ODIR, rep FitReport) {
				if rep.Iterations > 30 {
					t.Errorf("%+v: Newton–CG took %d steps from the identity, want at most 30", reg, rep.Iterations)
				}
				if _, again, err := fit(s, u, reg.Lambda, reg.Mu); err != nil || again.Iterations != 0 {
					t.Errorf("%+v: a fit from the optimum took %d steps (%v)", reg, again.Iterations, err)
				}
			},
		},
	} {
		t.Run(sv.name, func(t *testing.T) {
			c := sv.c
			s := logProbSet(dirBenchSet(rand.New(rand.NewPCG(5, sv.seed)), 700, c))
			for _, v := range DirichletVariants() {
				for _, reg := range []ODIR{{0, 0}, {1e-2 * float64(c*(c-1)), 1e-2 * float64(c)}, {100 * float64(c*(c-1)), 0}, {0, 100 * float64(c)}} {
					x, rep, err := dirichletFit(s, NewMatrix(c).Params(), v, reg.Lambda, reg.Mu, o)
					if err != nil || !rep.Converged {
						t.Fatalf("%s %+v: L-BFGS %v, %+v", v, reg, err, rep)
					}
					fit := sv.fit(v, c)
					u, srep, err := fit(s, dirichletReduce(NewMatrix(c).Params(), v, c), reg.Lambda, reg.Mu)
					if err != nil || !srep.Converged {
						t.Fatalf("%s %+v: %v, %+v", v, reg, err, srep)
					}
					xs := make([]float64, len(x))
					dirichletExpand(xs, u, v, c)
					var dx float64
					for i := range x {
						dx = max(dx, math.Abs(x[i]-xs[i]))
					}
					rel := math.Abs(srep.Objective-rep.Objective) / rep.Objective
					t.Logf("%s %+v: L-BFGS %d iterations, %s %d (%s); objectives differ by %.2g (relative), parameters by %.2g",
						v, reg, rep.Iterations, sv.name, srep.Iterations, srep.Stop, rel, dx)
					if rel > 1e-10 || dx > 1e-4 {
						t.Errorf("%s %+v: the optimum %v differs from L-BFGS's %v: objective by %.2g relative, parameters by %.2g",
							v, reg, srep.Objective, rep.Objective, rel, dx)
					}
					sv.check(t, fit, s, u, reg, srep)
				}
			}
		})
	}
}

// TestDirichletCVNewtonChoosesAsLBFGS checks that the cross-validation by
// Newton's method ranks the grid as the one by L-BFGS (crossValidateLBFGS,
// the path before it and the one of many classes): the same pair, and
// every pair's held-out NLL within what L-BFGS's looser stop (a gradient
// of DirichletCVGradientTol) leaves.
func TestDirichletCVNewtonChoosesAsLBFGS(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *Set
		d    *Dirichlet
	}{
		{"overconfident 400×4", scOverconfident(rand.New(rand.NewPCG(11, 11)), 400, 4, 4, 2), &Dirichlet{Seed: 3}},
		{"bench-like 900×6", dirBenchSet(rand.New(rand.NewPCG(6, 6)), 900, 6), &Dirichlet{Seed: 1}},
		{"bench-like 600×3, diag", dirBenchSet(rand.New(rand.NewPCG(7, 7)), 600, 3), &Dirichlet{Seed: 2, Variant: DirichletDiag}},
		{"overconfident 300×5, 3 folds, own grids", scOverconfident(rand.New(rand.NewPCG(8, 8)), 300, 5, 3, 1.5),
			&Dirichlet{Seed: 4, LambdaGrid: []float64{0, 0.5, 5, 50}, MuGrid: []float64{0, 0.05, 5}}},
	} {
		ls := logProbSet(tc.s)
		lambdas, mus := tc.d.grids(tc.s.Classes)
		folds := 5
		if tc.d.LambdaGrid != nil {
			folds = 3
		}
		newton, _, _, err := tc.d.heldOut(ls, folds, lambdas, mus, dirichletCVNewton)
		if err != nil {
			t.Fatal(err)
		}
		lbfgs, err := tc.d.heldOutLBFGS(ls, folds, lambdas, mus)
		if err != nil {
			t.Fatal(err)
		}
		var worst float64
		for p := range newton {
			worst = max(worst, math.Abs(newton[p]-lbfgs[p])/lbfgs[p])
		}
		bn, bl := bestPair(newton), bestPair(lbfgs)
		t.Logf("%s: Newton chose pair %d (λ %g, μ %g), L-BFGS pair %d; held-out NLLs differ by at most %.2g (relative)",
			tc.name, bn, lambdas[bn/len(mus)], mus[bn%len(mus)], bl, worst)
		if bn != bl {
			t.Errorf("%s: Newton chose pair %d, L-BFGS pair %d", tc.name, bn, bl)
		}
		if worst > 1e-4 {
			t.Errorf("%s: held-out NLLs of the two paths differ by %.2g (relative)", tc.name, worst)
		}
	}
}

// TestDirichletCVNewtonThreads checks that the Newton cross-validation's
// held-out NLLs are the same to the bit with 1, 2 or 4 threads, on a set
// of several row blocks.
func TestDirichletCVNewtonThreads(t *testing.T) {
	s := logProbSet(dirBenchSet(rand.New(rand.NewPCG(9, 9)), 3000, 5))
	d := &Dirichlet{Seed: 7}
	lambdas, mus := d.grids(5)
	var want []float64
	for _, procs := range []int{1, 2, 4} {
		prev := runtime.GOMAXPROCS(procs)
		got, _, _, err := d.heldOut(s, 5, lambdas, mus, dirichletCVNewton)
		runtime.GOMAXPROCS(prev)
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want = got
			continue
		}
		if !equalFloats(got, want) {
			t.Errorf("GOMAXPROCS %d: held-out NLLs %v differ from GOMAXPROCS 1's %v", procs, got, want)
		}
	}
}
