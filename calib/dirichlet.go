package calib

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
)

// Defaults of Dirichlet calibration.
const (
	// DefaultDirichletLambda and DefaultDirichletMu are the ODIR
	// regularisation of NewDirichlet, the scaler a federation averages:
	// λ = μ = 10⁻³. A federated fit cannot cross-validate on rows it
	// never sees, so it uses these fixed values.
	DefaultDirichletLambda = 1e-3
	DefaultDirichletMu     = 1e-3
	// DefaultDirichletFolds is the number of cross-validation folds of a
	// central fit (calib.New).
	DefaultDirichletFolds = 5
	// DirichletCVGradientTol is the gradient tolerance of the
	// cross-validation fits, which only rank the grid (the final fit
	// runs to FitOptions' own).
	DirichletCVGradientTol = 1e-5
)

// DirichletProbabilityFloor is the smallest probability whose log
// Dirichlet calibration takes: its features are log max(softmax(z), floor)
// = max(log softmax(z), log floor), log floor ≈ −36.04. It is float64's
// machine epsilon, the clip dirichletcal applies to probabilities before
// their log. Without it a logit far below the others (−1e4) becomes a
// feature of −1e4 that one off-diagonal weight turns into any logit.
// Predict, the fit and the exported ONNX graph clamp alike.
const DirichletProbabilityFloor = 0x1p-52

// The variants of Dirichlet calibration (Dirichlet.Variant), as
// dirichletcal names them Full, Diag and FixDiag.
const (
	// DirichletFull fits the whole C×C matrix W and the bias b.
	DirichletFull = "full"
	// DirichletDiag fits a diagonal W and the bias b: vector scaling of
	// the log-probabilities, 2C free parameters.
	DirichletDiag = "diag"
	// DirichletFixDiag fits W = a·I and no bias: temperature scaling of
	// the log-probabilities, 1 free parameter.
	DirichletFixDiag = "fixdiag"
)

// DirichletVariants returns the names of the variants, Full first.
func DirichletVariants() []string {
	return []string{DirichletFull, DirichletDiag, DirichletFixDiag}
}

// ODIR is a fixed ODIR regularisation of Dirichlet calibration: the
// weight λ of the off-diagonal entries of W and μ of the bias b (see
// Dirichlet). The zero value is no regularisation.
type ODIR struct {
	Lambda float64 // λ ≥ 0
	Mu     float64 // μ ≥ 0
}

// Check returns an error unless λ and μ are finite and ≥ 0.
func (r ODIR) Check() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"lambda", r.Lambda}, {"mu", r.Mu}} {
		if !(f.v >= 0) || math.IsInf(f.v, 1) {
			return fmt.Errorf("ODIR %s is %v: want a finite number ≥ 0 (0 means no regularisation)", f.name, f.v)
		}
	}
	return nil
}

// dirichletGridSteps are the per-entry weights κ of the default grids:
// λ = κ·C(C−1) puts weight κ on each off-diagonal entry of W, μ = κ·C on
// each bias. κ = 100 is far above any gradient of the mean NLL a
// log-probability of at least log DirichletProbabilityFloor gives, so the
// largest values reach the regime where the off-diagonal entries (and the
// bias) vanish, at any number of classes.
var dirichletGridSteps = [...]float64{0, 1e-4, 1e-2, 1, 1e2}

// DirichletLambdaGrid returns the default grid of λ, the ODIR weight of
// the off-diagonal entries, among which a cross-validated fit over
// classes classes chooses, increasing: 0 and C(C−1)·10^k for
// k = −4, −2, 0, 2.
func DirichletLambdaGrid(classes int) []float64 {
	return dirichletGrid(float64(classes * (classes - 1)))
}

// DirichletMuGrid returns the default grid of μ, the ODIR weight of the
// bias, increasing: 0 and C·10^k for k = −4, −2, 0, 2.
func DirichletMuGrid(classes int) []float64 { return dirichletGrid(float64(classes)) }

