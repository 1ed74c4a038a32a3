package calib

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// dirLogProbs returns log softmax of each row of s, computed directly as
// z − log Σ_k e^{z_k}, independently of LogSoftmax.
func dirLogProbs(s *Set) *Set {
	out := &Set{Logits: make([]float64, len(s.Logits)), Labels: slices.Clone(s.Labels), Classes: s.Classes}
	for i := range s.Len() {
		z := s.Row(i)
		m := slices.Max(z)
		var sum float64
		for _, v := range z {
			sum += math.Exp(v - m)
		}
		for j, v := range z {
			out.Logits[i*s.Classes+j] = v - m - math.Log(sum)
		}
	}
	return out
}

// TestDirichletPredict checks Predict against closed forms: with W = a·I
// and b = 0 the map is p^a/Σp^a (p = softmax(z)); with W = I it is
// p ⊙ e^b normalised.
func TestDirichletPredict(t *testing.T) {
	for _, tc := range []struct {
		name string
		z    []float64
		a    float64
		b    []float64
	}{
		{"identity", []float64{1, 2, 3}, 1, []float64{0, 0, 0}},
		{"a = 2", []float64{1, 2, 3}, 2, []float64{0, 0, 0}},
		{"a = 0.5", []float64{-4, 0, 7}, 0.5, []float64{0, 0, 0}},
		{"a = 0: uniform", []float64{-4, 0, 7}, 0, []float64{0, 0, 0}},
		{"bias", []float64{0.3, -1, 2}, 1, []float64{1, -2, 0.5}},
		{"a = 3 with bias", []float64{0.3, -1, 2}, 3, []float64{1, -2, 0.5}},
	} {
		c := len(tc.z)
		d := NewDirichlet(c)
		for i := range c {
			d.W[i*c+i] = tc.a
		}
		copy(d.B, tc.b)
		var sumE float64
		p := make([]float64, c)
		for j, v := range tc.z {
			p[j] = math.Exp(v)
			sumE += p[j]
		}
		want := make([]float64, c)
		var sum float64
		for j := range p {
			want[j] = math.Pow(p[j]/sumE, tc.a) * math.Exp(tc.b[j])
			sum += want[j]
		}
		got := make([]float64, c)
		d.Predict(got, tc.z)
		for j := range want {
			if want[j] /= sum; math.Abs(got[j]-want[j]) > 1e-14 {
				t.Errorf("%s: class %d: Predict %.17g, closed form %.17g", tc.name, j, got[j], want[j])
			}
		}
	}
}

// TestDirichletPenalty checks the ODIR term of the loss against a hand
// computation on 3 classes: λ/(3·2)·Σ_{i≠j} W_ij² + μ/3·Σ b_j².
func TestDirichletPenalty(t *testing.T) {
	s := &Set{Logits: []float64{1, 0, -1, 0.5, 2, 0}, Labels: []int{0, 1}, Classes: 3}
	ls := logProbSet(s)
	x := []float64{
		2, 1, -1,
		0, 1, 3,
		0.5, 0, 1,
		1, -2, 0,
	}
	// Off-diagonal squares: 1 + 1 + 0 + 9 + 0.25 + 0 = 11.25; bias: 1 + 4 + 0 = 5.
	for _, tc := range []struct{ lambda, mu, want float64 }{
		{0, 0, 0},
		{6, 0, 11.25},
		{0, 3, 5},
		{0.6, 0.3, 1.125 + 0.5},
	} {
		g := make([]float64, len(x))
		got := dirichletLoss(g, x, ls, tc.lambda, tc.mu, nil, nil) - matrixNLL(g, x, ls, nil)
		if math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("λ = %v, μ = %v: penalty %v, want %v", tc.lambda, tc.mu, got, tc.want)
		}
	}
}

