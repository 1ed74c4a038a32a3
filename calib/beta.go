package calib

import (
	"fmt"
	"math"
)

// BetaEpsilon is the clip of beta calibration's probabilities: s is taken
// in [ε, 1 − ε] with ε = 2^−52, float64's machine epsilon, as the betacal
// package clips them, so that ln s and ln(1 − s) stay finite.
const BetaEpsilon = 0x1p-52

// Beta is one-vs-rest beta calibration (Kull, Silva Filho and Flach 2017,
// "Beta calibration: a well-founded and easily implemented improvement on
// logistic calibration for binary classifiers"), method MethodBeta. For
// each class j, with s = p̂_j the class-j softmax probability clipped to
// [BetaEpsilon, 1 − BetaEpsilon], it predicts the three-parameter beta
// calibration map
//
//	g_j(s) = 1 / (1 + 1/(e^{c_j} · s^{a_j} / (1 − s)^{b_j}))
//	       = σ(a_j·ln s − b_j·ln(1 − s) + c_j),
//
// and normalises the C values to sum to 1 (a row whose values sum to 0,
// which only underflow can make, keeps p̂).
//
// Fit fits each class independently as the paper and the betacal package
// do: a logistic regression of the indicator 1[y = j] on the features
// [ln s, −ln(1 − s)] with intercept c_j, under the constraint
// a_j, b_j ≥ 0 that keeps the map monotone. Where betacal drops a feature
// whose unconstrained coefficient is negative and refits the other, Fit
// finds the exact constrained optimum of the convex objective: the best
// feasible of the fits with both features, with a_j = 0, with b_j = 0 and
// with both 0 (each by Newton's method to convergence), which is
// betacal's answer whenever that is feasible and optimal. The objective
// adds Options.Prior's Gaussian prior around the starting identity
// a = b = 1, c = 0 (g_j(s) = s), negligible for large sets; Prior < 0
// gives betacal's unregularised fit.
//
// As a Scaler its parameters are [a_1 … a_C, b_1 … b_C, c_1 … c_C]; a
// federation averages them (FedBeta, FedAvg) and projects a and b onto
// [0, ∞) after each round (Project).
//
// The zero value has no classes; Fit starts it from the identity. Predict
// panics on a Beta without classes.
type Beta struct {
	// A is the per-class coefficient a_j ≥ 0 of ln s.
	A []float64 `json:"a"`
	// B is the per-class coefficient b_j ≥ 0 of −ln(1 − s).
	B []float64 `json:"b"`
	// C is the per-class intercept c_j.
	C []float64 `json:"c"`
	// Options controls Fit (MaxIterations caps each Newton run;
	// GradientTol; Prior). It is not part of the sidecar parameters.
	Options FitOptions `json:"-"`

	// fit is the report of the last Fit; nil before it.
	fit *FitReport
}

// NewBeta returns the identity beta calibrator (a = b = 1, c = 0) for the
// given number of classes. It panics if classes < 2.
func NewBeta(classes int) *Beta {
	if classes < 2 {
		panic("calib: NewBeta needs at least 2 classes")
	}
	return &Beta{A: ones(classes), B: ones(classes), C: make([]float64, classes)}
}

// Method returns MethodBeta.
func (b *Beta) Method() string { return MethodBeta }

// LastFit returns a copy of the report of the last Fit, or nil.
func (b *Beta) LastFit() *FitReport { return lastFit(b.fit) }

// Classes returns the number of classes, len(A).
func (b *Beta) Classes() int { return len(b.A) }

// NumParams returns 3C.
func (b *Beta) NumParams() int { return 3 * len(b.A) }

// Params returns a copy of [a, b, c].
func (b *Beta) Params() []float64 {
	return append(append(append(make([]float64, 0, b.NumParams()), b.A...), b.B...), b.C...)
}

// SetParams sets [a, b, c] = w. It returns an error unless w holds 3C
// finite values with a, b ≥ 0.
func (b *Beta) SetParams(w []float64) error {
	if err := checkParamLen(b.Method(), b.NumParams(), w); err != nil {
		return err
	}
	if err := checkFinite("beta parameter", w); err != nil {
		return err
	}
	k := len(b.A)
	for i, v := range w[:2*k] {
		if v < 0 {
			return fmt.Errorf("beta parameter[%d] is %v: a and b must be ≥ 0", i, v)
		}
	}
	copy(b.A, w[:k])
	copy(b.B, w[k:2*k])
	copy(b.C, w[2*k:])
	return nil
}

// Projector is a Scaler whose parameters are constrained to a convex set
// (Beta's a, b ≥ 0): Project moves a parameter vector, in place, to the
// nearest point the scaler can take, so that a federated server can keep
// an averaged and noisy update feasible (post-processing, free of privacy
// cost) before SetParams.
type Projector interface {
	Project(w []float64)
}

// Project sets each negative a_j and b_j of the parameter vector w (the
// layout of Params) to 0, the nearest point a Beta can take: the
// projection a federated server applies after each averaged, possibly
// noisy, update.
func (b *Beta) Project(w []float64) {
	for i := range min(len(w), 2*len(b.A)) {
		w[i] = max(w[i], 0)
	}
}

// betaFeatures returns ln s and −ln(1 − s) of the probability p clipped to
// [BetaEpsilon, 1 − BetaEpsilon].
func betaFeatures(p float64) (lns, negLn1s float64) {
	s := min(max(p, BetaEpsilon), 1-BetaEpsilon)
	return math.Log(s), -math.Log(1 - s)
}

