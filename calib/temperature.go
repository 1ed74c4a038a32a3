package calib

import (
	"fmt"
	"math"
)

// Bounds of the temperature that Temperature.Fit searches.
const (
	MinTemperature = 0.01
	MaxTemperature = 100
)

// Temperature is temperature scaling (Guo et al. 2017), method MethodTemp:
// g(z) = softmax(z/T) with T > 0. It never changes the most probable class.
//
// Fit minimises the mean negative log-likelihood (NLL) over
// T ∈ [MinTemperature, MaxTemperature]. With β = 1/T the mean NLL is
// convex in β (its second derivative is the mean variance of the logits
// under softmax(βz)), so its derivative has at most one sign change and
// the minimiser is that root or a bound. Fit finds it by Halley's (or
// Newton's) method on log T safeguarded by bisection of a bracket
// (Numerical Recipes' rtsafe), which converges for every input, cubically
// near the root; it stops when the next step would be below 1e-12 in
// log T. The result does not depend on the starting T, to that
// tolerance. When the NLL does not depend on T at all (every row's logits
// equal) Fit keeps the current T, or 1.
//
// As a Scaler its one parameter is T itself (SPEC §6: FedTemp averages
// the temperatures, starting from T = 1).
//
// The zero value has no classes and T = 0: Fit sets both. Predict panics
// on a Temperature without classes or with T ≤ 0.
type Temperature struct {
	// T is the temperature; the constructor sets 1, the identity.
	T float64 `json:"t"`
	// C is the number of classes.
	C int `json:"classes"`

	// fit is the report of the last Fit; nil before it.
	fit *FitReport
}

// NewTemperature returns the identity temperature scaler (T = 1) for the
// given number of classes. It panics if classes < 2.
func NewTemperature(classes int) *Temperature {
	if classes < 2 {
		panic("calib: NewTemperature needs at least 2 classes")
	}
	return &Temperature{T: 1, C: classes}
}

// Method returns MethodTemp.
func (t *Temperature) Method() string { return MethodTemp }

// LastFit returns a copy of the report of the last Fit, or nil. Its
// Iterations are the steps taken on the whole set (after the warm start
// of a large one), each a pass over the rows; its Objective and Gradient,
// |dNLL/dlog T|, are at the result; AtBound names T when it ended at
// MinTemperature or MaxTemperature.
func (t *Temperature) LastFit() *FitReport { return lastFit(t.fit) }

// Classes returns the number of classes.
func (t *Temperature) Classes() int { return t.C }

// NumParams returns 1, also for the zero value.
func (t *Temperature) NumParams() int { return 1 }

// Params returns []float64{T}.
func (t *Temperature) Params() []float64 { return []float64{t.T} }

// SetParams sets T = w[0]. It returns an error unless w holds one finite
// T > 0.
func (t *Temperature) SetParams(w []float64) error {
	if err := checkParamLen(t.Method(), 1, w); err != nil {
		return err
	}
	if !(w[0] > 0) || math.IsInf(w[0], 1) {
		return fmt.Errorf("temperature %v: want a finite T > 0", w[0])
	}
	t.T = w[0]
	return nil
}

// Fit sets T to the minimiser of the mean NLL of s over
// [MinTemperature, MaxTemperature] (see Temperature). It returns an error,
// leaving t unchanged, for an invalid or empty set or one whose number of
// classes differs from t's.
func (t *Temperature) Fit(s *Set) error {
	if err := fitClasses(t.Method(), t.C, s); err != nil {
		return err
	}
	fitTemperatureRows(t, setRows(s))
	t.C = s.Classes
	return nil
}

// FitFloat32 is Fit on float32 rows read in place (Float32Fitter): the
// same T as Fit on the rows converted to a Set, without the copy.
func (t *Temperature) FitFloat32(r *Float32Rows) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if r.Len() == 0 {
		return fmt.Errorf("cannot fit: %w", ErrEmpty)
	}
	if t.C != 0 && t.C != r.Classes {
		return fmt.Errorf("%s scaler is for %d classes but the rows have %d", t.Method(), t.C, r.Classes)
	}
	fitTemperatureRows(t, tempRows[float32, int32]{logits: r.Logits, labels: r.Labels, rows: r.Rows, c: r.Classes})
	t.C = r.Classes
	return nil
}