// TestDirichletGradient checks the analytic gradient of the penalised
// loss with finite differences.
func TestDirichletGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	for _, c := range []int{2, 4} {
		ls := logProbSet(scOverconfident(rng, 30, c, 3, 2))
		for _, reg := range [][2]float64{{0, 0}, {0.7, 0}, {0, 0.4}, {0.7, 0.4}} {
			x := make([]float64, c*c+c)
			for k := range x {
				x[k] = rng.NormFloat64()
			}
			scGradCheck(t, "dirichlet", func(g, x []float64) float64 { return dirichletLoss(g, x, ls, reg[0], reg[1], nil, nil) }, x)
		}
	}
}

// TestDirichletZeroRegularisationIsMatrixOnLogProbs checks Kull et al.'s
// definition: with λ = μ = 0, Dirichlet calibration of the logits is
// matrix scaling fitted to the log-probabilities, in parameters and in
// predictions, with and without the Gaussian prior of FitOptions. The
// matrix fit's inputs are LogSoftmax rows, checked against log-softmax
// computed directly; on those very inputs both fits take the same L-BFGS
// path, so they agree bit for bit. (Inputs that differ in the last place
// lead L-BFGS along another path, to within its gradient tolerance of
// the same optimum.)
func TestDirichletZeroRegularisationIsMatrixOnLogProbs(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, tc := range []struct {
		name string
		c    int
		o    FitOptions
	}{
		{"2 classes", 2, FitOptions{}},
		{"5 classes", 5, FitOptions{}},
		{"5 classes, no prior", 5, FitOptions{Prior: -1}},
		{"10 classes, 200 iterations", 10, FitOptions{MaxIterations: 200}},
	} {
		s := scOverconfident(rng, 600, tc.c, 4, 2)
		lp := &Set{Logits: make([]float64, len(s.Logits)), Labels: s.Labels, Classes: s.Classes}
		direct := dirLogProbs(s)
		for i := 0; i < len(s.Logits); i += tc.c {
			LogSoftmax(lp.Logits[i:i+tc.c], s.Logits[i:i+tc.c])
		}
		for k, v := range direct.Logits {
			if math.Abs(lp.Logits[k]-v) > 1e-13*max(1, math.Abs(v)) {
				t.Fatalf("%s: LogSoftmax gives %.17g, the direct computation %.17g", tc.name, lp.Logits[k], v)
			}
		}
		d := &Dirichlet{Options: tc.o}
		if err := d.Fit(s); err != nil {
			t.Fatal(err)
		}
		m := &Matrix{Options: tc.o}
		if err := m.Fit(lp); err != nil {
			t.Fatal(err)
		}
		if !equalFloats(d.Params(), m.Params()) {
			t.Errorf("%s: parameters differ from matrix scaling on log-probabilities:\n%v\n%v", tc.name, d.Params(), m.Params())
		}
		got, want := make([]float64, len(s.Logits)), make([]float64, len(s.Logits))
		d.Predict(got, s.Logits)
		m.Predict(want, lp.Logits)
		if !equalFloats(got, want) {
			t.Errorf("%s: probabilities differ from matrix scaling on log-probabilities", tc.name)
		}
		// And the fit moved: the comparison is not of two identities.
		if equalFloats(m.Params(), NewMatrix(tc.c).Params()) {
			t.Errorf("%s: the matrix fit stayed at the identity", tc.name)
		}
	}
}

