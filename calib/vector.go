package calib

import (
	"fmt"
	"math"
)

// Vector is vector scaling (Guo et al. 2017), method MethodVector:
// g(z) = softmax(a ⊙ z + b), with a per-class scale a and bias b. Unlike
// temperature scaling it can change the most probable class.
//
// Fit minimises the mean NLL with L-BFGS and analytic gradients, from the
// current parameters (see Scaler), under Options.
//
// As a Scaler its parameters are [a_1 … a_C, b_1 … b_C].
//
// The zero value has no classes; Fit starts it from the identity
// (a = 1, b = 0). Predict panics on a Vector without classes.
type Vector struct {
	// A is the per-class scale a.
	A []float64 `json:"a"`
	// B is the per-class bias b.
	B []float64 `json:"b"`
	// Options controls Fit; the zero value is the paper's setting. It is
	// not part of the sidecar parameters.
	Options FitOptions `json:"-"`

	// fit is the report of the last Fit; nil before it.
	fit *FitReport
}

// NewVector returns the identity vector scaler (a = 1, b = 0) for the
// given number of classes. It panics if classes < 2.
func NewVector(classes int) *Vector {
	if classes < 2 {
		panic("calib: NewVector needs at least 2 classes")
	}
	v := &Vector{A: make([]float64, classes), B: make([]float64, classes)}
	for j := range v.A {
		v.A[j] = 1
	}
	return v
}

// Method returns MethodVector.
func (v *Vector) Method() string { return MethodVector }

// LastFit returns a copy of the report of the last Fit, or nil.
func (v *Vector) LastFit() *FitReport { return lastFit(v.fit) }

// Classes returns the number of classes, len(A).
func (v *Vector) Classes() int { return len(v.A) }

// NumParams returns 2C.
func (v *Vector) NumParams() int { return 2 * len(v.A) }

// Params returns a copy of [a, b].
func (v *Vector) Params() []float64 {
	return append(append(make([]float64, 0, v.NumParams()), v.A...), v.B...)
}

// SetParams sets [a, b] = w. It returns an error unless w holds 2C finite
// values.
func (v *Vector) SetParams(w []float64) error {
	if err := checkParamLen(v.Method(), v.NumParams(), w); err != nil {
		return err
	}
	if err := checkFinite("vector parameter", w); err != nil {
		return err
	}
	c := len(v.A)
	copy(v.A, w[:c])
	copy(v.B, w[c:])
	return nil
}

// Fit fits a and b to s by minimising the mean NLL, starting from the
// current parameters. It returns an error, leaving v unchanged, for an
// invalid or empty set, one whose number of classes differs from v's, or
// invalid Options.
func (v *Vector) Fit(s *Set) error {
	if err := fitClasses(v.Method(), v.Classes(), s); err != nil {
		return err
	}
	if err := v.Options.check(); err != nil {
		return fmt.Errorf("vector scaler: %w", err)
	}
	x0 := NewVector(s.Classes).Params()
	if v.Classes() != 0 {
		x0 = v.Params()
	}
	scale := append(featureScales(s.Logits, s.Classes), ones(s.Classes)...)
	r := newRowSums(s.Len())
	x, rep, err := minimizeScaled(withPrior(func(g, x []float64) float64 { return vectorNLL(g, x, s, r) }, NewVector(s.Classes).Params(), s.Len(), v.Options), x0, scale, v.Options)
	if err != nil {
		return fmt.Errorf("vector scaler: %w", err)
	}
	c := s.Classes
	v.A, v.B = x[:c:c], x[c:]
	v.fit = &rep
	return nil
}

// Predict writes softmax(a ⊙ z + b) of each row of logits into dst.
func (v *Vector) Predict(dst, logits []float64) {
	c := v.Classes()
	checkPredict(v.Method(), c, dst, logits)
	for i := 0; i < len(logits); i += c {
		row := dst[i : i+c]
		for j, z := range logits[i : i+c] {
			row[j] = v.A[j]*z + v.B[j]
		}
		Softmax(row, row)
	}
}

func (v *Vector) validate() error {
	if len(v.A) < 2 {
		return fmt.Errorf("a has %d values: want one per class, at least 2", len(v.A))
	}
	if len(v.B) != len(v.A) {
		return fmt.Errorf("b has %d values, a has %d: want one of each per class", len(v.B), len(v.A))
	}
	if err := checkFinite("a", v.A); err != nil {
		return err
	}
	return checkFinite("b", v.B)
}

// vectorNLL returns the mean NLL of softmax(a ⊙ z + b) on s at x = [a, b]
// and writes its gradient into g, summing the rows by r.
func vectorNLL(g, x []float64, s *Set, r *rowSums) float64 {
	c := s.Classes
	a, b := x[:c], x[c:]
	f := r.sum(g, func(lo, hi int, acc []float64) float64 {
		ga, gb := acc[:c], acc[c:]
		zh := make([]float64, c)
		var f float64
		for i := lo; i < hi; i++ {
			y := s.Labels[i]
			z := s.Logits[i*c : (i+1)*c]
			for j, v := range z {
				zh[j] = a[j]*v + b[j]
			}
			lse := LogSumExp(zh)
			f += lse - zh[y]
			for j, v := range z {
				p := math.Exp(zh[j] - lse)
				if j == y {
					p--
				}
				ga[j] += p * v
				gb[j] += p
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