func dirichletGrid(scale float64) []float64 {
	g := make([]float64, len(dirichletGridSteps))
	for i, k := range dirichletGridSteps {
		g[i] = k * scale
	}
	return g
}

// atGridEdge names λ and μ when cross-validation chose the largest
// non-zero value of a grid of several: the best value may lie beyond it.
func (c *DirichletChoice) atGridEdge() []string {
	var edges []string
	for _, g := range []struct {
		name string
		v    float64
		grid []float64
	}{{"lambda", c.Lambda, c.LambdaGrid}, {"mu", c.Mu, c.MuGrid}} {
		if len(g.grid) > 1 && g.v > 0 && g.v == slices.Max(g.grid) {
			edges = append(edges, fmt.Sprintf("%s = %g (the largest of its cross-validation grid)", g.name, g.v))
		}
	}
	return edges
}

// DirichletChoice records the regularisation and variant of a Dirichlet
// fit, and how they were chosen (FitReport.Dirichlet).
type DirichletChoice struct {
	// Variant is DirichletFull, DirichletDiag or DirichletFixDiag.
	Variant string `json:"variant"`
	// Lambda and Mu are the ODIR weights of the final fit.
	Lambda float64 `json:"lambda"`
	Mu     float64 `json:"mu"`
	// Folds is the number of cross-validation folds that chose them; 0
	// when they were fixed.
	Folds int `json:"folds,omitempty"`
	// LambdaGrid and MuGrid are the values cross-validation tried; nil
	// when they were fixed.
	LambdaGrid []float64 `json:"lambda_grid,omitempty"`
	MuGrid     []float64 `json:"mu_grid,omitempty"`
	// HeldOutNLL is the mean held-out NLL of the chosen values over the
	// folds; 0 when they were fixed.
	HeldOutNLL float64 `json:"held_out_nll,omitempty"`
}

// Dirichlet is Dirichlet calibration (Kull et al. 2019, "Beyond
// temperature scaling: obtaining well-calibrated multiclass probabilities
// with Dirichlet calibration"), method MethodDirichlet: matrix scaling of
// the clamped log-probabilities,
//
//	g(z) = softmax(W·ℓ(z) + b),   ℓ(z) = max(log softmax(z), log ε),
//
// ε = DirichletProbabilityFloor, with a C×C matrix W and bias b: C² + C
// parameters. The full variant can change the most probable class.
//
// Fit minimises the mean NLL plus the ODIR penalty (off-diagonal and
// intercept regularisation)
//
//	λ/(C(C−1))·Σ_{i≠j} W_ij² + μ/C·Σ_j b_j²
//
// (dirichletcal's reg_lambda and reg_mu with reg_norm) with L-BFGS and
// analytic gradients, from the current parameters (see Scaler), under
// Options, whose Gaussian prior around the identity also applies, as for
// Matrix. With λ = μ = 0 it is exactly Matrix fitted on ℓ(z). Variant
// restricts W and b: DirichletDiag fits a diagonal W and b, DirichletFixDiag
// W = a·I and b = 0 (the prior then applies to the free parameters only).
// With Folds ≥ 2, Fit first chooses λ and μ by Folds-fold
// cross-validation over LambdaGrid × MuGrid (see Fit).
//
// As a Scaler its parameters are W row by row, then b, as Matrix's, for
// every variant: a restricted variant holds zeros where it has no free
// parameter, so FedAvg's average of such scalers stays in the variant.
//
// The zero value is the full variant with no classes and no
// regularisation (λ = μ = 0, no cross-validation); Fit starts it from the
// identity (W = I, b = 0), whose prediction is softmax(ℓ(z)). Predict
// panics on a Dirichlet without classes.
type Dirichlet struct {
	// W is the C×C matrix, row-major: W[i*C+k] multiplies log-probability
	// k in calibrated logit i.
	W []float64 `json:"w"`
	// B is the bias b, one per class.
	B []float64 `json:"b"`

	// The fields below control Fit and are not part of the sidecar
	// parameters.

	// Variant is DirichletFull, DirichletDiag or DirichletFixDiag; ""
	// means DirichletFull.
	Variant string `json:"-"`
	// Lambda is the ODIR weight λ ≥ 0 of the off-diagonal entries of W;
	// zero means none. With Folds ≥ 2, Fit replaces it with the value
	// the cross-validation chose.
	Lambda float64 `json:"-"`
	// Mu is the ODIR weight μ ≥ 0 of the bias; zero means none. With
	// Folds ≥ 2, Fit replaces it with the value the cross-validation
	// chose.
	Mu float64 `json:"-"`
	// Folds, if at least 2, makes Fit choose λ and μ by cross-validation
	// over that many folds of the set; 0 (or 1) fits Lambda and Mu as
	// they are.
	Folds int `json:"-"`
	// LambdaGrid and MuGrid are the values of λ and μ cross-validation
	// tries, every pair of them; nil means DirichletLambdaGrid and
	// DirichletMuGrid of the set's classes. A variant without
	// off-diagonal entries (diag, fixdiag) tries λ = 0 only; fixdiag,
	// without bias, μ = 0 only.
	LambdaGrid, MuGrid []float64 `json:"-"`
	// Seed draws the assignment of examples to cross-validation folds.
	Seed int64 `json:"-"`
	// Options controls the L-BFGS fits; the zero value runs each to
	// DefaultGradientTol.
	Options FitOptions `json:"-"`

	// fit is the report of the last Fit; nil before it.
	fit *FitReport
}

