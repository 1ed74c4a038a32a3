package calib

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// scOverconfident returns n examples of c classes from a model that is
// over-confident by the known temperature tstar: the logits are
// independent N(0, sigma²) and each label is drawn from softmax(z/tstar),
// so temperature scaling with T = tstar is exactly calibrated.
func scOverconfident(rng *rand.Rand, n, c int, sigma, tstar float64) *Set {
	s := &Set{Logits: make([]float64, n*c), Labels: make([]int, n), Classes: c}
	p := make([]float64, c)
	for i := range n {
		z := s.Row(i)
		for j := range z {
			z[j] = sigma * rng.NormFloat64()
			p[j] = z[j] / tstar
		}
		Softmax(p, p)
		s.Labels[i] = scDraw(rng, p)
	}
	return s
}

// scDraw draws a class from the probabilities p.
func scDraw(rng *rand.Rand, p []float64) int {
	u := rng.Float64()
	for j, v := range p {
		if u < v {
			return j
		}
		u -= v
	}
	return len(p) - 1
}

// scScalers returns a fresh identity scaler of every method for c classes.
func scScalers(c int) []Scaler {
	return []Scaler{NewTemperature(c), NewVector(c), NewMatrix(c), NewDirichlet(c), NewOPVector(c), NewFedCalMLP(c, 1)}
}

// scZeroScalers returns the zero value of every scaler.
func scZeroScalers() []Scaler {
	return []Scaler{new(Temperature), new(Vector), new(Matrix), new(Dirichlet), new(OPVector), new(FedCalMLP)}
}

// scFirstMax returns the index of the first largest value of x.
func scFirstMax(x []float64) int {
	k := 0
	for j, v := range x {
		if v > x[k] {
			k = j
		}
	}
	return k
}

// scNLL returns the mean NLL of c's predictions on s, computed directly.
func scNLL(t *testing.T, c Calibrator, s *Set) float64 {
	t.Helper()
	p := make([]float64, len(s.Logits))
	c.Predict(p, s.Logits)
	var f float64
	for i, y := range s.Labels {
		f -= math.Log(p[i*s.Classes+y])
	}
	return f / float64(s.Len())
}

// scCheckRows fails unless every row of p is a probability vector.
func scCheckRows(t *testing.T, what string, p []float64, c int) {
	t.Helper()
	for i := 0; i < len(p); i += c {
		var sum float64
		for _, v := range p[i : i+c] {
			if !(v >= 0 && v <= 1) {
				t.Fatalf("%s: row %d has probability %v", what, i/c, v)
			}
			sum += v
		}
		if math.Abs(sum-1) > 1e-12 {
			t.Fatalf("%s: row %d sums to %v", what, i/c, sum)
		}
	}
}

func TestScalersStartAtIdentity(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, c := range []int{2, 7} {
		s := scOverconfident(rng, 20, c, 5, 1)
		want := make([]float64, len(s.Logits))
		SoftmaxRows(want, s.Logits, c)
		for _, sc := range scScalers(c) {
			got := make([]float64, len(s.Logits))
			sc.Predict(got, s.Logits)
			for k := range got {
				if math.Abs(got[k]-want[k]) > 1e-12 {
					t.Fatalf("%s, %d classes: identity predicts %v, softmax is %v", sc.Method(), c, got[k], want[k])
				}
			}
		}
	}
}

func TestScalersNumParams(t *testing.T) {
	for _, tc := range []struct {
		s    Scaler
		want int
	}{
		{NewTemperature(10), 1},
		{NewVector(10), 20},
		{NewMatrix(10), 110},
		{NewDirichlet(10), 110},
		{NewOPVector(10), 20},
		{NewFedCalMLP(10, 0), 10*64 + 64 + 64*64 + 64 + 64*10 + 10},
		{NewFedCalMLP(2, 0), 129*2 + 4224},
		{new(Vector), 0},
		{new(FedCalMLP), 0},
	} {
		if got := tc.s.NumParams(); got != tc.want {
			t.Errorf("%s with %d classes: NumParams = %d, want %d", tc.s.Method(), tc.s.Classes(), got, tc.want)
		}
		if got := len(tc.s.Params()); got != tc.want && tc.s.Method() != "temp" {
			t.Errorf("%s: len(Params()) = %d, want %d", tc.s.Method(), got, tc.want)
		}
	}
}

