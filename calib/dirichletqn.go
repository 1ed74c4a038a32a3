package calib

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
)

// L-BFGS with a kept history for the cross-validation of Dirichlet
// calibration beyond DirichletNewtonMaxClasses classes: the path before
// Newton–CG (dirichletncg.go), whose preconditioner is this file's model
// (the Kronecker factors or the diagonal, with kept pairs of curvature on
// top) and whose prediction of the next pair's optimum is this file's;
// the L-BFGS fit itself is kept as the tests' second method.
//
// There the Hessian ((C² + C)² values) is too large to form, but what
// makes the Newton path cheap still holds: neighbouring grid pairs and
// folds that share most of their rows have nearly the same curvature. A
// plain L-BFGS fit restarts with an empty history at each pair, and pays
// for rebuilding it; dirichletQN keeps its history of steps from one fit
// to the next. The penalty and the prior are quadratic with a diagonal
// Hessian known exactly (dirichletProblem.penalty), so a pair of the
// history stores the step s and the change y of the NLL's gradient alone,
// and a fit with penalty diagonal P uses the pair (s, y + P⊙s): exact for
// the penalty of the pair being fitted, whichever pair the step was taken
// at. The two-loop recursion starts from an inverse Hessian that knows the
// problem's ill-conditioning (the NLL is flat along C + 1 directions, and
// the log-probabilities are strongly correlated features): for the full
// variant the inverse of a Kronecker-factored model A ⊗ B + I ⊗ diag(P̄)
// (kfac: A the mean of diag(p) − ppᵀ, B the mean of x̃x̃ᵀ, one pass over
// the rows at each fit's start, inverted exactly through two small
// eigendecompositions); for diag and fixdiag the inverse of the diagonal
// of the NLL's Hessian plus P, exact on the NLL's null space
// (dirichletNull). The Kronecker model cuts the steps of a fit about
// fourfold against the diagonal one (at 1,000 × 40: 132 steps against 471
// for the first grid fit; 7,207 for all 125).

// dirichletQNMemory is the number of steps dirichletQN keeps.
const dirichletQNMemory = 20

// dirichletQN fits dirichletFit's objective by L-BFGS keeping its history
// across fits (see dirichletQNMemory): the grid pairs of one
// cross-validation above DirichletNewtonMaxClasses classes, one training
// set at a time, and the final fit after it. It is not safe for
// concurrent use.
type dirichletQN struct {
	dirichletProblem

	s, y [][]float64 // the kept steps and changes of the NLL's gradient, oldest first
	h    []float64   // the diagonal of the NLL's Hessian at the last fit's start
	// null and single are dirichletNull's groups and parameters in none.
	null   [][]int
	single []int
	// kf is the Kronecker model of the full variant (nil: the diagonal);
	// ka, kb its factors at the last fit's start.
	kf     *kfac
	ka, kb []float64
	// wdiag, when not nil, is the Cholesky factor of the objective's
	// Hessian block of W's diagonal, whose inverse initial adds to the
	// Kronecker model's (dirichletNewtonCG); wbuf its work.
	wdiag *mat.Cholesky
	wbuf  []float64
	// Work of the current penalty: y + P⊙s, 1/(s·(y + P⊙s)) and the
	// two-loop recursion's coefficients.
	yp         [][]float64
	rho, alpha []float64
	hfull      []float64
	fitted     bool // a fit has set h or kf
	// memory is the number of pairs kept (dirichletQNMemory).
	memory int
	// steps counts the L-BFGS steps taken, for the tests.
	steps int
}

// newDirichletQN returns the fitter of variant v on c classes, to the
// gradient tolerance and within the iterations of o, with no history.
func newDirichletQN(v string, c int, o FitOptions) *dirichletQN {
	null, single := dirichletNull(v, c)
	return &dirichletQN{dirichletProblem: newDirichletProblem(v, c, o), hfull: make([]float64, c*c+c), null: null, single: single, memory: dirichletQNMemory}
}

// refit returns the fitter of the final fit under o, with the history of
// the cross-validation's fits (q itself is not used after it).
func (q *dirichletQN) refit(o FitOptions) dirichletWarmFitter {
	r := q.refitted(o)
	return &r
}

