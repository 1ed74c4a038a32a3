package calib

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize"
)

// Scaler is a scaling calibrator whose parameters form one flat vector, so
// that a federated server can average them (FedAvg, paper Alg. 2; SPEC §6).
// Temperature, Vector, Matrix, Dirichlet, OPVector, FedCalMLP, Platt and
// Beta implement it.
//
// Fit warm-starts from the current parameters: a federated client calls
// SetParams(w) with the server's parameters w, then Fit on its local
// calibration set, and returns Params() − w as its update. A scaler built
// by its constructor (NewTemperature, NewVector, …) starts from the
// identity map (T = 1; a = 1, b = 0; A = I or W = I, b = 0; the
// order-preserving scalers' weights m = 1); the zero value has no classes
// yet and Fit first initialises it to the identity for the set's number of
// classes.
type Scaler interface {
	Calibrator

	// NumParams returns the length of the parameter vector; 0 while the
	// scaler has no classes (except Temperature, whose one parameter does
	// not depend on them).
	NumParams() int

	// Params returns a copy of the parameters as one flat vector of
	// length NumParams. The layout is documented by each type.
	Params() []float64

	// SetParams replaces the parameters with a copy of w. It returns an
	// error, leaving the scaler unchanged, when len(w) != NumParams() or
	// w holds a value the scaler cannot take (non-finite, or T ≤ 0 for
	// Temperature).
	SetParams(w []float64) error
}

// DefaultMaxIterations is the iteration limit of the L-BFGS fits
// (Vector, Matrix, Dirichlet, OPVector) when FitOptions.MaxIterations is
// zero: a generous cap that a fit meets only on an ill-conditioned
// objective, where its FitReport says it did not converge. (The paper's
// setting, App. A.3, was 50, at which a Dirichlet fit on MNIST stops
// 5.8e-3 above its optimum.)
const DefaultMaxIterations = 2000

// DefaultGradientTol is the convergence threshold of the gradient-based
// fits when FitOptions.GradientTol is zero: they stop once the largest
// absolute component of the gradient of their objective (the mean NLL plus
// any regularisation) is below it, and report that they converged.
const DefaultGradientTol = 1e-7

// FitOptions controls the L-BFGS fits of Vector, Matrix, Dirichlet and
// OPVector. The zero value runs to DefaultGradientTol, for at most
// DefaultMaxIterations iterations.
type FitOptions struct {
	// MaxIterations is the largest number of L-BFGS iterations; zero means
	// DefaultMaxIterations.
	MaxIterations int
	// GradientTol stops the fit once the infinity norm of the gradient of
	// its objective falls below it; zero means DefaultGradientTol.
	GradientTol float64
	// Prior is the precision λ of a Gaussian prior on the parameters,
	// centred on the identity map: the fit minimises
	// mean NLL + λ‖θ − θ_identity‖²/(2n) over n examples, the MAP
	// estimate. It is negligible for large sets and keeps fits on a few
	// separable examples (a federated client's) finite, where maximum
	// likelihood drives the parameters to infinity. Zero means
	// DefaultPrior; a negative value fits plain maximum likelihood.
	Prior float64
}

func (o FitOptions) maxIterations() int {
	if o.MaxIterations == 0 {
		return DefaultMaxIterations
	}
	return o.MaxIterations
}

func (o FitOptions) gradientTol() float64 {
	if o.GradientTol == 0 {
		return DefaultGradientTol
	}
	return o.GradientTol
}

// DefaultPrior is the prior precision of FitOptions.Prior: 1, a unit
// Gaussian prior around the identity map.
const DefaultPrior = 1

func (o FitOptions) check() error {
	if o.MaxIterations < 0 {
		return fmt.Errorf("max iterations is %d: want ≥ 0 (0 means %d)", o.MaxIterations, DefaultMaxIterations)
	}
	if o.GradientTol < 0 || math.IsNaN(o.GradientTol) {
		return fmt.Errorf("gradient tolerance is %v: want ≥ 0 (0 means %v)", o.GradientTol, DefaultGradientTol)
	}
	if math.IsNaN(o.Prior) || math.IsInf(o.Prior, 0) {
		return fmt.Errorf("prior precision is %v: want a finite number (0 means %v, negative none)", o.Prior, DefaultPrior)
	}
	return nil
}

// withPrior adds the Gaussian prior of o around identity to the mean NLL
// f of n examples.
func withPrior(f lossGrad, identity []float64, n int, o FitOptions) lossGrad {
	lambda := o.Prior
	if lambda == 0 {
		lambda = DefaultPrior
	}
	if lambda < 0 {
		return f
	}
	k := lambda / float64(n)
	return func(g, x []float64) float64 {
		v := f(g, x)
		for i, c := range identity {
			d := x[i] - c
			v += k * d * d / 2
			g[i] += k * d
		}
		return v
	}
}

