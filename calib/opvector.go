package calib

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// OPVector is order-preserving vector scaling, method MethodOPVector: the
// intra order-preserving map of Rahimi et al. 2020 ("Intra
// Order-preserving Functions for Calibration of Multi-Class Neural
// Networks", NeurIPS 2020, Theorem 1 and the authors' OrderPreservingModel)
// whose positive weights come from a vector-scaling map (paper App. B.5,
// SPEC §5). It has 2C parameters a and b.
//
// For logits z, let S sort them in descending order, y = S z
// (y_1 ≥ … ≥ y_C), and d_k = y_k − y_{k+1} ≥ 0 the gaps, k = 1 … C−1.
// Rank k gets the weight m_k = softplus(a_k·y_k + b_k) > 0, and the
// calibrated sorted logits are the reverse cumulative sums of
// w_k = d_k·m_k:
//
//	ŷ_k = Σ_{i=k}^{C−1} w_i,   ŷ_C = 0,
//
// and g(z) = softmax(S⁻¹ ŷ). As in the authors' implementation the
// smallest logit maps to 0 (their w_C = 0), m is made positive by
// softplus, and the weight map has one output per class of which the
// last scales no gap: a_C and b_C do not affect g (the paper counts 2C
// parameters). The weight map sees the sorted logits, the authors'
// order-invariant option, so g treats classes symmetrically and is
// continuous; a weight indexed by class instead would jump where two
// logits cross.
//
// Because every w_k ≥ 0, and w_k = 0 exactly when d_k = 0, g preserves the
// order of the logits: the most probable class never changes and tied
// logits get exactly equal probabilities, whatever order the sort puts
// them in. The computation keeps this in floating point: it forms
// ŷ_k − ŷ_1 = −(w_1 + … + w_{k−1}) from the top, a running sum of
// non-negative terms, so z_i ≥ z_j always gives g(z)_i ≥ g(z)_j. With
// a = 0 and every m_k = 1/T it is temperature scaling.
//
// Fit minimises the mean NLL with L-BFGS and analytic gradients, from the
// current parameters (see Scaler), under Options.
//
// As a Scaler its parameters are [a_1 … a_C, b_1 … b_C].
//
// The zero value has no classes; Fit starts it from the identity
// (a = 0, b = softplus⁻¹(1) = log(e − 1), so m ≡ 1 and g(z) = softmax(z)).
// Predict panics on an OPVector without classes.
type OPVector struct {
	// A is the per-rank scale a of the weights' pre-activation.
	A []float64 `json:"a"`
	// B is the per-rank bias b of the weights' pre-activation.
	B []float64 `json:"b"`
	// Options controls Fit; the zero value is the paper's setting. It is
	// not part of the sidecar parameters.
	Options FitOptions `json:"-"`

	// fit is the report of the last Fit; nil before it.
	fit *FitReport
}

// NewOPVector returns the identity order-preserving vector scaler (a = 0,
// b = log(e − 1), so every weight m_j = 1) for the given number of
// classes. It panics if classes < 2.
func NewOPVector(classes int) *OPVector {
	if classes < 2 {
		panic("calib: NewOPVector needs at least 2 classes")
	}
	o := &OPVector{A: make([]float64, classes), B: make([]float64, classes)}
	for j := range o.B {
		o.B[j] = softplusOne
	}
	return o
}

// Method returns MethodOPVector.
func (o *OPVector) Method() string { return MethodOPVector }

// LastFit returns a copy of the report of the last Fit, or nil.
func (o *OPVector) LastFit() *FitReport { return lastFit(o.fit) }

// Classes returns the number of classes, len(A).
func (o *OPVector) Classes() int { return len(o.A) }

// NumParams returns 2C.
func (o *OPVector) NumParams() int { return 2 * len(o.A) }

// Params returns a copy of [a, b].
func (o *OPVector) Params() []float64 {
	return append(append(make([]float64, 0, o.NumParams()), o.A...), o.B...)
}

