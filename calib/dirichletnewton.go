package calib

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/mat"
)

// Newton's method for the cross-validation of Dirichlet calibration.
//
// The cross-validation fits every pair (λ, μ) of a grid on every fold.
// L-BFGS restarts with an empty history at each pair, so a warm start
// from a neighbouring pair's optimum saves little: each fit costs as much
// as a fit from the identity. Newton's method with the analytic Hessian of
// matrix scaling converges in a few steps from a nearby start, and a
// Hessian computed at one pair (or fold) serves as the curvature of the
// next (a chord step: the NLL's curvature changes little between
// neighbouring optima, the penalty's is exact), until a step shows that it
// no longer does.

// DirichletNewtonMaxClasses is the most classes for which the
// cross-validation of a Dirichlet fit uses Newton's method with the
// analytic Hessian (of (C² + C)² values, whose cost grows as C⁴ against a
// gradient's C²); beyond it the grid fits run Newton–CG with exact
// Hessian-vector products (dirichletNewtonCG), warm-started as Newton's
// method is (crossValidateWarm). dirichletCVSolverFor decides. Measured
// in process, the grid fits of both against a fixed fit: at 5,000 × 10
// Newton 2.5×, Newton–CG 4.0×; at 1,000 × 12 8.0× and 6.6×; at
// 2,000 × 16 4.9× and 2.7×; at 2,000 × 20 9.0× and 3.3×; at 1,000 × 32
// 34× and 2.3× (docs/CALIBRATION.md).
const DirichletNewtonMaxClasses = 12

// matrixHessian writes into h (n×n, n = C² + C, row-major) the Hessian of
// the mean NLL of softmax(Az + b) on s at x = [A, b] (matrixNLL's
// objective), summing the rows by r. Writing x̃ = [z, 1] and p the
// softmax, the Hessian is the mean over rows of (diag(p) − ppᵀ) ⊗ x̃x̃ᵀ in
// the parameters ordered (class, feature); parameter (i, k) is A_ik at
// i·C + k for k < C and b_i at C² + i for k = C. Each row adds the
// C(C+1)/2 distinct weights of diag(p) − ppᵀ times the (C+1)(C+2)/2
// distinct products of x̃x̃ᵀ; the rows are summed in rowSums' fixed blocks
// (each block's accumulator holds those C(C+1)(C+1)(C+2)/4 sums: 38 MB
// in all at 32 classes), so h is the same to the bit whatever the number
// of threads.
func matrixHessian(h, x []float64, s *Set, r *rowSums) {
	c := s.Classes
	cc := c * c
	a, b := x[:cc], x[cc:]
	nw, nx := c*(c+1)/2, (c+1)*(c+2)/2
	if r == nil {
		r = newRowSums(s.Len())
	}
	m := make([]float64, nw*nx) // m[pair(i,j)*nx + pair(k,l)], i ≤ j, k ≤ l
	r.sum(m, func(lo, hi int, acc []float64) float64 {
		zh := make([]float64, c)
		p := make([]float64, c)
		// A batch of rows' weights and products, added into acc by one
		// matrix product acc += wᵀ·xx.
		w := make([]float64, hessianBatch*nw)
		xx := make([]float64, hessianBatch*nx)
		for start := lo; start < hi; start += hessianBatch {
			rows := min(hessianBatch, hi-start)
			for t := range rows {
				z := s.Logits[(start+t)*c : (start+t+1)*c]
				matrixLogits(zh, a, b, z)
				m := slices.Max(zh)
				var sum float64
				for j, v := range zh {
					p[j] = math.Exp(v - m)
					sum += p[j]
				}
				for j := range p {
					p[j] /= sum
				}
				wt := w[t*nw : (t+1)*nw]
				q := 0
				for i, pi := range p {
					wt[q] = pi - pi*pi
					q++
					for _, pj := range p[i+1:] {
						wt[q] = -pi * pj
						q++
					}
				}
				xt := xx[t*nx : (t+1)*nx]
				q = 0
				for k, xk := range z {
					for _, xl := range z[k:] {
						xt[q] = xk * xl
						q++
					}
					xt[q] = xk // x̃_C = 1
					q++
				}
				xt[q] = 1
			}
			blas64.Gemm(blas.Trans, blas.NoTrans, 1,
				blas64.General{Rows: rows, Cols: nw, Stride: nw, Data: w[:rows*nw]},
				blas64.General{Rows: rows, Cols: nx, Stride: nx, Data: xx[:rows*nx]},
				1, blas64.General{Rows: nw, Cols: nx, Stride: nx, Data: acc})
		}
		return 0
	})
	// Expand the distinct entries: H[(i,k),(j,l)] = m[pair(i,j), pair(k,l)]
	// with each pair ordered low, high.
	n := cc + c
	idx := func(i, k int) int {
		if k == c {
			return cc + i
		}
		return i*c + k
	}
	inv := 1 / float64(s.Len())
	pw := 0
	for i := range c {
		for j := i; j < c; j++ {
			px := 0
			for k := 0; k <= c; k++ {
				for l := k; l <= c; l++ {
					v := m[pw*nx+px] * inv
					px++
					h[idx(i, k)*n+idx(j, l)] = v
					h[idx(j, l)*n+idx(i, k)] = v
					h[idx(i, l)*n+idx(j, k)] = v
					h[idx(j, k)*n+idx(i, l)] = v
				}
			}
			pw++
		}
	}
}