// fitTemperatureRows sets t.T to the minimiser of the mean NLL on s and
// records the report of the fit: the steps, the objective and its
// derivative in log T at the result (from the fit's last pass over the
// rows, which was at the result), and T at a bound.
func fitTemperatureRows[F float32 | float64, L int | int32](t *Temperature, s tempRows[F, L]) {
	r := fitTemperatureWarm(s, t.start())
	t.T = r.t
	rep := &FitReport{
		Converged:     r.converged,
		Iterations:    r.steps,
		MaxIterations: tempMaxSteps,
		Tolerance:     tempTol,
		Objective:     r.at.f,
		// dNLL/dlog T = −β·dNLL/dβ.
		Gradient: math.Abs(r.at.beta * r.at.d1),
		Stop:     "step below tolerance",
	}
	switch {
	case r.t == MinTemperature:
		rep.AtBound = []string{fmt.Sprintf("t = %v (lower bound)", MinTemperature)}
		rep.Stop = "lower bound, the NLL still decreasing"
	case r.t == MaxTemperature:
		rep.AtBound = []string{fmt.Sprintf("t = %v (upper bound)", MaxTemperature)}
		rep.Stop = "upper bound, the NLL still decreasing"
	case !r.converged:
		rep.Stop = "step limit"
	}
	t.fit = rep
}

// start is where a fit starts: the current T when it is in range, else 1.
func (t *Temperature) start() float64 {
	if t.T >= MinTemperature && t.T <= MaxTemperature {
		return t.T
	}
	return 1
}

// tempRows are the rows a temperature fit reads: the logits of every row
// (float64 of a Set, or float32 of a logits file's block, converted as
// they are read), their labels, the rows used (nil: all) and the classes.
type tempRows[F float32 | float64, L int | int32] struct {
	logits []F
	labels []L
	rows   []int
	c      int
}

// setRows returns every row of s.
func setRows(s *Set) tempRows[float64, int] {
	return tempRows[float64, int]{logits: s.Logits, labels: s.Labels, c: s.Classes}
}

func (r tempRows[F, L]) len() int {
	if r.rows != nil {
		return len(r.rows)
	}
	return len(r.labels)
}

// Predict writes softmax(z/T) of each row of logits into dst.
func (t *Temperature) Predict(dst, logits []float64) {
	checkPredict(t.Method(), t.C, dst, logits)
	if !(t.T > 0) {
		panic("calib: Predict on a temp scaler with T ≤ 0")
	}
	c := t.C
	for i := 0; i < len(logits); i += c {
		row := dst[i : i+c]
		for j, v := range logits[i : i+c] {
			row[j] = v / t.T
		}
		Softmax(row, row)
	}
}

func (t *Temperature) validate() error {
	if t.C < 2 {
		return fmt.Errorf("classes is %d: want at least 2", t.C)
	}
	if !(t.T > 0) || math.IsInf(t.T, 1) {
		return fmt.Errorf("t is %v: want a finite temperature > 0", t.T)
	}
	return nil
}

// tempTol is the step in log T below which fitTemperature stops.
const tempTol = 1e-12

// tempMaxSteps is the cap on fitTemperature's steps: bisection alone
// halves the bracket of width log 10⁴ below tempTol in 44 steps.
const tempMaxSteps = 200

// warmStride is the stride of the rows on which fitTemperatureWarm first
// fits a large set: one row in 64.
const warmStride = 64

// warmRows is the most rows of a set of few classes that
// fitTemperatureWarm fits without a warm start.
const warmRows = 1 << 16

// warmMinRows is the fewest rows of a many-class set that
// fitTemperatureWarm warm-starts: 256 rows in its subsample.
const warmMinRows = 256 * warmStride

// warmStarts reports whether fitTemperatureWarm starts a set of n rows of
// c classes from the minimiser on every warmStride-th row: a set of more
// than warmRows rows, or of at least warmMinRows rows holding more
// logits than warmRows rows of 10 classes (ImageNet's 50,000 × 1,000,
// whose every pass is as long as 5·10⁶ rows of 10 classes).
func warmStarts(n, c int) bool {
	return n > warmRows || (n >= warmMinRows && n*c > warmRows*10)
}