func TestScalersFitLowersNLLAndKeepsRowsValid(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for _, c := range []int{2, 5} {
		fit := scOverconfident(rng, 1000, c, 6, 3)
		test := scOverconfident(rng, 1000, c, 6, 3)
		for _, sc := range scScalers(c) {
			before := scNLL(t, sc, test)
			if err := sc.Fit(fit); err != nil {
				t.Fatalf("%s: %v", sc.Method(), err)
			}
			after := scNLL(t, sc, test)
			if !(after < before) {
				t.Errorf("%s, %d classes: test NLL %v after fitting, %v before", sc.Method(), c, after, before)
			}
			p := make([]float64, len(test.Logits))
			sc.Predict(p, test.Logits)
			scCheckRows(t, sc.Method(), p, c)
		}
	}
}

func TestScalersExtremeInputs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for _, tc := range []struct {
		name  string
		n, c  int
		scale float64
	}{
		{"logits ±1e4", 50, 4, 1e4},
		{"one example", 1, 3, 3},
		{"two classes", 40, 2, 3},
		{"200 classes", 30, 200, 5},
		{"200 classes ±1e4", 5, 200, 1e4},
	} {
		s := &Set{Logits: make([]float64, tc.n*tc.c), Labels: make([]int, tc.n), Classes: tc.c}
		for i := range s.Logits {
			s.Logits[i] = tc.scale * (2*rng.Float64() - 1)
		}
		for i := range s.Labels {
			s.Labels[i] = rng.IntN(tc.c)
		}
		for _, sc := range scZeroScalers() {
			if err := sc.Fit(s); err != nil {
				t.Fatalf("%s: %s: %v", tc.name, sc.Method(), err)
			}
			if err := checkFinite("params", sc.Params()); err != nil {
				t.Fatalf("%s: %s: %v", tc.name, sc.Method(), err)
			}
			p := make([]float64, len(s.Logits))
			sc.Predict(p, s.Logits)
			scCheckRows(t, tc.name+": "+sc.Method(), p, tc.c)
		}
	}
}

func TestScalersBadInput(t *testing.T) {
	good := &Set{Logits: []float64{1, 2, 3, 4}, Labels: []int{0, 1}, Classes: 2}
	for _, tc := range []struct {
		name string
		set  *Set
		want string
	}{
		{"empty", &Set{Classes: 3}, "no examples"},
		{"NaN logit", &Set{Logits: []float64{1, math.NaN()}, Labels: []int{0}, Classes: 2}, "must be finite"},
		{"Inf logit", &Set{Logits: []float64{math.Inf(1), 0}, Labels: []int{0}, Classes: 2}, "must be finite"},
		{"label out of range", &Set{Logits: []float64{1, 2}, Labels: []int{2}, Classes: 2}, "outside [0, 2)"},
		{"lengths", &Set{Logits: []float64{1, 2, 3}, Labels: []int{0}, Classes: 2}, "do not match"},
		{"one class", &Set{Logits: []float64{1}, Labels: []int{0}, Classes: 1}, "at least 2 classes"},
		{"other class count", &Set{Logits: []float64{1, 2, 3}, Labels: []int{0}, Classes: 3}, "for 2 classes but the set has 3"},
	} {
		for _, sc := range scScalers(2) {
			before := sc.Params()
			err := sc.Fit(tc.set)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %s: Fit error %v, want one containing %q", tc.name, sc.Method(), err, tc.want)
			}
			if tc.name == "empty" && !errors.Is(err, ErrEmpty) {
				t.Errorf("%s: error %v does not wrap ErrEmpty", sc.Method(), err)
			}
			if !equalFloats(before, sc.Params()) {
				t.Errorf("%s: %s: a failed Fit changed the parameters", tc.name, sc.Method())
			}
			if err := sc.Fit(good); err != nil {
				t.Errorf("%s: Fit on a good set after a bad one: %v", sc.Method(), err)
			}
		}
	}
	for _, sc := range []Scaler{
		&Vector{Options: FitOptions{MaxIterations: -1}},
		&Matrix{Options: FitOptions{GradientTol: math.NaN()}},
		&Dirichlet{Options: FitOptions{MaxIterations: -1}},
		&OPVector{Options: FitOptions{GradientTol: -1}},
		&FedCalMLP{LearningRate: math.Inf(1)},
		&FedCalMLP{Epochs: -1},
		&FedCalMLP{BatchSize: -2},
		&FedCalMLP{MaxGradNorm: -1},
	} {
		if err := sc.Fit(good); err == nil {
			t.Errorf("%s with bad settings %+v: Fit succeeded", sc.Method(), sc)
		}
	}
}