// lossGrad evaluates an objective at x, writes its gradient into grad
// (same length as x) and returns its value.
type lossGrad func(grad, x []float64) float64

// lbfgsRestarts is the number of times minimizeScaled starts L-BFGS
// afresh from the best point so far, with an empty history, when a run
// stops (a failed line search, a stalled objective) before the gradient
// meets the tolerance.
const lbfgsRestarts = 5

// minimizeScaled minimises f with L-BFGS from x0 under the options o and
// returns the best point found, never one worse than x0, with the report
// of the fit: converged when the infinity norm of the gradient there is at
// most o's tolerance. A run that stops short of it (a failed line search
// near the optimum, a stalled objective) is restarted from its best point
// with an empty history, up to lbfgsRestarts times while it makes
// progress, within one budget of o's iterations. It returns an error only
// when the objective is not finite at x0.
//
// L-BFGS is preconditioned by scale (nil: none): it runs on
// y = x ⊙ scale, so that a parameter multiplying a feature of large
// magnitude s (a logit of −1e4) moves in steps of its natural size; the
// optimum, the objective and the convergence test (on the gradient in x)
// are unchanged. Every scale must be ≥ 1.
func minimizeScaled(fx0 lossGrad, x0, scale []float64, o FitOptions) ([]float64, FitReport, error) {
	f := fx0
	if scale != nil {
		gx, x := make([]float64, len(x0)), make([]float64, len(x0))
		f = func(g, y []float64) float64 {
			for i, v := range y {
				x[i] = v / scale[i]
			}
			v := fx0(gx, x)
			for i, d := range gx {
				g[i] = d / scale[i]
			}
			return v
		}
		y0 := make([]float64, len(x0))
		for i, v := range x0 {
			y0[i] = v * scale[i]
		}
		y, rep, err := minimizeOn(f, y0, scale, o)
		if err != nil {
			return nil, rep, err
		}
		for i := range y {
			y[i] /= scale[i]
		}
		return y, rep, nil
	}
	return minimizeOn(f, x0, nil, o)
}

// minimizeOn runs minimizeScaled's restarted L-BFGS on f from x0; the
// gradient of f, divided by scale (nil: 1), is the gradient in the
// original parameters whose infinity norm the tolerance bounds.
func minimizeOn(f lossGrad, x0, scale []float64, o FitOptions) ([]float64, FitReport, error) {
	maxIter, tol := o.maxIterations(), o.gradientTol()
	norm := func(g []float64) float64 {
		if scale == nil {
			return infNorm(g)
		}
		var m float64
		for i, v := range g {
			m = max(m, math.Abs(v*scale[i]))
		}
		return m
	}
	// The threshold on the gradient in y that guarantees tol in x.
	ytol := tol
	for _, s := range scale {
		ytol = min(ytol, tol/s)
	}
	rep := FitReport{MaxIterations: maxIter, Tolerance: tol}
	c := newFGCache(f, len(x0))
	fx := c.fun(x0)
	if math.IsNaN(fx) || math.IsInf(fx, 0) {
		return nil, rep, fmt.Errorf("the mean NLL at the starting parameters is %v", fx)
	}
	x := append([]float64(nil), x0...)
	g := make([]float64, len(x0))
	rep.Stop = "gradient below tolerance"
	for range lbfgsRestarts + 1 {
		c.grad(g, x)
		if norm(g) <= tol {
			break
		}
		left := maxIter - rep.Iterations
		if left <= 0 {
			rep.Stop = "iteration limit"
			break
		}
		if len(x) <= newtonMaxParams {
			// Newton's method finishes a small fit that L-BFGS has
			// not finished in newtonAfter iterations.
			left = min(left, newtonAfter)
		}
		p := optimize.Problem{Func: c.fun, Grad: c.grad}
		settings := &optimize.Settings{
			MajorIterations:   left,
			GradientThreshold: ytol,
			Converger:         &optimize.FunctionConverge{Absolute: 1e-15, Relative: 1e-15, Iterations: 20},
		}
		// Minimize reports line-search failures near the optimum and
		// limits as errors; its Location is still the best point it
		// evaluated.
		res, err := optimize.Minimize(p, x, settings, &optimize.LBFGS{})
		if res == nil {
			rep.Stop = fmt.Sprintf("L-BFGS failed: %v", err)
			break
		}
		rep.Iterations += res.Stats.MajorIterations
		rep.Stop = stopReason(res.Status, err)
		if !(res.F < fx) || checkFinite("x", res.X) != nil {
			break // no progress: a restart would end at the same point
		}
		x, fx = res.X, res.F
		if res.Status == optimize.IterationLimit {
			rep.Stop = "iteration limit"
			if len(x) <= newtonMaxParams {
				rep.Stop = "L-BFGS iteration limit"
			}
			break
		}
	}
	c.grad(g, x)
	if norm(g) > tol && len(x) <= newtonMaxParams && rep.Iterations < maxIter {
		x, fx = newtonPolish(c, x, fx, norm, tol, maxIter, &rep)
		c.grad(g, x)
	}
	rep.Objective = fx
	rep.Gradient = norm(g)
	rep.Converged = rep.Gradient <= tol
	if rep.Converged {
		rep.Stop = "gradient below tolerance"
	}
	return x, rep, nil
}

