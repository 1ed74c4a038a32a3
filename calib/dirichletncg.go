package calib

import (
	"math"
	"slices"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/mat"
)

// Truncated Newton (Newton–CG) for the cross-validation of Dirichlet
// calibration beyond DirichletNewtonMaxClasses classes.
//
// There the Hessian ((C² + C)² values) is too large to form, but its
// product with a vector is cheap: writing x̃ = [ℓ(z), 1] and p the
// softmax of a row, the NLL's Hessian times V = [V_W, v_b] is the mean
// over rows of r x̃ᵀ with r = p ⊙ (t − (p·t)) and t = V_W ℓ(z) + v_b
// (matrixHessVec): with each row's p kept from the last evaluation of the
// objective, one product is two matrix products over the rows, about half
// a gradient's evaluation (no exponentials; 9 against 16 ms at 800 × 100
// on one thread).
// Each Newton step solves (H + P)·d = g by conjugate gradients with
// exact products, preconditioned by the inverse of dirichletQN's model
// (the Kronecker factors of the full variant, the diagonal of the others,
// with the kept pairs of curvature on top), to a residual a fraction of
// the gradient; the kept pairs are the solves' own (p, H·p), exact
// curvature, so the next fit's preconditioner (at a neighbouring pair or
// fold) starts knowing the directions the last one had to find. The
// Kronecker factors come from the kept softmax (A) and, once per training
// set, from its rows (B), not from a pass of their own.
//
// The Kronecker model takes the penalty as one value per feature (its
// mean over the classes), which is wrong for W's diagonal: ODIR leaves
// W_ii unpenalised while a strong λ stiffens every other entry of the
// column. The preconditioner therefore adds to the model's inverse the
// exact inverse of the objective's C×C Hessian block of W's diagonal
// (diagonalBlock, one pass over the kept softmax and a Cholesky
// factorisation a fit): at 1,000 × 100 the fits at the largest λ took
// 408 products instead of 2,512, and the 125 grid fits 2,130 instead of
// 4,774.

// dirichletCGForcing is the largest reduction of the gradient's
// infinity norm ‖g‖ a Newton–CG step's linear solve asks for: its residual
// at most min(dirichletCGForcing, √‖g‖)·‖g‖ (Nocedal and Wright's
// superlinear forcing, loose far from the optimum, tight near it), or half
// the tolerance, whichever is larger.
const dirichletCGForcing = 0.5

// dirichletCGMaxIter caps the conjugate-gradient iterations of one
// Newton–CG step.
const dirichletCGMaxIter = 250

// dirichletNewtonCG fits dirichletFit's objective by Newton–CG (see
// above): the grid pairs of one cross-validation above
// DirichletNewtonMaxClasses classes, one training set at a time, and the
// final fit after it. It is not safe for concurrent use.
type dirichletNewtonCG struct {
	dirichletQN
	// Work of the products: the direction and the product in the full
	// parameters.
	vf, hf []float64
	// moments caches each training set's B (featureMoments).
	moments map[*Set][]float64
	// Counts of the work done, for the tests: Hessian-vector products and
	// Newton steps.
	products, newtonSteps int
}

// newDirichletNewtonCG returns the Newton–CG fitter of variant v on c
// classes, to the gradient tolerance and within the iterations of o.
func newDirichletNewtonCG(v string, c int, o FitOptions) *dirichletNewtonCG {
	return &dirichletNewtonCG{dirichletQN: *newDirichletQN(v, c, o), vf: make([]float64, c*c+c), hf: make([]float64, c*c+c)}
}

// refit returns the fitter of the final fit under o, with the kept
// curvature of the cross-validation's fits (q itself is not used after).
func (q *dirichletNewtonCG) refit(o FitOptions) dirichletWarmFitter {
	r := *q
	r.dirichletQN = q.dirichletQN.refitted(o)
	return &r
}

// matrixHessVec writes into hv the product of the Hessian of the mean NLL
// of softmax(Az + b) on s (matrixHessian's) with v = [V_A, v_b], at the
// point whose rows' softmax probs holds (matrixNLLProbs): the mean over
// rows of r x̃ᵀ, r = p ⊙ (t − p·t), t = V_A z + v_b, x̃ = [z, 1]. Up to
// hessVecBatch rows at a time, T = Z·V_Aᵀ and the sum Rᵀ·Z are matrix
// products. It sums the rows by rs's fixed blocks (and each block's
// batches in order), so hv is the same to the bit whatever the number of
// threads.
func matrixHessVec(hv, v, probs []float64, s *Set, rs *rowSums) {
	c := s.Classes
	cc := c * c
	va, vb := v[:cc], v[cc:]
	rs.sum(hv, func(lo, hi int, acc []float64) float64 {
		t := make([]float64, min(hessVecBatch, hi-lo)*c)
		ga, gb := acc[:cc], acc[cc:]
		for start := lo; start < hi; start += hessVecBatch {
			rows := min(hessVecBatch, hi-start)
			z := blas64.General{Rows: rows, Cols: c, Stride: c, Data: s.Logits[start*c : (start+rows)*c]}
			tm := blas64.General{Rows: rows, Cols: c, Stride: c, Data: t[:rows*c]}
			blas64.Gemm(blas.NoTrans, blas.Trans, 1, z, blas64.General{Rows: c, Cols: c, Stride: c, Data: va}, 0, tm)
			for i := range rows {
				ti := t[i*c : (i+1)*c]
				p := probs[(start+i)*c : (start+i+1)*c]
				var pt float64
				for j, pj := range p {
					ti[j] += vb[j]
					pt += pj * ti[j]
				}
				for j, pj := range p {
					w := pj * (ti[j] - pt)
					ti[j] = w
					gb[j] += w
				}
			}
			blas64.Gemm(blas.Trans, blas.NoTrans, 1, tm, z, 1, blas64.General{Rows: c, Cols: c, Stride: c, Data: ga})
		}
		return 0
	})
	inv := 1 / float64(s.Len())
	for i := range hv {
		hv[i] *= inv
	}
}

