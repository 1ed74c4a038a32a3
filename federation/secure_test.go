package federation

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
)

var (
	_ SumStep = (*binServer)(nil)
	_ SumStep = (*scaleServer)(nil)
)

// TestAddSum: a server given each round's sum (AddSum) ends with the
// calibrator of one given each update (Add); binning's integer counts
// bit for bit.
func TestAddSum(t *testing.T) {
	fed := Federation{Clients: 4, Classes: 3, ClassCounts: func() ([]float64, error) { return []float64{1, 1, 1}, nil }}
	r := Rounds{T: 2, SampleRate: 1}
	for _, spec := range []Spec{{Method: "bbq", Mexp: 3}, {Method: "bin", Mexp: 2, Weighting: calib.WeightAll}} {
		f, err := spec.Fitter()
		if err != nil {
			t.Fatal(err)
		}
		_, each, _ := f.(Stepper).Steps(fed, r)
		_, summed, _ := f.(Stepper).Steps(fed, r)
		n := each.UpdateLen()
		for round := 1; round <= r.T; round++ {
			sum := make([]float64, n)
			for k := range 3 {
				u := make([]float64, n)
				for i := range u {
					u[i] = float64((i*7 + k*3 + round) % 5)
					sum[i] += u[i]
				}
				if err := each.Add(u); err != nil {
					t.Fatal(err)
				}
			}
			if err := summed.(SumStep).AddSum(sum, 3); err != nil {
				t.Fatal(err)
			}
			if err := each.EndRound(round, 3); err != nil {
				t.Fatal(err)
			}
			if err := summed.EndRound(round, 3); err != nil {
				t.Fatal(err)
			}
		}
		a, _ := each.Result()
		b, _ := summed.Result()
		if !reflect.DeepEqual(a.Histograms, b.Histograms) {
			t.Errorf("%s: histograms from sums differ", spec.Method)
		}
	}
	_, s, _ := FedTemp().Steps(fed, r)
	for _, bad := range [][]float64{{1, 2}, {math.NaN()}} {
		if err := s.(SumStep).AddSum(bad, 1); !errors.Is(err, ErrBadUpdate) {
			t.Errorf("AddSum(%v): %v, want ErrBadUpdate", bad, err)
		}
	}
}

// TestNoisedRound: a round marked NoisedRound adds no noise and charges
// the given Skellam release instead of the plan; a server without privacy
// refuses it.
func TestNoisedRound(t *testing.T) {
	fed := Federation{Clients: 4, Classes: 3}
	r := Rounds{T: 1, SampleRate: 1, Seed: 3}
	spec := Spec{Method: "temp", Epsilon: 1, Accountant: "rdp"}
	f, _ := spec.Fitter()
	_, s, err := f.(Stepper).Steps(fed, r)
	if err != nil {
		t.Fatal(err)
	}
	rel := dp.Release{Mechanism: "FedTemp round 1", Skellam: []dp.Skellam{{Variance: 4e6, L1: 300, L2: 260}}, SampleRate: 1, Rounds: 1}
	if err := s.(SumStep).NoisedRound(rel, 1e-3); err != nil {
		t.Fatal(err)
	}
	if err := s.(SumStep).AddSum([]float64{0.2}, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.EndRound(1, 2); err != nil {
		t.Fatal(err)
	}
	res, _ := s.Result()
	// No noise: w = 1 + 0.2 / (p·K).
	if got, want := res.Calibrator.(calib.Scaler).Params()[0], 1+0.2/4; got != want {
		t.Errorf("temperature %v, want %v (no noise added)", got, want)
	}
	want, _, _ := dp.SkellamEpsilon(rel.Skellam[0], 1, dp.DefaultDelta)
	if got := res.Privacy.Epsilon; math.Abs(got-want) > 1e-9*want {
		t.Errorf("ε %v, want the Skellam release's %v", got, want)
	}
	_, plain, _ := FedTemp().Steps(fed, r)
	if err := plain.(SumStep).NoisedRound(rel, 1); err == nil {
		t.Errorf("a server without privacy took distributed noise")
	}
}