// TestDirichletRegularisationShrinks checks that ODIR does what it is for:
// a larger λ gives smaller off-diagonal entries, a larger μ a smaller
// bias.
func TestDirichletRegularisationShrinks(t *testing.T) {
	s := scOverconfident(rand.New(rand.NewPCG(10, 10)), 300, 4, 4, 2)
	offDiag := func(d *Dirichlet) (v float64) {
		c := d.Classes()
		for i := range c {
			for j := range c {
				if i != j {
					v += d.W[i*c+j] * d.W[i*c+j]
				}
			}
		}
		return v
	}
	bias := func(d *Dirichlet) (v float64) {
		for _, b := range d.B {
			v += b * b
		}
		return v
	}
	prevW, prevB := math.Inf(1), math.Inf(1)
	for _, reg := range []float64{0, 0.1, 1, 10, 100} {
		d := &Dirichlet{Lambda: reg, Mu: reg, Options: FitOptions{Prior: -1, MaxIterations: 500}}
		if err := d.Fit(s); err != nil {
			t.Fatal(err)
		}
		w, b := offDiag(d), bias(d)
		t.Logf("λ = μ = %v: Σ W_ij² (i ≠ j) = %.4g, Σ b² = %.4g", reg, w, b)
		if !(w < prevW) || !(b < prevB) {
			t.Errorf("λ = μ = %v: off-diagonal %v, bias %v: not below the weaker regularisation's %v, %v", reg, w, b, prevW, prevB)
		}
		prevW, prevB = w, b
	}
}

// TestDirichletCrossValidation checks the central fit: it chooses λ and μ
// from their grids, the same choice for the same seed, records it in its
// report, and its final fit is the fit with the chosen values fixed.
func TestDirichletCrossValidation(t *testing.T) {
	s := scOverconfident(rand.New(rand.NewPCG(11, 11)), 400, 4, 4, 2)
	fit := func(d *Dirichlet) *Dirichlet {
		t.Helper()
		if err := d.Fit(s); err != nil {
			t.Fatal(err)
		}
		return d
	}
	a := fit(&Dirichlet{Folds: 5, Seed: 3})
	if !slices.Contains(DirichletLambdaGrid(4), a.Lambda) || !slices.Contains(DirichletMuGrid(4), a.Mu) {
		t.Fatalf("cross-validation chose λ = %v, μ = %v: want them from %v and %v", a.Lambda, a.Mu, DirichletLambdaGrid(4), DirichletMuGrid(4))
	}
	rep := a.LastFit()
	if rep == nil || rep.Dirichlet == nil || rep.Dirichlet.Lambda != a.Lambda || rep.Dirichlet.Mu != a.Mu || rep.Dirichlet.Folds != 5 ||
		!slices.Equal(rep.Dirichlet.LambdaGrid, DirichletLambdaGrid(4)) || !(rep.Dirichlet.HeldOutNLL > 0) || !rep.Converged {
		t.Errorf("report %+v: want the choice, its grids, a held-out NLL, converged", rep)
	}
	t.Logf("5 folds chose λ = %v, μ = %v", a.Lambda, a.Mu)
	for _, procs := range []int{1, 3} {
		prev := runtime.GOMAXPROCS(procs)
		b := fit(&Dirichlet{Folds: 5, Seed: 3})
		runtime.GOMAXPROCS(prev)
		if !equalFloats(a.Params(), b.Params()) || a.Lambda != b.Lambda {
			t.Errorf("GOMAXPROCS %d: two cross-validated fits with the same seed differ", procs)
		}
	}
	// The final fit (Newton's method from the folds' optima) ends at the
	// optimum of the L-BFGS fit with the chosen λ and μ fixed.
	fixed := fit(&Dirichlet{Lambda: a.Lambda, Mu: a.Mu})
	var dx float64
	for i, v := range fixed.Params() {
		dx = max(dx, math.Abs(v-a.Params()[i]))
	}
	fa, ff := rep.Objective, fixed.LastFit().Objective
	t.Logf("final fit: %d Newton steps (%s); the fixed fit: %d L-BFGS iterations; objectives differ by %.2g (relative), parameters by %.2g",
		rep.Iterations, rep.Stop, fixed.LastFit().Iterations, math.Abs(fa-ff)/ff, dx)
	if math.Abs(fa-ff) > 1e-10*ff || dx > 1e-3 {
		t.Errorf("the cross-validated fit (objective %v) differs from the fit with the chosen λ and μ fixed (%v): parameters by %.2g", fa, ff, dx)
	}
	// More folds than examples: leave-one-out, and still a choice.
	small := &Set{Logits: s.Logits[:3*4], Labels: s.Labels[:3], Classes: 4}
	d := &Dirichlet{Folds: 5}
	if err := d.Fit(small); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(DirichletLambdaGrid(4), d.Lambda) {
		t.Errorf("3 examples, 5 folds: chose λ = %v", d.Lambda)
	}
}