// NewDirichlet returns the identity Dirichlet scaler (W = I, b = 0) for
// the given number of classes, full variant, with the fixed
// regularisation of a federated fit, DefaultDirichletLambda and
// DefaultDirichletMu, and no cross-validation. It panics if classes < 2.
func NewDirichlet(classes int) *Dirichlet {
	m := NewMatrix(classes)
	return &Dirichlet{W: m.A, B: m.B, Lambda: DefaultDirichletLambda, Mu: DefaultDirichletMu}
}

// Method returns MethodDirichlet.
func (d *Dirichlet) Method() string { return MethodDirichlet }

// LastFit returns a copy of the report of the last Fit, or nil. Its
// Dirichlet field records the variant and the λ and μ of the fit.
func (d *Dirichlet) LastFit() *FitReport { return lastFit(d.fit) }

// Classes returns the number of classes, len(B).
func (d *Dirichlet) Classes() int { return len(d.B) }

// NumParams returns C² + C.
func (d *Dirichlet) NumParams() int { return len(d.W) + len(d.B) }

// Params returns a copy of W (row-major) followed by b.
func (d *Dirichlet) Params() []float64 { return (&Matrix{A: d.W, B: d.B}).Params() }

// SetParams sets W and b from w (W row-major, then b). It returns an
// error unless w holds C² + C finite values.
func (d *Dirichlet) SetParams(w []float64) error {
	if err := checkParamLen(d.Method(), d.NumParams(), w); err != nil {
		return err
	}
	if err := checkFinite("dirichlet parameter", w); err != nil {
		return err
	}
	copy(d.W, w[:len(d.W)])
	copy(d.B, w[len(d.W):])
	return nil
}

// variant returns d.Variant, "" as DirichletFull.
func (d *Dirichlet) variant() string {
	if d.Variant == "" {
		return DirichletFull
	}
	return d.Variant
}