// newtonMaxParams is the largest number of parameters for which
// minimizeScaled finishes a fit that L-BFGS left short of its tolerance by
// Newton's method: its Hessian costs as many gradient evaluations as
// there are parameters (matrix scaling of up to 33 classes).
const newtonMaxParams = 1200

// newtonAfter is the number of L-BFGS iterations after which a fit of
// at most newtonMaxParams parameters switches to Newton's method.
const newtonAfter = 500

// newtonMaxSteps caps the steps of newtonPolish, which converges in a
// few where it converges at all.
const newtonMaxSteps = 50

// newtonPolish runs Newton's method from x (objective fx) on the cached
// objective c until the gradient (measured by norm) is at most tol, a
// step no longer lowers the objective, or rep.Iterations reaches
// maxIter; it adds its steps to rep and returns the best point. The
// Hessian is the central difference of the analytic gradient, symmetrised
// and shifted by a multiple of the identity until Cholesky succeeds, so a
// step always descends; a backtracking search halves it until the
// objective decreases. L-BFGS stalls on an objective whose curvature
// spans many orders of magnitude (logits of −1e4 beside logits of 1);
// Newton's steps do not depend on the conditioning.
func newtonPolish(c *fgCache, x []float64, fx float64, norm func([]float64) float64, tol float64, maxIter int, rep *FitReport) ([]float64, float64) {
	n := len(x)
	g := make([]float64, n)
	gp, gm := make([]float64, n), make([]float64, n)
	xt := make([]float64, n)
	raw := make([]float64, n*n) // raw[j*n+i] = ∂g_i/∂x_j
	h := mat.NewSymDense(n, nil)
	step := make([]float64, n)
	steps := 0
	defer func() { rep.Stop = fmt.Sprintf("%s, then %d Newton step(s)", rep.Stop, steps) }()
	for ; steps < newtonMaxSteps && rep.Iterations < maxIter; steps++ {
		c.grad(g, x)
		if norm(g) <= tol {
			break
		}
		rep.Iterations++
		copy(xt, x)
		for j := range n {
			d := 1e-5 * max(1, math.Abs(x[j]))
			xt[j] = x[j] + d
			c.grad(gp, xt)
			xt[j] = x[j] - d
			c.grad(gm, xt)
			xt[j] = x[j]
			for i := range n {
				raw[j*n+i] = (gp[i] - gm[i]) / (2 * d)
			}
		}
		for i := range n {
			for j := i; j < n; j++ {
				h.SetSym(i, j, (raw[i*n+j]+raw[j*n+i])/2)
			}
		}
		if !newtonStep(step, h, g) {
			break
		}
		improved := false
		for t := 1.0; t > 1e-10; t /= 2 {
			for i := range xt {
				xt[i] = x[i] - t*step[i]
			}
			if v := c.fun(xt); v < fx {
				x, fx, improved = append(x[:0:0], xt...), v, true
				break
			}
		}
		if !improved {
			break
		}
	}
	return x, fx
}

// newtonStep solves (H + δI)·step = g for the smallest δ in 0, 1e-10·s,
// 1e-8·s, … (s the largest diagonal entry of H, at least 1e-300) for
// which H + δI is positive definite, and reports whether one was.
func newtonStep(step []float64, h *mat.SymDense, g []float64) bool {
	n := len(g)
	scale := 1e-300
	for i := range n {
		scale = max(scale, math.Abs(h.At(i, i)))
	}
	shifted := mat.NewSymDense(n, nil)
	var ch mat.Cholesky
	for _, delta := range []float64{0, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2, 1} {
		shifted.CopySym(h)
		for i := range n {
			shifted.SetSym(i, i, h.At(i, i)+delta*scale)
		}
		if !ch.Factorize(shifted) {
			continue
		}
		var s mat.VecDense
		if err := ch.SolveVecTo(&s, mat.NewVecDense(n, append([]float64(nil), g...))); err != nil {
			continue
		}
		copy(step, s.RawVector().Data)
		return checkFinite("step", step) == nil
	}
	return false
}