func TestDirichletBadSettings(t *testing.T) {
	s := scOverconfident(rand.New(rand.NewPCG(12, 12)), 20, 3, 4, 2)
	for _, tc := range []struct {
		d    *Dirichlet
		want string
	}{
		{&Dirichlet{Lambda: -1}, "ODIR lambda is -1"},
		{&Dirichlet{Mu: -0.5}, "ODIR mu is -0.5"},
		{&Dirichlet{Lambda: math.NaN()}, "ODIR lambda is NaN"},
		{&Dirichlet{Mu: math.Inf(1)}, "ODIR mu is +Inf"},
		{&Dirichlet{Folds: -2}, "folds is -2"},
	} {
		err := tc.d.Fit(s)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: Fit error %v, want one containing %q", tc.d, err, tc.want)
		}
		if tc.d.Classes() != 0 {
			t.Errorf("%+v: a failed Fit set parameters", tc.d)
		}
	}
}

// TestDirichletSettingsODIR checks Settings.ODIR: it fixes dirichlet's
// regularisation in New (no cross-validation) and in ScalerFor (in place
// of the defaults), and every other method, and negative values, are
// refused.
func TestDirichletSettingsODIR(t *testing.T) {
	r := &ODIR{Lambda: 0.5, Mu: 0.25}
	c, err := New(MethodDirichlet, Settings{ODIR: r, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	if d := c.(*Dirichlet); d.Lambda != 0.5 || d.Mu != 0.25 || d.Folds != 0 || d.Seed != 4 {
		t.Errorf("New with ODIR %+v: %+v, want it fixed and no folds", *r, d)
	}
	c, err = New(MethodDirichlet, Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if d := c.(*Dirichlet); d.Folds != DefaultDirichletFolds {
		t.Errorf("New without ODIR: %d folds, want %d", d.Folds, DefaultDirichletFolds)
	}
	m, err := LookupMethod(MethodDirichlet)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		r          *ODIR
		lambda, mu float64
	}{
		{nil, DefaultDirichletLambda, DefaultDirichletMu},
		{r, 0.5, 0.25},
		{&ODIR{}, 0, 0},
	} {
		f, err := m.ScalerFor(Settings{ODIR: tc.r})
		if err != nil {
			t.Fatal(err)
		}
		d := f(3, nil).(*Dirichlet)
		if d.Lambda != tc.lambda || d.Mu != tc.mu || d.Folds != 0 || !equalFloats(d.Params(), NewDirichlet(3).Params()) {
			t.Errorf("ScalerFor(ODIR %v): λ = %v, μ = %v, %d folds, parameters %v", tc.r, d.Lambda, d.Mu, d.Folds, d.Params())
		}
	}
	for _, tc := range []struct {
		method string
		r      *ODIR
		want   string
	}{
		{MethodMatrix, &ODIR{}, "matrix takes no ODIR regularisation (λ, μ): only dirichlet does"},
		{MethodBin, &ODIR{Lambda: 1}, "bin takes no ODIR"},
		{MethodDirichlet, &ODIR{Lambda: -1}, "ODIR lambda is -1"},
		{MethodDirichlet, &ODIR{Mu: math.NaN()}, "ODIR mu is NaN"},
	} {
		_, err := New(tc.method, Settings{ODIR: tc.r})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%s, ODIR %+v): error %v, want one containing %q", tc.method, *tc.r, err, tc.want)
		}
		if m, _ := LookupMethod(tc.method); m.Family == Scaling {
			if _, err := m.ScalerFor(Settings{ODIR: tc.r}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ScalerFor(%s, ODIR %+v): error %v, want one containing %q", tc.method, *tc.r, err, tc.want)
			}
		}
	}
}