// hessianBatch is the number of rows matrixHessian adds into its sum by
// one matrix product.
const hessianBatch = 32

// dirichletFree returns, for each free parameter of variant v on c
// classes, the indices of the full parameters [W, b] it sets (see
// dirichletExpand).
func dirichletFree(v string, c int) [][]int {
	cc := c * c
	switch v {
	case DirichletDiag:
		u := make([][]int, 2*c)
		for j := range c {
			u[j] = []int{j*c + j}
			u[c+j] = []int{cc + j}
		}
		return u
	case DirichletFixDiag:
		d := make([]int, c)
		for j := range c {
			d[j] = j*c + j
		}
		return [][]int{d}
	}
	u := make([][]int, cc+c)
	for i := range u {
		u[i] = []int{i}
	}
	return u
}

// dirichletProblem is dirichletFit's objective in the free parameters of
// a variant as the warm-started fits of a cross-validation see it
// (Newton's method, dirichletNewton; Newton–CG, dirichletNewtonCG; L-BFGS
// with a kept history, dirichletQN): the variant, its free parameters, the prior and the
// stopping rule.
type dirichletProblem struct {
	v       string
	c, nu   int
	free    [][]int
	tol     float64
	prior   float64 // the prior precision (FitOptions.Prior, 0 → DefaultPrior); < 0: none
	maxIter int
	// probs, when not nil, receives each row's softmax at the last
	// evaluation of the objective (s.Len()×C; Newton–CG's Hessian-vector
	// products at the current point).
	probs []float64
	// evaluations counts the objective's evaluations, for the tests.
	evaluations int
}

// newDirichletProblem returns the problem of variant v on c classes, to
// the gradient tolerance and within the iterations of o.
func newDirichletProblem(v string, c int, o FitOptions) dirichletProblem {
	free := dirichletFree(v, c)
	prior := o.Prior
	if prior == 0 {
		prior = DefaultPrior
	}
	return dirichletProblem{v: v, c: c, nu: len(free), free: free, tol: o.gradientTol(), prior: prior, maxIter: o.maxIterations()}
}

// objective returns dirichletFit's objective on the log-probability set
// ls with ODIR weights lambda and mu, in the free parameters, with the
// prior of withPrior, summing the rows by r; it counts its evaluations.
func (d *dirichletProblem) objective(ls *Set, lambda, mu float64, r *rowSums) lossGrad {
	c := d.c
	full := make([]float64, c*c+c)
	gfull := make([]float64, c*c+c)
	identity := dirichletReduce(NewMatrix(c).Params(), d.v, c)
	kp := d.priorWeight(ls.Len())
	return func(g, u []float64) float64 {
		d.evaluations++
		dirichletExpand(full, u, d.v, c)
		val := dirichletLoss(gfull, full, ls, lambda, mu, r, d.probs)
		dirichletProject(g, gfull, d.v, c)
		for i, id := range identity {
			e := u[i] - id
			val += kp * e * e / 2
			g[i] += kp * e
		}
		return val
	}
}

