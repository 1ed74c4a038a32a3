package calib

import (
	"fmt"
	"math"
	"runtime"
	"sync"
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
// the minimiser is that root or a bound. Fit finds it by Newton's method
// on log T safeguarded by bisection of a bracket (Numerical Recipes'
// rtsafe), which converges for every input, quadratically near the root;
// it stops when a step is below 1e-12 in log T. The result does not
// depend on the starting T. When the NLL does not depend on T at all
// (every row's logits equal) Fit keeps the current T, or 1.
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
// Gradient is |dNLL/dlog T| at the result; AtBound names T when it ended
// at MinTemperature or MaxTemperature.
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
// derivative in log T at the result, and T at a bound.
func fitTemperatureRows[F float32 | float64, L int | int32](t *Temperature, s tempRows[F, L]) {
	T, steps, converged := fitTemperatureWarm(s, t.start())
	t.T = T
	f, d1, _ := tempNLL(s, 1/T, make([]float64, s.c))
	rep := &FitReport{
		Converged:     converged,
		Iterations:    steps,
		MaxIterations: tempMaxSteps,
		Tolerance:     tempTol,
		Objective:     f,
		// dNLL/dlog T = −β·dNLL/dβ.
		Gradient: math.Abs(d1 / T),
		Stop:     "Newton step below tolerance",
	}
	switch {
	case T == MinTemperature:
		rep.AtBound = []string{fmt.Sprintf("t = %v (lower bound)", MinTemperature)}
		rep.Stop = "lower bound, the NLL still decreasing"
	case T == MaxTemperature:
		rep.AtBound = []string{fmt.Sprintf("t = %v (upper bound)", MaxTemperature)}
		rep.Stop = "upper bound, the NLL still decreasing"
	case !converged:
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

// warmMinRows is the fewest rows of a many-class set that
// fitTemperatureWarm warm-starts: 256 rows in its subsample.
const warmMinRows = 256 * warmStride

// warmStarts reports whether fitTemperatureWarm starts a set of n rows of
// c classes from the minimiser on every warmStride-th row: a set of more
// than 4·tempBlock rows, or of at least warmMinRows rows holding more
// logits than 4·tempBlock rows of 10 classes (ImageNet's 50,000 × 1,000,
// whose every pass is as long as 5·10⁶ rows of 10 classes).
func warmStarts(n, c int) bool {
	return n > 4*tempBlock || (n >= warmMinRows && n*c > 4*tempBlock*10)
}

// fitTemperatureWarm is fitTemperature, started for a large set (see
// warmStarts) from the minimiser on every warmStride-th row: that fit
// costs a 64th of a pass per step, and its T is close enough to the
// whole set's that Newton then needs two or three passes instead of five
// to eight. The minimiser is the same; only the path to it changes.
func fitTemperatureWarm[F float32 | float64, L int | int32](s tempRows[F, L], start float64) (float64, int, bool) {
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
	warm, _, _ := fitTemperature(sub, start)
	sub.rows = nil
	return fitTemperature(s, warm)
}

// fitTemperature returns the T in [MinTemperature, MaxTemperature] that
// minimises the mean NLL of softmax(z/T) on s, starting from start. It
// works on v = log β = −log T, where φ(v) = dNLL/dβ (e^v) is
// non-decreasing, and finds the root of φ by safeguarded Newton inside a
// bracket that starts as the whole interval. Each evaluation of φ is a
// pass over the rows, so the interval's ends are evaluated only when the
// iterates reach one of them (the NLL is then monotone on the interval
// and the end is the answer): a fit costs a pass per Newton step.
//
// It also returns the number of steps taken and whether the search
// converged: a step below tempTol, a stationary point, or an end of the
// interval where the NLL still decreases outward. It fails to only if
// tempMaxSteps steps do not get there.
func fitTemperature[F float32 | float64, L int | int32](s tempRows[F, L], start float64) (t float64, steps int, converged bool) {
	vmin, vmax := -math.Log(MaxTemperature), -math.Log(MinTemperature)
	buf := make([]float64, s.c)
	v := -math.Log(start)
	phi, dphi := tempPhi(s, v, buf)
	if phi == 0 { // a stationary point of the convex NLL: the minimum
		return start, 0, true
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
	converged = false
	for steps < tempMaxSteps {
		steps++
		// A Newton step beyond an end not yet evaluated: evaluate it. If
		// φ has no root inside, the end is the answer; else the end
		// bounds the bracket as assumed.
		if next := v - phi/dphi; next <= vmin && lo == vmin {
			if _, d, _ := tempNLL(s, math.Exp(vmin), buf); d >= 0 {
				return MaxTemperature, steps, true
			}
			lo = math.Nextafter(vmin, vmax) // evaluated: not evaluated again
		} else if next >= vmax && hi == vmax {
			if _, d, _ := tempNLL(s, math.Exp(vmax), buf); d <= 0 {
				return MinTemperature, steps, true
			}
			hi = math.Nextafter(vmax, vmin)
		}
		if ((v-hi)*dphi-phi)*((v-lo)*dphi-phi) > 0 || math.Abs(2*phi) > math.Abs(dxOld*dphi) {
			// Newton would leave the bracket or is converging too slowly.
			dxOld = dx
			dx = (hi - lo) / 2
			v = lo + dx
		} else {
			dxOld = dx
			dx = phi / dphi
			v -= dx
		}
		if math.Abs(dx) < tempTol {
			converged = true
			break
		}
		phi, dphi = tempPhi(s, v, buf)
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
		if _, d, _ := tempNLL(s, math.Exp(vmax), buf); d <= 0 {
			return MinTemperature, steps, true
		}
	case lo == vmin && v < vmin+4*tempTol:
		if _, d, _ := tempNLL(s, math.Exp(vmin), buf); d >= 0 {
			return MaxTemperature, steps, true
		}
	}
	return math.Exp(-v), steps, converged
}

// tempPhi returns φ(v) = dNLL/dβ at β = e^v and its derivative in v,
// β·d²NLL/dβ².
func tempPhi[F float32 | float64, L int | int32](s tempRows[F, L], v float64, buf []float64) (phi, dphi float64) {
	beta := math.Exp(v)
	_, d1, d2 := tempNLL(s, beta, buf)
	return d1, beta * d2
}

// tempBlock is the number of rows whose NLL sums tempNLL computes as one
// unit: blocks run in parallel, and their sums are added in block order,
// so the result does not depend on the number of goroutines. A set of at
// most one block is summed row by row in order.
const tempBlock = 16384

// tempNLL returns the mean NLL of softmax(β·z) on s and its first and
// second derivatives in β. buf is scratch space of s.Classes values.
//
// With x = z − max z, the NLL of a row is log Σ_j e^{βx_j} − βx_y, its
// derivative E[x] − x_y and its second derivative Var[x], the moments
// under softmax(βx).
func tempNLL[F float32 | float64, L int | int32](s tempRows[F, L], beta float64, buf []float64) (f, d1, d2 float64) {
	n := s.len()
	blocks := (n + tempBlock - 1) / tempBlock
	if blocks <= 1 {
		f, d1, d2 = tempNLLRows(s, 0, n, beta, buf)
		return f / float64(n), d1 / float64(n), d2 / float64(n)
	}
	sums := make([][3]float64, blocks)
	workers := min(runtime.GOMAXPROCS(0), blocks)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			scratch := make([]float64, s.c)
			for b := w; b < blocks; b += workers {
				lo := b * tempBlock
				sums[b][0], sums[b][1], sums[b][2] = tempNLLRows(s, lo, min(lo+tempBlock, n), beta, scratch)
			}
		})
	}
	wg.Wait()
	for _, b := range sums {
		f, d1, d2 = f+b[0], d1+b[1], d2+b[2]
	}
	return f / float64(n), d1 / float64(n), d2 / float64(n)
}

// tempNLLRows returns the sums over rows lo to hi of s (positions in its
// selection) of the NLL of softmax(β·z) and of its first and second
// derivatives in β. float32 logits are converted exactly as they are
// read, so the sums equal those over their float64 copy.
func tempNLLRows[F float32 | float64, L int | int32](s tempRows[F, L], lo, hi int, beta float64, buf []float64) (f, d1, d2 float64) {
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
		var vr float64
		for j, v := range z {
			d := float64(v) - m - mean
			vr += buf[j] * d * d
		}
		xy := float64(z[y]) - m
		f += math.Log(sum) - beta*xy
		d1 += mean - xy
		d2 += vr / sum
	}
	return f, d1, d2
}