// SetParams sets [a, b] = w. It returns an error unless w holds 2C finite
// values.
func (o *OPVector) SetParams(w []float64) error {
	if err := checkParamLen(o.Method(), o.NumParams(), w); err != nil {
		return err
	}
	if err := checkFinite("opvector parameter", w); err != nil {
		return err
	}
	c := len(o.A)
	copy(o.A, w[:c])
	copy(o.B, w[c:])
	return nil
}

// Fit fits a and b to s by minimising the mean NLL, starting from the
// current parameters. It returns an error, leaving o unchanged, for an
// invalid or empty set, one whose number of classes differs from o's, or
// invalid Options.
func (o *OPVector) Fit(s *Set) error {
	if err := fitClasses(o.Method(), o.Classes(), s); err != nil {
		return err
	}
	if err := o.Options.check(); err != nil {
		return fmt.Errorf("opvector scaler: %w", err)
	}
	x0 := NewOPVector(s.Classes).Params()
	if o.Classes() != 0 {
		x0 = o.Params()
	}
	d := newOPData(s)
	// a_k multiplies the logit of rank k.
	sorted := make([]float64, len(s.Logits))
	for i := range s.Labels {
		z := s.Row(i)
		for k, j := range d.perm[i*s.Classes : (i+1)*s.Classes] {
			sorted[i*s.Classes+k] = z[j]
		}
	}
	scale := append(featureScales(sorted, s.Classes), ones(s.Classes)...)
	r := newRowSums(s.Len())
	x, rep, err := minimizeScaled(withPrior(func(g, x []float64) float64 { return opVectorNLL(g, x, s, d, r) }, NewOPVector(s.Classes).Params(), s.Len(), o.Options), x0, scale, o.Options)
	if err != nil {
		return fmt.Errorf("opvector scaler: %w", err)
	}
	c := s.Classes
	o.A, o.B = x[:c:c], x[c:]
	o.fit = &rep
	return nil
}

// Predict writes the order-preserving calibrated probabilities of each row
// of logits into dst.
func (o *OPVector) Predict(dst, logits []float64) {
	c := o.Classes()
	checkPredict(o.Method(), c, dst, logits)
	w := newOPWork(c)
	for i := 0; i < len(logits); i += c {
		z := logits[i : i+c]
		w.sort(z)
		for k, j := range w.perm {
			w.m[k] = softplus(o.A[k]*z[j] + o.B[k])
		}
		w.finish(dst[i : i+c])
	}
}

func (o *OPVector) validate() error {
	if len(o.A) < 2 {
		return fmt.Errorf("a has %d values: want one per class, at least 2", len(o.A))
	}
	if len(o.B) != len(o.A) {
		return fmt.Errorf("b has %d values, a has %d: want one of each per class", len(o.B), len(o.A))
	}
	if err := checkFinite("a", o.A); err != nil {
		return err
	}
	return checkFinite("b", o.B)
}

