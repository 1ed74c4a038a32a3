package calib

import (
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// scGridTemperature returns the T on a grid of n points evenly spaced in
// log T over [MinTemperature, MaxTemperature] with the smallest mean NLL
// of softmax(z/T) on s, the NLL there, and the grid step in log T. It
// evaluates the NLL with Softmax, independently of tempNLL.
func scGridTemperature(s *Set, n int) (tBest, fBest, step float64) {
	lo, hi := math.Log(MinTemperature), math.Log(MaxTemperature)
	step = (hi - lo) / float64(n-1)
	fBest = math.Inf(1)
	p := make([]float64, s.Classes)
	for k := range n {
		T := math.Exp(lo + float64(k)*step)
		var f float64
		for i, y := range s.Labels {
			for j, v := range s.Row(i) {
				p[j] = v / T
			}
			LogSoftmax(p, p)
			f -= p[y]
		}
		f /= float64(s.Len())
		if f < fBest {
			tBest, fBest = T, f
		}
	}
	return tBest, fBest, step
}

func TestTemperatureMatchesGridMinimum(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 10))
	for _, tc := range []struct {
		name         string
		n, c         int
		sigma, tstar float64
	}{
		{"over-confident", 300, 5, 5, 3},
		{"under-confident", 300, 5, 1, 0.4},
		{"two classes", 200, 2, 3, 1.7},
		{"many classes", 60, 50, 4, 2},
		{"logits ±1e4", 100, 3, 4000, 1500},
	} {
		s := scOverconfident(rng, tc.n, tc.c, tc.sigma, tc.tstar)
		tGrid, fGrid, step := scGridTemperature(s, 4001)
		temp := new(Temperature)
		if err := temp.Fit(s); err != nil {
			t.Fatal(err)
		}
		f := scNLL(t, temp, s)
		if f > fGrid+1e-12 {
			t.Errorf("%s: fitted T = %v has NLL %v, grid minimum %v at T = %v", tc.name, temp.T, f, fGrid, tGrid)
		}
		if d := math.Abs(math.Log(temp.T / tGrid)); d > step {
			t.Errorf("%s: fitted T = %v, grid minimum at T = %v (log step %v)", tc.name, temp.T, tGrid, step)
		}
	}
}

// TestTemperatureClosedForm checks Fit against a case with a closed-form
// optimum: two classes, every example with logit margin d, a fraction q
// of them correct. The NLL q·log(1+e^{−βd}) + (1−q)·log(1+e^{βd}) is
// minimal where logistic(βd) = q, so T = d / log(q/(1−q)).
func TestTemperatureClosedForm(t *testing.T) {
	for _, tc := range []struct {
		d          float64
		right, all int
	}{
		{4, 4, 5},
		{1, 9, 10},
		{10, 3, 4},
		{0.5, 99, 100},
	} {
		s := &Set{Classes: 2}
		for i := range tc.all {
			s.Logits = append(s.Logits, 0, tc.d)
			y := 1
			if i >= tc.right {
				y = 0
			}
			s.Labels = append(s.Labels, y)
		}
		q := float64(tc.right) / float64(tc.all)
		want := tc.d / math.Log(q/(1-q))
		temp := NewTemperature(2)
		if err := temp.Fit(s); err != nil {
			t.Fatal(err)
		}
		if math.Abs(temp.T-want) > 1e-9*want {
			t.Errorf("margin %v, %d of %d right: T = %.12g, want %.12g", tc.d, tc.right, tc.all, temp.T, want)
		}
	}
}

func TestTemperatureBounds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		set    *Set
		start  float64
		wantT  float64
		reason string
	}{
		{"all right", &Set{Logits: []float64{3, 0, 0, 2}, Labels: []int{0, 1}, Classes: 2}, 1, MinTemperature, "sharper is always better"},
		{"all wrong", &Set{Logits: []float64{3, 0, 0, 2}, Labels: []int{1, 0}, Classes: 2}, 1, MaxTemperature, "flatter is always better"},
		{"flat logits", &Set{Logits: []float64{1, 1, 1, 5, 5, 5}, Labels: []int{0, 2}, Classes: 3}, 1, 1, "no T is better than another"},
		{"flat logits keep T", &Set{Logits: []float64{1, 1, 1, 5, 5, 5}, Labels: []int{0, 2}, Classes: 3}, 7, 7, "no T is better than another"},
		{"one example", &Set{Logits: []float64{-1e4, 1e4}, Labels: []int{0}, Classes: 2}, 1, MaxTemperature, "a confident mistake"},
	} {
		temp := &Temperature{T: tc.start}
		if err := temp.Fit(tc.set); err != nil {
			t.Fatal(err)
		}
		if temp.T != tc.wantT {
			t.Errorf("%s: T = %v, want %v (%s)", tc.name, temp.T, tc.wantT, tc.reason)
		}
	}
}