// Fit fits W and b to s, starting from the current parameters (projected
// onto the variant's).
//
// With Folds ≥ 2 it first chooses the regularisation: the examples are
// split into min(Folds, n) folds by a permutation drawn from Seed; for
// each pair (λ, μ) of the grids (see LambdaGrid), a fit on all folds but
// one (to DirichletCVGradientTol; warm-started along the grid and across
// folds, by Newton's method up to DirichletNewtonMaxClasses classes, by
// Newton–CG with exact Hessian-vector products beyond: see
// docs/CALIBRATION.md) is scored by its NLL on the
// held-out fold; the pair of the least NLL summed over all held-out
// examples becomes Lambda and Mu, ties going to the larger λ, then the
// larger μ (the simpler map). The final fit uses all of s and ends at
// the optimum a fit with them fixed ends at, within Options' tolerance:
// unless Options.Prior is negative, it starts at the mean of the folds'
// optima for the chosen pair and goes on by the grid fits' method (see
// docs/CALIBRATION.md); otherwise it runs L-BFGS from the current
// parameters. A set of fewer than 2 examples is fitted with Lambda and Mu
// as they are.
//
// LastFit reports the final fit, with the variant, λ, μ and how they were
// chosen. Fit returns an error, leaving d unchanged, for an invalid or
// empty set, one whose number of classes differs from d's, an unknown
// Variant, negative or non-finite Lambda, Mu or grid values, negative
// Folds, or invalid Options.
func (d *Dirichlet) Fit(s *Set) error {
	if err := fitClasses(d.Method(), d.Classes(), s); err != nil {
		return err
	}
	if err := d.check(); err != nil {
		return fmt.Errorf("dirichlet scaler: %w", err)
	}
	ls := logProbSet(s)
	v := d.variant()
	choice := &DirichletChoice{Variant: v, Lambda: d.Lambda, Mu: d.Mu}
	if v != DirichletFull {
		choice.Lambda = 0
	}
	if v == DirichletFixDiag {
		choice.Mu = 0
	}
	var start []float64          // the folds' mean optimum at the chosen pair
	var warm dirichletWarmFitter // the fitter of the grid fits
	if folds := min(d.Folds, s.Len()); folds >= 2 {
		var err error
		if start, warm, err = d.crossValidate(ls, folds, choice); err != nil {
			return fmt.Errorf("dirichlet scaler: %w", err)
		}
	}
	var x []float64
	var rep FitReport
	var err error
	if start != nil && d.Options.Prior >= 0 {
		// The objective is strictly convex (the prior), so its one
		// optimum is the one a fit from the identity finds: the grid
		// fits' method gets there in a few steps from the folds' optima.
		var u []float64
		if u, rep, err = warm.refit(d.Options).fit(ls, start, choice.Lambda, choice.Mu); err == nil {
			x = make([]float64, s.Classes*s.Classes+s.Classes)
			dirichletExpand(x, u, v, s.Classes)
		}
	} else {
		x0 := NewMatrix(s.Classes).Params()
		if d.Classes() != 0 {
			x0 = d.Params()
		}
		x, rep, err = dirichletFit(ls, x0, v, choice.Lambda, choice.Mu, d.Options)
	}
	if err != nil {
		return fmt.Errorf("dirichlet scaler: %w", err)
	}
	cc := s.Classes * s.Classes
	d.W, d.B = x[:cc:cc], x[cc:]
	d.Lambda, d.Mu = choice.Lambda, choice.Mu
	rep.Dirichlet = choice
	rep.AtBound = choice.atGridEdge()
	d.fit = &rep
	return nil
}

// check checks the fit settings.
func (d *Dirichlet) check() error {
	if !slices.Contains(DirichletVariants(), d.variant()) {
		return fmt.Errorf("variant %q: want one of %s", d.Variant, strings.Join(DirichletVariants(), ", "))
	}
	if err := (ODIR{d.Lambda, d.Mu}).Check(); err != nil {
		return err
	}
	for _, g := range []struct {
		name string
		v    []float64
	}{{"lambda", d.LambdaGrid}, {"mu", d.MuGrid}} {
		for _, v := range g.v {
			if !(v >= 0) || math.IsInf(v, 1) {
				return fmt.Errorf("%s grid holds %v: want finite numbers ≥ 0", g.name, v)
			}
		}
	}
	if d.Folds < 0 {
		return fmt.Errorf("cross-validation folds is %d: want ≥ 0 (0 or 1: no cross-validation)", d.Folds)
	}
	return d.Options.check()
}