// opVectorNLL returns the mean NLL of the OPVector with parameters
// x = [a, b] on s (sorted as d) and writes its gradient into g, summing
// the rows by r.
func opVectorNLL(g, x []float64, s *Set, d *opData, r *rowSums) float64 {
	c := s.Classes
	a, b := x[:c], x[c:]
	f := r.sum(g, func(lo, hi int, acc []float64) float64 {
		ga, gb := acc[:c], acc[c:]
		m := make([]float64, c)
		sig := make([]float64, c)
		dm := make([]float64, c)
		o := make([]float64, c)
		var f float64
		for i := lo; i < hi; i++ {
			z := s.Row(i)
			perm := d.perm[i*c : (i+1)*c-1] // the last rank scales no gap
			for k, j := range perm {
				m[k], sig[k] = softplusAndLogistic(a[k]*z[j] + b[k])
			}
			f += d.rowNLL(i, m, o, dm)
			for k, j := range perm {
				gu := dm[k] * sig[k]
				ga[k] += gu * z[j]
				gb[k] += gu
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

// opData holds the sort of every row of a set, which depends only on the
// logits, so the fits of the order-preserving scalers compute it once.
type opData struct {
	c     int
	perm  []int32   // n×c: perm[i*c+k] is the class of rank k in row i
	gap   []float64 // n×(c−1): gap[i*(c−1)+k] = y_k − y_{k+1} of row i
	yRank []int32   // rank of each row's label
}

func newOPData(s *Set) *opData {
	c, n := s.Classes, s.Len()
	d := &opData{
		c:     c,
		perm:  make([]int32, n*c),
		gap:   make([]float64, n*(c-1)),
		yRank: make([]int32, n),
	}
	for i, y := range s.Labels {
		z := s.Row(i)
		p := d.perm[i*c : (i+1)*c]
		sortDescending(p, z)
		g := d.gap[i*(c-1) : (i+1)*(c-1)]
		for k := range g {
			g[k] = z[p[k]] - z[p[k+1]]
		}
		d.yRank[i] = int32(slices.Index(p, int32(y)))
	}
	return d
}

// sortDescending writes into perm the classes of z in descending order of
// their logits, ties in class order.
func sortDescending(perm []int32, z []float64) {
	for j := range perm {
		perm[j] = int32(j)
	}
	slices.SortStableFunc(perm, func(i, j int32) int { return cmp.Compare(z[j], z[i]) })
}

// rowNLL returns the NLL of row i of the set under the order-preserving map
// with rank weights m (m_{C−1}, which scales no gap, is not read), and
// writes the derivative of that NLL with respect to each m_k into dm. o is
// scratch space of c values.
//
// The calibrated logits, in rank order and relative to the top one, are
// o_0 = 0 and o_{k+1} = o_k − w_k with w_k = gap_k·m_k. With
// g_k = softmax(o)_k − 1{k = rank of the label}, the derivative with
// respect to w_k is −Σ_{l>k} g_l.
func (d *opData) rowNLL(i int, m, o, dm []float64) float64 {
	c := d.c
	gap := d.gap[i*(c-1) : (i+1)*(c-1)]
	opForward(o, gap, m)
	yr := int(d.yRank[i])
	oy := o[yr]
	var sum float64
	for k, v := range o {
		e := math.Exp(v) // o_0 = 0 is the largest
		o[k] = e
		sum += e
	}
	lse := math.Log(sum)
	clear(dm)
	var suffix float64 // Σ_{l>k} g_l
	for k := c - 2; k >= 0; k-- {
		gl := o[k+1] / sum
		if k+1 == yr {
			gl--
		}
		suffix += gl
		dm[k] = -suffix * gap[k]
	}
	return lse - oy
}

// opForward writes into o, in rank order, the calibrated logits relative to
// the top one: o_0 = 0, o_{k+1} = o_k − gap_k·m_k. A zero gap gives a zero
// step whatever the weight, so tied logits stay exactly tied.
func opForward(o, gap, m []float64) {
	o[0] = 0
	for k, g := range gap {
		step := 0.0
		if g > 0 {
			step = g * m[k]
		}
		o[k+1] = o[k] - step
	}
}

// opWork is the scratch space of one Predict call of an order-preserving
// scaler.
type opWork struct {
	perm []int32
	gap  []float64
	m, o []float64
}

func newOPWork(c int) *opWork {
	return &opWork{
		perm: make([]int32, c),
		gap:  make([]float64, c-1),
		m:    make([]float64, c),
		o:    make([]float64, c),
	}
}

// sort sorts the row z into w.perm and w.gap.
func (w *opWork) sort(z []float64) {
	sortDescending(w.perm, z)
	for k := range w.gap {
		w.gap[k] = z[w.perm[k]] - z[w.perm[k+1]]
	}
}

// finish writes into dst the calibrated probabilities of the row sorted by
// the last call to sort, with the rank weights in w.m.
func (w *opWork) finish(dst []float64) {
	opForward(w.o, w.gap, w.m)
	var sum float64
	for k, v := range w.o {
		e := math.Exp(v)
		w.o[k] = e
		sum += e
	}
	for k, j := range w.perm {
		dst[j] = w.o[k] / sum
	}
}
