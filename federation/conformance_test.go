package federation_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
)

// The federated half of the conformance suite (see
// calib/conformance_test.go): for every method of the registry, a
// federation of one client holding the whole set, sampled with p = 1 for
// T = 1 round without noise, must give the central calibrator.

// fedConformanceSet returns n labelled logits of c classes from an
// over-confident model: a random class favoured by 4 on N(0, 2²) noise,
// labels drawn from softmax(z/3).
func fedConformanceSet(n, c int, seed uint64) *calib.Set {
	rng := rand.New(rand.NewPCG(seed, 0x66656463)) // "fedc"
	s := &calib.Set{Logits: make([]float64, n*c), Labels: make([]int, n), Classes: c}
	p := make([]float64, c)
	for i := range n {
		z := s.Row(i)
		for j := range z {
			z[j] = 2 * rng.NormFloat64()
		}
		z[rng.IntN(c)] += 4
		for j := range p {
			p[j] = z[j] / 3
		}
		calib.Softmax(p, p)
		u, acc := rng.Float64(), 0.0
		s.Labels[i] = c - 1
		for j, v := range p {
			if acc += v; u < acc {
				s.Labels[i] = j
				break
			}
		}
	}
	return s
}

// scalingTol bounds the relative difference of each federated parameter
// from the central one: the server computes w⁰ + η·((w₁ − w⁰)/1) with
// η = 1 from the client's fitted w₁, which rounds twice, so the result
// is within a few units in the last place of w₁ but not always w₁
// itself.
const scalingTol = 1e-14

// fedSeed seeds the federated runs and the central fits.
const fedSeed = 17

// TestConformanceFederatedEqualsCentral checks, for every method of the
// registry, that one client holding the whole set, p = 1, T = 1 and no
// noise gives the central calibrator (calib.New + Fit):
//
//   - binning: the same lookup table, exactly (the server's histograms are
//     the client's); weighted variants get α_j = Ñ_j/N_j = 1 for every
//     class and so predict exactly what the unweighted central
//     calibrator does;
//   - scaling: the same parameters to scalingTol relative (see there).
//     fedcal differs legitimately from a fit of calib.New(fedcal,
//     Settings{Seed}), which seeds the initial network and the example
//     order from one seed, while the protocol draws the initial network
//     from the server's stream and the example order from the client's.
//     The test records both seeds from the protocol's scaler constructor
//     and fits the central FedCalMLP with them. dirichlet's central fit
//     cross-validates its regularisation; the test fits it with the
//     protocol's fixed regularisation instead (see checkFedScaling).
func TestConformanceFederatedEqualsCentral(t *testing.T) {
	const classes = 4
	set := fedConformanceSet(600, classes, 2)
	logits := append(append([]float64(nil), set.Logits[:100*classes]...), 1e4, 0, 0, 0, 3, 3, 3, 3, -1e4, 5, 5, -1e4)
	r := federation.Rounds{T: 1, SampleRate: 1, Seed: fedSeed, Workers: 1}
	for _, m := range calib.Methods() {
		t.Run(m.Name, func(t *testing.T) {
			switch m.Family {
			case calib.Binning:
				for _, w := range []calib.Weighting{calib.WeightNone, calib.WeightAll, calib.WeightChanged} {
					t.Run(string(w), func(t *testing.T) { checkFedBinning(t, m, w, set, r, logits) })
				}
			case calib.Scaling:
				checkFedScaling(t, m, set, r)
			case calib.Hybrid:
				checkFedHybrid(t, m, set, r, logits)
			default:
				t.Fatalf("method %q of unknown family %v: add its federated case", m.Name, m.Family)
			}
		})
	}
}

// fedFit runs the protocol of spec over one client holding set.
func fedFit(t *testing.T, f federation.Fitter, set *calib.Set, r federation.Rounds) calib.Calibrator {
	t.Helper()
	res, err := f.Fit(context.Background(), federation.Slices{set}, r)
	if err != nil {
		t.Fatal(err)
	}
	if res.Privacy != nil || res.Ledger != nil {
		t.Errorf("a fit without privacy records privacy %+v", res.Privacy)
	}
	if len(res.Rounds) != 1 || res.Rounds[0].Participants != 1 {
		t.Fatalf("rounds %+v: want one round with the one client", res.Rounds)
	}
	return res.Calibrator
}

// binParams are the parameters of a binning calibrator's sidecar.
type binParams struct {
	Bins      int             `json:"bins"` // bin
	Mexp      int             `json:"mexp"` // bbq
	Table     []float64       `json:"table"`
	Weighting calib.Weighting `json:"weighting"`
	Alpha     []float64       `json:"alpha"`
}

