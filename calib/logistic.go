package calib

import "math"

// logisticProblem is a one-class logistic regression with soft targets, the
// per-class fit of Platt and Beta: over w ∈ ℝ^k (k ≤ 3) it minimises
//
//	f(w) = (1/n) Σ_i [softplus(w·x_i) − t_i·(w·x_i)] + (ρ/2)‖w − w₀‖²
//
// — the mean cross-entropy of σ(w·x_i) against the target t_i ∈ [0, 1]
// plus FitOptions.Prior's Gaussian prior (ρ = λ/n, 0 for none) — which is
// convex, so Newton's method with a backtracking line search reaches its
// minimum whenever one exists.
type logisticProblem struct {
	k      int
	x      []float64 // n×k features, row-major
	t      []float64 // n targets
	rho    float64   // prior precision per row, λ/n; 0: no prior
	center []float64 // w₀, the prior's centre
}

// eval returns f(w) and writes its gradient into g and its k×k Hessian
// into h (either may be nil).
func (p *logisticProblem) eval(w, g, h []float64) float64 {
	k := p.k
	if g != nil {
		clear(g)
	}
	if h != nil {
		clear(h)
	}
	var f float64
	for i, t := range p.t {
		x := p.x[i*k : (i+1)*k]
		var u float64
		for a, v := range x {
			u += w[a] * v
		}
		sp, sig := softplusAndLogistic(u)
		f += sp - t*u
		if g != nil {
			r := sig - t
			for a, v := range x {
				g[a] += r * v
			}
		}
		if h != nil {
			d := sig * (1 - sig)
			for a, va := range x {
				for b := a; b < k; b++ {
					h[a*k+b] += d * va * x[b]
				}
			}
		}
	}
	n := float64(len(p.t))
	f /= n
	for a := range k {
		d := w[a] - p.center[a]
		f += p.rho * d * d / 2
		if g != nil {
			g[a] = g[a]/n + p.rho*d
		}
		if h != nil {
			for b := a; b < k; b++ {
				h[a*k+b] /= n
				h[b*k+a] = h[a*k+b]
			}
			h[a*k+a] += p.rho
		}
	}
	return f
}

// logisticResult is how one newton run ended.
type logisticResult struct {
	f          float64 // the objective at the end
	gradient   float64 // the largest |∂f/∂w_a| over the free components
	iterations int     // Newton steps taken
	converged  bool    // gradient ≤ the tolerance
	stop       string  // why it stopped
}

// newton minimises f over the components a of w with free[a], the others
// held at their values, by Newton's method from w (updated in place):
// each step solves the free block of the Hessian (with a ridge added while
// it is not positive definite) and backtracks until the objective makes
// Armijo's decrease. It stops when the largest free component of the
// gradient is at most tol, after maxIter steps, or when a step cannot
// decrease f (the floor of float64, or a minimum at infinity on separable
// data without a prior).
func (p *logisticProblem) newton(w []float64, free []bool, maxIter int, tol float64) logisticResult {
	k := p.k
	g, h := make([]float64, k), make([]float64, k*k)
	d, trial, gt := make([]float64, k), make([]float64, k), make([]float64, k)
	idx := make([]int, 0, k)
	for a, ok := range free {
		if ok {
			idx = append(idx, a)
		}
	}
	r := logisticResult{stop: "gradient below tolerance"}
	r.f = p.eval(w, g, h)
	for {
		r.gradient = freeNorm(g, idx)
		if r.gradient <= tol {
			r.converged = true
			return r
		}
		if r.iterations >= maxIter {
			r.stop = "iteration limit"
			return r
		}
		if !solveFree(d, h, g, idx, k) {
			r.stop = "singular Hessian"
			return r
		}
		var slope float64 // g·d > 0, the decrease rate along −d
		for _, a := range idx {
			slope += g[a] * d[a]
		}
		step, ok := 1.0, false
		for range 60 {
			copy(trial, w)
			for _, a := range idx {
				trial[a] -= step * d[a]
			}
			ft := p.eval(trial, gt, nil)
			if ft <= r.f-1e-4*step*slope && !math.IsNaN(ft) {
				ok = true
				break
			}
			// Near the optimum the decrease of a full step falls below
			// the rounding of f (a sum of n terms), while the gradient
			// still measures progress: accept a full step that leaves f
			// unchanged to rounding and reduces the gradient.
			if step == 1 && ft <= r.f+flatTol*max(1, math.Abs(r.f)) && freeNorm(gt, idx) < r.gradient {
				ok = true
				break
			}
			step /= 2
		}
		r.iterations++
		if !ok {
			r.stop = "no decrease along the Newton direction"
			return r
		}
		copy(w, trial)
		r.f = p.eval(w, g, h)
	}
}

