package calib

import (
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"
)

// IsotonicTieResolution is the resolution below which the exact isotonic
// fit takes two scores as one: sorted scores are merged into the group
// of the first score of the group while they exceed it by less than
// 10⁻¹⁵, the resolution of float64 that scikit-learn's IsotonicRegression
// merges duplicate inputs at (np.finfo(np.float64).resolution).
const IsotonicTieResolution = 1e-15

// fitExact fits b to the labelled logits of s by the exact isotonic
// regression of each class (see Isotonic), leaving b unchanged on error.
func (b *Isotonic) fitExact(s *Set) error {
	if err := checkFit(s); err != nil {
		return err
	}
	return fitExactTo(b, setRows(s))
}

// FitFloat32 is Fit on float32 rows read in place (Float32Fitter): the
// calibrator Fit gives on the rows converted to a Set, bit for bit. The
// exact fit (Bins zero) makes no float64 copy of the rows; a binned fit
// accumulates its histograms from such a copy.
func (b *Isotonic) FitFloat32(r *Float32Rows) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if r.Len() == 0 {
		return fmt.Errorf("cannot fit: %w", ErrEmpty)
	}
	if b.Bins != 0 {
		s := &Set{Classes: r.Classes, Logits: make([]float64, 0, r.Len()*r.Classes), Labels: make([]int, 0, r.Len())}
		for k := range r.Len() {
			i := k
			if r.Rows != nil {
				i = r.Rows[k]
			}
			for _, v := range r.Logits[i*r.Classes : (i+1)*r.Classes] {
				s.Logits = append(s.Logits, float64(v))
			}
			s.Labels = append(s.Labels, int(r.Labels[i]))
		}
		return b.Fit(s)
	}
	return fitExactTo(b, tempRows[float32, int32]{logits: r.Logits, labels: r.Labels, rows: r.Rows, c: r.Classes})
}

// fitExactRows returns the breakpoints of the exact fit of each class to
// the valid, non-empty rows r, the classes on up to GOMAXPROCS
// goroutines. It holds the rows' probabilities (8 bytes per row and
// class) and their labels, not a copy of the logits.
func fitExactRows[F float32 | float64, L int | int32](r tempRows[F, L]) (xs, ys [][]float64) {
	n, c := r.len(), r.c
	// The probabilities class by class (column-major), so that each
	// class's fit reads its n scores contiguously.
	probs := make([]float64, n*c)
	labels := make([]int, n)
	row := make([]float64, c)
	for k := range n {
		i := k
		if r.rows != nil {
			i = r.rows[k]
		}
		for j, v := range r.logits[i*c : (i+1)*c] {
			row[j] = float64(v)
		}
		Softmax(row, row)
		for j, v := range row {
			probs[j*n+k] = v
		}
		labels[k] = int(r.labels[i])
	}
	// The classes are independent: one worker fits every workers-th
	// class, each into its own slot, so the result does not depend on
	// the number of workers.
	xs, ys = make([][]float64, c), make([][]float64, c)
	workers := min(runtime.GOMAXPROCS(0), c)
	var wg sync.WaitGroup
	for k := range workers {
		wg.Go(func() {
			w := &exactWork{}
			for j := k; j < c; j += workers {
				xs[j], ys[j] = w.fit(probs[j*n:(j+1)*n], labels, j)
			}
		})
	}
	wg.Wait()
	return xs, ys
}

// fitExactTo sets b to the exact fit of the valid, non-empty rows r
// (fitExactRows), or returns an error, leaving b unchanged, when its
// breakpoints would hold more than MaxSize values.
func fitExactTo[F float32 | float64, L int | int32](b *Isotonic, r tempRows[F, L]) error {
	xs, ys := fitExactRows(r)
	total := 0
	for _, x := range xs {
		total += 2 * len(x)
	}
	if total > MaxSize {
		return fmt.Errorf("exact isotonic regression of %d rows and %d classes keeps %d breakpoint values, more than the %d a calibrator may hold: fit on bins (a bin exponent, calibrate --bins-exp)", r.len(), r.c, total, MaxSize)
	}
	*b = Isotonic{X: xs, Y: ys}
	return nil
}

// exactWork holds the scratch space of fitting the classes of an exact
// Isotonic one after another; the zero value is ready to use.
type exactWork struct {
	pos, neg []float64 // the scores of the rows of the class and of the others
	pts      []scorePoint
	x, y, w  []float64
}