// finish ends a warm-started fit that stalled after iterations steps of
// method with dirichletFit's L-BFGS from its best point u, and returns
// the free parameters and the report of both.
func (d *dirichletProblem) finish(ls *Set, u []float64, lambda, mu float64, iterations int, method string) ([]float64, FitReport, error) {
	x := make([]float64, d.c*d.c+d.c)
	dirichletExpand(x, u, d.v, d.c)
	x, rep, err := dirichletFit(ls, x, d.v, lambda, mu, FitOptions{GradientTol: d.tol, MaxIterations: max(1, d.maxIter-iterations), Prior: d.prior})
	rep.Stop = fmt.Sprintf("%d %s, then %s", iterations, method, rep.Stop)
	rep.Iterations += iterations
	rep.MaxIterations = d.maxIter
	if err != nil {
		return nil, rep, err
	}
	return dirichletReduce(x, d.v, d.c), rep, nil
}

// dirichletNewton fits dirichletFit's objective by Newton's method (see
// DirichletNewtonMaxClasses): the grid pairs of one cross-validation, on
// one training set at a time, and the final fit after it. It keeps the
// last Hessian of the mean NLL in the free parameters, to take chord
// steps at the next pair or fold. It is not safe for concurrent use.
type dirichletNewton struct {
	dirichletProblem

	hfull []float64 // full Hessian of the mean NLL, (C²+C)²
	hnll  []float64 // the NLL's Hessian in the free parameters, nu×nu
	have  bool      // hnll holds a Hessian
	// Counts of the work done, for the tests.
	hessians, steps int
}

// newDirichletNewton returns the Newton fitter of variant v on c classes,
// to the gradient tolerance and within the iterations of o.
func newDirichletNewton(v string, c int, o FitOptions) *dirichletNewton {
	p := newDirichletProblem(v, c, o)
	n := c*c + c
	return &dirichletNewton{dirichletProblem: p, hfull: make([]float64, n*n), hnll: make([]float64, p.nu*p.nu)}
}

// refit returns the fitter of the final fit under o: a fresh Newton
// fitter, whose first step computes the Hessian at its start.
func (d *dirichletNewton) refit(o FitOptions) dirichletWarmFitter {
	return newDirichletNewton(d.v, d.c, o)
}

// dirichletNewtonMaxSteps caps the steps of one dirichletNewton fit;
// beyond it (or when a step fails) the fit goes on with L-BFGS.
const dirichletNewtonMaxSteps = 50

// dirichletNewtonRefresh is the gradient reduction a chord step must
// achieve (the new infinity norm at most this fraction of the old) for
// the next step to keep the Hessian; otherwise the next step computes a
// fresh one.
const dirichletNewtonRefresh = 0.3

// fitStart is where a fit of a dirichletProblem starts (start).
type fitStart struct {
	r    *rowSums  // the objective's row sums, reused by the fit
	obj  lossGrad  // the objective at (λ, μ) over the rows
	pen  []float64 // the penalty's diagonal (penalty)
	u, g []float64 // a copy of the starting point and the gradient there
	f    float64   // the objective there
}

// start evaluates the objective at (λ, μ) over ls at a copy of u0, for a
// fit that starts there; it fails where the objective is not finite.
func (d *dirichletProblem) start(ls *Set, u0 []float64, lambda, mu float64) (fitStart, error) {
	n := ls.Len()
	st := fitStart{r: newRowSums(n), pen: d.penalty(lambda, mu, n), u: slices.Clone(u0), g: make([]float64, d.nu)}
	st.obj = d.objective(ls, lambda, mu, st.r)
	st.f = st.obj(st.g, st.u)
	if math.IsNaN(st.f) || math.IsInf(st.f, 0) {
		return st, errAtStart(st.f)
	}
	return st, nil
}

