package calib

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
)

// Defaults of Dirichlet calibration.
const (
	// DefaultDirichletLambda and DefaultDirichletMu are the ODIR
	// regularisation of NewDirichlet, the scaler a federation averages:
	// λ = μ = 10⁻³, the middle of DirichletGrid. A federated fit cannot
	// cross-validate on rows it never sees, so it uses these fixed values.
	DefaultDirichletLambda = 1e-3
	DefaultDirichletMu     = 1e-3
	// DefaultDirichletFolds is the number of cross-validation folds of a
	// central fit (calib.New).
	DefaultDirichletFolds = 5
)

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

// DirichletGrid returns the regularisation strengths among which a
// cross-validated Dirichlet fit chooses, in increasing order: each value v
// is tried as λ = μ = v.
func DirichletGrid() []float64 { return []float64{0, 1e-4, 1e-3, 1e-2, 1e-1} }

// Dirichlet is Dirichlet calibration (Kull et al. 2019, "Beyond
// temperature scaling: obtaining well-calibrated multiclass probabilities
// with Dirichlet calibration"), method MethodDirichlet: matrix scaling of
// the log-probabilities,
//
//	g(z) = softmax(W·log softmax(z) + b),
//
// with a C×C matrix W and bias b: C² + C parameters. It can change the
// most probable class.
//
// Fit minimises the mean NLL plus the ODIR penalty (off-diagonal and
// intercept regularisation)
//
//	λ/(C(C−1))·Σ_{i≠j} W_ij² + μ/C·Σ_j b_j²
//
// with L-BFGS and analytic gradients, from the current parameters (see
// Scaler), under Options (whose Gaussian prior around the identity also
// applies, as for Matrix). With λ = μ = 0 it is exactly Matrix fitted on
// the log-probabilities. With Folds ≥ 2, Fit first chooses λ = μ among
// DirichletGrid by Folds-fold cross-validation (see Fit).
//
// As a Scaler its parameters are W row by row, then b, as Matrix's.
//
// The zero value has no classes and no regularisation (λ = μ = 0, no
// cross-validation); Fit starts it from the identity (W = I, b = 0),
// whose prediction is softmax(z). Predict panics on a Dirichlet without
// classes.
type Dirichlet struct {
	// W is the C×C matrix, row-major: W[i*C+k] multiplies log-probability
	// k in calibrated logit i.
	W []float64 `json:"w"`
	// B is the bias b, one per class.
	B []float64 `json:"b"`

	// The fields below control Fit and are not part of the sidecar
	// parameters.

	// Lambda is the ODIR weight λ ≥ 0 of the off-diagonal entries of W;
	// zero means none. With Folds ≥ 2, Fit replaces it with the value
	// the cross-validation chose.
	Lambda float64 `json:"-"`
	// Mu is the ODIR weight μ ≥ 0 of the bias; zero means none. With
	// Folds ≥ 2, Fit replaces it with the value the cross-validation
	// chose.
	Mu float64 `json:"-"`
	// Folds, if at least 2, makes Fit choose λ = μ by cross-validation
	// over that many folds of the set; 0 (or 1) fits Lambda and Mu as
	// they are.
	Folds int `json:"-"`
	// Seed draws the assignment of examples to cross-validation folds.
	Seed int64 `json:"-"`
	// Options controls the L-BFGS fits; the zero value is the paper's
	// setting.
	Options FitOptions `json:"-"`
}

// NewDirichlet returns the identity Dirichlet scaler (W = I, b = 0) for
// the given number of classes, with the fixed regularisation of a
// federated fit, DefaultDirichletLambda and DefaultDirichletMu, and no
// cross-validation. It panics if classes < 2.
func NewDirichlet(classes int) *Dirichlet {
	m := NewMatrix(classes)
	return &Dirichlet{W: m.A, B: m.B, Lambda: DefaultDirichletLambda, Mu: DefaultDirichletMu}
}

// Method returns MethodDirichlet.
func (d *Dirichlet) Method() string { return MethodDirichlet }

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

// Fit fits W and b to s, starting from the current parameters.
//
// With Folds ≥ 2 it first chooses the regularisation: the examples are
// split into min(Folds, n) folds by a permutation drawn from Seed; for
// each v of DirichletGrid, a fit with λ = μ = v from the identity on all
// folds but one is scored by its NLL on the held-out fold; the v of the
// least NLL summed over all held-out examples (the smallest on a tie)
// becomes Lambda and Mu. The final fit uses all of s. A set of fewer than
// 2 examples is fitted with Lambda and Mu as they are.
//
// Fit returns an error, leaving d unchanged, for an invalid or empty set,
// one whose number of classes differs from d's, negative or non-finite
// Lambda or Mu, negative Folds, or invalid Options.
func (d *Dirichlet) Fit(s *Set) error {
	if err := fitClasses(d.Method(), d.Classes(), s); err != nil {
		return err
	}
	if err := d.check(); err != nil {
		return fmt.Errorf("dirichlet scaler: %w", err)
	}
	ls := logProbSet(s)
	lambda, mu := d.Lambda, d.Mu
	if folds := min(d.Folds, s.Len()); folds >= 2 {
		v, err := d.crossValidate(ls, folds)
		if err != nil {
			return fmt.Errorf("dirichlet scaler: %w", err)
		}
		lambda, mu = v, v
	}
	x0 := NewMatrix(s.Classes).Params()
	if d.Classes() != 0 {
		x0 = d.Params()
	}
	x, err := dirichletFit(ls, x0, lambda, mu, d.Options)
	if err != nil {
		return fmt.Errorf("dirichlet scaler: %w", err)
	}
	cc := s.Classes * s.Classes
	d.W, d.B = x[:cc:cc], x[cc:]
	d.Lambda, d.Mu = lambda, mu
	return nil
}