// betaActiveSets are the faces of a, b ≥ 0 Fit searches, as which of
// (a, b, c) are free: the interior first, whose optimum is the answer
// whenever it is feasible.
var betaActiveSets = [...][3]bool{{true, true, true}, {false, true, true}, {true, false, true}, {false, false, true}}

// Fit fits (a_j, b_j, c_j) of every class to s, starting from the current
// parameters (see Beta). The report (LastFit) holds the sum over classes
// of their objectives, the largest component of the projected gradient
// (for a coefficient held at 0, how far the objective still decreases
// inward) and the most Newton steps any one run took. It returns an
// error, leaving b unchanged, for an invalid or empty set, one whose
// number of classes differs from b's, or invalid Options.
func (b *Beta) Fit(s *Set) error {
	if err := fitClasses(b.Method(), b.Classes(), s); err != nil {
		return err
	}
	if err := b.Options.check(); err != nil {
		return fmt.Errorf("beta calibration: %w", err)
	}
	c, n := s.Classes, s.Len()
	start := NewBeta(c)
	if b.Classes() != 0 {
		if err := b.validate(); err != nil {
			return fmt.Errorf("beta calibration: starting parameters: %w", err)
		}
		start.SetParams(b.Params()) //nolint:errcheck // validated above
	}
	probs := make([]float64, len(s.Logits))
	SoftmaxRows(probs, s.Logits, c)
	prob := &logisticProblem{k: 3, x: make([]float64, 3*n), t: make([]float64, n), rho: priorPerRow(b.Options, n), center: []float64{1, 1, 0}}
	rep := FitReport{MaxIterations: b.Options.maxIterations(), Tolerance: b.Options.gradientTol(), Converged: true, Stop: "gradient below tolerance"}
	w, best, g := make([]float64, 3), make([]float64, 3), make([]float64, 3)
	for j := range c {
		for i, y := range s.Labels {
			prob.x[3*i], prob.x[3*i+1] = betaFeatures(probs[i*c+j])
			prob.x[3*i+2] = 1
			prob.t[i] = 0
			if y == j {
				prob.t[i] = 1
			}
		}
		var bestR logisticResult
		found := false
		for _, free := range betaActiveSets {
			w[0], w[1], w[2] = start.A[j], start.B[j], start.C[j]
			for a := range 2 {
				if !free[a] {
					w[a] = 0
				}
			}
			r := prob.newton(w, free[:], rep.MaxIterations, rep.Tolerance)
			if w[0] < 0 || w[1] < 0 || math.IsNaN(r.f) {
				continue // infeasible: the optimum lies on another face
			}
			if !found || r.f < bestR.f {
				copy(best, w)
				bestR, found = r, true
			}
			if free[0] && free[1] {
				break // a feasible interior optimum is the constrained one
			}
		}
		if err := checkFinite("beta parameter", best); err != nil || !found {
			return fmt.Errorf("beta calibration: class %d: the fit diverged", j)
		}
		// The measure of convergence on the constraint a, b ≥ 0: the
		// free components' gradient, and for a coefficient at 0 the
		// decrease that moving it inward would still give.
		bestR.f = prob.eval(best, g, nil)
		bestR.gradient = math.Abs(g[2])
		for a := range 2 {
			if best[a] > 0 {
				bestR.gradient = max(bestR.gradient, math.Abs(g[a]))
			} else {
				bestR.gradient = max(bestR.gradient, -g[a])
			}
		}
		if bestR.converged && bestR.gradient > rep.Tolerance {
			bestR.converged, bestR.stop = false, "the optimum lies on a face the fit did not search"
		}
		start.A[j], start.B[j], start.C[j] = best[0], best[1], best[2]
		rep.add(j, bestR)
	}
	b.A, b.B, b.C = start.A, start.B, start.C
	b.fit = &rep
	return nil
}

// Predict writes the normalised beta maps of each row of logits into dst.
func (b *Beta) Predict(dst, logits []float64) {
	c := b.Classes()
	checkPredict(b.Method(), c, dst, logits)
	buf := make([]float64, 2*c)
	g, p := buf[:c], buf[c:]
	for i := 0; i < len(logits); i += c {
		Softmax(p, logits[i:i+c])
		for j, v := range p {
			lns, negLn1s := betaFeatures(v)
			g[j] = logistic(b.A[j]*lns + b.B[j]*negLn1s + b.C[j])
		}
		normaliseOr(dst[i:i+c], g, p)
	}
}

func (b *Beta) validate() error {
	k := len(b.A)
	if k < 2 {
		return fmt.Errorf("a has %d values: want one per class, at least 2", k)
	}
	if len(b.B) != k || len(b.C) != k {
		return fmt.Errorf("a, b and c have %d, %d and %d values: want one of each per class", k, len(b.B), len(b.C))
	}
	for i, v := range [][]float64{b.A, b.B, b.C} {
		if err := checkFinite([]string{"a", "b", "c"}[i], v); err != nil {
			return err
		}
	}
	for j := range k {
		if b.A[j] < 0 || b.B[j] < 0 {
			return fmt.Errorf("class %d has a = %v, b = %v: want a, b ≥ 0", j, b.A[j], b.B[j])
		}
	}
	return nil
}