func TestScalersDeterministic(t *testing.T) {
	s := scOverconfident(rand.New(rand.NewPCG(4, 4)), 300, 4, 5, 2)
	for i, a := range scZeroScalers() {
		b := scZeroScalers()[i]
		if err := a.Fit(s); err != nil {
			t.Fatal(err)
		}
		if err := b.Fit(s); err != nil {
			t.Fatal(err)
		}
		if !equalFloats(a.Params(), b.Params()) {
			t.Errorf("%s: two fits of the same set differ", a.Method())
		}
	}
}

func TestScalersSetParams(t *testing.T) {
	for _, sc := range scScalers(3) {
		w := sc.Params()
		for k := range w {
			w[k] = 0.5 + 0.001*float64(k)
		}
		if err := sc.SetParams(w); err != nil {
			t.Fatalf("%s: %v", sc.Method(), err)
		}
		got := sc.Params()
		if !equalFloats(got, w) {
			t.Errorf("%s: Params after SetParams differ", sc.Method())
		}
		got[0] = 99 // Params returns a copy
		w[len(w)-1] = 77
		if sc.Params()[0] == 99 || sc.Params()[len(w)-1] == 77 {
			t.Errorf("%s: Params or SetParams aliases the caller's slice", sc.Method())
		}
		if err := sc.SetParams(w[:len(w)-1]); err == nil {
			t.Errorf("%s: SetParams accepted %d parameters", sc.Method(), len(w)-1)
		}
		bad := append([]float64(nil), w...)
		bad[0] = math.NaN()
		if err := sc.SetParams(bad); err == nil {
			t.Errorf("%s: SetParams accepted NaN", sc.Method())
		}
	}
	for _, w := range [][]float64{{0}, {-1}, {math.Inf(1)}} {
		if err := NewTemperature(2).SetParams(w); err == nil {
			t.Errorf("temperature SetParams(%v) succeeded", w)
		}
	}
	for _, sc := range scZeroScalers()[1:] {
		if err := sc.SetParams([]float64{1, 2, 3, 4}); err == nil || !strings.Contains(err.Error(), "no classes yet") {
			t.Errorf("zero %s: SetParams error %v, want one saying it has no classes", sc.Method(), err)
		}
	}
}

// TestScalersFitWarmStarts checks that Fit starts from the current
// parameters: one iteration from the optimum stays there, one iteration
// from the identity does not reach it.
func TestScalersFitWarmStarts(t *testing.T) {
	s := scOverconfident(rand.New(rand.NewPCG(5, 5)), 500, 3, 6, 3)
	one := FitOptions{MaxIterations: 1}
	v, m, d, o := NewVector(3), NewMatrix(3), NewDirichlet(3), NewOPVector(3)
	v.Options, m.Options, d.Options, o.Options = one, one, one, one
	for _, tc := range []struct{ full, warm, cold Scaler }{
		{NewVector(3), v, &Vector{Options: one}},
		{NewMatrix(3), m, &Matrix{Options: one}},
		{NewDirichlet(3), d, &Dirichlet{Lambda: DefaultDirichletLambda, Mu: DefaultDirichletMu, Options: one}},
		{NewOPVector(3), o, &OPVector{Options: one}},
	} {
		if err := tc.full.Fit(s); err != nil {
			t.Fatal(err)
		}
		best := scNLL(t, tc.full, s)
		if err := tc.warm.SetParams(tc.full.Params()); err != nil {
			t.Fatal(err)
		}
		if err := tc.warm.Fit(s); err != nil {
			t.Fatal(err)
		}
		if err := tc.cold.Fit(s); err != nil {
			t.Fatal(err)
		}
		if w := scNLL(t, tc.warm, s); w > best+1e-9 {
			t.Errorf("%s: one iteration from the optimum gives NLL %v, optimum %v", tc.full.Method(), w, best)
		}
		if c := scNLL(t, tc.cold, s); c < best+1e-4 {
			t.Errorf("%s: one iteration from the identity already gives NLL %v (optimum %v): the test cannot tell warm from cold starts", tc.full.Method(), c, best)
		}
	}
	// FedCal: a second Fit continues the training of the first.
	f := NewFedCalMLP(3, 7)
	if err := f.Fit(s); err != nil {
		t.Fatal(err)
	}
	once := f.Params()
	if err := f.Fit(s); err != nil {
		t.Fatal(err)
	}
	g := NewFedCalMLP(3, 7)
	if err := g.SetParams(once); err != nil {
		t.Fatal(err)
	}
	if err := g.Fit(s); err != nil {
		t.Fatal(err)
	}
	if !equalFloats(f.Params(), g.Params()) {
		t.Error("fedcal: Fit from SetParams(w) differs from continuing the fit that produced w")
	}
}