// scorePoint is one row's class-j score and 0/1 target.
type scorePoint struct{ x, y float64 }

// fit returns the breakpoints of the exact isotonic fit of class j to the
// rows' class-j scores with their labels: sorted by score
// (then target), scores within IsotonicTieResolution of their group's
// first merged into it at their mean target and summed weight, pooled
// by PAV, clipped to [0, 1], and reduced to the points where the fitted
// value changes plus the two ends. It allocates the returned slices.
func (w *exactWork) fit(scores []float64, labels []int, j int) (x, y []float64) {
	// Sorting by (score, target) is sorting the two targets' scores
	// apart and merging them, targets 0 first among equal scores: two
	// sorts of plain float64s instead of one of pairs.
	w.pos, w.neg = w.pos[:0], w.neg[:0]
	for i, l := range labels {
		if l == j {
			w.pos = append(w.pos, scores[i])
		} else {
			w.neg = append(w.neg, scores[i])
		}
	}
	slices.Sort(w.pos)
	slices.Sort(w.neg)
	w.pts = w.pts[:0]
	a, b := 0, 0
	for a < len(w.neg) || b < len(w.pos) {
		if b == len(w.pos) || a < len(w.neg) && w.neg[a] <= w.pos[b] {
			w.pts = append(w.pts, scorePoint{w.neg[a], 0})
			a++
		} else {
			w.pts = append(w.pts, scorePoint{w.pos[b], 1})
			b++
		}
	}
	w.x, w.y, w.w = mergeTies(w.pts, w.x[:0], w.y[:0], w.w[:0])
	pavInPlace(w.y, w.w)
	for i, v := range w.y {
		w.y[i] = min(max(v, 0), 1)
	}
	return compressBreakpoints(w.x, w.y)
}

// mergeTies appends to x, y and wt the distinct scores of the sorted
// points pts, their mean targets and their counts, as scikit-learn's
// _make_unique: a point less than IsotonicTieResolution above the first
// score of the current group joins the group, whose score is that first
// score.
func mergeTies(pts []scorePoint, x, y, wt []float64) ([]float64, []float64, []float64) {
	cur := pts[0].x
	var sw, swy float64
	for _, p := range pts {
		if p.x-cur >= IsotonicTieResolution {
			x, y, wt = append(x, cur), append(y, swy/sw), append(wt, sw)
			cur, sw, swy = p.x, 1, p.y
			continue
		}
		sw++
		swy += p.y
	}
	return append(x, cur), append(y, swy/sw), append(wt, sw)
}

// pavInPlace replaces y by its weighted least-squares non-decreasing fit
// under the positive weights w (which it overwrites), by the
// pool-adjacent-violators algorithm as scikit-learn's
// _inplace_contiguous_isotonic_regression runs it: a single pass that
// pools any non-increasing run (ties included) and backtracks, O(n). It
// computes what pav does, in scikit-learn's order of operations, so that
// the pooled blocks and their means agree with scikit-learn's bit for bit
// on the same input. It panics when the lengths differ.
func pavInPlace(y, w []float64) {
	n := len(y)
	if len(w) != n {
		panic(fmt.Sprintf("calib: pav of %d values with %d weights", n, len(w)))
	}
	// target describes the blocks: if [i..k] is a block, target[i] = k
	// and target[k] = i; at a block's start i, w[i] is its total weight
	// and y[i] its weighted mean.
	target := make([]int, n)
	for i := range target {
		target[i] = i
	}
	i := 0
	for i < n {
		k := target[i] + 1
		if k == n {
			break
		}
		if y[i] < y[k] {
			i = k
			continue
		}
		swy, sw := w[i]*y[i], w[i]
		for {
			prev := y[k]
			swy += w[k] * y[k]
			sw += w[k]
			k = target[k] + 1
			if k == n || prev < y[k] {
				y[i], w[i] = swy/sw, sw
				target[i], target[k-1] = k-1, i
				if i > 0 {
					i = target[i-1]
				}
				break
			}
		}
	}
	for i := 0; i < n; {
		k := target[i] + 1
		for m := i + 1; m < k; m++ {
			y[m] = y[i]
		}
		i = k
	}
}