func paramsOf(t *testing.T, c calib.Calibrator) binParams {
	t.Helper()
	var buf bytes.Buffer
	if err := calib.Encode(&buf, c, nil, calib.Provenance{}); err != nil {
		t.Fatal(err)
	}
	var f struct {
		Params binParams `json:"params"`
	}
	if err := json.Unmarshal(buf.Bytes(), &f); err != nil {
		t.Fatal(err)
	}
	return f.Params
}

func checkFedBinning(t *testing.T, m calib.Method, w calib.Weighting, set *calib.Set, r federation.Rounds, logits []float64) {
	const mexp = 4
	f, err := federation.Spec{Method: m.Name, Mexp: mexp, Weighting: w}.Fitter()
	if err != nil {
		t.Fatal(err)
	}
	fed := fedFit(t, f, set, r)
	central, err := calib.New(m.Name, calib.Settings{Mexp: mexp})
	if err != nil {
		t.Fatal(err)
	}
	if err := central.Fit(set); err != nil {
		t.Fatal(err)
	}
	fp, cp := paramsOf(t, fed), paramsOf(t, central)
	if fp.Bins != cp.Bins || fp.Mexp != cp.Mexp || len(fp.Table) != len(cp.Table) || len(cp.Table) != set.Classes<<mexp {
		t.Fatalf("federated %d bins (Mexp %d, %d entries), central %d bins (Mexp %d, %d entries)", fp.Bins, fp.Mexp, len(fp.Table), cp.Bins, cp.Mexp, len(cp.Table))
	}
	for k := range cp.Table {
		if math.Float64bits(fp.Table[k]) != math.Float64bits(cp.Table[k]) {
			t.Fatalf("table entry %d (class %d): federated %.17g, central %.17g", k, k>>mexp, fp.Table[k], cp.Table[k])
		}
	}
	if w == calib.WeightNone {
		if fp.Weighting != "" || fp.Alpha != nil {
			t.Errorf("unweighted fit has weighting %q, alpha %v", fp.Weighting, fp.Alpha)
		}
	} else {
		if fp.Weighting != w || len(fp.Alpha) != set.Classes {
			t.Fatalf("weighting %q, alpha %v: want %q with one weight per class", fp.Weighting, fp.Alpha, w)
		}
		for j, a := range fp.Alpha {
			if a != 1 {
				t.Errorf("α_%d = %v: the one client holds every example of the class, want 1", j, a)
			}
		}
	}
	got, want := make([]float64, len(logits)), make([]float64, len(logits))
	fed.Predict(got, logits)
	central.Predict(want, logits)
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			t.Fatalf("prediction %d: federated %.17g, central %.17g", i, got[i], want[i])
		}
	}
}

func checkFedScaling(t *testing.T, m calib.Method, set *calib.Set, r federation.Rounds) {
	f, err := federation.Spec{Method: m.Name}.Fitter()
	if err != nil {
		t.Fatal(err)
	}
	if m.Name == calib.MethodFedCal {
		// Record the seeds the protocol gives its scalers: the first is
		// the server's (initial network), the second the client's
		// (example order of its local SGD).
		fa, ok := f.(*federation.FedAvg)
		if !ok {
			t.Fatalf("federation.New(%q) is a %T, not *federation.FedAvg", m.Name, f)
		}
		var seeds []int64
		inner := fa.Scaler
		fa.Scaler = func(c int, rng *rand.Rand) calib.Scaler {
			s := inner(c, rng)
			seeds = append(seeds, s.(*calib.FedCalMLP).Seed)
			return s
		}
		fed := fedFit(t, f, set, r)
		if len(seeds) != 2 {
			t.Fatalf("the protocol built %d scalers: want the server's and the client's", len(seeds))
		}
		mlp := calib.NewFedCalMLP(set.Classes, seeds[0])
		mlp.Seed = seeds[1]
		if err := mlp.Fit(set); err != nil {
			t.Fatal(err)
		}
		compareParams(t, fed.(calib.Scaler).Params(), mlp.Params())

		// calib.New with either seed alone gives another network.
		for _, seed := range seeds {
			c, err := calib.New(m.Name, calib.Settings{Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Fit(set); err != nil {
				t.Fatal(err)
			}
			if p := c.(calib.Scaler).Params(); closeParams(fed.(calib.Scaler).Params(), p) {
				t.Errorf("calib.New(fedcal, Seed %d) matches the federated fit: the stated difference no longer holds, compare with it directly", seed)
			}
		}
		return
	}
	c, err := calib.New(m.Name, calib.Settings{Seed: fedSeed})
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := c.(*calib.Dirichlet); ok {
		// The central dirichlet fit chooses λ = μ by cross-validation on
		// the rows, which a federation cannot: its clients fit the fixed
		// regularisation of the protocol's scaler. Compare like with
		// like: the central fit with that regularisation and no
		// cross-validation.
		fa, ok := f.(*federation.FedAvg)
		if !ok {
			t.Fatalf("federation.New(%q) is a %T, not *federation.FedAvg", m.Name, f)
		}
		fs := fa.Scaler(set.Classes, rand.New(rand.NewPCG(fedSeed, 0))).(*calib.Dirichlet)
		if d.Folds < 2 || fs.Folds != 0 {
			t.Fatalf("central fit has %d folds, the federation's scaler %d: want cross-validation centrally only", d.Folds, fs.Folds)
		}
		d.Folds, d.Lambda, d.Mu = 0, fs.Lambda, fs.Mu
		t.Logf("central fit with the federation's λ = %v, μ = %v", d.Lambda, d.Mu)
	}
	if err := c.Fit(set); err != nil {
		t.Fatal(err)
	}
	central, ok := c.(calib.Scaler)
	if !ok {
		t.Fatalf("scaling method %q: %T is not a calib.Scaler", m.Name, c)
	}
	fed := fedFit(t, f, set, r)
	compareParams(t, fed.(calib.Scaler).Params(), central.Params())
}

func closeParams(got, want []float64) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range want {
		if !(math.Abs(got[i]-want[i]) <= scalingTol*max(1, math.Abs(want[i]))) {
			return false
		}
	}
	return true
}

func compareParams(t *testing.T, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("federated fit has %d parameters, central %d", len(got), len(want))
	}
	var worst float64
	exact := 0
	for i := range want {
		d := math.Abs(got[i]-want[i]) / max(1, math.Abs(want[i]))
		if !(d <= scalingTol) {
			t.Fatalf("parameter %d: federated %.17g, central %.17g (relative difference %.3g > %g)", i, got[i], want[i], d, scalingTol)
		}
		if got[i] == want[i] {
			exact++
		}
		worst = max(worst, d)
	}
	t.Logf("%d parameters, %d identical, largest relative difference %.3g", len(want), exact, worst)
}