func TestScalersSidecarRoundTrip(t *testing.T) {
	s := scOverconfident(rand.New(rand.NewPCG(6, 6)), 200, 3, 5, 2)
	for _, sc := range scScalers(3) {
		if err := sc.Fit(s); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := Encode(&buf, sc, nil, Provenance{Protocol: "central"}); err != nil {
			t.Fatal(err)
		}
		got, f, err := Decode(&buf)
		if err != nil {
			t.Fatalf("%s: %v", sc.Method(), err)
		}
		if f.Method != sc.Method() || got.Classes() != 3 {
			t.Errorf("%s: decoded method %q, %d classes", sc.Method(), f.Method, got.Classes())
		}
		if !equalFloats(got.(Scaler).Params(), sc.Params()) {
			t.Errorf("%s: decoded parameters differ", sc.Method())
		}
	}
}

func TestScalersSidecarRejectsBadParams(t *testing.T) {
	for _, tc := range []struct{ method, params, want string }{
		{"temp", `{"t": 0, "classes": 3}`, "t is 0"},
		{"temp", `{"t": 2, "classes": 1}`, "classes is 1"},
		{"vector", `{"a": [1, 1], "b": [0]}`, "b has 1 values"},
		{"vector", `{"a": [1], "b": [0]}`, "at least 2"},
		{"matrix", `{"a": [1, 0, 0], "b": [0, 0]}`, "want 2×2"},
		{"dirichlet", `{"w": [1, 0, 0], "b": [0, 0]}`, "w has 3 values: want 2×2"},
		{"dirichlet", `{"w": [1, 0, 0, 1], "b": [0]}`, "at least 2"},
		{"dirichlet", `{"w": [1, 0, 0, 1], "b": [0, 0], "lambda": 0.1}`, "unknown field"},
		{"opvector", `{"a": [0, 0], "b": [0, 0, 0]}`, "b has 3 values"},
		{"fedcal", `{"w1": [], "b1": [], "w2": [], "b2": [], "w3": [], "b3": [0, 0]}`, "w1 has 0 values"},
		{"vector", `{"a": [1, 1], "b": [0, 0], "options": {}}`, "unknown field"},
	} {
		doc := `{"format": "fedcalib.calibrator/v1", "method": "` + tc.method + `", "classes": 2, "params": ` + tc.params + `, "provenance": {"seed": 0}}`
		_, _, err := Decode(strings.NewReader(doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: error %v, want one containing %q", tc.method, tc.params, err, tc.want)
		}
	}
}

// scGradCheck compares the analytic gradient of f at x with central
// finite differences.
func scGradCheck(t *testing.T, name string, f lossGrad, x []float64) {
	t.Helper()
	g := make([]float64, len(x))
	f(g, x)
	scratch := make([]float64, len(x))
	xp := append([]float64(nil), x...)
	const h = 1e-5
	for k := range x {
		xp[k] = x[k] + h
		fp := f(scratch, xp)
		xp[k] = x[k] - h
		fm := f(scratch, xp)
		xp[k] = x[k]
		num := (fp - fm) / (2 * h)
		if math.Abs(num-g[k]) > 1e-6*math.Max(1, math.Abs(num)) {
			t.Errorf("%s: d/dx[%d] analytic %.10g, finite differences %.10g", name, k, g[k], num)
		}
	}
}

func TestScalerGradients(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, c := range []int{2, 4} {
		s := scOverconfident(rng, 30, c, 3, 2)
		random := func(n int, scale float64) []float64 {
			x := make([]float64, n)
			for k := range x {
				x[k] = scale * rng.NormFloat64()
			}
			return x
		}
		scGradCheck(t, "vector", func(g, x []float64) float64 { return vectorNLL(g, x, s, newRowSums(s.Len())) }, random(2*c, 1))
		scGradCheck(t, "matrix", func(g, x []float64) float64 { return matrixNLL(g, x, s, nil) }, random(c*c+c, 1))
		d := newOPData(s)
		scGradCheck(t, "opvector", func(g, x []float64) float64 { return opVectorNLL(g, x, s, d, newRowSums(s.Len())) }, random(2*c, 1))

		rows := make([]int, s.Len())
		for i := range rows {
			rows[i] = i
		}
		x := NewFedCalMLP(c, 3).Params()
		for k := range x {
			x[k] += 0.1 * rng.NormFloat64() // W3 ≠ 0, so every layer gets gradient
		}
		work := newMLPWork(c)
		scGradCheck(t, "fedcal", func(g, x []float64) float64 {
			return newMLPNet(c, x).lossGrad(newMLPNet(c, g), s, d, rows, work)
		}, x)
	}
}

// TestOPDataMatchesDirectNLL checks the order-preserving NLL and the
// opData sort against a direct computation of the calibrated logits as
// reverse cumulative sums from the bottom (the paper's U·w form), with an
// unstable sort: ties may come out in any order.
func TestOPDataMatchesDirectNLL(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	s := scOverconfident(rng, 50, 5, 3, 1)
	s.Logits[0], s.Logits[1] = 2, 2 // a tie
	d := newOPData(s)
	m := make([]float64, 5)
	for j := range m {
		m[j] = 0.2 + rng.Float64()
	}
	o, dm := make([]float64, 5), make([]float64, 5)
	for i := range s.Labels {
		z := s.Row(i)
		// Sort by selection, the slow way.
		idx := []int{0, 1, 2, 3, 4}
		for a := range idx {
			for b := a + 1; b < len(idx); b++ {
				if z[idx[b]] > z[idx[a]] {
					idx[a], idx[b] = idx[b], idx[a]
				}
			}
		}
		zh := make([]float64, 5)
		for k := 3; k >= 0; k-- {
			zh[idx[k]] = zh[idx[k+1]] + (z[idx[k]]-z[idx[k+1]])*m[k]
		}
		want := LogSumExp(zh) - zh[s.Labels[i]]
		if got := d.rowNLL(i, m, o, dm); math.Abs(got-want) > 1e-12 {
			t.Fatalf("row %d: NLL %v, direct %v", i, got, want)
		}
	}
}

func TestSoftplusOne(t *testing.T) {
	if got := softplus(softplusOne); math.Abs(got-1) > 1e-15 {
		t.Errorf("softplus(softplusOne) = %v", got)
	}
	for _, x := range []float64{-800, -30, -1, 0, 1, 30, 800} {
		sp, sig := softplusAndLogistic(x)
		if want := math.Log1p(math.Exp(x)); x < 700 && math.Abs(sp-want) > 1e-15*math.Max(1, want) {
			t.Errorf("softplus(%v) = %v, want %v", x, sp, want)
		}
		if want := 1 / (1 + math.Exp(-x)); math.Abs(sig-want) > 1e-16 {
			t.Errorf("logistic(%v) = %v, want %v", x, sig, want)
		}
		if math.IsInf(sp, 0) || math.IsNaN(sp) {
			t.Errorf("softplus(%v) = %v", x, sp)
		}
	}
}

// TestSyntheticOverconfident is the synthetic check of docs/CALIBRATION.md:
// logits from a model over-confident by T* = 2.5, 10^5 calibration
// examples. Temperature scaling must recover T* within 2%, and every
// scaling method must lower the classwise ECE on 10^5 fresh test examples.
func TestSyntheticOverconfident(t *testing.T) {
	const (
		n, c  = 100_000, 10
		sigma = 4.0
		tstar = 2.5
	)
	rng := rand.New(rand.NewPCG(2026, 11))
	fit := scOverconfident(rng, n, c, sigma, tstar)
	test := scOverconfident(rng, n, c, sigma, tstar)
	base, err := EvaluateSet(test, nil, 15)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("T* = %v, sigma = %v, C = %d, n = %d fit + %d test", tstar, sigma, c, n, n)
	t.Logf("%-9s cwECE %.4f%%  ECE %.4f%%  NLL %.5f  acc %.4f", "uncal", 100*base.CWECE, 100*base.ECE, base.NLL, base.Accuracy)
	oracle, err := EvaluateSet(test, &Temperature{T: tstar, C: c}, 15)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%-9s cwECE %.4f%%  ECE %.4f%%  NLL %.5f  acc %.4f", "T = T*", 100*oracle.CWECE, 100*oracle.ECE, oracle.NLL, oracle.Accuracy)
	for _, sc := range scScalers(c) {
		if testing.Short() && (sc.Method() == "matrix" || sc.Method() == "dirichlet" || sc.Method() == "fedcal") {
			continue
		}
		if err := sc.Fit(fit); err != nil {
			t.Fatal(err)
		}
		m, err := EvaluateSet(test, sc, 15)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-9s cwECE %.4f%%  ECE %.4f%%  NLL %.5f  acc %.4f", sc.Method(), 100*m.CWECE, 100*m.ECE, m.NLL, m.Accuracy)
		if !(m.CWECE < base.CWECE) {
			t.Errorf("%s: cwECE %v after, %v before", sc.Method(), m.CWECE, base.CWECE)
		}
		if tp, ok := sc.(*Temperature); ok {
			t.Logf("fitted T = %.5f (%.3f%% from T*)", tp.T, 100*(tp.T/tstar-1))
			if math.Abs(tp.T/tstar-1) > 0.02 {
				t.Errorf("fitted T = %v, want T* = %v within 2%%", tp.T, tstar)
			}
		}
		if sc.Method() == "temp" || sc.Method() == "opvector" || sc.Method() == "fedcal" {
			if m.Accuracy != base.Accuracy {
				t.Errorf("%s changed the accuracy from %v to %v", sc.Method(), base.Accuracy, m.Accuracy)
			}
		}
	}
}

// scBenchSet is one client's calibration data in the paper's Table 4
// setting: 70 examples, 10 classes.
func scBenchSet() *Set {
	return scOverconfident(rand.New(rand.NewPCG(9, 9)), 70, 10, 4, 2.5)
}

// BenchmarkLocalFit measures one client's local work in one round of the
// federated scaling protocols (paper Table 4: FedTemp 111 ms, FedOPVector
// 17 ms, FedCal 8 ms), each starting from the server's identity
// parameters.
func BenchmarkLocalFit(b *testing.B) {
	s := scBenchSet()
	for _, tc := range []struct {
		name string
		new  func() Scaler
	}{
		{"FedTemp", func() Scaler { return NewTemperature(10) }},
		{"FedVector", func() Scaler { return NewVector(10) }},
		{"FedMatrix", func() Scaler { return NewMatrix(10) }},
		{"FedOPVector", func() Scaler { return NewOPVector(10) }},
		{"FedCal", func() Scaler { return NewFedCalMLP(10, 1) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			w := tc.new().Params()
			sc := tc.new()
			cpu := scCPUTime()
			for b.Loop() {
				if err := sc.SetParams(w); err != nil {
					b.Fatal(err)
				}
				if err := sc.Fit(s); err != nil {
					b.Fatal(err)
				}
			}
			scReportCPU(b, cpu)
		})
	}
}

// BenchmarkSoftmaxBaseline is the reference for BenchmarkLocalFit: the
// softmax of the same 70×10 logits, the least work any calibrator does.
func BenchmarkSoftmaxBaseline(b *testing.B) {
	s := scBenchSet()
	p := make([]float64, len(s.Logits))
	cpu := scCPUTime()
	for b.Loop() {
		SoftmaxRows(p, s.Logits, s.Classes)
	}
	scReportCPU(b, cpu)
}

// scReportCPU reports the process CPU time per operation since start as
// the metric cpu-ns/op.
func scReportCPU(b *testing.B, start time.Duration) {
	if used := scCPUTime() - start; used > 0 {
		b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}