// grids returns the λ and μ grids the cross-validation of d tries on c
// classes.
func (d *Dirichlet) grids(c int) (lambdas, mus []float64) {
	lambdas, mus = d.LambdaGrid, d.MuGrid
	if len(lambdas) == 0 {
		lambdas = DirichletLambdaGrid(c)
	}
	if len(mus) == 0 {
		mus = DirichletMuGrid(c)
	}
	switch d.variant() {
	case DirichletDiag:
		lambdas = []float64{0}
	case DirichletFixDiag:
		lambdas, mus = []float64{0}, []float64{0}
	}
	return slices.Clone(lambdas), slices.Clone(mus)
}

// crossValidate sets choice's λ and μ to the pair of d's grids whose fits
// have the least held-out NLL over folds folds of the log-probability set
// ls, and records the search in choice. It returns the mean of the
// folds' optima at that pair (free parameters) and the fitter that found
// them.
func (d *Dirichlet) crossValidate(ls *Set, folds int, choice *DirichletChoice) ([]float64, dirichletWarmFitter, error) {
	lambdas, mus := d.grids(ls.Classes)
	sums, starts, warm, err := d.heldOut(ls, folds, lambdas, mus, dirichletCVSolverFor(ls.Classes))
	if err != nil {
		return nil, nil, err
	}
	best := bestPair(sums)
	choice.Lambda, choice.Mu = lambdas[best/len(mus)], mus[best%len(mus)]
	choice.Folds = folds
	choice.LambdaGrid, choice.MuGrid = lambdas, mus
	choice.HeldOutNLL = sums[best] / float64(ls.Len())
	return starts[best], warm, nil
}

// bestPair returns the grid pair with the least held-out NLL sum. Grids
// increase, so a tie keeps the later, larger, pair.
func bestPair(sums []float64) int {
	best := 0
	for p, sum := range sums {
		if sum <= sums[best] {
			best = p
		}
	}
	return best
}

// heldOut returns, for each pair p = i·len(mus) + j of the grids, the NLL
// summed over every held-out example of folds folds of ls, each fold's
// fit on the others to DirichletCVGradientTol (unless Options asks for
// less), by solver's fitter (dirichletCVSolverFor chooses it),
// warm-started as crossValidateWarm says; the
// folds' sums are added in fold order. It also returns, for each pair,
// the mean of the folds' optima (free parameters), and the fitter.
func (d *Dirichlet) heldOut(ls *Set, folds int, lambdas, mus []float64, solver dirichletCVSolver) (sums []float64, starts [][]float64, warm dirichletWarmFitter, err error) {
	train, test := d.folds(ls, folds)
	pairs := len(lambdas) * len(mus)
	nll := make([]float64, pairs*folds) // nll[p*folds+f]
	warm = solver.fitter(d.variant(), ls.Classes, d.cvOptions())
	starts = make([][]float64, pairs)
	if err = d.crossValidateWarm(warm, train, test, lambdas, mus, snakeOrder(len(lambdas), len(mus)), nll, starts); err != nil {
		return nil, nil, nil, err
	}
	return foldSums(nll, folds), starts, warm, nil
}

// dirichletCVSolver is a solver of the grid fits of a cross-validation
// (dirichletWarmFitter).
type dirichletCVSolver int

const (
	// dirichletCVNewton is Newton's method with the analytic Hessian
	// (dirichletNewton).
	dirichletCVNewton dirichletCVSolver = iota
	// dirichletCVNewtonCG is Newton–CG with exact Hessian-vector products
	// (dirichletNewtonCG).
	dirichletCVNewtonCG
	// dirichletCVKeptLBFGS is L-BFGS keeping its history from fit to fit
	// (dirichletQN), the path beyond DirichletNewtonMaxClasses before
	// Newton–CG, kept as the tests' second method.
	dirichletCVKeptLBFGS
)

// dirichletCVSolverFor returns the solver of the grid fits on c classes:
// Newton's method up to DirichletNewtonMaxClasses, Newton–CG beyond. It
// is the one place that decides.
func dirichletCVSolverFor(c int) dirichletCVSolver {
	if c <= DirichletNewtonMaxClasses {
		return dirichletCVNewton
	}
	return dirichletCVNewtonCG
}