// refitted returns a copy of q for the final fit under o: a problem of its
// own (counting on from q's evaluations) and copies of the kept pairs.
func (q *dirichletQN) refitted(o FitOptions) dirichletQN {
	r := *q
	p := newDirichletProblem(q.v, q.c, o)
	p.evaluations = q.evaluations
	r.dirichletProblem = p
	r.s, r.y = slices.Clone(q.s), slices.Clone(q.y)
	return r
}

// usePenalty prepares the history for the penalty diagonal pen: the
// pairs (s, y + pen⊙s) and their 1/(s·(y + pen⊙s)).
func (q *dirichletQN) usePenalty(pen []float64) {
	k := len(q.s)
	for len(q.yp) < k {
		q.yp = append(q.yp, make([]float64, q.nu))
	}
	q.rho, q.alpha = q.rho[:0], q.alpha[:0]
	for i := range k {
		var sy float64
		for a, s := range q.s[i] {
			q.yp[i][a] = q.y[i][a] + pen[a]*s
			sy += s * q.yp[i][a]
		}
		q.rho = append(q.rho, 1/sy)
		q.alpha = append(q.alpha, 0)
	}
}

// direction writes into d the two-loop recursion's H·g, H the inverse
// Hessian the history and the diagonal h + pen give (usePenalty(pen)
// first).
func (q *dirichletQN) direction(d, g, pen []float64) {
	copy(d, g)
	for i := len(q.s) - 1; i >= 0; i-- {
		q.alpha[i] = q.rho[i] * dot(q.s[i], d)
		floats.AddScaled(d, -q.alpha[i], q.yp[i])
	}
	q.initial(d, pen)
	for i := range q.s {
		beta := q.rho[i] * dot(q.yp[i], d)
		floats.AddScaled(d, q.alpha[i]-beta, q.s[i])
	}
}

// remember keeps the step s with the change y of the NLL's gradient,
// dropping the oldest beyond dirichletQNMemory, when s·(y + pen⊙s) > 0
// (always, the objective being convex and the prior or penalty strictly
// so; a step lost in rounding is not kept).
func (q *dirichletQN) remember(s, y, pen []float64) {
	if q.keep(s, y, pen) {
		q.usePenalty(pen)
	}
}

// keep is remember without preparing the history for pen (usePenalty),
// for several pairs at once; it reports whether it kept the pair.
func (q *dirichletQN) keep(s, y, pen []float64) bool {
	var sy float64
	for a, v := range s {
		sy += v * (y[a] + pen[a]*v)
	}
	if !(sy > 0) || math.IsInf(sy, 0) {
		return false
	}
	var ns, ny []float64
	if len(q.s) >= q.memory {
		ns, ny = q.s[0], q.y[0]
		q.s, q.y = append(q.s[:0], q.s[1:]...), append(q.y[:0], q.y[1:]...)
	} else {
		ns, ny = make([]float64, q.nu), make([]float64, q.nu)
	}
	copy(ns, s)
	copy(ny, y)
	q.s, q.y = append(q.s, ns), append(q.y, ny)
	return true
}

// diagonal sets q.h to the diagonal of the NLL's Hessian at the free
// parameters u on ls, in the free parameters (summed over the full
// parameters each sets: exact for full and diag, the sum of the
// diagonal's entries for fixdiag's one parameter).
func (q *dirichletQN) diagonal(ls *Set, u []float64, r *rowSums) {
	x := make([]float64, q.c*q.c+q.c)
	dirichletExpand(x, u, q.v, q.c)
	matrixHessianDiag(q.hfull, x, ls, r)
	if len(q.h) != q.nu {
		q.h = make([]float64, q.nu)
	}
	for a, ids := range q.free {
		q.h[a] = 0
		for _, i := range ids {
			q.h[a] += q.hfull[i]
		}
	}
}

// predict returns, for each free parameter vector us[f] at the optimum of
// the ODIR weights (lambda0, mu0) on a training set of n rows, the
// predicted optimum at (lambda, mu): dirichletNewton.predict's step, on
// the inverse Hessian of the history. It returns nil before any fit.
func (q *dirichletQN) predict(us [][]float64, lambda0, mu0, lambda, mu float64, n int) [][]float64 {
	if !q.fitted {
		return nil
	}
	pen0, pen := q.penalty(lambda0, mu0, n), q.penalty(lambda, mu, n)
	q.usePenalty(pen)
	if q.ka != nil {
		if q.kf = newKFAC(q.c, q.ka, q.kb, pen); q.kf == nil {
			return nil
		}
	}
	out := make([][]float64, len(us))
	rhs := make([]float64, q.nu)
	for f, u := range us {
		for a, v := range u {
			rhs[a] = (pen[a] - pen0[a]) * v
		}
		out[f] = make([]float64, q.nu)
		q.direction(out[f], rhs, pen)
		for a, v := range u {
			out[f][a] = v - out[f][a]
		}
		if checkFinite("prediction", out[f]) != nil {
			return nil
		}
	}
	return out
}

