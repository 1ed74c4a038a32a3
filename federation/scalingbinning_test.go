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

// TestFedScalBin checks FedScalBin over several clients, p = 1, T = 1,
// against a computation by hand: the temperature is the mean of the
// clients' own temperatures fitted on their even rows (FedAvg with
// η_S = 1 from T = 1), and the bins are those formed from the value
// histograms of all clients' odd rows scaled by it. It also checks the
// numbering of the 2T rounds and that the fit does not depend on the
// number of workers.
func TestFedScalBin(t *testing.T) {
	all := synthSet(1203, 3, 4)
	var clients Slices
	for k, n := 0, 0; n < all.Len(); k++ {
		m := min(100+57*k, all.Len()-n)
		idx := make([]int, m)
		for i := range idx {
			idx[i] = n + i
		}
		clients = append(clients, all.Subset(idx))
		n += m
	}
	f, err := Spec{Method: calib.MethodScalingBinning, Mexp: 7}.Fitter()
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Fit(context.Background(), clients, Rounds{T: 1, SampleRate: 1, Seed: 3, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	var sumT float64
	h := calib.NewValueHistograms(3, 1<<7)
	for _, c := range clients {
		even, _ := calib.SplitScalingBinning(c)
		temp := calib.NewTemperature(3)
		if err := temp.Fit(even); err != nil {
			t.Fatal(err)
		}
		sumT += temp.T - 1
	}
	wantT := 1 + sumT/float64(len(clients))
	got := res.Calibrator.(*calib.ScalingBinning)
	if math.Abs(got.T-wantT) > 1e-14*wantT {
		t.Fatalf("T = %.17g, want the mean of the clients' temperatures %.17g", got.T, wantT)
	}
	for _, c := range clients {
		_, odd := calib.SplitScalingBinning(c)
		if err := h.Accumulate(calib.TemperedSet(odd, got.T)); err != nil {
			t.Fatal(err)
		}
	}
	if res.Histograms != nil {
		t.Errorf("Result.Histograms is set")
	}
	want, err := calib.NewScalingBinning(got.T, h, calib.ScalingBinningBins)
	if err != nil {
		t.Fatal(err)
	}
	// The server adds the clients' sums in client order, the hand
	// computation example by example: the values agree to rounding.
	if !reflect.DeepEqual(got.Thresholds, want.Thresholds) || got.Bins != want.Bins || got.Mexp != want.Mexp {
		t.Fatalf("calibrator %+v, want %+v", got, want)
	}
	for k, v := range want.Values {
		if math.Abs(got.Values[k]-v) > 1e-14 {
			t.Fatalf("value %d: %.17g, want %.17g", k, got.Values[k], v)
		}
	}
	if res.Protocol != "FedScalBin" || len(res.Rounds) != 2 || res.Rounds[0].Round != 1 || res.Rounds[1].Round != 2 ||
		res.Rounds[0].Participants != len(clients) || res.Rounds[1].Participants != len(clients) {
		t.Errorf("protocol %q, rounds %+v", res.Protocol, res.Rounds)
	}

	// Sampled rounds: the same calibrator for 1 and 3 workers.
	var fits []*calib.ScalingBinning
	for _, w := range []int{1, 3} {
		res, err := f.Fit(context.Background(), clients, Rounds{T: 3, SampleRate: 0.5, Seed: 8, Workers: w})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Rounds) != 6 || res.Rounds[5].Round != 6 {
			t.Fatalf("rounds %+v: want 6, numbered 1 to 6", res.Rounds)
		}
		// The binning stage samples from its own stream: its rounds are
		// not the scaling stage's samples again.
		same := true
		for i := range 3 {
			same = same && res.Rounds[i].Participants == res.Rounds[3+i].Participants
		}
		if same {
			t.Errorf("the stages sampled the same numbers of clients %+v: the binning stage reuses the scaling stage's samples", res.Rounds)
		}
		fits = append(fits, res.Calibrator.(*calib.ScalingBinning))
	}
	if !reflect.DeepEqual(fits[0], fits[1]) {
		t.Errorf("1 worker gives %+v, 3 give %+v", fits[0], fits[1])
	}
}

// TestFedScalBinRefuses: weighting, a bin exponent out of range and a
// number of bins are refused with errors that say so.
func TestFedScalBinRefuses(t *testing.T) {
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{Method: calib.MethodScalingBinning, Weighting: calib.WeightAll}, "takes no weighting"},
		{Spec{Method: calib.MethodScalingBinning, Mexp: 17}, "bin exponent"},
		{Spec{Method: calib.MethodScalingBinning, Epsilon: 1, ClipPos: -1}, "clip norm C₊"},
	} {
		f, err := tc.spec.Fitter()
		if err == nil {
			_, err = f.Fit(context.Background(), Slices{synthSet(50, 3, 1)}, Rounds{T: 1, SampleRate: 1})
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.spec, err, tc.want)
		}
	}
	if _, err := New(calib.MethodScalingBinning, Options{Bins: 8}); err == nil || !strings.Contains(err.Error(), "not a number of bins") {
		t.Errorf("Bins: %v", err)
	}
}

