package calib

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMatrixHessVec checks matrixHessVec, the Hessian-vector product of
// the Newton–CG path, by two other methods at a point away from the
// identity: against the formed Hessian (matrixHessian) times the vector,
// and against central differences of the analytic gradient along the
// vector, on sets of one row block and of several (each several of
// hessVecBatch's batches).
func TestMatrixHessVec(t *testing.T) {
	for _, tc := range []struct {
		n, c   int
		formed bool // also against matrixHessian (its (C²+C)² values)
	}{{7, 2, true}, {50, 3, true}, {600, 5, true}, {1100, 12, true}, {900, 40, false}} {
		rng := rand.New(rand.NewPCG(uint64(tc.n), uint64(tc.c)))
		s := logProbSet(dirBenchSet(rng, tc.n, tc.c))
		np := tc.c*tc.c + tc.c
		x := NewMatrix(tc.c).Params()
		for i := range x {
			x[i] += 0.3 * rng.NormFloat64()
		}
		v := make([]float64, np)
		for i := range v {
			v[i] = rng.NormFloat64()
		}
		r := newRowSums(s.Len())
		probs := make([]float64, tc.n*tc.c)
		g := make([]float64, np)
		matrixNLLProbs(g, x, s, r, probs)
		hv := make([]float64, np)
		matrixHessVec(hv, v, probs, s, r)

		if tc.formed {
			h := make([]float64, np*np)
			matrixHessian(h, x, s, nil)
			var worst float64
			for i := range np {
				var want float64
				for j, vj := range v {
					want += h[i*np+j] * vj
				}
				worst = max(worst, math.Abs(hv[i]-want)/(1+math.Abs(want)))
			}
			t.Logf("%d rows, C = %d: largest difference from the formed Hessian's product %.2g", tc.n, tc.c, worst)
			if worst > 1e-12 {
				t.Errorf("%d rows, C = %d: H·v differs from matrixHessian's product by %.2g", tc.n, tc.c, worst)
			}
		}

		const d = 1e-5
		gp, gm := make([]float64, np), make([]float64, np)
		xt := make([]float64, np)
		for i := range x {
			xt[i] = x[i] + d*v[i]
		}
		matrixNLL(gp, xt, s, nil)
		for i := range x {
			xt[i] = x[i] - d*v[i]
		}
		matrixNLL(gm, xt, s, nil)
		var worst float64
		for i := range np {
			fd := (gp[i] - gm[i]) / (2 * d)
			worst = max(worst, math.Abs(fd-hv[i])/(1+math.Abs(fd)))
		}
		t.Logf("%d rows, C = %d: largest difference from central differences %.2g", tc.n, tc.c, worst)
		if worst > 1e-6 {
			t.Errorf("%d rows, C = %d: H·v differs from central differences of the gradient by %.2g", tc.n, tc.c, worst)
		}
	}
}

// TestDirichletNewtonCGHessVec checks the Newton–CG fitter's product in
// each variant's free parameters (hessVec) against the formed Hessian in
// the free parameters (dirichletNewton's, the chain rule through
// dirichletExpand) plus the penalty's diagonal.
func TestDirichletNewtonCGHessVec(t *testing.T) {
	const n, c = 300, 4
	rng := rand.New(rand.NewPCG(3, 4))
	s := logProbSet(dirBenchSet(rng, n, c))
	for _, v := range DirichletVariants() {
		q := newDirichletNewtonCG(v, c, FitOptions{})
		nw := newDirichletNewton(v, c, FitOptions{})
		u := dirichletReduce(NewMatrix(c).Params(), v, c)
		for a := range u {
			u[a] += 0.2 * rng.NormFloat64()
		}
		x := make([]float64, c*c+c)
		dirichletExpand(x, u, v, c)
		r := newRowSums(n)
		nw.hessian(s, x, r)
		q.probs = make([]float64, n*c)
		pen := q.penalty(1.5, 0.5, n)
		q.objective(s, 1.5, 0.5, r)(make([]float64, q.nu), u)
		w := make([]float64, q.nu)
		for a := range w {
			w[a] = rng.NormFloat64()
		}
		got, nll := make([]float64, q.nu), make([]float64, q.nu)
		q.hessVec(got, nll, w, pen, s, r)
		var worst float64
		for a := range q.nu {
			want := pen[a] * w[a]
			for b, wb := range w {
				want += nw.hnll[a*q.nu+b] * wb
			}
			worst = max(worst, math.Abs(got[a]-want)/(1+math.Abs(want)))
		}
		t.Logf("%s: largest difference %.2g", v, worst)
		if worst > 1e-12 {
			t.Errorf("%s: (H + P)·w differs from the formed Hessian's by %.2g", v, worst)
		}
	}
}