// penalty returns the diagonal Hessian, in the free parameters, of the
// ODIR penalty of lambda and mu and of the prior over n rows. Every free
// parameter the penalty weighs sets one full parameter (the diagonal of
// W, which fixdiag ties, is not penalised), so the penalty's gradient is
// (penalty − prior) ⊙ u.
func (d *dirichletProblem) penalty(lambda, mu float64, n int) []float64 {
	c := d.c
	pen := make([]float64, d.nu)
	kw, kb := lambda/float64(c*(c-1)), mu/float64(c)
	kp := d.priorWeight(n)
	for a, ids := range d.free {
		for _, i := range ids {
			switch {
			case i >= c*c:
				pen[a] += 2 * kb
			case i/c != i%c:
				pen[a] += 2 * kw
			}
		}
		pen[a] += kp
	}
	return pen
}

// priorWeight returns the weight of the prior over n rows (withPrior).
func (d *dirichletProblem) priorWeight(n int) float64 {
	if d.prior > 0 {
		return d.prior / float64(n)
	}
	return 0
}

// factor factorises the last Hessian of the NLL plus the diagonal pen
// into ch, shifted as newtonStep shifts, and reports whether it could.
func (d *dirichletNewton) factor(ch *mat.Cholesky, pen []float64) bool {
	nu := d.nu
	h := mat.NewSymDense(nu, nil)
	scale := 1e-300
	for a := range nu {
		scale = max(scale, math.Abs(d.hnll[a*nu+a]+pen[a]))
	}
	for _, delta := range []float64{0, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2, 1} {
		for a := range nu {
			for b := a; b < nu; b++ {
				v := d.hnll[a*nu+b]
				if a == b {
					v += pen[a] + delta*scale
				}
				h.SetSym(a, b, v)
			}
		}
		if ch.Factorize(h) {
			return true
		}
	}
	return false
}

// solve writes into step the solution of ch·step = rhs and reports
// whether it is finite.
func solve(step []float64, ch *mat.Cholesky, rhs []float64) bool {
	var sv mat.VecDense
	if err := ch.SolveVecTo(&sv, mat.NewVecDense(len(rhs), slices.Clone(rhs))); err != nil {
		return false
	}
	copy(step, sv.RawVector().Data)
	return checkFinite("step", step) == nil
}

// predict returns, for each free parameter vector us[f] at the optimum of
// the ODIR weights (lambda0, mu0) on a training set of n rows, the chord
// prediction of the optimum at (lambda, mu): one Newton step on the last
// Hessian, whose gradient at us[f] is the change of the penalty's,
// (penalty(lambda, mu) − penalty(lambda0, mu0)) ⊙ us[f], no row visited.
// It returns nil without a Hessian or when the factorisation fails.
func (d *dirichletNewton) predict(us [][]float64, lambda0, mu0, lambda, mu float64, n int) [][]float64 {
	if !d.have {
		return nil
	}
	pen0, pen := d.penalty(lambda0, mu0, n), d.penalty(lambda, mu, n)
	var ch mat.Cholesky
	if !d.factor(&ch, pen) {
		return nil
	}
	out := make([][]float64, len(us))
	rhs, step := make([]float64, d.nu), make([]float64, d.nu)
	for f, u := range us {
		for a, v := range u {
			rhs[a] = (pen[a] - pen0[a]) * v
		}
		if !solve(step, &ch, rhs) {
			return nil
		}
		out[f] = make([]float64, d.nu)
		for a, v := range u {
			out[f][a] = v - step[a]
		}
	}
	return out
}