// fitter returns the solver's fitter of variant v on c classes under o.
func (s dirichletCVSolver) fitter(v string, c int, o FitOptions) dirichletWarmFitter {
	switch s {
	case dirichletCVNewton:
		return newDirichletNewton(v, c, o)
	case dirichletCVKeptLBFGS:
		return newDirichletQN(v, c, o)
	}
	return newDirichletNewtonCG(v, c, o)
}

// cvOptions returns the options of the grid fits: d.Options with a
// gradient tolerance of at least DirichletCVGradientTol.
func (d *Dirichlet) cvOptions() FitOptions {
	cv := d.Options
	cv.GradientTol = max(cv.gradientTol(), DirichletCVGradientTol)
	return cv
}

// foldSums returns, for each pair p, the sum of nll[p*folds+f] over the
// folds f, in fold order.
func foldSums(nll []float64, folds int) []float64 {
	sums := make([]float64, len(nll)/folds)
	for p := range sums {
		for _, x := range nll[p*folds : (p+1)*folds] {
			sums[p] += x
		}
	}
	return sums
}

// snakeOrder returns the pairs (i, j) of an nl × nm grid in snake order,
// row i = 0 left to right, row 1 right to left, …: consecutive pairs are
// neighbours.
func snakeOrder(nl, nm int) [][2]int {
	order := make([][2]int, nl*nm)
	for k := range order {
		i, j := k/nm, k%nm
		if i%2 == 1 {
			j = nm - 1 - j
		}
		order[k] = [2]int{i, j}
	}
	return order
}

// folds splits the log-probability set ls into folds training and
// held-out sets, by a permutation drawn from d.Seed: example perm[i]
// is held out of fold i mod folds. Each set keeps ls's order.
func (d *Dirichlet) folds(ls *Set, folds int) (train, test []*Set) {
	rng := rand.New(rand.NewPCG(uint64(d.Seed), 0x6469726963686c74)) // "dirichlt"
	perm := rng.Perm(ls.Len())
	train, test = make([]*Set, folds), make([]*Set, folds)
	for f := range folds {
		var in, out []int
		for i, e := range perm {
			if i%folds == f {
				out = append(out, e)
			} else {
				in = append(in, e)
			}
		}
		// Keep each fold in the set's order, whatever the permutation.
		slices.Sort(in)
		slices.Sort(out)
		train[f], test[f] = ls.Subset(in), ls.Subset(out)
	}
	return train, test
}

// dirichletWarmFitter fits dirichletFit's objective at the grid pairs of
// a cross-validation one after the other, keeping what each fit learnt of
// the objective's curvature for the next: Newton's method
// (dirichletNewton) up to DirichletNewtonMaxClasses classes, Newton–CG
// (dirichletNewtonCG) beyond (dirichletCVSolverFor).
type dirichletWarmFitter interface {
	// fit minimises the objective on the log-probability set ls with
	// ODIR weights lambda and mu from the free parameters u0, to the
	// fitter's gradient tolerance.
	fit(ls *Set, u0 []float64, lambda, mu float64) ([]float64, FitReport, error)
	// predict returns, for each optimum us[f] at (lambda0, mu0) on a
	// training set of n rows, the predicted optimum at (lambda, mu), no
	// row read; nil when it cannot.
	predict(us [][]float64, lambda0, mu0, lambda, mu float64, n int) [][]float64
	// refit returns the fitter of the final fit under o, after the grid
	// fits (the fitter itself is not used after).
	refit(o FitOptions) dirichletWarmFitter
}