// fitTemperatureWarm is fitTemperature, started for a large set (see
// warmStarts) from the minimiser on every warmStride-th row: that fit
// costs a 64th of a pass per step, and its T is close enough to the
// whole set's that two or three passes over the whole set follow
// instead of four to seven. The minimiser is the same, to the fit's
// tolerance; only the path to it changes.
func fitTemperatureWarm[F float32 | float64, L int | int32](s tempRows[F, L], start float64) tempFit {
	n := s.len()
	if !warmStarts(n, s.c) {
		return fitTemperature(s, start)
	}
	sub := s
	sub.rows = make([]int, 0, n/warmStride+1)
	for k := 0; k < n; k += warmStride {
		i := k
		if s.rows != nil {
			i = s.rows[k]
		}
		sub.rows = append(sub.rows, i)
	}
	warm := fitTemperature(sub, start)
	sub.rows = nil
	return fitTemperature(s, warm.t)
}

// tempFit is the result of fitTemperature.
type tempFit struct {
	// t is the minimiser found.
	t float64
	// steps is the number of steps taken, each a pass over the rows.
	steps int
	// converged is false when the search stopped at tempMaxSteps.
	converged bool
	// at is the last pass over the rows, at the result: β = 1/t to
	// rounding.
	at tempEval
}

// fitTemperature returns the T in [MinTemperature, MaxTemperature] that
// minimises the mean NLL of softmax(z/T) on s, starting from start. It
// works on v = log β = −log T, where φ(v) = dNLL/dβ (e^v) is
// non-decreasing, and finds the root of φ inside a bracket that starts
// as the whole interval by Numerical Recipes' rtsafe with Halley's step
// (cubic convergence) in place of Newton's where its correction to
// Newton's is modest: the second derivative of φ comes from the same
// pass as φ and the first (the third central moment of the logits). A
// step that would leave the bracket, or shrink it too slowly, bisects it
// instead. Each evaluation of φ is a pass over the rows, so the
// interval's ends are evaluated only when the iterates reach one of them
// (the NLL is then monotone on the interval and the end is the answer).
//
// It stops at the last point evaluated once the step from there is below
// tempTol: that point is within tempTol in log T of the root, and its
// pass is the report at the result, so no pass is made only to report.
// It also returns the number of steps taken and whether the search
// converged: a step below tempTol, a stationary point, or an end of the
// interval where the NLL still decreases outward. It fails to only if
// tempMaxSteps steps do not get there.
func fitTemperature[F float32 | float64, L int | int32](s tempRows[F, L], start float64) tempFit {
	vmin, vmax := -math.Log(MaxTemperature), -math.Log(MinTemperature)
	sums := newTempSums(s)
	v := -math.Log(start)
	e := sums.at(math.Exp(v))
	phi, dphi, ddphi := e.phi()
	if phi == 0 { // a stationary point of the convex NLL: the minimum
		return tempFit{t: start, converged: true, at: e}
	}
	// The bracket [lo, hi] holds the root when there is one inside the
	// interval: φ(lo) < 0 < φ(hi), the ends taken as evaluated.
	lo, hi := vmin, vmax
	if phi < 0 {
		lo = v
	} else {
		hi = v
	}
	dxOld := vmax - vmin
	dx := dxOld
	steps, converged := 0, false
	for steps < tempMaxSteps {
		step := phi / dphi // Newton's
		if h := phi * ddphi / (2 * dphi * dphi); math.Abs(h) <= 0.5 {
			step /= 1 - h // Halley's
		}
		// A step beyond an end not yet evaluated: evaluate it. If φ has
		// no root inside, the end is the answer; else the end bounds the
		// bracket as assumed.
		if next := v - step; next <= vmin && lo == vmin {
			if end := sums.at(math.Exp(vmin)); end.d1 >= 0 {
				return tempFit{t: MaxTemperature, steps: steps, converged: true, at: end}
			}
			lo = math.Nextafter(vmin, vmax) // evaluated: not evaluated again
		} else if next >= vmax && hi == vmax {
			if end := sums.at(math.Exp(vmax)); end.d1 <= 0 {
				return tempFit{t: MinTemperature, steps: steps, converged: true, at: end}
			}
			hi = math.Nextafter(vmax, vmin)
		}
		next := v - step
		dxOld = dx
		if !(next >= lo && next <= hi) || math.Abs(2*step) > math.Abs(dxOld) {
			// The step would leave the bracket or shrinks too slowly.
			dx = (hi - lo) / 2
			next = lo + dx
		} else {
			dx = step
		}
		if math.Abs(dx) < tempTol {
			converged = true
			break
		}
		steps++
		v = next
		e = sums.at(math.Exp(v))
		phi, dphi, ddphi = e.phi()
		if phi == 0 {
			converged = true
			break
		}
		if phi < 0 {
			lo = v
		} else {
			hi = v
		}
	}
	// At an end of the interval, the root may lie beyond it: then the NLL
	// is monotone on the interval, and the end is the minimiser.
	switch {
	case hi == vmax && v > vmax-4*tempTol:
		if end := sums.at(math.Exp(vmax)); end.d1 <= 0 {
			return tempFit{t: MinTemperature, steps: steps, converged: true, at: end}
		}
	case lo == vmin && v < vmin+4*tempTol:
		if end := sums.at(math.Exp(vmin)); end.d1 >= 0 {
			return tempFit{t: MaxTemperature, steps: steps, converged: true, at: end}
		}
	}
	return tempFit{t: math.Exp(-v), steps: steps, converged: converged, at: e}
}