// fit minimises dirichletFit's objective on the log-probability set ls
// with ODIR weights lambda and mu from the free parameters u0 by L-BFGS
// on the kept history (backtracking from the unit step), and returns the
// free parameters at which the gradient's infinity norm is at most the
// tolerance, and the report of the fit. When a step fails twice (the
// second time with the history dropped) or the iterations run out it
// finishes with dirichletFit's L-BFGS from its best point.
func (q *dirichletQN) fit(ls *Set, u0 []float64, lambda, mu float64) ([]float64, FitReport, error) {
	nu := q.nu
	rep := FitReport{MaxIterations: q.maxIter, Tolerance: q.tol}
	st, err := q.start(ls, u0, lambda, mu)
	if err != nil {
		return nil, rep, err
	}
	r, obj, pen, u, g, f := st.r, st.obj, st.pen, st.u, st.g, st.f
	if q.factors(ls, u, r, pen); q.kf == nil {
		q.diagonal(ls, u, r)
	}
	q.fitted = true
	q.usePenalty(pen)
	un, gn, d := make([]float64, nu), make([]float64, nu), make([]float64, nu)
	s, y := make([]float64, nu), make([]float64, nu)
	ok := true
	for infNorm(g) > q.tol {
		if rep.Iterations == q.maxIter {
			ok = false
			break
		}
		q.direction(d, g, pen)
		slope := dot(g, d)
		accepted := false
		if slope > 0 {
			var fn float64
			if fn, _, accepted = backtrack(obj, u, d, un, gn, f, slope); accepted {
				for a := range s {
					s[a] = un[a] - u[a]
					y[a] = gn[a] - g[a] - pen[a]*s[a]
				}
				copy(u, un)
				copy(g, gn)
				f = fn
			}
		}
		if !accepted {
			if len(q.s) > 0 {
				q.s, q.y = q.s[:0], q.y[:0] // retry once along the diagonal's step
				q.usePenalty(pen)
				continue
			}
			ok = false
			break
		}
		rep.Iterations++
		q.steps++
		q.remember(s, y, pen)
	}
	return q.end(ok, f, g, ls, u, lambda, mu, rep, "L-BFGS step(s) on the kept history")
}

// dot returns a·b (floats.Dot: the same sum whatever the machine's
// number of threads).
func dot(a, b []float64) float64 { return floats.Dot(a, b) }

// errAtStart is the error of a warm-started fit whose objective at its
// start is f, not finite.
func errAtStart(f float64) error {
	return fmt.Errorf("the objective at the starting parameters is %v", f)
}

// matrixHessianDiag writes into h (C² + C values) the diagonal of the
// Hessian of the mean NLL of softmax(Az + b) on s at x = [A, b]
// (matrixHessian's diagonal): the mean over rows of p_i(1 − p_i)·x̃_k²
// for A_ik and p_i(1 − p_i) for b_i, summing the rows by r.
func matrixHessianDiag(h, x []float64, s *Set, r *rowSums) {
	c := s.Classes
	cc := c * c
	a, b := x[:cc], x[cc:]
	r.sum(h, func(lo, hi int, acc []float64) float64 {
		zh := make([]float64, c)
		z2 := make([]float64, c)
		for i := lo; i < hi; i++ {
			z := s.Logits[i*c : (i+1)*c]
			matrixLogits(zh, a, b, z)
			lse := LogSumExp(zh)
			for k, v := range z {
				z2[k] = v * v
			}
			for j, v := range zh {
				p := math.Exp(v - lse)
				w := p - p*p
				if w == 0 {
					continue
				}
				acc[cc+j] += w
				row := acc[j*c : (j+1)*c]
				for k, v := range z2 {
					row[k] += w * v
				}
			}
		}
		return 0
	})
	inv := 1 / float64(s.Len())
	for i := range h {
		h[i] *= inv
	}
}