// fit minimises dirichletFit's objective on the log-probability set ls
// with ODIR weights lambda and mu from the free parameters u0, and
// returns the free parameters at which the gradient's infinity norm is
// at most the tolerance, and the report of the fit (its Iterations the
// Newton steps). When Newton's method stalls (a step that does not lower
// the objective, or dirichletNewtonMaxSteps steps) it finishes with
// dirichletFit's L-BFGS from its best point.
func (d *dirichletNewton) fit(ls *Set, u0 []float64, lambda, mu float64) ([]float64, FitReport, error) {
	c, nu := d.c, d.nu
	rep := FitReport{MaxIterations: d.maxIter, Tolerance: d.tol}
	full := make([]float64, c*c+c)
	st, err := d.start(ls, u0, lambda, mu)
	if err != nil {
		return nil, rep, err
	}
	r, obj, pen, u, g, f := st.r, st.obj, st.pen, st.u, st.g, st.f
	un, gn := make([]float64, nu), make([]float64, nu)
	step := make([]float64, nu)
	var ch mat.Cholesky
	factored := false // ch holds hnll + pen
	fresh := !d.have
	ok := true
	for infNorm(g) > d.tol {
		if rep.Iterations == dirichletNewtonMaxSteps || rep.Iterations == d.maxIter {
			ok = false
			break
		}
		if fresh {
			dirichletExpand(full, u, d.v, c)
			d.hessian(ls, full, r)
			factored = false
		}
		if !factored {
			if !d.factor(&ch, pen) {
				ok = false
				break
			}
			factored = true
		}
		if !solve(step, &ch, g) {
			ok = false
			break
		}
		rep.Iterations++
		d.steps++
		// Backtrack until the objective does not rise (by more than its
		// rounding: a converging step changes it by ≈ g·step, which can be
		// below one ulp).
		var slope float64
		for a, s := range step {
			slope += g[a] * s
		}
		fn, t, accepted := backtrack(obj, u, step, un, gn, f, slope)
		if accepted {
			rate := infNorm(gn) / infNorm(g)
			copy(u, un)
			copy(g, gn)
			f = fn
			// A chord step on a stale Hessian that reduces the gradient
			// little, or a shortened step, asks for a fresh Hessian.
			fresh = t < 1 || (rate > dirichletNewtonRefresh && !fresh)
		}
		if !accepted {
			if !fresh {
				fresh = true // retry once with the Hessian at u
				continue
			}
			ok = false
			break
		}
	}
	if ok {
		rep.Objective, rep.Gradient, rep.Converged = f, infNorm(g), true
		rep.Stop = "gradient below tolerance"
		return u, rep, nil
	}
	// Newton's method stalled: finish with L-BFGS from its best point.
	d.have = false
	return d.finish(ls, u, lambda, mu, rep.Iterations, "Newton step(s)")
}

// hessian computes the Hessian of the mean NLL at the full parameters x
// on ls into d.hnll, in the free parameters.
func (d *dirichletNewton) hessian(ls *Set, x []float64, r *rowSums) {
	d.hessians++
	matrixHessian(d.hfull, x, ls, r)
	n := d.c*d.c + d.c
	for a, ia := range d.free {
		for b, ib := range d.free {
			var v float64
			for _, i := range ia {
				for _, j := range ib {
					v += d.hfull[i*n+j]
				}
			}
			d.hnll[a*d.nu+b] = v
		}
	}
	d.have = true
}

// backtrack searches along −d from u for the Dirichlet solvers (Newton,
// Newton–CG, the kept-history L-BFGS): it tries u − t·d for t = 1, ½, ¼,
// … while t > 1e-10 and stops at the first point whose objective obj
// (which writes its gradient into gn) is at most f − 1e-4·t·slope, or
// above it by no more than its rounding (4e-16·|f|: a converging step
// changes f by about t·slope, which can be below one ulp). It leaves that
// point in un and its gradient in gn, and returns its objective, t and
// whether a point was accepted.
func backtrack(obj func(g, u []float64) float64, u, d, un, gn []float64, f, slope float64) (fn, t float64, ok bool) {
	for t = 1.0; t > 1e-10; t /= 2 {
		for a := range un {
			un[a] = u[a] - t*d[a]
		}
		if fn = obj(gn, un); fn <= f-1e-4*t*slope+4e-16*math.Abs(f) {
			return fn, t, true
		}
	}
	return fn, t, false
}