// hessVecBatch is the most rows matrixHessVec multiplies at once.
const hessVecBatch = 256

// hessVec writes into out the objective's Hessian times v, in the free
// parameters: the NLL's (at the point of q.probs, on ls) and the
// penalty's diagonal pen. It writes the NLL's part alone into nll.
func (q *dirichletNewtonCG) hessVec(out, nll, v, pen []float64, ls *Set, r *rowSums) {
	q.products++
	dirichletExpand(q.vf, v, q.v, q.c)
	matrixHessVec(q.hf, q.vf, q.probs, ls, r)
	dirichletProject(nll, q.hf, q.v, q.c)
	for a, x := range v {
		out[a] = nll[a] + pen[a]*x
	}
}

// solve writes into d an approximate solution of (H + P)·d = g by
// conjugate gradients preconditioned by q.direction, stopping once the
// residual's infinity norm is at most target; it keeps the last
// dirichletQNMemory of its directions with their NLL products as
// curvature pairs for the next solves.
func (q *dirichletNewtonCG) solve(d, g, pen []float64, target float64, ls *Set, r *rowSums) {
	nu := q.nu
	res, z, p := slices.Clone(g), make([]float64, nu), make([]float64, nu)
	hp, hn := make([]float64, nu), make([]float64, nu)
	clear(d)
	q.direction(z, res, pen)
	copy(p, z)
	rz := dot(res, z)
	var ps, ys [][]float64
	for range dirichletCGMaxIter {
		q.hessVec(hp, hn, p, pen, ls, r)
		php := dot(p, hp)
		if !(php > 0) || math.IsInf(php, 0) {
			if len(ps) == 0 {
				copy(d, z) // the preconditioned gradient
			}
			break
		}
		ps, ys = append(ps, slices.Clone(p)), append(ys, slices.Clone(hn))
		alpha := rz / php
		for a := range d {
			d[a] += alpha * p[a]
			res[a] -= alpha * hp[a]
		}
		if infNorm(res) <= target {
			break
		}
		q.direction(z, res, pen)
		rzn := dot(res, z)
		beta := rzn / rz
		rz = rzn
		for a := range p {
			p[a] = z[a] + beta*p[a]
		}
	}
	// Keep the solve's last pairs (the history is not changed during a
	// solve: the preconditioner must stay fixed).
	for k := max(0, len(ps)-q.memory); k < len(ps); k++ {
		q.keep(ps[k], ys[k], pen)
	}
	q.usePenalty(pen)
}

// fit minimises dirichletFit's objective on the log-probability set ls
// with ODIR weights lambda and mu from the free parameters u0 by
// Newton–CG (backtracking from the unit step), and returns the free
// parameters at which the gradient's infinity norm is at most the
// tolerance, and the report of the fit (its Iterations the Newton steps).
// When a step fails or the iterations run out it finishes with
// dirichletFit's L-BFGS from its best point.
func (q *dirichletNewtonCG) fit(ls *Set, u0 []float64, lambda, mu float64) ([]float64, FitReport, error) {
	nu := q.nu
	rep := FitReport{MaxIterations: q.maxIter, Tolerance: q.tol}
	if n := ls.Len() * q.c; cap(q.probs) < n {
		q.probs = make([]float64, n)
	} else {
		q.probs = q.probs[:n]
	}
	st, err := q.start(ls, u0, lambda, mu)
	if err != nil {
		return nil, rep, err
	}
	r, obj, pen, u, g, f := st.r, st.obj, st.pen, st.u, st.g, st.f
	q.kf, q.ka, q.kb = nil, nil, nil
	if q.v == DirichletFull {
		q.ka, q.kb = kfacFactorsProbs(q.probs, q.featureMoments(ls, r), ls, r)
		q.kf = newKFAC(q.c, q.ka, q.kb, pen)
		q.wdiag = nil
		if q.kf != nil {
			q.wdiag = diagonalBlock(q.probs, pen, ls, r)
			q.wbuf = make([]float64, q.c)
		}
	}
	if q.kf == nil {
		q.diagonal(ls, u, r)
	}
	q.fitted = true
	q.usePenalty(pen)
	un, gn, d := make([]float64, nu), make([]float64, nu), make([]float64, nu)
	ok := true
	for gi := infNorm(g); gi > q.tol; gi = infNorm(g) {
		if rep.Iterations == q.maxIter {
			ok = false
			break
		}
		q.solve(d, g, pen, max(q.tol/2, min(dirichletCGForcing, math.Sqrt(gi))*gi), ls, r)
		slope := dot(g, d)
		accepted := false
		if slope > 0 {
			var fn float64
			if fn, _, accepted = backtrack(obj, u, d, un, gn, f, slope); accepted {
				copy(u, un)
				copy(g, gn)
				f = fn
			}
		}
		if !accepted {
			ok = false
			break
		}
		rep.Iterations++
		q.newtonSteps++
	}
	return q.end(ok, f, g, ls, u, lambda, mu, rep, "Newton–CG step(s)")
}