// checkFedHybrid checks scalbin: the federated temperature equals the
// central one to scalingTol (FedAvg's one update rounds), and the bins
// formed from the one client's histograms are the central bins; the
// predictions then agree to 1e-12.
func checkFedHybrid(t *testing.T, m calib.Method, set *calib.Set, r federation.Rounds, logits []float64) {
	const mexp = 6
	f, err := federation.Spec{Method: m.Name, Mexp: mexp}.Fitter()
	if err != nil {
		t.Fatal(err)
	}
	fed, ok := fedFitRounds(t, f, set, r, 2).(*calib.ScalingBinning)
	if !ok {
		t.Fatalf("federated scalbin is not a *calib.ScalingBinning")
	}
	c, err := calib.New(m.Name, calib.Settings{Mexp: mexp})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Fit(set); err != nil {
		t.Fatal(err)
	}
	central := c.(*calib.ScalingBinning)
	compareParams(t, []float64{fed.T}, []float64{central.T})
	if fed.Bins != central.Bins || fed.Mexp != mexp || central.Mexp != mexp {
		t.Fatalf("federated %d bins of 2^%d, central %d bins of 2^%d", fed.Bins, fed.Mexp, central.Bins, central.Mexp)
	}
	if !slices.Equal(fed.Thresholds, central.Thresholds) {
		t.Fatalf("thresholds: federated %v, central %v", fed.Thresholds, central.Thresholds)
	}
	for k, v := range central.Values {
		if math.Abs(fed.Values[k]-v) > 1e-12 {
			t.Fatalf("value %d: federated %.17g, central %.17g", k, fed.Values[k], v)
		}
	}
	got, want := make([]float64, len(logits)), make([]float64, len(logits))
	fed.Predict(got, logits)
	central.Predict(want, logits)
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Fatalf("prediction %d: federated %.17g, central %.17g", i, got[i], want[i])
		}
	}
}

// fedFitRounds is fedFit for a protocol that runs stages rounds per
// round of r.
func fedFitRounds(t *testing.T, f federation.Fitter, set *calib.Set, r federation.Rounds, stages int) calib.Calibrator {
	t.Helper()
	res, err := f.Fit(context.Background(), federation.Slices{set}, r)
	if err != nil {
		t.Fatal(err)
	}
	if res.Privacy != nil || res.Ledger != nil {
		t.Errorf("a fit without privacy records privacy %+v", res.Privacy)
	}
	if len(res.Rounds) != stages*r.T {
		t.Fatalf("%d rounds: want %d", len(res.Rounds), stages*r.T)
	}
	for i, st := range res.Rounds {
		if st.Round != i+1 || st.Participants != 1 {
			t.Fatalf("round %d: %+v, want round %d with the one client", i, st, i+1)
		}
	}
	return res.Calibrator
}