// end is the exit of the fitters on the kept history (L-BFGS, and
// Newton–CG beyond DirichletNewtonMaxClasses): the parameters u as they
// stand when the gradient g met the tolerance (ok), at objective f; else
// dirichletFit's L-BFGS from u (finish), the kept pairs dropped first.
func (q *dirichletQN) end(ok bool, f float64, g []float64, ls *Set, u []float64, lambda, mu float64, rep FitReport, method string) ([]float64, FitReport, error) {
	if ok {
		rep.Objective, rep.Gradient, rep.Converged = f, infNorm(g), true
		rep.Stop = "gradient below tolerance"
		return u, rep, nil
	}
	q.s, q.y = q.s[:0], q.y[:0]
	return q.finish(ls, u, lambda, mu, rep.Iterations, method)
}

// initial applies the two-loop recursion's initial inverse Hessian to d,
// in place: the Kronecker model's inverse (plus, where wdiag is set, the
// inverse of the Hessian block of W's diagonal on those entries) for the
// full variant; otherwise the inverse of diag(h + pen) on the complement
// of the NLL's null space, and of the penalty's curvature on that null
// space (see dirichletNull).
func (q *dirichletQN) initial(d, pen []float64) {
	if q.kf != nil {
		if q.wdiag == nil {
			q.kf.apply(d)
			return
		}
		c := q.c
		for i := range c {
			q.wbuf[i] = d[i*c+i]
		}
		q.kf.apply(d)
		var sv mat.VecDense
		if err := q.wdiag.SolveVecTo(&sv, mat.NewVecDense(c, q.wbuf)); err == nil {
			for i := range c {
				d[i*c+i] += sv.AtVec(i)
			}
		}
		return
	}
	groups := q.null
	if len(groups) == 0 {
		for a := range d {
			d[a] /= q.h[a] + pen[a]
		}
		return
	}
	// d = P⊥ diag(1/(h+pen)) P⊥ d + N (NᵀPN)⁻¹ Nᵀ d, one group (a null
	// direction: the parameters it moves alike) at a time; the groups
	// are disjoint.
	for _, ids := range groups {
		var sum, psum float64
		for _, a := range ids {
			sum += d[a]
			psum += pen[a]
		}
		mean := sum / float64(len(ids))
		var flat float64
		if psum > 0 {
			flat = sum / psum
		}
		var m float64
		for _, a := range ids {
			d[a] = (d[a] - mean) / (q.h[a] + pen[a])
			m += d[a]
		}
		m /= float64(len(ids))
		for _, a := range ids {
			d[a] += flat - m
		}
	}
	// Parameters in no group.
	for _, a := range q.single {
		d[a] /= q.h[a] + pen[a]
	}
}

// dirichletNull returns the null directions of the NLL of variant v on c
// classes in its free parameters, each as the parameters it moves alike
// (adding the same t to every class's logit leaves softmax unchanged):
// for full, each column k of [W, b] (feature k's weight in every class);
// for diag, the bias; for fixdiag none. It also returns the parameters
// in no group.
func dirichletNull(v string, c int) (groups [][]int, single []int) {
	switch v {
	case DirichletFull:
		for k := 0; k <= c; k++ {
			g := make([]int, c)
			for i := range c {
				if k == c {
					g[i] = c*c + i
				} else {
					g[i] = i*c + k
				}
			}
			groups = append(groups, g)
		}
	case DirichletDiag:
		b := make([]int, c)
		for i := range c {
			single = append(single, i)
			b[i] = c + i
		}
		groups = append(groups, b)
	default:
		single = []int{0}
	}
	return groups, single
}

// kfac is a Kronecker-factored model of the full variant's Hessian,
// A ⊗ B + I ⊗ diag(dd): A = mean(diag p − ppᵀ) over the rows (C×C),
// B = mean(x̃x̃ᵀ), x̃ = [ℓ(z), 1] ((C+1)×(C+1)), and dd the penalty's
// curvature of each feature, averaged over the classes. It inverts the
// model exactly through the eigenvectors of A and of dd^(−1/2)·B·dd^(−1/2).
type kfac struct {
	c         int
	qa, qb    *mat.Dense
	la, lb    []float64
	isd       []float64 // dd^(−1/2)
	m, t1, t2 *mat.Dense
}