// featureMoments returns the Kronecker model's B = mean(x̃x̃ᵀ) of ls,
// x̃ = [ℓ(z), 1] ((C+1)×(C+1)), which depends on the rows alone: it is
// computed once for each training set.
func (q *dirichletNewtonCG) featureMoments(ls *Set, r *rowSums) []float64 {
	if b, ok := q.moments[ls]; ok {
		return b
	}
	c, c1 := q.c, q.c+1
	zz := make([]float64, c*c+c)
	r.sum(zz, func(lo, hi int, acc []float64) float64 {
		z := blas64.General{Rows: hi - lo, Cols: c, Stride: c, Data: ls.Logits[lo*c : hi*c]}
		blas64.Gemm(blas.Trans, blas.NoTrans, 1, z, z, 1, blas64.General{Rows: c, Cols: c, Stride: c, Data: acc[:c*c]})
		for i := lo; i < hi; i++ {
			for k, v := range ls.Logits[i*c : (i+1)*c] {
				acc[c*c+k] += v
			}
		}
		return 0
	})
	inv := 1 / float64(ls.Len())
	b := make([]float64, c1*c1)
	for i := range c {
		for j := range c {
			b[i*c1+j] = zz[i*c+j] * inv
		}
		b[i*c1+c] = zz[c*c+i] * inv
		b[c*c1+i] = zz[c*c+i] * inv
	}
	b[c*c1+c] = 1
	if q.moments == nil {
		q.moments = make(map[*Set][]float64)
	}
	q.moments[ls] = b
	return b
}

// kfacFactorsProbs returns kfacFactors' A = mean(diag p − ppᵀ) from the
// rows' softmax probs (matrixNLLProbs), and b as B.
func kfacFactorsProbs(probs, b []float64, s *Set, r *rowSums) (a, bb []float64) {
	c := s.Classes
	a = make([]float64, c*c)
	r.sum(a, func(lo, hi int, acc []float64) float64 {
		p := blas64.General{Rows: hi - lo, Cols: c, Stride: c, Data: probs[lo*c : hi*c]}
		blas64.Gemm(blas.Trans, blas.NoTrans, -1, p, p, 1, blas64.General{Rows: c, Cols: c, Stride: c, Data: acc})
		for i := lo; i < hi; i++ {
			for j, v := range probs[i*c : (i+1)*c] {
				acc[j*c+j] += v
			}
		}
		return 0
	})
	inv := 1 / float64(s.Len())
	for i := range a {
		a[i] *= inv
	}
	return a, b
}

// diagonalBlock returns the Cholesky factor of the objective's Hessian
// block of W's diagonal entries W_ii at the point whose rows' softmax
// probs holds, pen the penalty's diagonal (full parameters): the mean
// over rows of diag(p ⊙ z ⊙ z) − (p ⊙ z)(p ⊙ z)ᵀ, plus pen's W_ii entries;
// nil if it is not positive definite.
func diagonalBlock(probs, pen []float64, s *Set, r *rowSums) *mat.Cholesky {
	c := s.Classes
	h := make([]float64, c*c)
	r.sum(h, func(lo, hi int, acc []float64) float64 {
		y := make([]float64, (hi-lo)*c)
		for i := lo; i < hi; i++ {
			z, p := s.Logits[i*c:(i+1)*c], probs[i*c:(i+1)*c]
			yi := y[(i-lo)*c : (i-lo+1)*c]
			for j := range c {
				yi[j] = p[j] * z[j]
				acc[j*c+j] += yi[j] * z[j]
			}
		}
		ym := blas64.General{Rows: hi - lo, Cols: c, Stride: c, Data: y}
		blas64.Gemm(blas.Trans, blas.NoTrans, -1, ym, ym, 1, blas64.General{Rows: c, Cols: c, Stride: c, Data: acc})
		return 0
	})
	inv := 1 / float64(s.Len())
	sym := mat.NewSymDense(c, nil)
	for i := range c {
		for j := i; j < c; j++ {
			v := h[i*c+j] * inv
			if i == j {
				v += pen[i*c+i]
			}
			sym.SetSym(i, j, v)
		}
	}
	var ch mat.Cholesky
	if !ch.Factorize(sym) {
		return nil
	}
	return &ch
}