// TestTemperatureDerivatives checks the analytic first, second and
// third derivatives of the NLL in β against central finite differences
// of the one below.
func TestTemperatureDerivatives(t *testing.T) {
	s := newTempSums(setRows(scOverconfident(rand.New(rand.NewPCG(11, 11)), 50, 4, 3, 2)))
	for _, beta := range []float64{0.05, 0.4, 1, 3} {
		const h = 1e-5
		p, m, e := s.at(beta+h), s.at(beta-h), s.at(beta)
		for _, d := range []struct {
			name           string
			got, fp, fm, r float64
		}{
			{"dNLL/dβ", e.d1, p.f, m.f, 1e-7},
			{"d²NLL/dβ²", e.d2, p.d1, m.d1, 1e-6},
			{"d³NLL/dβ³", e.d3, p.d2, m.d2, 1e-6},
		} {
			if num := (d.fp - d.fm) / (2 * h); math.Abs(num-d.got) > d.r*math.Max(1, math.Abs(d.got)) {
				t.Errorf("β = %v: %s = %v, finite differences %v", beta, d.name, d.got, num)
			}
		}
		if e.beta != beta || e.d2 <= 0 || e.d3 == 0 {
			t.Errorf("β = %v: evaluated at β = %v, d² = %v, d³ = %v: want β, d² > 0, d³ ≠ 0", beta, e.beta, e.d2, e.d3)
		}
	}
}

func TestTemperatureKeepsAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	for range 20 {
		c := 2 + rng.IntN(8)
		s := scOverconfident(rng, 100, c, 1+5*rng.Float64(), 0.3+3*rng.Float64())
		temp := new(Temperature)
		if err := temp.Fit(s); err != nil {
			t.Fatal(err)
		}
		p := make([]float64, len(s.Logits))
		temp.Predict(p, s.Logits)
		for i := range s.Labels {
			if got, want := scFirstMax(p[i*c:(i+1)*c]), scFirstMax(s.Row(i)); got != want {
				t.Fatalf("T = %v moved the top class of row %d from %d to %d", temp.T, i, want, got)
			}
		}
	}
}

func TestTemperaturePredict(t *testing.T) {
	temp := &Temperature{T: 2, C: 3}
	got := make([]float64, 3)
	temp.Predict(got, []float64{0, 2, 4})
	e := []float64{1, math.E, math.E * math.E}
	sum := e[0] + e[1] + e[2]
	for j := range got {
		if math.Abs(got[j]-e[j]/sum) > 1e-15 {
			t.Errorf("p[%d] = %v, want %v", j, got[j], e[j]/sum)
		}
	}
}

func TestTemperaturePredictPanicsUnfitted(t *testing.T) {
	for _, temp := range []*Temperature{{}, {T: 0, C: 2}, {T: 1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Predict on %+v did not panic", *temp)
				}
			}()
			temp.Predict(make([]float64, 2), []float64{1, 2})
		}()
	}
}

// TestTemperatureFitDoesNotDependOnThreads: a set of several blocks is
// fitted in parallel, and the same T comes out with 1 or 4 goroutines.
func TestTemperatureFitDoesNotDependOnThreads(t *testing.T) {
	s := randomSet(rand.New(rand.NewPCG(11, 12)), 3*rowSumsMaxBlocks*rowSumsBlockRows+123, 5, 4)
	var got [2]float64
	var evals [2]tempEval
	for i, procs := range []int{1, 4} {
		old := runtime.GOMAXPROCS(procs)
		tc := new(Temperature)
		err := tc.Fit(s)
		evals[i] = newTempSums(setRows(s)).at(0.7)
		runtime.GOMAXPROCS(old)
		if err != nil {
			t.Fatal(err)
		}
		got[i] = tc.T
	}
	if got[0] != got[1] || got[0] == 1 {
		t.Errorf("T = %v with 1 goroutine, %v with 4", got[0], got[1])
	}
	if evals[0] != evals[1] {
		t.Errorf("the NLL and its derivatives at β = 0.7: %+v with 1 goroutine, %+v with 4", evals[0], evals[1])
	}
}

