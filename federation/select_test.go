package federation

import (
	"math"
	"slices"
	"testing"

	"github.com/fedcalib/fedcalib/dp"
)

func TestHoldOut(t *testing.T) {
	p := &Partition{Clients: []Client{
		{ID: 0, Calibration: []int32{0, 2, 4, 6, 8, 10, 12, 14, 16, 18}, Test: []int32{1, 3}},
		{ID: 1, Calibration: []int32{5, 7, 9}},
		{ID: 2},
	}}
	fit, held, err := HoldOut(p, 0.3, 7)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range []int{3, 1, 0} { // round(0.3·10), round(0.3·3), 0
		h, f := held.Clients[k].Calibration, fit.Clients[k].Calibration
		if len(h) != want || len(h)+len(f) != len(p.Clients[k].Calibration) {
			t.Errorf("client %d: %d held and %d to fit, want %d held of %d", k, len(h), len(f), want, len(p.Clients[k].Calibration))
		}
		all := slices.Concat(h, f)
		slices.Sort(all)
		if !slices.Equal(all, p.Clients[k].Calibration) || !slices.IsSorted(h) || !slices.IsSorted(f) {
			t.Errorf("client %d: held %v and fit %v are not a sorted split of %v", k, h, f, p.Clients[k].Calibration)
		}
		if !slices.Equal(held.Clients[k].Test, p.Clients[k].Test) {
			t.Errorf("client %d: test rows changed", k)
		}
	}
	if len(p.Clients[0].Calibration) != 10 {
		t.Error("HoldOut changed its input")
	}
	fit2, held2, _ := HoldOut(p, 0.3, 7)
	if !slices.Equal(fit2.Clients[0].Calibration, fit.Clients[0].Calibration) || !slices.Equal(held2.Clients[0].Calibration, held.Clients[0].Calibration) {
		t.Error("one seed, two splits")
	}
	for _, share := range []float64{0, 1, math.NaN()} {
		if _, _, err := HoldOut(p, share, 7); err == nil {
			t.Errorf("share %v accepted", share)
		}
	}
}

func TestPlanSelection(t *testing.T) {
	p, err := PlanSelection(2, 1e-5, 0.2, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	rho, _ := dp.ZCDPRho(2, 1e-5)
	if p.Rho != rho || math.Abs(p.FitRho-0.8*rho/3) > 1e-15 || math.Abs(p.EvalRho-0.2*rho/4) > 1e-15 {
		t.Errorf("plan %+v, ρ %v", p, rho)
	}
	if got := 3*p.FitRho + 4*p.EvalRho; math.Abs(got-rho) > 1e-12*rho {
		t.Errorf("the parts sum to ρ %v, want %v", got, rho)
	}
	if e, _ := dp.ZCDPEpsilon(p.FitRho, 1e-5); e != p.FitEpsilon {
		t.Errorf("fit ε %v, want %v", p.FitEpsilon, e)
	}
	for _, bad := range [][5]float64{{0, 1e-5, 0.2, 1, 2}, {1, 0, 0.2, 1, 2}, {1, 1e-5, 1, 1, 2}, {1, 1e-5, 0.2, 0, 2}, {1, 1e-5, 0.2, 1, 1}, {math.Inf(1), 1e-5, 0.2, 1, 2}} {
		if _, err := PlanSelection(bad[0], bad[1], bad[2], int(bad[3]), int(bad[4])); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// TestSelectionRelease: the one release's ρ is the sum of its parts',
// by hand: Δ²/(2σ²) per mechanism and round.
func TestSelectionRelease(t *testing.T) {
	fit := dp.Release{Mechanism: "fit", Noise: []dp.Gaussian{{Sigma: 2, Sensitivity: 1, Count: 3}, {Sigma: 4, Sensitivity: 2, Count: 3}}, SampleRate: 0.5, Rounds: 4}
	eval := dp.Release{Mechanism: "eval", Noise: []dp.Gaussian{{Sigma: 10, Sensitivity: 5}}, SampleRate: 1, Rounds: 1}
	r, err := SelectionRelease("sel", fit, eval, eval)
	if err != nil {
		t.Fatal(err)
	}
	want := 4*(3*0.125+3*0.125) + 2*0.125
	if math.Abs(r.Rho()-want) > 1e-15 || math.Abs(r.Rho()-(fit.Rho()+2*eval.Rho())) > 1e-15 || r.Rounds != 1 || r.SampleRate != 1 {
		t.Errorf("release %+v: ρ %v, want %v", r, r.Rho(), want)
	}
	if _, err := SelectionRelease("sel"); err == nil {
		t.Error("no releases accepted")
	}
	if a, b := SelectSeed(1, 0), SelectSeed(1, 0); SelectSeed(1, 0) == SelectSeed(1, 1) || SelectSeed(1, 0) == SelectSeed(2, 0) || a != b {
		t.Error("SelectSeed does not separate its streams")
	}
}