// TestFedScalBinPrivate checks the private fit: with ε = +Inf and
// infinite clip norms it is the non-private fit bit for bit (at p = 1,
// where DP-FedAvg's fixed denominator p·K is the number of
// participants); with a real
// budget, under both accountants, it spends the budget over 2T releases,
// its record passes calib.Privacy.Check, PlanNoise prints its σ, and
// under zCDP z is √((1 + 2c)·T/(2ρ)) computed by hand.
func TestFedScalBinPrivate(t *testing.T) {
	const classes = 3
	pop, _, _ := federationOf(t, synthSet(1500, classes, 3), 12, 0.5, 3)
	r := Rounds{T: 3, SampleRate: 0.5, Seed: 9, Workers: 2}
	fit := func(p *Privacy, r Rounds) *Result {
		t.Helper()
		f, err := New(calib.MethodScalingBinning, Options{Mexp: 6, Privacy: p})
		if err != nil {
			t.Fatal(err)
		}
		res, err := f.Fit(context.Background(), pop, r)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	all := Rounds{T: 3, SampleRate: 1, Seed: 9, Workers: 2}
	plain := fit(nil, all)
	inf := math.Inf(1)
	noNoise := fit(&Privacy{Epsilon: inf, Delta: 1e-5, Clip: inf, ClipPos: inf}, all)
	if !reflect.DeepEqual(plain.Calibrator, noNoise.Calibrator) || noNoise.Privacy != nil {
		t.Errorf("ε = +Inf without clipping differs from the plain fit (privacy %+v)", noNoise.Privacy)
	}
	for _, acc := range []dp.Accountant{dp.ZCDP, dp.RDP} {
		p := &Privacy{Epsilon: 1, Delta: 1e-5, Clip: 0.7, ClipPos: 3, Accountant: acc}
		res := fit(p, r)
		rec := res.Privacy
		if rec == nil || rec.Clip != 0.7 || rec.ClipPos != 3 || rec.ClipNeg != 0 || rec.Rounds != r.T || rec.Accountant != acc.String() {
			t.Fatalf("%v: record %+v", acc, rec)
		}
		if err := rec.Check(calib.MethodScalingBinning, classes); err != nil {
			t.Errorf("%v: the fit's own record is refused: %v", acc, err)
		}
		if rec.Epsilon > 1+1e-9 || rec.Epsilon < 0.99 {
			t.Errorf("%v: ε spent %v, want the budget 1", acc, rec.Epsilon)
		}
		if n := len(res.Ledger.Releases()); n != 2*r.T {
			t.Errorf("%v: %d releases, want 2T = %d", acc, n, 2*r.T)
		}
		plan, err := PlanNoise(calib.MethodScalingBinning, classes, p, r.T, r.SampleRate)
		if err != nil {
			t.Fatal(err)
		}
		if plan.Sigma() != rec.Sigma || plan.Mechanisms[1].Sigma != plan.Multiplier*3 || plan.PerRound() != 1+2*classes {
			t.Errorf("%v: plan %+v, record σ %v", acc, plan, rec.Sigma)
		}
		if acc == dp.ZCDP {
			rho, err := dp.ZCDPRho(1, 1e-5)
			if err != nil {
				t.Fatal(err)
			}
			if z := math.Sqrt(float64((1+2*classes)*r.T) / (2 * rho)); math.Abs(plan.Multiplier-z) > 1e-12*z {
				t.Errorf("zCDP multiplier %v, want %v", plan.Multiplier, z)
			}
		}
		if d := res.Calibrator.(*calib.ScalingBinning).T; !(d >= calib.MinTemperature && d <= calib.MaxTemperature) {
			t.Errorf("%v: T = %v", acc, d)
		}
	}
}

// TestFedScalBinCheck: the binning stage's server refuses updates of the
// wrong length, with a negative value, or a sum above its count; the
// client refuses a broadcast that is not one temperature.
func TestFedScalBinCheck(t *testing.T) {
	s := &valueServer{t: 2, bins: 2, round: calib.NewValueHistograms(2, 2), cum: calib.NewValueHistograms(2, 2)}
	ok := []float64{1, 2, 0, 3, 0.5, 1.5, 0, 2.5} // counts, then sums ≤ counts
	if err := s.Check(ok); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		u    []float64
		want string
	}{
		{ok[:7], "7 values, want 8"},
		{[]float64{1, 2, 0, 3, 0.5, -1, 0, 2.5}, "value 5 is negative"},
		{[]float64{1, 2, 0, 3, 1.5, 1.5, 0, 2.5}, "bin 0 sums probabilities to 1.5 over 1 examples"},
	} {
		if err := s.Check(tc.u); !errors.Is(err, ErrBadUpdate) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want ErrBadUpdate with %q", tc.u, err, tc.want)
		}
	}
	if b := s.Broadcast(); len(b) != 1 || b[0] != 2 {
		t.Errorf("broadcast %v: want [2]", b)
	}
	c := &valueClient{classes: 2, bins: 2}
	if _, err := c.Update(nil, 1, synthSet(4, 2, 1), []float64{0}, nil); err == nil || !strings.Contains(err.Error(), "want one finite temperature") {
		t.Errorf("broadcast T = 0: %v", err)
	}
}
