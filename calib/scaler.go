package calib

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/optimize"
)

// Scaler is a scaling calibrator whose parameters form one flat vector, so
// that a federated server can average them (FedAvg, paper Alg. 2; SPEC §6).
// Temperature, Vector, Matrix, Dirichlet, OPVector and FedCalMLP implement
// it.
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

// lbfgsRestarts is the number of times minimizeLBFGS starts L-BFGS
// afresh from the best point so far, with an empty history, when a run
// stops (a failed line search, a stalled objective) before the gradient
// meets the tolerance.
const lbfgsRestarts = 5

// minimizeLBFGS minimises f with L-BFGS from x0 under the options o and
// returns the best point found, never one worse than x0, with the report
// of the fit: converged when the infinity norm of the gradient there is at
// most o's tolerance. A run that stops short of it (a failed line search
// near the optimum, a stalled objective) is restarted from its best point
// with an empty history, up to lbfgsRestarts times while it makes
// progress, within one budget of o's iterations. It returns an error only
// when the objective is not finite at x0.
func minimizeLBFGS(f lossGrad, x0 []float64, o FitOptions) ([]float64, FitReport, error) {
	maxIter, tol := o.maxIterations(), o.gradientTol()
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
		if infNorm(g) <= tol {
			break
		}
		left := maxIter - rep.Iterations
		if left <= 0 {
			rep.Stop = "iteration limit"
			break
		}
		p := optimize.Problem{Func: c.fun, Grad: c.grad}
		settings := &optimize.Settings{
			MajorIterations:   left,
			GradientThreshold: tol,
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
			break
		}
	}
	c.grad(g, x)
	rep.Objective = fx
	rep.Gradient = infNorm(g)
	rep.Converged = rep.Gradient <= tol
	if rep.Converged {
		rep.Stop = "gradient below tolerance"
	}
	return x, rep, nil
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
