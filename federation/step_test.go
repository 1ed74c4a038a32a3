package federation

import (
	"context"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

// stepDrive is a second driver of a protocol's steps, written as a network
// coordinator would: sequentially, with every update checked and copied
// through its wire form. It must give the same calibrator as Fit.
func stepDrive(t *testing.T, p Stepper, pop Population, r Rounds) *Result {
	t.Helper()
	c, s, err := p.Steps(FederationOf(context.Background(), pop, 1), r)
	if err != nil {
		t.Fatal(err)
	}
	sched := Schedule(s, r)
	for round := 1; round <= sched.Rounds(); round++ {
		parts := sched.Participants(round, pop.Len())
		bc := append([]float64(nil), s.Broadcast()...) // as received over the wire
		updates := make(map[int][]float64)
		for i := len(parts) - 1; i >= 0; i-- { // arrival order differs from client order
			k := parts[i]
			set, err := pop.Client(k)
			if err != nil {
				t.Fatal(err)
			}
			u, err := c.Update(nil, round, set, bc, ClientRand(r.Seed, round, k))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Check(u); err != nil {
				t.Fatalf("round %d client %d: %v", round, k, err)
			}
			updates[k] = u
		}
		for _, k := range parts {
			if err := s.Add(updates[k]); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.EndRound(round, len(parts)); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.Result()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestStepsEqualFit: the in-process Fit and a sequential driver of the
// same steps give bit-identical calibrators and privacy records, for
// every method, with and without privacy.
func TestStepsEqualFit(t *testing.T) {
	pop, _, _ := federationOf(t, synthSet(1500, 4, 3), 12, 0.5, 3)
	r := Rounds{T: 3, SampleRate: 0.5, Seed: 9, Workers: 3}
	for _, m := range calib.Methods() {
		for _, private := range []bool{false, true} {
			spec := Spec{Method: m.Name}
			if m.Family == calib.Binning {
				spec.Weighting = calib.WeightAll
			}
			if private {
				spec.Epsilon = 2
			}
			f, err := spec.Fitter()
			if err != nil {
				t.Fatal(err)
			}
			want, err := f.Fit(context.Background(), pop, r)
			if err != nil {
				t.Fatal(err)
			}
			got := stepDrive(t, f.(Stepper), pop, r)
			probe := synthSet(50, 4, 11)
			a, b := make([]float64, len(probe.Logits)), make([]float64, len(probe.Logits))
			want.Calibrator.Predict(a, probe.Logits)
			got.Calibrator.Predict(b, probe.Logits)
			if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(want.Privacy, got.Privacy) {
				t.Errorf("%s private=%v: the step driver differs from Fit (privacy %+v vs %+v)", m.Name, private, got.Privacy, want.Privacy)
			}
		}
	}
}

func TestServerStepCheck(t *testing.T) {
	fed := Federation{Clients: 4, Classes: 3}
	r := Rounds{T: 1, SampleRate: 1}
	bin, _ := New("bin", Options{Bins: 2, Privacy: &Privacy{Epsilon: 1, Delta: 1e-5, ClipPos: 1, ClipNeg: 2}})
	_, bs, err := bin.(Stepper).Steps(fed, r)
	if err != nil {
		t.Fatal(err)
	}
	temp, _ := New("temp", Options{Privacy: &Privacy{Epsilon: 1, Delta: 1e-5, Clip: 0.5}})
	_, ts, err := temp.(Stepper).Steps(fed, r)
	if err != nil {
		t.Fatal(err)
	}
	okBin := make([]float64, 2*3*2) // 2·C·B
	okBin[0], okBin[1] = 0.6, 0.8   // norm 1 = C₊
	for _, tc := range []struct {
		name string
		s    ServerStep
		u    []float64
		bad  bool
	}{
		{"binning ok", bs, okBin, false},
		{"binning short", bs, okBin[:11], true},
		{"binning NaN", bs, with(okBin, 3, math.NaN()), true},
		{"binning negative", bs, with(okBin, 7, -1), true},
		{"binning over C₊", bs, with(okBin, 1, 0.9), true},
		{"binning over C₋", bs, with(okBin, 6, 2.5), true},
		{"scaling ok", ts, []float64{-0.5}, false},
		{"scaling long", ts, []float64{0.1, 0.1}, true},
		{"scaling Inf", ts, []float64{math.Inf(1)}, true},
		{"scaling over C", ts, []float64{0.51}, true},
	} {
		err := tc.s.Check(tc.u)
		if got := errors.Is(err, ErrBadUpdate); got != tc.bad || (err != nil && !tc.bad) {
			t.Errorf("%s: Check = %v, want refused %v", tc.name, err, tc.bad)
		}
	}
	if got := len(ts.Broadcast()); got != 1 || ts.Broadcast()[0] != 1 {
		t.Errorf("FedTemp broadcasts %v, want T = [1]", ts.Broadcast())
	}
	if bs.Broadcast() != nil || bs.UpdateLen() != 12 || ts.UpdateLen() != 1 {
		t.Errorf("binning broadcast %v, update lengths %d and %d", bs.Broadcast(), bs.UpdateLen(), ts.UpdateLen())
	}
}

// with returns a copy of u with u[i] = v.
func with(u []float64, i int, v float64) []float64 {
	out := append([]float64(nil), u...)
	out[i] = v
	return out
}

// driveRounds runs rounds from..to of the steps c and s sequentially.
func driveRounds(t testing.TB, c ClientStep, s ServerStep, pop Population, r Rounds, from, to int) {
	t.Helper()
	sched := Schedule(s, r)
	for round := from; round <= to; round++ {
		parts := sched.Participants(round, pop.Len())
		for _, k := range parts {
			set, err := pop.Client(k)
			if err != nil {
				t.Fatal(err)
			}
			u, err := c.Update(nil, round, set, s.Broadcast(), ClientRand(r.Seed, round, k))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Add(u); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.EndRound(round, len(parts)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestServerStateResumes: a server whose state is saved after a round
// and restored into fresh steps (a restarted coordinator) finishes with
// the calibrator and ledger of an uninterrupted fit, for every method;
// FedScalBin is cut in its first stage, at the end of it and in its
// second.
func TestServerStateResumes(t *testing.T) {
	pop, _, _ := federationOf(t, synthSet(1200, 3, 5), 10, 0.5, 5)
	r := Rounds{T: 4, SampleRate: 0.6, Seed: 4, Workers: 2}
	for _, m := range calib.Methods() {
		spec := Spec{Method: m.Name, Epsilon: 3}
		f, err := spec.Fitter()
		if err != nil {
			t.Fatal(err)
		}
		want, err := f.Fit(context.Background(), pop, r)
		if err != nil {
			t.Fatal(err)
		}
		fed := FederationOf(context.Background(), pop, 1)
		cuts := []int{2}
		if m.Family == calib.Hybrid {
			cuts = []int{2, 4, 6}
		}
		for _, cut := range cuts {
			c, s, err := f.(Stepper).Steps(fed, r)
			if err != nil {
				t.Fatal(err)
			}
			total := Schedule(s, r).Rounds()
			driveRounds(t, c, s, pop, r, 1, cut)
			state, err := s.(StateSaver).State()
			if err != nil {
				t.Fatal(err)
			}
			c2, s2, err := f.(Stepper).Steps(fed, r)
			if err != nil {
				t.Fatal(err)
			}
			if err := s2.(StateSaver).Restore(state); err != nil {
				t.Fatal(err)
			}
			if got := s2.(StateSaver).Closed(); got != cut {
				t.Fatalf("%s: restored at round %d, want %d", m.Name, got, cut)
			}
			if err := s2.EndRound(cut, 0); err == nil {
				t.Errorf("%s: round %d closed twice", m.Name, cut)
			}
			driveRounds(t, c2, s2, pop, r, cut+1, total)
			got, err := s2.Result()
			if err != nil {
				t.Fatal(err)
			}
			probe := synthSet(40, 3, 8)
			a, b := make([]float64, len(probe.Logits)), make([]float64, len(probe.Logits))
			want.Calibrator.Predict(a, probe.Logits)
			got.Calibrator.Predict(b, probe.Logits)
			if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(want.Privacy, got.Privacy) || len(got.Ledger.Releases()) != total {
				t.Errorf("%s cut after round %d: the resumed fit differs (privacy %+v vs %+v, %d releases of %d)", m.Name, cut, got.Privacy, want.Privacy, len(got.Ledger.Releases()), total)
			}
			// A state of another protocol is refused.
			other := "FedTemp"
			if m.Protocol == other {
				other = "FedBBQ"
			}
			bad := []byte(`{"protocol":"` + other + `","closed":1}`)
			if err := s2.(StateSaver).Restore(bad); err == nil {
				t.Errorf("%s: restored a state of %s", m.Name, other)
			}
		}
	}
}