// TestTemperatureFitFloat32 checks that fitting float32 rows in place
// gives, bit for bit, the T of Fit on their float64 copy: every row, and
// a selection of rows in another order; and that FitFloat32 refuses what
// Fit refuses.
func TestTemperatureFitFloat32(t *testing.T) {
	s := scOverconfident(rand.New(rand.NewPCG(21, 22)), 40000, 6, 3, 2) // more than two blocks
	r := &Float32Rows{Logits: make([]float32, len(s.Logits)), Labels: make([]int32, s.Len()), Classes: s.Classes}
	for i, v := range s.Logits {
		r.Logits[i] = float32(v)
	}
	for i, y := range s.Labels {
		r.Labels[i] = int32(y)
	}
	sel := []int{}
	for i := s.Len() - 1; i >= 0; i -= 3 {
		sel = append(sel, i)
	}
	for _, rows := range [][]int{nil, sel} {
		// The float64 copy of the selected float32 rows.
		want := &Set{Classes: s.Classes}
		for k := range (&Float32Rows{Labels: r.Labels, Rows: rows}).Len() {
			i := k
			if rows != nil {
				i = rows[k]
			}
			for _, v := range r.Logits[i*s.Classes : (i+1)*s.Classes] {
				want.Logits = append(want.Logits, float64(v))
			}
			want.Labels = append(want.Labels, int(r.Labels[i]))
		}
		a, b := NewTemperature(s.Classes), NewTemperature(s.Classes)
		if err := a.Fit(want); err != nil {
			t.Fatal(err)
		}
		r.Rows = rows
		if err := b.FitFloat32(r); err != nil {
			t.Fatal(err)
		}
		if a.T != b.T || a.T == 1 {
			t.Errorf("%d rows: FitFloat32 T = %v, Fit on the float64 copy %v", want.Len(), b.T, a.T)
		}
	}
	for _, tc := range []struct {
		name string
		r    Float32Rows
		want string
	}{
		{"NaN", Float32Rows{Logits: []float32{0, float32(math.NaN())}, Labels: []int32{0}, Classes: 2}, "logits must be finite"},
		{"label", Float32Rows{Logits: []float32{0, 1}, Labels: []int32{2}, Classes: 2}, "label of example 0 is 2"},
		{"row", Float32Rows{Logits: []float32{0, 1}, Labels: []int32{1}, Rows: []int{1}, Classes: 2}, "row 0 of the selection is 1"},
		{"lengths", Float32Rows{Logits: []float32{0, 1, 2}, Labels: []int32{1}, Classes: 2}, "lengths do not match"},
		{"empty", Float32Rows{Classes: 2}, "no examples"},
		{"classes", Float32Rows{Logits: []float32{0, 1, 2}, Labels: []int32{1}, Classes: 3}, "is for 2 classes"},
	} {
		tc := tc
		if err := NewTemperature(2).FitFloat32(&tc.r); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestTemperatureWarmStart checks that starting a large fit from the
// minimiser on every 64th row reaches the same T as the plain fit: the
// root of the same function, to the fit's tolerance.
func TestTemperatureWarmStart(t *testing.T) {
	for _, tc := range []struct{ n, c int }{
		{warmRows + 1, 4}, // many rows
		{warmMinRows, 50}, // fewer rows of many classes
	} {
		if !warmStarts(tc.n, tc.c) {
			t.Fatalf("%d rows of %d classes are not warm-started", tc.n, tc.c)
		}
		s := scOverconfident(rand.New(rand.NewPCG(31, 32)), tc.n, tc.c, 3, 2)
		r := setRows(s)
		c, w := fitTemperature(r, 1), fitTemperatureWarm(r, 1)
		cold, coldSteps, ok1 := c.t, c.steps, c.converged
		warm, warmSteps, ok2 := w.t, w.steps, w.converged
		if !ok1 || !ok2 {
			t.Errorf("%d×%d: converged: plain %v, warm-started %v; want both", tc.n, tc.c, ok1, ok2)
		}
		if math.Abs(cold-warm) > 1e-11*cold || math.Abs(cold-2) > 0.1 {
			t.Errorf("%d×%d: warm-started T = %v, plain %v (true temperature 2)", tc.n, tc.c, warm, cold)
		}
		if warmSteps >= coldSteps {
			t.Errorf("%d×%d: %d steps on the whole set warm-started, %d from T = 1: want fewer", tc.n, tc.c, warmSteps, coldSteps)
		}
	}
	// Below the thresholds: no warm start.
	for _, tc := range []struct{ n, c int }{{warmRows, 10}, {warmMinRows - 1, 1000}, {warmMinRows, 10}} {
		if warmStarts(tc.n, tc.c) {
			t.Errorf("%d rows of %d classes are warm-started: want a plain fit", tc.n, tc.c)
		}
	}
}

// tempFixture returns n rows of c classes drawn from seed with plain
// arithmetic only (no exp, so the rows are the same on every platform):
// logits uniform in [−2, 2], rounded to float32, and 5 added to the true
// class's logit in 80% of the rows, to another class's in the rest.
func tempFixture(seed uint64, n, c int) *Set {
	rng := rand.New(rand.NewPCG(seed, 7))
	s := &Set{Logits: make([]float64, n*c), Labels: make([]int, n), Classes: c}
	for i := range n {
		y := rng.IntN(c)
		z := s.Row(i)
		for j := range z {
			z[j] = float64(float32(4*rng.Float64() - 2))
		}
		k := y
		if rng.Float64() >= 0.8 {
			k = rng.IntN(c)
		}
		z[k] = float64(float32(z[k] + 5))
		s.Labels[i] = y
	}
	return s
}

// TestTemperatureMatchesPreviousFits pins T on fixed sets to the fits of
// the previous Newton search (commit 83a85d4, which took a pass more per
// fit and another to report): the minimiser is the same to the fit's
// tolerance, tempTol in log T, from Fit and from FitFloat32. The report
// is at the result, and a warm-started set of 200,000 rows takes two
// steps after the pass at the warm start (the previous search took three
// and a fourth pass to report).
func TestTemperatureMatchesPreviousFits(t *testing.T) {
	for _, tc := range []struct {
		seed     uint64
		n, c     int
		previous float64 // T from commit 83a85d4's Fit
	}{
		{1, 200, 3, 2.0451631092281559},
		{2, 5000, 10, 1.3474613910574105},
		{3, 40000, 6, 1.5546525351251221},
		{4, 5 * 16384, 4, 1.7852007369734466}, // warm-started
		{5, 16384, 50, 0.88488300784432916},   // warm-started, many classes
		{6, 200000, 10, 1.3288280197643438},   // warm-started
	} {
		s := tempFixture(tc.seed, tc.n, tc.c)
		r := &Float32Rows{Logits: make([]float32, len(s.Logits)), Labels: make([]int32, s.Len()), Classes: s.Classes}
		for i, v := range s.Logits {
			r.Logits[i] = float32(v)
		}
		for i, y := range s.Labels {
			r.Labels[i] = int32(y)
		}
		a, b := NewTemperature(tc.c), NewTemperature(tc.c)
		if err := a.Fit(s); err != nil {
			t.Fatal(err)
		}
		if err := b.FitFloat32(r); err != nil {
			t.Fatal(err)
		}
		if d := math.Abs(math.Log(a.T / tc.previous)); d > tempTol || a.T != b.T {
			t.Errorf("%d×%d: T = %.17g (FitFloat32 %.17g), previously %.17g: %.2g apart in log T, want within %v", tc.n, tc.c, a.T, b.T, tc.previous, d, tempTol)
		}
		rep := a.LastFit()
		at := newTempSums(setRows(s)).at(1 / a.T)
		if !rep.Converged || math.Abs(rep.Objective-at.f) > 1e-14*at.f || rep.Gradient > 1e-12 || math.Abs(at.d1/a.T) > 1e-12 {
			t.Errorf("%d×%d: report %+v; at the result NLL %.17g, |dNLL/dlog T| %.2g", tc.n, tc.c, rep, at.f, math.Abs(at.d1/a.T))
		}
		if tc.n == 200000 && rep.Iterations > 2 {
			t.Errorf("%d×%d: %d steps after the warm start, want at most 2", tc.n, tc.c, rep.Iterations)
		}
	}
}
