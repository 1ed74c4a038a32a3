package network

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
)

// TestCoordinatorEqualsFit: a coordinator and 20 clients over the embedded
// server (TLS, pinned certificate) give the simulation's calibrator and
// privacy record bit for bit, with dense or sparse updates, and sample
// the simulation's participants in every round (2T rounds for scalbin,
// whose updates change length between its stages).
func TestCoordinatorEqualsFit(t *testing.T) {
	const K, C = 20, 4
	pop := population(t, 3000, C, K)
	r := federation.Rounds{T: 3, SampleRate: 0.5, Seed: 11}
	for _, tc := range []struct {
		name   string
		spec   federation.Spec
		sparse bool // Config.SparseUpdates
	}{
		{"FedBBQ weighted DP", federation.Spec{Method: "bbq", Mexp: 4, Weighting: calib.WeightAll, Epsilon: 2}, false},
		{"FedBBQ weighted DP, sparse updates", federation.Spec{Method: "bbq", Mexp: 4, Weighting: calib.WeightAll, Epsilon: 2}, true},
		{"FedBBQ weighted", federation.Spec{Method: "bbq", Mexp: 4, Weighting: calib.WeightAll}, false},
		{"FedTemp DP", federation.Spec{Method: "temp", Epsilon: 2}, false},
		{"FedScalBin", federation.Spec{Method: calib.MethodScalingBinning, Mexp: 5}, false},
		{"FedScalBin DP, sparse updates", federation.Spec{Method: calib.MethodScalingBinning, Mexp: 5, Epsilon: 2}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, K, t.TempDir())
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			wait := h.joinAll(ctx, pop, upTo(K))
			out, err := h.coordinate(ctx, t, Config{Spec: tc.spec, Rounds: r, MinClients: K / 2, RoundTimeout: 10 * time.Second, EnrolTimeout: 20 * time.Second, SparseUpdates: tc.sparse})
			if err != nil {
				t.Fatal(err)
			}
			noErrors(t, wait())
			want := fit(t, tc.spec, pop, r)
			if !samePredictions(want.Calibrator, out.Result.Calibrator, C) {
				t.Errorf("the networked calibrator differs from the simulation's")
			}
			if !reflect.DeepEqual(want.Privacy, out.Result.Privacy) {
				t.Errorf("privacy %+v, simulation %+v", out.Result.Privacy, want.Privacy)
			}
			if len(out.Rounds) != len(want.Rounds) {
				t.Fatalf("%d round records, want %d", len(out.Rounds), len(want.Rounds))
			}
			for i, rec := range out.Rounds {
				if len(rec.Participants) != want.Rounds[i].Participants {
					t.Errorf("round %d: %d participants, the simulation %d", rec.Round, len(rec.Participants), want.Rounds[i].Participants)
				}
				if want := schedule(t, tc.spec, K, C, r).Participants(rec.Round, K); !reflect.DeepEqual(rec.Participants, want) || len(rec.Dropouts) != 0 || rec.Attempts != 1 {
					t.Errorf("round %d: participants %v dropouts %v attempts %d; want %v, none, 1", rec.Round, rec.Participants, rec.Dropouts, rec.Attempts, want)
				}
			}
		})
	}
}

// schedule returns the rounds of spec's server step for a federation of
// K clients and C classes.
func schedule(t *testing.T, spec federation.Spec, K, C int, r federation.Rounds) federation.Scheduler {
	t.Helper()
	f, err := spec.Fitter()
	if err != nil {
		t.Fatal(err)
	}
	zero := func() ([]float64, error) { return make([]float64, C), nil }
	_, s, err := f.(federation.Stepper).Steps(federation.Federation{Clients: K, Classes: C, ClassCounts: zero}, r)
	if err != nil {
		t.Fatal(err)
	}
	return federation.Schedule(s, r)
}