// crossValidateWarm fits every grid pair, in the given order, on every
// fold's training set with warm, and writes each fit's held-out NLL,
// summed over the fold's held-out examples, into nll[p*folds+f] for pair
// p = i·len(mus) + j and fold f.
//
// At the first pair the first fold starts at the identity and fold f > 0
// at fold f − 1's optimum. At each next pair fold f starts at warm's
// prediction from its optimum of the previous pair, moved by fold f − 1's
// error of prediction at this pair: the folds share most of their rows,
// so their predictions err alike. Everything runs in one sequence, each
// sum over rows in rowSums' fixed blocks, so the held-out NLLs do not
// depend on the number of threads. It writes the mean of the folds'
// optima at each pair into means[p].
func (d *Dirichlet) crossValidateWarm(warm dirichletWarmFitter, train, test []*Set, lambdas, mus []float64, order [][2]int, nll []float64, means [][]float64) error {
	folds := len(train)
	c := train[0].Classes
	v := d.variant()
	g := make([]float64, c*c+c)
	x := make([]float64, c*c+c)
	us := make([][]float64, folds) // each fold's optimum at the previous pair
	for k, ij := range order {
		lambda, mu := lambdas[ij[0]], mus[ij[1]]
		var pred [][]float64
		if k > 0 {
			prev := order[k-1]
			pred = warm.predict(us, lambdas[prev[0]], mus[prev[1]], lambda, mu, train[0].Len())
		}
		next := make([][]float64, folds)
		for f := range folds {
			var u0 []float64
			switch {
			case k == 0 && f == 0:
				u0 = dirichletReduce(NewMatrix(c).Params(), v, c)
			case k == 0:
				u0 = next[f-1]
			case pred == nil:
				u0 = us[f]
			default:
				u0 = pred[f]
				if f > 0 {
					u0 = slices.Clone(u0)
					for a := range u0 {
						u0[a] += next[f-1][a] - pred[f-1][a]
					}
				}
			}
			u, _, err := warm.fit(train[f], u0, lambda, mu)
			if err != nil {
				return fmt.Errorf("cross-validation fold %d, λ = %v, μ = %v: %w", f+1, lambda, mu, err)
			}
			next[f] = u
			dirichletExpand(x, u, v, c)
			nll[(ij[0]*len(mus)+ij[1])*folds+f] = matrixNLL(g, x, test[f], nil) * float64(test[f].Len())
		}
		mean := make([]float64, len(next[0]))
		for _, u := range next {
			for a, v := range u {
				mean[a] += v
			}
		}
		for a := range mean {
			mean[a] /= float64(folds)
		}
		means[ij[0]*len(mus)+ij[1]] = mean
		us = next
	}
	return nil
}

// dirichletFit minimises the mean NLL of matrix scaling of variant v on
// the log-probability set ls plus the ODIR penalty of lambda and mu and
// the prior of o (on the variant's free parameters), from x0 projected
// onto the variant. It returns the full parameters [W, b].
func dirichletFit(ls *Set, x0 []float64, v string, lambda, mu float64, o FitOptions) ([]float64, FitReport, error) {
	c := ls.Classes
	full := make([]float64, c*c+c)
	gfull := make([]float64, c*c+c)
	r := newRowSums(ls.Len())
	f := func(g, u []float64) float64 {
		dirichletExpand(full, u, v, c)
		val := dirichletLoss(gfull, full, ls, lambda, mu, r, nil)
		dirichletProject(g, gfull, v, c)
		return val
	}
	id := NewMatrix(c).Params()
	identity := dirichletReduce(id, v, c)
	// Precondition as matrix scaling: the clamped log-probabilities are at
	// most 36 in magnitude, but a variant's a multiplies all of them.
	scale := dirichletReduce(matrixScales(ls), v, c)
	u, rep, err := minimizeScaled(withPrior(f, identity, ls.Len(), o), dirichletReduce(x0, v, c), scale, o)
	if err != nil {
		return nil, rep, err
	}
	x := make([]float64, c*c+c)
	dirichletExpand(x, u, v, c)
	return x, rep, nil
}

