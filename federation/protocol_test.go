package federation

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
)

var ctx = context.Background()

// TestBinningEqualsCentral: with p = 1 and T = 1 the server's sums are the
// central histograms, so FedBin and FedBBQ equal the central calibrators
// bit for bit; with T rounds the sums are T times the central counts.
func TestBinningEqualsCentral(t *testing.T) {
	data := synthSet(3000, 10, 1)
	pop, cal, _ := federationOf(t, data, 20, 0.3, 2)
	central := map[string]calib.Calibrator{"FedBin": &calib.Histogram{Bins: 32}, "FedBBQ": &calib.BBQ{Mexp: 6}}
	for name, c := range central {
		if err := c.Fit(cal); err != nil {
			t.Fatal(err)
		}
		var fed Fitter = &FedBin{Bins: 32}
		if name == "FedBBQ" {
			fed = &FedBBQ{Mexp: 6}
		}
		res, err := fed.Fit(ctx, pop, Rounds{T: 1, SampleRate: 1, Seed: 3, Workers: 3})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(res.Calibrator, c) {
			t.Errorf("%s with p = 1, T = 1 differs from the central calibrator", name)
		}
		bins := 32
		if name == "FedBBQ" {
			bins = 64
		}
		want := calib.NewHistograms(10, bins)
		if err := want.Accumulate(cal); err != nil {
			t.Fatal(err)
		}
		const T = 4
		res, err = fed.Fit(ctx, pop, Rounds{T: T, SampleRate: 1, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		for k := range want.Pos {
			if res.Histograms.Pos[k] != T*want.Pos[k] || res.Histograms.Neg[k] != T*want.Neg[k] {
				t.Fatalf("%s, T = %d: bin %d sums (%v, %v), want %d × (%v, %v)", name, T, k,
					res.Histograms.Pos[k], res.Histograms.Neg[k], T, want.Pos[k], want.Neg[k])
			}
		}
	}
}

// TestFedTempOneClientEqualsCentral: one client holding all the data,
// taking part once, moves the server's T to its local fit from T = 1,
// which is the central fit.
func TestFedTempOneClientEqualsCentral(t *testing.T) {
	data := synthSet(2000, 10, 4)
	central := calib.NewTemperature(10)
	if err := central.Fit(data); err != nil {
		t.Fatal(err)
	}
	if central.T <= 1 {
		t.Fatalf("synthetic model is not overconfident: T = %v", central.T)
	}
	res, err := FedTemp().Fit(ctx, Slices{data}, Rounds{T: 1, SampleRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Calibrator.(*calib.Temperature).T; got != central.T {
		t.Errorf("FedTemp T = %v, central %v", got, central.T)
	}
	// The other scalers agree to rounding (w⁰ + (w_k − w⁰) need not be w_k
	// exactly for every parameter).
	for _, f := range []*FedAvg{FedVector(), FedOPVector()} {
		var c calib.Scaler = calib.NewVector(10)
		if f.Name == "FedOPVector" {
			c = calib.NewOPVector(10)
		}
		if err := c.Fit(data); err != nil {
			t.Fatal(err)
		}
		res, err := f.Fit(ctx, Slices{data}, Rounds{T: 1, SampleRate: 1})
		if err != nil {
			t.Fatal(err)
		}
		got, want := res.Calibrator.(calib.Scaler).Params(), c.Params()
		for i := range want {
			if math.Abs(got[i]-want[i]) > 1e-12*max(1, math.Abs(want[i])) {
				t.Errorf("%s parameter %d = %v, central %v", f.Name, i, got[i], want[i])
			}
		}
	}
}

// TestInfiniteEpsilonEqualsNonPrivate: the private code path with ε = ∞
// (no noise) and infinite clip norms reproduces the non-private fit bit
// for bit (p = 1, so the fixed denominator p·K is the participant count).
func TestInfiniteEpsilonEqualsNonPrivate(t *testing.T) {
	data := synthSet(2000, 5, 5)
	pop, _, _ := federationOf(t, data, 10, 0.5, 6)
	inf := math.Inf(1)
	priv := &Privacy{Epsilon: inf, Delta: 1e-5, Clip: inf, ClipPos: inf, ClipNeg: inf}
	r := Rounds{T: 3, SampleRate: 1, Seed: 8}
	for _, tc := range []struct {
		name     string
		plain, p Fitter
	}{
		{"FedBBQ all", &FedBBQ{Weighting: calib.WeightAll}, &FedBBQ{Weighting: calib.WeightAll, Privacy: priv}},
		{"FedBin changed", &FedBin{Weighting: calib.WeightChanged}, &FedBin{Weighting: calib.WeightChanged, Privacy: priv}},
		{"FedTemp", FedTemp(), &FedAvg{Name: "FedTemp", Scaler: FedTemp().Scaler, Privacy: priv}},
		{"FedVector", FedVector(), &FedAvg{Name: "FedVector", Scaler: FedVector().Scaler, Privacy: priv}},
	} {
		a, err := tc.plain.Fit(ctx, pop, r)
		if err != nil {
			t.Fatal(err)
		}
		b, err := tc.p.Fit(ctx, pop, r)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a.Calibrator, b.Calibrator) {
			t.Errorf("%s: ε = ∞ differs from the non-private fit", tc.name)
		}
		if b.Privacy != nil || b.Ledger != nil {
			t.Errorf("%s: ε = ∞ recorded privacy %+v", tc.name, b.Privacy)
		}
	}
}

// TestDeterministicAcrossWorkers: private (noisy, clipped) fits with
// partial participation are bit-identical for any number of workers.
func TestDeterministicAcrossWorkers(t *testing.T) {
	data := synthSet(3000, 10, 9)
	pop, _, _ := federationOf(t, data, 40, 0.1, 10)
	priv := &Privacy{Epsilon: 2, Delta: 1e-5}
	for _, f := range []Fitter{
		&FedBBQ{Weighting: calib.WeightAll, Privacy: priv},
		&FedAvg{Name: "FedVector", Scaler: FedVector().Scaler, Privacy: priv},
		FedCal(),
	} {
		var first calib.Calibrator
		for _, w := range []int{1, 2, 5} {
			res, err := f.Fit(ctx, pop, Rounds{T: 3, SampleRate: 0.3, Seed: 11, Workers: w})
			if err != nil {
				t.Fatal(err)
			}
			if first == nil {
				first = res.Calibrator
				continue
			}
			if !reflect.DeepEqual(first, res.Calibrator) {
				t.Errorf("%T: %d workers give another calibrator than 1", f, w)
			}
		}
	}
}

// TestNoiseFollowsSigmaFormula: clients with no data send zero
// histograms, so the server's sums after T rounds are pure noise with
// standard deviation σ·√T per bin; σ must follow SPEC §7 for every ε, and
// the recorded ε, ρ and σ must match.
func TestNoiseFollowsSigmaFormula(t *testing.T) {
	const c, T, delta = 4, 3, 1e-5
	empty := Slices{{Classes: c}, {Classes: c}}
	prev := 0.0
	for _, eps := range []float64{8, 2, 0.5, 0.1} {
		rho, err := dp.ZCDPRho(eps, delta)
		if err != nil {
			t.Fatal(err)
		}
		want := math.Sqrt(2 * c * T / (2 * rho)) // per unit clip norm
		res, err := (&FedBin{Bins: 512, Privacy: &Privacy{Epsilon: eps, Delta: delta, ClipPos: 1, ClipNeg: 3}}).
			Fit(ctx, empty, Rounds{T: T, SampleRate: 1, Seed: 12})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Privacy.Sigma; math.Abs(got-want) > 1e-9*want {
			t.Errorf("ε = %v: σ₊ = %v, want C₊·√(2cT/(2ρ)) = %v", eps, got, want)
		}
		if math.Abs(res.Privacy.Epsilon-eps) > 1e-6*eps || math.Abs(res.Privacy.Rho-rho) > 1e-9*rho {
			t.Errorf("ε = %v: recorded ε %v, ρ %v; want %v, %v", eps, res.Privacy.Epsilon, res.Privacy.Rho, eps, rho)
		}
		if n := len(res.Ledger.Releases()); n != T {
			t.Errorf("ε = %v: %d releases, want %d", eps, n, T)
		}
		for _, h := range []struct {
			counts []float64
			clip   float64
		}{{res.Histograms.Pos, 1}, {res.Histograms.Neg, 3}} {
			var ss float64
			for _, v := range h.counts {
				ss += v * v
			}
			sd := math.Sqrt(ss / float64(len(h.counts)))
			exp := h.clip * want * math.Sqrt(T)
			// 2048 samples: the relative standard error of sd is ≈ 1.6%.
			if math.Abs(sd-exp) > 0.08*exp {
				t.Errorf("ε = %v, clip %v: noise sd %.4g, want %.4g", eps, h.clip, sd, exp)
			}
		}
		if !(want > prev) {
			t.Errorf("σ did not grow as ε shrank to %v", eps)
		}
		prev = want
	}
	// Scaling: σ = C·√(T/(2ρ)).
	rho, _ := dp.ZCDPRho(1, delta)
	res, err := (&FedAvg{Name: "FedTemp", Scaler: FedTemp().Scaler, Privacy: &Privacy{Epsilon: 1, Delta: delta, Clip: 0.5}}).
		Fit(ctx, Slices{synthSet(50, c, 1)}, Rounds{T: 12, SampleRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := 0.5 * math.Sqrt(12/(2*rho)); math.Abs(res.Privacy.Sigma-want) > 1e-9*want {
		t.Errorf("FedTemp σ = %v, want C·√(T/(2ρ)) = %v", res.Privacy.Sigma, want)
	}
	if res.Privacy.Clip != 0.5 || res.Privacy.Rounds != 12 || res.Privacy.Accountant != "zcdp" {
		t.Errorf("privacy record %+v", res.Privacy)
	}
}

// TestSkippedRoundsCharged: with a tiny sample rate most rounds are empty;
// the ledger still charges all T and the spent ε is the target.
func TestSkippedRoundsCharged(t *testing.T) {
	data := synthSet(200, 3, 2)
	res, err := (&FedBBQ{Privacy: &Privacy{Epsilon: 1, Delta: 1e-6}}).Fit(ctx, Slices{data}, Rounds{T: 20, SampleRate: 0.1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var skipped int
	for _, s := range res.Rounds {
		if s.Skipped() {
			skipped++
		}
	}
	if skipped == 0 {
		t.Fatal("no round was skipped")
	}
	if len(res.Ledger.Releases()) != 20 || math.Abs(res.Privacy.Epsilon-1) > 1e-6 {
		t.Errorf("%d releases, ε %v after %d skipped rounds; want 20 and 1", len(res.Ledger.Releases()), res.Privacy.Epsilon, skipped)
	}
}

func TestClipWithoutNoise(t *testing.T) {
	// One client whose local T is far from 1: with clipping the server's
	// T moves by exactly the clip norm per round.
	data := synthSet(1000, 10, 3)
	res, err := (&FedAvg{Name: "FedTemp", Scaler: FedTemp().Scaler, Clip: 0.25}).Fit(ctx, Slices{data}, Rounds{T: 2, SampleRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Calibrator.(*calib.Temperature).T; math.Abs(got-1.5) > 1e-12 {
		t.Errorf("T = %v after two clipped rounds, want 1.5", got)
	}
}

func TestTelemetry(t *testing.T) {
	data := synthSet(500, 10, 3)
	pop, _, _ := federationOf(t, data, 10, 1, 1)
	res, err := (&FedBBQ{}).Fit(ctx, pop, Rounds{T: 2, SampleRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Rounds {
		if s.Participants != 10 || s.UploadBytes != 8*2*10*128 || s.DownloadBytes != 0 || s.ComputeMax <= 0 {
			t.Errorf("FedBBQ round stats %+v", s)
		}
	}
	res, err = FedMatrix().Fit(ctx, pop, Rounds{T: 1, SampleRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s := res.Rounds[0]; s.UploadBytes != 8*110 || s.DownloadBytes != 8*110 {
		t.Errorf("FedMatrix round stats %+v, want 110 parameters each way", s)
	}
}

func TestProtocolErrors(t *testing.T) {
	data := synthSet(100, 3, 1)
	pop := Slices{data}
	r := Rounds{T: 1, SampleRate: 1}
	for _, tc := range []struct {
		name string
		f    Fitter
		r    Rounds
		want string
	}{
		{"weighting", &FedBBQ{Weighting: "some"}, r, "unknown weighting"},
		{"mexp", &FedBBQ{Mexp: 17}, r, "Mexp = 17"},
		{"bins", &FedBin{Bins: -1}, r, "-1 bins"},
		{"rounds", &FedBBQ{}, Rounds{T: 0, SampleRate: 1}, "rounds T is 0"},
		{"rate", FedTemp(), Rounds{T: 1, SampleRate: 2}, "sample rate p is 2"},
		{"epsilon", &FedBBQ{Privacy: &Privacy{Epsilon: 0, Delta: 1e-5}}, r, "ε is 0"},
		{"delta", &FedBBQ{Privacy: &Privacy{Epsilon: 1, Delta: 1}}, r, "δ is 1"},
		{"infinite clip", &FedBBQ{Privacy: &Privacy{Epsilon: 1, Delta: 1e-5, ClipPos: math.Inf(1)}}, r, "clip norm C₊"},
		{"negative clip", &FedAvg{Name: "x", Scaler: FedTemp().Scaler, Privacy: &Privacy{Epsilon: 1, Delta: 1e-5, Clip: -1}}, r, "clip norm C"},
		{"server lr", &FedAvg{Name: "x", Scaler: FedTemp().Scaler, ServerLR: -1}, r, "learning rate"},
		{"no scaler", &FedAvg{}, r, "no Scaler"},
	} {
		_, err := tc.f.Fit(ctx, pop, tc.r)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	// Calibrators of more than calib.MaxSize values are refused before
	// they are allocated.
	for _, tc := range []struct {
		name    string
		f       Fitter
		classes int
		want    string
	}{
		{"matrix", FedMatrix(), 4096, "FedMatrix: matrix with 4096 classes has 1.678e+07 parameters"},
		{"bins", &FedBin{Bins: calib.MaxBins}, 200, "FedBin: bin with 200 classes and 65536 bins per class"},
	} {
		pop := Slices{synthSet(4, tc.classes, 1)}
		_, err := tc.f.Fit(ctx, pop, r)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		f    Fitter
		r    Rounds
		want string
	}{
		{"rounds", FedTemp(), Rounds{T: MaxRounds + 1, SampleRate: 1}, "FedTemp: rounds T is 10001: want 1 to 10000"},
	} {
		_, err := tc.f.Fit(ctx, pop, tc.r)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := (&FedBBQ{}).Fit(ctx, failing{}, r); err == nil || !strings.Contains(err.Error(), "client 1: disk on fire") {
		t.Errorf("failing client: %v", err)
	}
}

type failing struct{}

func (failing) Len() int     { return 3 }
func (failing) Classes() int { return 2 }
func (failing) Client(k int) (*calib.Set, error) {
	if k == 1 {
		return nil, errors.New("disk on fire")
	}
	return &calib.Set{Classes: 2}, nil
}

func TestNew(t *testing.T) {
	for _, m := range calib.MethodNames() {
		if _, err := New(m, Options{}); err != nil {
			t.Errorf("New(%q): %v", m, err)
		}
	}
	for _, tc := range []struct {
		method string
		o      Options
		want   string
	}{
		{"no-such-method", Options{}, "unknown calibrator method"},
		{"temp", Options{Weighting: calib.WeightAll}, "is scaling"},
		{"bbq", Options{ServerLR: 0.5}, "is binning"},
		{"bbq", Options{Bins: 10}, "bin exponent"},
		{"bin", Options{Mexp: 3}, "number of bins"},
	} {
		if _, err := New(tc.method, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q, %+v): %v, want %q", tc.method, tc.o, err, tc.want)
		}
	}
}