// compressBreakpoints returns copies of the points (x, y) reduced as
// scikit-learn's IsotonicRegression reduces them: the first and last
// point, and every point whose value differs from that of the point
// before it or of the point after it. Linear interpolation between the
// kept points gives the same function on [x_0, x_last].
func compressBreakpoints(x, y []float64) (kx, ky []float64) {
	n := len(x)
	for i := range n {
		if i == 0 || i == n-1 || y[i] != y[i-1] || y[i] != y[i+1] {
			kx, ky = append(kx, x[i]), append(ky, y[i])
		}
	}
	return slices.Clip(kx), slices.Clip(ky)
}

// interpolate returns the piecewise-linear map through the breakpoints
// (x, y) at v, as scikit-learn's IsotonicRegression.predict with
// out_of_bounds="clip" computes it (NumPy's interp): v is clipped to
// [x_0, x_last]; at x_last, and for a single breakpoint, the value is
// y_last; otherwise, with k the last breakpoint at or below v, it is
// s·(v − x_k) + y_k with s = (y_(k+1) − y_k)/(x_(k+1) − x_k).
func interpolate(x, y []float64, v float64) float64 {
	last := len(x) - 1
	switch {
	case v >= x[last]: // also a single breakpoint
		return y[last]
	case v <= x[0]:
		return y[0]
	}
	// The first breakpoint above v is k+1: 1 ≤ k+1 ≤ last.
	k := sort.Search(last, func(i int) bool { return x[i+1] > v })
	s := (y[k+1] - y[k]) / (x[k+1] - x[k])
	return s*(v-x[k]) + y[k]
}

// Breakpoints returns the number of breakpoints of an exact fit, summed
// over the classes: 0 for a binned fit.
func (b *Isotonic) Breakpoints() int {
	n := 0
	for _, x := range b.X {
		n += len(x)
	}
	return n
}

// validateExact checks the breakpoints of an exact fit: one list per
// class for at least 2 classes, x and y of one length ≥ 1, x finite and
// strictly increasing in [0, 1], y non-decreasing in [0, 1].
func (b *Isotonic) validateExact() error {
	if len(b.X) != len(b.Y) {
		return fmt.Errorf("x has breakpoints of %d classes but y of %d", len(b.X), len(b.Y))
	}
	if len(b.X) < 2 {
		return fmt.Errorf("breakpoints of %d classes: want at least 2 classes", len(b.X))
	}
	if 2*b.Breakpoints() > MaxSize {
		return fmt.Errorf("%d breakpoints: more than the %d values a calibrator may hold", b.Breakpoints(), MaxSize)
	}
	for j := range b.X {
		x, y := b.X[j], b.Y[j]
		switch {
		case len(x) != len(y):
			return fmt.Errorf("class %d has %d breakpoints in x but %d in y", j, len(x), len(y))
		case len(x) == 0:
			return fmt.Errorf("class %d has no breakpoints: want at least 1", j)
		}
		for i := range x {
			switch {
			case !(x[i] >= 0 && x[i] <= 1):
				return fmt.Errorf("x of class %d, breakpoint %d is %v: want a probability in [0, 1]", j, i, x[i])
			case !(y[i] >= 0 && y[i] <= 1):
				return fmt.Errorf("y of class %d, breakpoint %d is %v: want a probability in [0, 1]", j, i, y[i])
			case i > 0 && !(x[i] > x[i-1]):
				return fmt.Errorf("x of class %d does not increase from %v at breakpoint %d to %v at %d: want strictly increasing scores", j, x[i-1], i-1, x[i], i)
			case i > 0 && y[i] < y[i-1]:
				return fmt.Errorf("y of class %d decreases from %v at breakpoint %d to %v at %d: isotonic fits are non-decreasing", j, y[i-1], i-1, y[i], i)
			}
		}
	}
	return nil
}

// predictExact is Predict of an exact fit.
func (b *Isotonic) predictExact(dst, logits []float64) {
	if len(b.X) == 0 || len(b.X) != len(b.Y) {
		panic("calib: Predict on an isotonic calibrator that is not fitted")
	}
	predictOneVsAll(dst, logits, len(b.X), &b.Weights, func(g, p []float64) {
		for j, v := range p {
			g[j] = interpolate(b.X[j], b.Y[j], v)
		}
	})
}