// check checks the fit settings.
func (d *Dirichlet) check() error {
	if err := (ODIR{d.Lambda, d.Mu}).Check(); err != nil {
		return err
	}
	if d.Folds < 0 {
		return fmt.Errorf("cross-validation folds is %d: want ≥ 0 (0 or 1: no cross-validation)", d.Folds)
	}
	return d.Options.check()
}

// crossValidate returns the v of DirichletGrid whose fits with λ = μ = v
// have the least held-out NLL over folds folds of the log-probability set
// ls.
func (d *Dirichlet) crossValidate(ls *Set, folds int) (float64, error) {
	n := ls.Len()
	rng := rand.New(rand.NewPCG(uint64(d.Seed), 0x6469726963686c74)) // "dirichlt"
	perm := rng.Perm(n)
	train, test := make([]*Set, folds), make([]*Set, folds)
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
	// The fits, one per grid value and fold, are independent: they run in
	// parallel, and their held-out NLLs are added in fold order, so the
	// choice does not depend on the number of goroutines.
	grid := DirichletGrid()
	jobs := len(grid) * folds
	nll, errs := make([]float64, jobs), make([]error, jobs)
	identity := NewMatrix(ls.Classes).Params()
	workers := min(runtime.GOMAXPROCS(0), jobs)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			g := make([]float64, len(identity))
			for j := w; j < jobs; j += workers {
				v, f := grid[j/folds], j%folds
				x, err := dirichletFit(train[f], identity, v, v, d.Options)
				if err != nil {
					errs[j] = fmt.Errorf("cross-validation fold %d, λ = μ = %v: %w", f+1, v, err)
					continue
				}
				nll[j] = matrixNLL(g, x, test[f]) * float64(test[f].Len())
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	best, bestNLL := 0.0, math.Inf(1)
	for i, v := range grid {
		var sum float64
		for _, x := range nll[i*folds : (i+1)*folds] {
			sum += x
		}
		if sum < bestNLL {
			best, bestNLL = v, sum
		}
	}
	return best, nil
}

// dirichletFit minimises the mean NLL of matrix scaling on the
// log-probability set ls plus the ODIR penalty of lambda and mu and the
// prior of o, from x0.
func dirichletFit(ls *Set, x0 []float64, lambda, mu float64, o FitOptions) ([]float64, error) {
	identity := NewMatrix(ls.Classes).Params()
	f := func(g, x []float64) float64 { return dirichletLoss(g, x, ls, lambda, mu) }
	return minimizeLBFGS(withPrior(f, identity, ls.Len(), o), x0, o)
}

// dirichletLoss returns the mean NLL of softmax(Wx + b) on the
// log-probability set ls at x = [W, b] plus the ODIR penalty
// λ/(C(C−1))·Σ_{i≠j} W_ij² + μ/C·Σ_j b_j², and writes its gradient into g.
func dirichletLoss(g, x []float64, ls *Set, lambda, mu float64) float64 {
	f := matrixNLL(g, x, ls)
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
// log-probabilities, log softmax(z), which are finite for finite logits.
// The labels are shared with s.
func logProbSet(s *Set) *Set {
	ls := &Set{Logits: make([]float64, len(s.Logits)), Labels: s.Labels, Classes: s.Classes}
	for i := 0; i < len(s.Logits); i += s.Classes {
		LogSoftmax(ls.Logits[i:i+s.Classes], s.Logits[i:i+s.Classes])
	}
	return ls
}

// Predict writes softmax(W·log softmax(z) + b) of each row of logits into
// dst.
func (d *Dirichlet) Predict(dst, logits []float64) {
	c := d.Classes()
	checkPredict(d.Method(), c, dst, logits)
	lp := make([]float64, c)
	for i := 0; i < len(logits); i += c {
		LogSoftmax(lp, logits[i:i+c])
		matrixLogits(dst[i:i+c], d.W, d.B, lp)
		Softmax(dst[i:i+c], dst[i:i+c])
	}
}

func (d *Dirichlet) validate() error { return validateMatrix("w", d.W, d.B) }
