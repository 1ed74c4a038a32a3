package federation

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
)

// evalFixture returns 6000 synthetic examples of 10 classes dealt to 200
// clients by a skewed Dirichlet partition, the population of their test
// rows, and the pooled test rows.
func evalFixture(t testing.TB) (*SetPopulation, *calib.Set) {
	t.Helper()
	data := synthSet(6000, 10, 17)
	p, err := Dirichlet(data.Labels, data.Classes, 200, 0.3, PartitionOptions{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	pop, err := NewPopulation(data, p, Test)
	if err != nil {
		t.Fatal(err)
	}
	return pop, data.Subset(p.Rows(Test))
}

// pooledMetrics returns the metrics of cal on the pooled rows computed
// centrally by calib.Evaluate, the independent reference.
func pooledMetrics(t testing.TB, test *calib.Set, cal calib.Calibrator, bins int) calib.Metrics {
	t.Helper()
	probs, err := calib.Probabilities(test, cal)
	if err != nil {
		t.Fatal(err)
	}
	m, err := calib.Evaluate(probs, test.Labels, test.Classes, bins)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestEvaluateEqualsPooled(t *testing.T) {
	pop, test := evalFixture(t)
	temp := calib.NewTemperature(test.Classes)
	temp.T = 2.5
	for _, tc := range []struct {
		name    string
		cal     calib.Calibrator
		bins    int
		workers int
	}{
		{"base model, default bins", nil, 0, 1},
		{"base model, 7 bins, 4 workers", nil, 7, 4},
		{"temperature 2.5, 20 bins", temp, 20, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Evaluate(context.Background(), pop, tc.cal, EvalOptions{Bins: tc.bins, Workers: tc.workers})
			if err != nil {
				t.Fatal(err)
			}
			want := pooledMetrics(t, test, tc.cal, tc.bins)
			if res.Metrics != want { // bit for bit
				t.Errorf("federated metrics\n%+v\nwant the pooled\n%+v", res.Metrics, want)
			}
			if res.Clients != pop.Len() || res.Privacy != nil || res.Noisy != nil || res.Stats == nil {
				t.Errorf("clients %d (want %d), privacy %v, noisy %v, stats %v", res.Clients, pop.Len(), res.Privacy, res.Noisy != nil, res.Stats != nil)
			}
			tl, err := calib.TopLabelErrors(mustProbs(t, test, tc.cal), test.Labels, test.Classes, tc.bins)
			if err != nil {
				t.Fatal(err)
			}
			tl.AdaptiveECE, tl.KS = nil, nil // the equal-mass and KS errors need every row
			if got := res.Stats.TopLabel(); got != tl {
				t.Errorf("top-label errors %+v, want the pooled %+v", got, tl)
			}
		})
	}
}

func mustProbs(t testing.TB, s *calib.Set, c calib.Calibrator) []float64 {
	t.Helper()
	p, err := calib.Probabilities(s, c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEvaluateNotAverage checks that the federated metric is not the mean
// of per-client metrics (which weighs small clients as much as large).
func TestEvaluateNotAverage(t *testing.T) {
	pop, _ := evalFixture(t)
	res, err := Evaluate(context.Background(), pop, nil, EvalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mean float64
	var k int
	for i := range pop.Len() {
		s, _ := pop.Client(i)
		if s.Len() == 0 {
			continue
		}
		m := pooledMetrics(t, s, nil, 0)
		mean += m.CWECE
		k++
	}
	mean /= float64(k)
	if math.Abs(mean-res.Metrics.CWECE) < 1e-3 {
		t.Errorf("mean of per-client cwECE %v is close to the federated %v: the fixture does not tell them apart", mean, res.Metrics.CWECE)
	}
}

func TestEvaluateInfiniteEpsilonEqualsExact(t *testing.T) {
	pop, test := evalFixture(t)
	inf := math.Inf(1)
	res, err := Evaluate(context.Background(), pop, nil, EvalOptions{Privacy: &Privacy{Epsilon: inf, Delta: 1e-5, Clip: inf}})
	if err != nil {
		t.Fatal(err)
	}
	want := pooledMetrics(t, test, nil, 0)
	got := res.Metrics
	if got.N != want.N || got.Classes != want.Classes || res.Privacy != nil || res.Noisy == nil {
		t.Fatalf("got N %d classes %d privacy %v, want N %d classes %d and no privacy record", got.N, got.Classes, res.Privacy, want.N, want.Classes)
	}
	for _, v := range [][3]float64{
		{got.CWECE, want.CWECE}, {got.ECE, want.ECE}, {got.Accuracy, want.Accuracy}, {got.NLL, want.NLL}, {got.Brier, want.Brier},
	} {
		if math.Abs(v[0]-v[1]) > 1e-12*max(1, math.Abs(v[1])) {
			t.Errorf("private path without noise gives %v, exact %v", v[0], v[1])
		}
	}
}

func TestEvaluatePrivateDeterministic(t *testing.T) {
	pop, _ := evalFixture(t)
	run := func(seed uint64, workers int) *EvalResult {
		res, err := Evaluate(context.Background(), pop, nil, EvalOptions{Seed: seed, Workers: workers, Privacy: &Privacy{Epsilon: 1, Delta: 1e-5}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a, b, c := run(3, 1), run(3, 4), run(4, 2)
	if !slices.Equal(a.Noisy, b.Noisy) || a.Metrics != b.Metrics {
		t.Errorf("seed 3 on 1 and 4 workers gives different results: %+v, %+v", a.Metrics, b.Metrics)
	}
	if slices.Equal(a.Noisy, c.Noisy) {
		t.Error("seeds 3 and 4 give the same noise")
	}
}

// TestEvaluatePrivacy checks the privacy record against σ derived from
// the zCDP conversion, and the ledger's ε against the budget.
func TestEvaluatePrivacy(t *testing.T) {
	pop, test := evalFixture(t)
	for _, tc := range []struct {
		eps, delta, clip float64
		acc              dp.Accountant
	}{
		{1, 1e-5, 0, dp.ZCDP},
		{4, 1e-6, 30, dp.ZCDP},
		{1, 1e-5, 50, dp.RDP},
	} {
		res, err := Evaluate(context.Background(), pop, nil, EvalOptions{Seed: 1, Privacy: &Privacy{Epsilon: tc.eps, Delta: tc.delta, Clip: tc.clip, Accountant: tc.acc}})
		if err != nil {
			t.Fatal(err)
		}
		c := tc.clip
		if c == 0 {
			c = DefaultEvalClip
		}
		pr := res.Privacy
		if pr == nil || pr.Clip != c || pr.Rounds != 1 || pr.SampleRate != 1 || pr.Accountant != tc.acc.String() {
			t.Fatalf("privacy record %+v: want clip %v, 1 round, rate 1, %v", pr, c, tc.acc)
		}
		if math.Abs(pr.Epsilon-tc.eps) > 1e-6*tc.eps {
			t.Errorf("ε spent %v, want the budget %v", pr.Epsilon, tc.eps)
		}
		if tc.acc == dp.ZCDP {
			rho, err := dp.ZCDPRho(tc.eps, tc.delta)
			if err != nil {
				t.Fatal(err)
			}
			// One Gaussian mechanism of sensitivity C is C²/(2σ²)-zCDP.
			if want := c / math.Sqrt(2*rho); math.Abs(pr.Sigma-want) > 1e-9*want {
				t.Errorf("σ = %v, want C/√(2ρ) = %v", pr.Sigma, want)
			}
		}
		if r := res.Ledger.Releases(); len(r) != 1 || r[0].Mechanism != EvaluationProtocol {
			t.Errorf("ledger releases %+v, want one evaluation", r)
		}
		exact := pooledMetrics(t, test, nil, 0)
		t.Logf("ε = %v, δ = %v, C = %v, %v: σ = %.4g; cwECE %.4f (exact %.4f), ECE %.4f (%.4f), accuracy %.4f (%.4f), N %d (%d)",
			tc.eps, tc.delta, c, tc.acc, pr.Sigma, res.Metrics.CWECE, exact.CWECE, res.Metrics.ECE, exact.ECE, res.Metrics.Accuracy, exact.Accuracy, res.Metrics.N, exact.N)
	}
}

// TestEvaluateSensitivity checks that removing one client, or replacing
// its data by other data, moves the clipped sum (the private path without
// noise) by at most the clip norm C, or 2C for a replacement.
func TestEvaluateSensitivity(t *testing.T) {
	const c = 20.0
	data := synthSet(3000, 5, 9)
	big := synthSet(2000, 5, 10) // a client far above the clip norm
	clients := Slices{data.Subset(seq(0, 1000)), data.Subset(seq(1000, 1010)), data.Subset(seq(1010, 3000))}
	sum := func(pop Population) []float64 {
		res, err := Evaluate(context.Background(), pop, nil, EvalOptions{Privacy: &Privacy{Epsilon: math.Inf(1), Delta: 1e-5, Clip: c}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Noisy
	}
	base := sum(clients)
	for _, tc := range []struct {
		name  string
		pop   Slices
		bound float64
	}{
		{"remove the small client", Slices{clients[0], clients[2]}, c},
		{"remove a large client", Slices{clients[1], clients[2]}, c},
		{"replace the small client by a large one", Slices{clients[0], big, clients[2]}, 2 * c},
		{"replace a large client by an empty one", Slices{clients[0], clients[1], data.Subset(nil)}, c},
	} {
		got := sum(tc.pop)
		d := make([]float64, len(got))
		for i := range d {
			d[i] = got[i] - base[i]
		}
		if n := dp.Norm(d); n > tc.bound*(1+1e-9) {
			t.Errorf("%s: the clipped sum moves by %v, above the sensitivity %v", tc.name, n, tc.bound)
		} else {
			t.Logf("%s: moves by %.4g ≤ %v", tc.name, n, tc.bound)
		}
	}
}

func seq(a, b int) []int {
	out := make([]int, 0, b-a)
	for i := a; i < b; i++ {
		out = append(out, i)
	}
	return out
}

func TestEvalServerCheck(t *testing.T) {
	_, exact, err := EvalSteps(3, nil, EvalOptions{Bins: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, private, err := EvalSteps(3, nil, EvalOptions{Bins: 2, Privacy: &Privacy{Epsilon: 1, Delta: 1e-5, Clip: 1}})
	if err != nil {
		t.Fatal(err)
	}
	good := make([]float64, exact.UpdateLen())
	half := slices.Clone(good)
	half[0] = 0.5
	bigLimb := slices.Clone(good)
	bigLimb[2] = 0x1p32
	neg := make([]float64, private.UpdateLen())
	neg[0] = -1
	long := make([]float64, private.UpdateLen())
	long[0], long[1] = 1, 1 // norm √2 > 1
	for _, tc := range []struct {
		name string
		s    *EvalServer
		u    []float64
		ok   bool
	}{
		{"exact zeros", exact, good, true},
		{"exact wrong length", exact, good[1:], false},
		{"exact non-integer count", exact, half, false},
		{"exact limb out of range", exact, bigLimb, false},
		{"private zeros", private, make([]float64, private.UpdateLen()), true},
		{"private negative", private, neg, false},
		{"private above the clip norm", private, long, false},
		{"private NaN", private, append(make([]float64, private.UpdateLen()-1), math.NaN()), false},
	} {
		err := tc.s.Check(tc.u)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrBadUpdate)) {
			t.Errorf("%s: Check gives %v", tc.name, err)
		}
	}
}

func TestEvalStepsErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		classes int
		cal     calib.Calibrator
		o       EvalOptions
	}{
		{"one class", 1, nil, EvalOptions{}},
		{"negative bins", 3, nil, EvalOptions{Bins: -1}},
		{"calibrator of other classes", 3, calib.NewTemperature(4), EvalOptions{}},
		{"ε ≤ 0", 3, nil, EvalOptions{Privacy: &Privacy{Epsilon: 0, Delta: 1e-5}}},
		{"fit's clip norms", 3, nil, EvalOptions{Privacy: &Privacy{Epsilon: 1, Delta: 1e-5, ClipPos: 3}}},
		{"negative clip", 3, nil, EvalOptions{Privacy: &Privacy{Epsilon: 1, Delta: 1e-5, Clip: -1}}},
	} {
		if _, _, err := EvalSteps(tc.classes, tc.cal, tc.o); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

func TestEvaluateEmpty(t *testing.T) {
	empty := synthSet(0, 3, 1)
	_, err := Evaluate(context.Background(), Slices{empty, empty}, nil, EvalOptions{})
	if !errors.Is(err, calib.ErrEmpty) {
		t.Errorf("no rows: got %v, want ErrEmpty", err)
	}
}

// TestEvaluateNoisyError measures the error of private evaluation on
// 10,000 clients of 10 rows of 10 classes (mean absolute error over 5
// seeds), the numbers docs/CALIBRATION.md quotes, and bounds it loosely.
func TestEvaluateNoisyError(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 rows, 30 evaluations")
	}
	const k, rows = 10000, 10
	data := synthSet(k*rows, 10, 3)
	pop := make(Slices, k)
	for i := range k {
		pop[i] = data.Subset(seq(rows*i, rows*(i+1)))
	}
	exact, err := Evaluate(context.Background(), pop, nil, EvalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ eps, clip, bound float64 }{
		{1, 35, 0.02}, {1, 100, 0.05}, {8, 35, 0.005},
	} {
		var cw, ece, acc float64
		for seed := range 5 {
			res, err := Evaluate(context.Background(), pop, nil, EvalOptions{Seed: uint64(seed), Privacy: &Privacy{Epsilon: tc.eps, Delta: 1e-5, Clip: tc.clip}})
			if err != nil {
				t.Fatal(err)
			}
			cw += math.Abs(res.Metrics.CWECE-exact.Metrics.CWECE) / 5
			ece += math.Abs(res.Metrics.ECE-exact.Metrics.ECE) / 5
			acc += math.Abs(res.Metrics.Accuracy-exact.Metrics.Accuracy) / 5
		}
		t.Logf("ε = %v, C = %v: exact cwECE %.4f ECE %.4f accuracy %.4f; mean |error| cwECE %.4f, ECE %.4f, accuracy %.4f",
			tc.eps, tc.clip, exact.Metrics.CWECE, exact.Metrics.ECE, exact.Metrics.Accuracy, cw, ece, acc)
		if cw > tc.bound {
			t.Errorf("ε = %v, C = %v: mean cwECE error %v above %v", tc.eps, tc.clip, cw, tc.bound)
		}
	}
}