// stopReason says in words why an L-BFGS run stopped.
func stopReason(s optimize.Status, err error) string {
	switch s {
	case optimize.GradientThreshold:
		return "gradient below tolerance"
	case optimize.IterationLimit:
		return "iteration limit"
	case optimize.FunctionConvergence:
		return "objective stalled"
	}
	if err != nil {
		return fmt.Sprintf("L-BFGS stopped: %v", err)
	}
	return "L-BFGS stopped: " + s.String()
}

// featureScales returns, for each of the c columns of the rows
// (row-major, c values a row), max(1, its root mean square): the scale of
// the parameters that multiply it, for minimizeScaled.
func featureScales(rows []float64, c int) []float64 {
	s := make([]float64, c)
	n := len(rows) / c
	for i := 0; i < len(rows); i += c {
		for j, v := range rows[i : i+c] {
			s[j] += v * v
		}
	}
	for j := range s {
		s[j] = max(1, math.Sqrt(s[j]/float64(max(n, 1))))
	}
	return s
}

// infNorm returns the largest absolute value of g.
func infNorm(g []float64) float64 {
	var m float64
	for _, v := range g {
		m = max(m, math.Abs(v))
	}
	return m
}

// fgCache lets gonum/optimize call Func and Grad separately at the same
// point while the objective computes both in one pass.
type fgCache struct {
	f    lossGrad
	x    []float64
	g    []float64
	v    float64
	have bool
}

func newFGCache(f lossGrad, n int) *fgCache {
	return &fgCache{f: f, x: make([]float64, n), g: make([]float64, n)}
}

func (c *fgCache) eval(x []float64) {
	if c.have && equalFloats(c.x, x) {
		return
	}
	copy(c.x, x)
	c.v = c.f(c.g, c.x)
	c.have = true
}

func (c *fgCache) fun(x []float64) float64 {
	c.eval(x)
	return c.v
}

func (c *fgCache) grad(g, x []float64) {
	c.eval(x)
	copy(g, c.g)
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i, v := range a {
		if math.Float64bits(v) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

// checkFinite returns an error naming what when w holds NaN or ±Inf.
func checkFinite(what string, w []float64) error {
	for i, v := range w {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%s[%d] is %v: parameters must be finite", what, i, v)
		}
	}
	return nil
}

// checkParamLen returns an error when a scaler of the given method and
// number of parameters cannot take the len(w) parameters of w.
func checkParamLen(method string, want int, w []float64) error {
	if want == 0 {
		return fmt.Errorf("%s scaler has no classes yet: construct it with its New function or Fit it first", method)
	}
	if len(w) != want {
		return fmt.Errorf("%s scaler takes %d parameters, got %d", method, want, len(w))
	}
	return nil
}

// checkPredict panics unless dst and logits are rows of c classes.
func checkPredict(method string, c int, dst, logits []float64) {
	if c < 2 {
		panic("calib: Predict on a " + method + " scaler that is not fitted")
	}
	if len(dst) != len(logits) || len(logits)%c != 0 {
		panic("calib: " + method + " Predict shape mismatch")
	}
}

// fitClasses checks that a scaler with c classes (0: none yet) can be
// fitted to s.
func fitClasses(method string, c int, s *Set) error {
	if err := checkFit(s); err != nil {
		return err
	}
	if c != 0 && c != s.Classes {
		return fmt.Errorf("%s scaler is for %d classes but the set has %d", method, c, s.Classes)
	}
	return nil
}

// softplus returns log(1 + e^x), without overflow.
func softplus(x float64) float64 {
	if x > 0 {
		return x + math.Log1p(math.Exp(-x))
	}
	return math.Log1p(math.Exp(x))
}

// softplusAndLogistic returns softplus(x) and its derivative, the logistic
// function 1/(1 + e^{−x}), sharing one exponential.
func softplusAndLogistic(x float64) (sp, sig float64) {
	if x > 0 {
		e := math.Exp(-x)
		return x + math.Log1p(e), 1 / (1 + e)
	}
	e := math.Exp(x)
	return math.Log1p(e), e / (1 + e)
}

// softplusOne is softplus⁻¹(1) = log(e − 1): the pre-activation that makes
// an order-preserving weight m = softplus(·) equal to 1.
const softplusOne = 0.541324854612918