// kfacFactors returns A and B of kfac at x = [W, b] on s.
func kfacFactors(x []float64, s *Set, r *rowSums) (a, b []float64) {
	c := s.Classes
	cc := c * c
	c1 := c + 1
	acc0 := make([]float64, cc+c1*c1)
	w, bias := x[:cc], x[cc:]
	r.sum(acc0, func(lo, hi int, acc []float64) float64 {
		zh := make([]float64, c)
		p := make([]float64, c)
		aa, bb := acc[:cc], acc[cc:]
		for i := lo; i < hi; i++ {
			z := s.Logits[i*c : (i+1)*c]
			matrixLogits(zh, w, bias, z)
			lse := LogSumExp(zh)
			for j, v := range zh {
				p[j] = math.Exp(v - lse)
			}
			for j, pj := range p {
				row := aa[j*c : (j+1)*c]
				row[j] += pj
				for k, pk := range p {
					row[k] -= pj * pk
				}
			}
			for j := range c1 {
				xj := 1.0
				if j < c {
					xj = z[j]
				}
				row := bb[j*c1 : (j+1)*c1]
				for k, zk := range z {
					row[k] += xj * zk
				}
				row[c] += xj
			}
		}
		return 0
	})
	inv := 1 / float64(s.Len())
	for i := range acc0 {
		acc0[i] *= inv
	}
	return acc0[:cc], acc0[cc:]
}

// newKFAC returns the model of factors a, b and penalty pen (full
// parameters' order), or nil if an eigendecomposition fails.
func newKFAC(c int, a, b, pen []float64) *kfac {
	c1 := c + 1
	k := &kfac{c: c, isd: make([]float64, c1)}
	for f := range c1 {
		var s float64
		for i := range c {
			if f == c {
				s += pen[c*c+i]
			} else {
				s += pen[i*c+f]
			}
		}
		s /= float64(c)
		k.isd[f] = 1 / math.Sqrt(max(s, 1e-300))
	}
	var ea, eb mat.EigenSym
	if !ea.Factorize(mat.NewSymDense(c, slices.Clone(a)), true) {
		return nil
	}
	bh := make([]float64, c1*c1)
	for i := range c1 {
		for j := range c1 {
			bh[i*c1+j] = b[i*c1+j] * k.isd[i] * k.isd[j]
		}
	}
	if !eb.Factorize(mat.NewSymDense(c1, bh), true) {
		return nil
	}
	k.la, k.lb = ea.Values(nil), eb.Values(nil)
	k.qa, k.qb = &mat.Dense{}, &mat.Dense{}
	ea.VectorsTo(k.qa)
	eb.VectorsTo(k.qb)
	k.m, k.t1, k.t2 = mat.NewDense(c, c1, nil), mat.NewDense(c, c1, nil), mat.NewDense(c, c1, nil)
	return k
}

// apply replaces d (full parameters) with the model's inverse times d.
func (k *kfac) apply(d []float64) {
	c, c1 := k.c, k.c+1
	cc := c * c
	for i := range c {
		for f := range c {
			k.m.Set(i, f, d[i*c+f]*k.isd[f])
		}
		k.m.Set(i, c, d[cc+i]*k.isd[c])
	}
	k.t1.Mul(k.qa.T(), k.m)
	k.t2.Mul(k.t1, k.qb)
	for i := range c {
		for f := range c1 {
			k.t2.Set(i, f, k.t2.At(i, f)/(1+max(0, k.la[i])*max(0, k.lb[f])))
		}
	}
	k.t1.Mul(k.qa, k.t2)
	k.m.Mul(k.t1, k.qb.T())
	for i := range c {
		for f := range c {
			d[i*c+f] = k.m.At(i, f) * k.isd[f]
		}
		d[cc+i] = k.m.At(i, c) * k.isd[c]
	}
}

// factors sets the Kronecker model at u on ls with penalty pen, for the
// full variant (nil for the others, or if an eigendecomposition fails).
func (q *dirichletQN) factors(ls *Set, u []float64, r *rowSums, pen []float64) {
	q.kf = nil
	if q.v != DirichletFull {
		return
	}
	q.ka, q.kb = kfacFactors(u, ls, r)
	q.kf = newKFAC(q.c, q.ka, q.kb, pen)
}