// flatTol is the relative change of the objective newton takes for
// rounding: about 2^−40, far above the rounding of a sum of a few million
// terms and far below any decrease a Newton step away from the optimum
// makes.
const flatTol = 1e-12

// freeNorm returns the largest |g_a| over the indices idx.
func freeNorm(g []float64, idx []int) float64 {
	var m float64
	for _, a := range idx {
		m = max(m, math.Abs(g[a]))
	}
	return m
}

// solveFree solves H_FF·d_F = g_F for the free indices F = idx of the
// k×k Hessian h, adding a growing ridge until the Cholesky factorisation
// succeeds; d's other components are left alone. It reports false when no
// ridge up to 1e10 times the largest diagonal entry makes it positive
// definite.
func solveFree(d, h, g []float64, idx []int, k int) bool {
	m := len(idx)
	if m == 0 {
		return true
	}
	var scale float64
	for _, a := range idx {
		scale = max(scale, math.Abs(h[a*k+a]))
	}
	if scale == 0 || math.IsNaN(scale) {
		scale = 1
	}
	l := make([]float64, m*m)
	for ridge := 0.0; ridge <= 1e10*scale; ridge = max(ridge*100, 1e-12*scale) {
		if cholesky(l, h, idx, k, ridge) {
			// Forward, then back substitution.
			y := make([]float64, m)
			for i := range m {
				s := g[idx[i]]
				for j := range i {
					s -= l[i*m+j] * y[j]
				}
				y[i] = s / l[i*m+i]
			}
			for i := m - 1; i >= 0; i-- {
				s := y[i]
				for j := i + 1; j < m; j++ {
					s -= l[j*m+i] * d[idx[j]]
				}
				d[idx[i]] = s / l[i*m+i]
			}
			return true
		}
	}
	return false
}

// cholesky writes into l the lower Cholesky factor of H_FF + ridge·I and
// reports whether it is positive definite.
func cholesky(l, h []float64, idx []int, k int, ridge float64) bool {
	m := len(idx)
	for i := range m {
		for j := 0; j <= i; j++ {
			s := h[idx[i]*k+idx[j]]
			if i == j {
				s += ridge
			}
			for q := range j {
				s -= l[i*m+q] * l[j*m+q]
			}
			if i == j {
				if !(s > 0) {
					return false
				}
				l[i*m+i] = math.Sqrt(s)
			} else {
				l[i*m+j] = s / l[j*m+j]
			}
		}
	}
	return true
}

// logistic returns 1/(1 + e^{−u}) without overflow.
func logistic(u float64) float64 {
	if u >= 0 {
		return 1 / (1 + math.Exp(-u))
	}
	e := math.Exp(u)
	return e / (1 + e)
}

// priorPerRow returns the per-row prior precision ρ = λ/n of o for n rows,
// 0 when o fits plain maximum likelihood (see FitOptions.Prior).
func priorPerRow(o FitOptions, n int) float64 {
	switch {
	case o.Prior < 0:
		return 0
	case o.Prior == 0:
		return DefaultPrior / float64(n)
	}
	return o.Prior / float64(n)
}