// dirichletReduce returns the free parameters of variant v that are
// nearest the full parameters x = [W, b]: all of x (full); W's diagonal
// and b (diag); the mean of W's diagonal (fixdiag).
func dirichletReduce(x []float64, v string, c int) []float64 {
	switch v {
	case DirichletDiag:
		u := make([]float64, 2*c)
		for j := range c {
			u[j] = x[j*c+j]
		}
		copy(u[c:], x[c*c:])
		return u
	case DirichletFixDiag:
		var a float64
		for j := range c {
			a += x[j*c+j]
		}
		return []float64{a / float64(c)}
	}
	return slices.Clone(x)
}

// dirichletExpand writes the full parameters [W, b] of variant v's free
// parameters u into x.
func dirichletExpand(x, u []float64, v string, c int) {
	switch v {
	case DirichletDiag:
		clear(x)
		for j := range c {
			x[j*c+j] = u[j]
		}
		copy(x[c*c:], u[c:])
	case DirichletFixDiag:
		clear(x)
		for j := range c {
			x[j*c+j] = u[0]
		}
	default:
		copy(x, u)
	}
}

// dirichletProject writes into gu the gradient in variant v's free
// parameters of a function whose gradient in the full parameters is g
// (the chain rule through dirichletExpand).
func dirichletProject(gu, g []float64, v string, c int) {
	switch v {
	case DirichletDiag:
		for j := range c {
			gu[j] = g[j*c+j]
		}
		copy(gu[c:], g[c*c:])
	case DirichletFixDiag:
		var s float64
		for j := range c {
			s += g[j*c+j]
		}
		gu[0] = s
	default:
		copy(gu, g)
	}
}

// dirichletLoss returns the mean NLL of softmax(Wx + b) on the
// log-probability set ls at x = [W, b] plus the ODIR penalty
// λ/(C(C−1))·Σ_{i≠j} W_ij² + μ/C·Σ_j b_j², and writes its gradient into g,
// summing the rows by r; unless probs is nil it also writes each row's
// softmax there (matrixNLLProbs).
func dirichletLoss(g, x []float64, ls *Set, lambda, mu float64, r *rowSums, probs []float64) float64 {
	f := matrixNLLProbs(g, x, ls, r, probs)
	c := ls.Classes
	kw, kb := lambda/float64(c*(c-1)), mu/float64(c)
	for i := range c {
		for j := range c {
			if i == j {
				continue
			}
			w := x[i*c+j]
			f += kw * w * w
			g[i*c+j] += 2 * kw * w
		}
	}
	for j, b := range x[c*c:] {
		f += kb * b * b
		g[c*c+j] += 2 * kb * b
	}
	return f
}

// logProbSet returns a copy of s with each row of logits replaced by its
// clamped log-probabilities ℓ(z) (dirichletLogProbs). The labels are
// shared with s.
func logProbSet(s *Set) *Set {
	ls := &Set{Logits: make([]float64, len(s.Logits)), Labels: s.Labels, Classes: s.Classes}
	for i := 0; i < len(s.Logits); i += s.Classes {
		dirichletLogProbs(ls.Logits[i:i+s.Classes], s.Logits[i:i+s.Classes])
	}
	return ls
}

// logDirichletFloor is log DirichletProbabilityFloor = −52·log 2.
var logDirichletFloor = math.Log(DirichletProbabilityFloor)

// dirichletLogProbs writes ℓ(z) = max(log softmax(z), log ε) into dst,
// ε = DirichletProbabilityFloor.
func dirichletLogProbs(dst, z []float64) {
	LogSoftmax(dst, z)
	for j, v := range dst {
		dst[j] = max(v, logDirichletFloor)
	}
}

// Predict writes softmax(W·ℓ(z) + b) of each row of logits into dst.
func (d *Dirichlet) Predict(dst, logits []float64) {
	c := d.Classes()
	checkPredict(d.Method(), c, dst, logits)
	lp := make([]float64, c)
	for i := 0; i < len(logits); i += c {
		dirichletLogProbs(lp, logits[i:i+c])
		matrixLogits(dst[i:i+c], d.W, d.B, lp)
		Softmax(dst[i:i+c], dst[i:i+c])
	}
}

func (d *Dirichlet) validate() error { return validateMatrix("w", d.W, d.B) }
