package calib

import (
	"fmt"
	"math"
)

// Platt is one-vs-rest Platt (sigmoid) scaling, method MethodPlatt: what
// scikit-learn's CalibratedClassifierCV(method="sigmoid") fits for a
// multiclass model. For each class j it maps the class's decision value,
// its logit z_j, through its own sigmoid
//
//	g_j(z) = σ(a_j·z_j + b_j),  σ(u) = 1/(1 + e^{−u}),
//
// and normalises the C values to sum to 1 (a row whose values sum to 0,
// which only underflow can make, keeps softmax(z), the rule of the binning
// calibrators; scikit-learn returns 1/C there). With scikit-learn's sign
// convention 1/(1 + exp(A·f + B)), A = −a and B = −b. For two classes it
// fits both classes' sigmoids, where scikit-learn fits one, to the
// positive class's decision value.
//
// Fit fits each class's (a_j, b_j) independently, by Newton's method to
// convergence, minimising Platt's (1999) objective as scikit-learn does:
// the mean cross-entropy of σ(a_j·z_j + b_j) against the smoothed targets
// t = (N₊+1)/(N₊+2) for the rows of class j and t = 1/(N₋+2) for the
// others, N₊ and N₋ their counts in the fitted set (a federated client
// uses its own), plus Options.Prior's Gaussian prior around the starting
// identity a = 1, b = 0 (negligible for large sets; Prior < 0 removes it
// and gives scikit-learn's fit).
//
// As a Scaler its parameters are [a_1 … a_C, b_1 … b_C]; a federation
// averages them (FedPlatt, FedAvg).
//
// The zero value has no classes; Fit starts it from a = 1, b = 0. Predict
// panics on a Platt without classes.
type Platt struct {
	// A is the per-class slope a_j.
	A []float64 `json:"a"`
	// B is the per-class intercept b_j.
	B []float64 `json:"b"`
	// Options controls Fit (MaxIterations caps each class's Newton
	// steps; GradientTol; Prior). It is not part of the sidecar
	// parameters.
	Options FitOptions `json:"-"`

	// fit is the report of the last Fit; nil before it.
	fit *FitReport
}

// NewPlatt returns the Platt scaler with a = 1, b = 0 for the given number
// of classes. It panics if classes < 2.
func NewPlatt(classes int) *Platt {
	if classes < 2 {
		panic("calib: NewPlatt needs at least 2 classes")
	}
	p := &Platt{A: ones(classes), B: make([]float64, classes)}
	return p
}

// Method returns MethodPlatt.
func (p *Platt) Method() string { return MethodPlatt }

// LastFit returns a copy of the report of the last Fit, or nil.
func (p *Platt) LastFit() *FitReport { return lastFit(p.fit) }

// Classes returns the number of classes, len(A).
func (p *Platt) Classes() int { return len(p.A) }

// NumParams returns 2C.
func (p *Platt) NumParams() int { return 2 * len(p.A) }

// Params returns a copy of [a, b].
func (p *Platt) Params() []float64 {
	return append(append(make([]float64, 0, p.NumParams()), p.A...), p.B...)
}

// SetParams sets [a, b] = w. It returns an error unless w holds 2C finite
// values.
func (p *Platt) SetParams(w []float64) error {
	if err := checkParamLen(p.Method(), p.NumParams(), w); err != nil {
		return err
	}
	if err := checkFinite("platt parameter", w); err != nil {
		return err
	}
	c := len(p.A)
	copy(p.A, w[:c])
	copy(p.B, w[c:])
	return nil
}

// Fit fits (a_j, b_j) of every class to s, starting from the current
// parameters (see Platt). The report (LastFit) holds the sum over classes
// of their objectives, the largest gradient component and the most Newton
// steps any class took. It returns an error, leaving p unchanged, for an
// invalid or empty set, one whose number of classes differs from p's, or
// invalid Options.
func (p *Platt) Fit(s *Set) error {
	if err := fitClasses(p.Method(), p.Classes(), s); err != nil {
		return err
	}
	if err := p.Options.check(); err != nil {
		return fmt.Errorf("platt scaler: %w", err)
	}
	c, n := s.Classes, s.Len()
	start := NewPlatt(c)
	if p.Classes() != 0 {
		start.A, start.B = append([]float64(nil), p.A...), append([]float64(nil), p.B...)
	}
	counts := make([]float64, c)
	for _, y := range s.Labels {
		counts[y]++
	}
	prob := &logisticProblem{k: 2, x: make([]float64, 2*n), t: make([]float64, n), rho: priorPerRow(p.Options, n), center: []float64{1, 0}}
	rep := FitReport{MaxIterations: p.Options.maxIterations(), Tolerance: p.Options.gradientTol(), Converged: true, Stop: "gradient below tolerance"}
	w := make([]float64, 2)
	for j := range c {
		pos, neg := (counts[j]+1)/(counts[j]+2), 1/(float64(n)-counts[j]+2)
		for i, y := range s.Labels {
			prob.x[2*i], prob.x[2*i+1] = s.Logits[i*c+j], 1
			prob.t[i] = neg
			if y == j {
				prob.t[i] = pos
			}
		}
		w[0], w[1] = start.A[j], start.B[j]
		r := prob.newton(w, []bool{true, true}, rep.MaxIterations, rep.Tolerance)
		if err := checkFinite("platt parameter", w); err != nil || math.IsNaN(r.f) {
			return fmt.Errorf("platt scaler: class %d: the fit diverged", j)
		}
		start.A[j], start.B[j] = w[0], w[1]
		rep.add(j, r)
	}
	p.A, p.B = start.A, start.B
	p.fit = &rep
	return nil
}

// add merges the result of class j's fit into the report of a per-class
// fit: objectives add up, the gradient and iterations are the largest of
// any class, and the first class that did not converge says why.
func (rep *FitReport) add(j int, r logisticResult) {
	rep.Objective += r.f
	rep.Gradient = max(rep.Gradient, r.gradient)
	rep.Iterations = max(rep.Iterations, r.iterations)
	if !r.converged && rep.Converged {
		rep.Converged = false
		rep.Stop = fmt.Sprintf("class %d: %s", j, r.stop)
	}
}

// Predict writes the normalised σ(a_j·z_j + b_j) of each row of logits
// into dst.
func (p *Platt) Predict(dst, logits []float64) {
	c := p.Classes()
	checkPredict(p.Method(), c, dst, logits)
	buf := make([]float64, 2*c)
	g, sm := buf[:c], buf[c:]
	for i := 0; i < len(logits); i += c {
		z := logits[i : i+c]
		for j, v := range z {
			g[j] = logistic(p.A[j]*v + p.B[j])
		}
		Softmax(sm, z)
		normaliseOr(dst[i:i+c], g, sm)
	}
}

func (p *Platt) validate() error {
	if len(p.A) < 2 {
		return fmt.Errorf("a has %d values: want one per class, at least 2", len(p.A))
	}
	if len(p.B) != len(p.A) {
		return fmt.Errorf("b has %d values, a has %d: want one of each per class", len(p.B), len(p.A))
	}
	if err := checkFinite("a", p.A); err != nil {
		return err
	}
	return checkFinite("b", p.B)
}