// tempEval is one pass over the rows of a temperature fit: the mean NLL
// of softmax(β·z) and its first three derivatives in β.
type tempEval struct {
	beta, f, d1, d2, d3 float64
}

// phi returns φ(v) = dNLL/dβ at β = e^v and its first and second
// derivatives in v: β·d²NLL/dβ² and β·d²NLL/dβ² + β²·d³NLL/dβ³.
func (e tempEval) phi() (phi, dphi, ddphi float64) {
	return e.d1, e.beta * e.d2, e.beta*e.d2 + e.beta*e.beta*e.d3
}

// tempSums evaluates the NLL of a temperature fit over the rows of a set,
// the rows summed in parallel and deterministically by rowSums. It is not
// safe for concurrent use.
type tempSums[F float32 | float64, L int | int32] struct {
	s    tempRows[F, L]
	rows *rowSums
	acc  [3]float64
}

func newTempSums[F float32 | float64, L int | int32](s tempRows[F, L]) *tempSums[F, L] {
	return &tempSums[F, L]{s: s, rows: newRowSums(s.len())}
}

// at returns the mean NLL of softmax(β·z) over the rows and its first
// three derivatives in β.
func (ts *tempSums[F, L]) at(beta float64) tempEval {
	d := ts.acc[:]
	f := ts.rows.sum(d, func(lo, hi int, acc []float64) float64 {
		f, d1, d2, d3 := tempNLLRows(ts.s, lo, hi, beta, make([]float64, ts.s.c))
		acc[0], acc[1], acc[2] = d1, d2, d3
		return f
	})
	n := float64(ts.s.len())
	return tempEval{beta: beta, f: f / n, d1: d[0] / n, d2: d[1] / n, d3: d[2] / n}
}

// tempNLLRows returns the sums over rows lo to hi of s (positions in its
// selection) of the NLL of softmax(β·z) and of its first three
// derivatives in β. float32 logits are converted exactly as they are
// read, so the sums equal those over their float64 copy. buf is scratch
// space of s.c values.
//
// With x = z − max z, the NLL of a row is log Σ_j e^{βx_j} − βx_y and its
// derivatives are E[x] − x_y, Var[x] and the third central moment
// E[(x − E[x])³], the moments under softmax(βx).
func tempNLLRows[F float32 | float64, L int | int32](s tempRows[F, L], lo, hi int, beta float64, buf []float64) (f, d1, d2, d3 float64) {
	c := s.c
	for k := lo; k < hi; k++ {
		i := k
		if s.rows != nil {
			i = s.rows[k]
		}
		y := int(s.labels[i])
		z := s.logits[i*c : (i+1)*c]
		m := float64(z[0])
		for _, v := range z[1:] {
			m = max(m, float64(v))
		}
		var sum float64
		for j, v := range z {
			e := math.Exp(beta * (float64(v) - m))
			buf[j] = e
			sum += e
		}
		var mean float64
		for j, v := range z {
			mean += buf[j] * (float64(v) - m)
		}
		mean /= sum
		var vr, k3 float64
		for j, v := range z {
			d := float64(v) - m - mean
			vr += buf[j] * d * d
			k3 += buf[j] * d * d * d
		}
		xy := float64(z[y]) - m
		f += math.Log(sum) - beta*xy
		d1 += mean - xy
		d2 += vr / sum
		d3 += k3 / sum
	}
	return f, d1, d2, d3
}
