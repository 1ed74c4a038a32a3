package calib

import (
	"fmt"
	"math"
)

// Matrix is matrix scaling (Guo et al. 2017), method MethodMatrix:
// g(z) = softmax(Az + b) with a C×C matrix A and bias b. It has C² + C
// parameters and can change the most probable class.
//
// Fit minimises the mean NLL with L-BFGS and analytic gradients, from the
// current parameters (see Scaler), under Options.
//
// As a Scaler its parameters are A row by row, then b.
//
// The zero value has no classes; Fit starts it from the identity
// (A = I, b = 0). Predict panics on a Matrix without classes.
type Matrix struct {
	// A is the C×C matrix, row-major: A[i*C+k] multiplies logit k in
	// calibrated logit i.
	A []float64 `json:"a"`
	// B is the bias b, one per class.
	B []float64 `json:"b"`
	// Options controls Fit; the zero value is the paper's setting. It is
	// not part of the sidecar parameters.
	Options FitOptions `json:"-"`

	// fit is the report of the last Fit; nil before it.
	fit *FitReport
}

// NewMatrix returns the identity matrix scaler (A = I, b = 0) for the
// given number of classes. It panics if classes < 2.
func NewMatrix(classes int) *Matrix {
	if classes < 2 {
		panic("calib: NewMatrix needs at least 2 classes")
	}
	m := &Matrix{A: make([]float64, classes*classes), B: make([]float64, classes)}
	for j := range classes {
		m.A[j*classes+j] = 1
	}
	return m
}

// Method returns MethodMatrix.
func (m *Matrix) Method() string { return MethodMatrix }

// LastFit returns a copy of the report of the last Fit, or nil.
func (m *Matrix) LastFit() *FitReport { return lastFit(m.fit) }

// Classes returns the number of classes, len(B).
func (m *Matrix) Classes() int { return len(m.B) }

// NumParams returns C² + C.
func (m *Matrix) NumParams() int { return len(m.A) + len(m.B) }

// Params returns a copy of A (row-major) followed by b.
func (m *Matrix) Params() []float64 {
	return append(append(make([]float64, 0, m.NumParams()), m.A...), m.B...)
}

// SetParams sets A and b from w (A row-major, then b). It returns an error
// unless w holds C² + C finite values.
func (m *Matrix) SetParams(w []float64) error {
	if err := checkParamLen(m.Method(), m.NumParams(), w); err != nil {
		return err
	}
	if err := checkFinite("matrix parameter", w); err != nil {
		return err
	}
	copy(m.A, w[:len(m.A)])
	copy(m.B, w[len(m.A):])
	return nil
}

// Fit fits A and b to s by minimising the mean NLL, starting from the
// current parameters. It returns an error, leaving m unchanged, for an
// invalid or empty set, one whose number of classes differs from m's, or
// invalid Options.
func (m *Matrix) Fit(s *Set) error {
	if err := fitClasses(m.Method(), m.Classes(), s); err != nil {
		return err
	}
	if err := m.Options.check(); err != nil {
		return fmt.Errorf("matrix scaler: %w", err)
	}
	x0 := NewMatrix(s.Classes).Params()
	if m.Classes() != 0 {
		x0 = m.Params()
	}
	r := newRowSums(s.Len())
	x, rep, err := minimizeScaled(withPrior(func(g, x []float64) float64 { return matrixNLL(g, x, s, r) }, NewMatrix(s.Classes).Params(), s.Len(), m.Options), x0, matrixScales(s), m.Options)
	if err != nil {
		return fmt.Errorf("matrix scaler: %w", err)
	}
	cc := s.Classes * s.Classes
	m.A, m.B = x[:cc:cc], x[cc:]
	m.fit = &rep
	return nil
}

// Predict writes softmax(Az + b) of each row of logits into dst.
func (m *Matrix) Predict(dst, logits []float64) {
	c := m.Classes()
	checkPredict(m.Method(), c, dst, logits)
	for i := 0; i < len(logits); i += c {
		matrixLogits(dst[i:i+c], m.A, m.B, logits[i:i+c])
		Softmax(dst[i:i+c], dst[i:i+c])
	}
}

func (m *Matrix) validate() error { return validateMatrix("a", m.A, m.B) }

// validateMatrix checks the parameters of a matrix map read from a file:
// the C×C matrix a, named name, and the bias b of C ≥ 2 values, all
// finite.
func validateMatrix(name string, a, b []float64) error {
	c := len(b)
	if c < 2 {
		return fmt.Errorf("b has %d values: want one per class, at least 2", c)
	}
	if len(a) != c*c {
		return fmt.Errorf("%s has %d values: want %d×%d = %d for %d classes", name, len(a), c, c, c*c, c)
	}
	if err := checkFinite(name, a); err != nil {
		return err
	}
	return checkFinite("b", b)
}

// matrixScales returns the preconditioning scales (minimizeScaled) of
// the parameters [A, b] of a matrix map of the rows of s: A_ik scales
// with feature k, b not at all.
func matrixScales(s *Set) []float64 {
	c := s.Classes
	fs := featureScales(s.Logits, c)
	scale := ones(c*c + c)
	for i := range c {
		copy(scale[i*c:(i+1)*c], fs)
	}
	return scale
}

// ones returns n ones.
func ones(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = 1
	}
	return v
}

// matrixLogits writes Az + b into dst.
func matrixLogits(dst, a, b, z []float64) {
	c := len(z)
	for i := range dst {
		row := a[i*c : (i+1)*c]
		v := b[i]
		for k, zk := range z {
			v += row[k] * zk
		}
		dst[i] = v
	}
}

// matrixNLL returns the mean NLL of softmax(Az + b) on s at x = [A, b] and
// writes its gradient into g, summing the rows by r (newRowSums(s.Len())
// when nil).
func matrixNLL(g, x []float64, s *Set, r *rowSums) float64 {
	return matrixNLLProbs(g, x, s, r, nil)
}

// matrixNLLProbs is matrixNLL that also writes each row's softmax(Az + b)
// into probs (row-major, s.Len()×C), unless probs is nil: what the
// Hessian-vector products at x (matrixHessVec) need.
func matrixNLLProbs(g, x []float64, s *Set, r *rowSums, probs []float64) float64 {
	c := s.Classes
	cc := c * c
	a, b := x[:cc], x[cc:]
	if r == nil {
		r = newRowSums(s.Len())
	}
	f := r.sum(g, func(lo, hi int, acc []float64) float64 {
		ga, gb := acc[:cc], acc[cc:]
		zh := make([]float64, c)
		var f float64
		for i := lo; i < hi; i++ {
			y := s.Labels[i]
			z := s.Logits[i*c : (i+1)*c]
			matrixLogits(zh, a, b, z)
			lse := LogSumExp(zh)
			f += lse - zh[y]
			for j := range zh {
				p := math.Exp(zh[j] - lse)
				if probs != nil {
					probs[i*c+j] = p
				}
				if j == y {
					p--
				}
				gb[j] += p
				if p == 0 {
					continue
				}
				row := ga[j*c : (j+1)*c]
				for k, zk := range z {
					row[k] += p * zk
				}
			}
		}
		return f
	})
	n := float64(s.Len())
	for j := range g {
		g[j] /= n
	}
	return f / n
}
