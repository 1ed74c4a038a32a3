package network

import (
	"context"
	"errors"
	"math"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
)

// evalPopulations returns the calibration and test populations of one
// IID partition of synthetic data into K clients.
func evalPopulations(t testing.TB, n, c, K int) (cal, test *federation.SetPopulation) {
	t.Helper()
	data := synthSet(n, c, 3)
	p, err := federation.IID(data.Labels, c, K, federation.PartitionOptions{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if cal, err = federation.NewPopulation(data, p, federation.Calibration); err != nil {
		t.Fatal(err)
	}
	if test, err = federation.NewPopulation(data, p, federation.Test); err != nil {
		t.Fatal(err)
	}
	return cal, test
}

// joinWithTest starts a client goroutine for each of h's clients, those
// in withTest with their test rows; wait returns their reports and errors.
func (h *harness) joinWithTest(ctx context.Context, cal, test federation.Population, withTest func(k int) bool) (wait func() ([]*ClientReport, []error)) {
	var wg sync.WaitGroup
	reps, errs := make([]*ClientReport, len(h.keys)), make([]error, len(h.keys))
	for i := range h.keys {
		cfg := ClientConfig{Key: h.keys[i], Data: func(w Welcome) (*calib.Set, error) { return cal.Client(w.Client) }}
		if withTest(i) {
			cfg.TestData = func(w Welcome) (*calib.Set, error) { return test.Client(w.Client) }
		}
		wg.Go(func() { reps[i], errs[i] = Join(ctx, h.clientDial(), cfg) })
	}
	return func() ([]*ClientReport, []error) { wg.Wait(); return reps, errs }
}

// TestCoordinatorEvaluationRound: after the fit, the clients' summed test
// statistics give the metrics federation.Evaluate computes in process —
// exactly, and with the same noise for a private, seeded evaluation; a
// client without test rows is a dropout of the evaluation round.
func TestCoordinatorEvaluationRound(t *testing.T) {
	const K, C = 6, 4
	cal, test := evalPopulations(t, 3000, C, K)
	spec := federation.Spec{Method: "bbq", Mexp: 4}
	r := federation.Rounds{T: 2, SampleRate: 1, Seed: 11}
	priv := &federation.Privacy{Epsilon: 1, Delta: 1e-5, Clip: 20}
	for _, tc := range []struct {
		name    string
		opts    federation.EvalOptions
		without int // a client without test rows, or -1
	}{
		{"exact", federation.EvalOptions{Bins: 10}, -1},
		{"exact, client 2 without test rows", federation.EvalOptions{}, 2},
		{"private", federation.EvalOptions{Privacy: priv}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, K, t.TempDir())
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			wait := h.joinWithTest(ctx, cal, test, func(k int) bool { return k != tc.without })
			opts := tc.opts
			out, err := h.coordinate(ctx, t, Config{Spec: spec, Rounds: r, Evaluate: &opts, RoundTimeout: 3 * time.Second, EnrolTimeout: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			reps, errs := wait()
			noErrors(t, errs)
			// The same evaluation in process, over the clients that had
			// test rows.
			var pop federation.Slices
			var want []int
			for k := range K {
				if k != tc.without {
					s, _ := test.Client(k)
					pop = append(pop, s)
					want = append(want, k)
				}
			}
			o := tc.opts
			o.Seed = r.Seed
			sim, err := federation.Evaluate(ctx, pop, out.Result.Calibrator, o)
			if err != nil {
				t.Fatal(err)
			}
			ev := out.Evaluation
			if ev == nil || ev.Metrics != sim.Metrics || !slices.Equal(ev.Noisy, sim.Noisy) || !reflect.DeepEqual(ev.Privacy, sim.Privacy) {
				t.Fatalf("networked evaluation %+v, in process %+v", ev, sim)
			}
			if rec := out.EvalRound; rec.Round != r.T+1 || !slices.Equal(rec.Participants, want) || len(rec.Dropouts) != K-len(want) {
				t.Errorf("evaluation round %+v: want round %d, participants %v", rec, r.T+1, want)
			}
			if len(out.Rounds) != r.T {
				t.Errorf("%d fit rounds recorded, want %d", len(out.Rounds), r.T)
			}
			for k, rep := range reps {
				answered := rep != nil && slices.Contains(rep.Answered, r.T+1)
				if answered != (k != tc.without) {
					t.Errorf("client %d answered the evaluation round: %v", k, answered)
				}
			}
			if tc.opts.Privacy != nil && (ev.Privacy == nil || math.Abs(ev.Privacy.Epsilon-1) > 1e-9) {
				t.Errorf("private evaluation records %+v", ev.Privacy)
			}
		})
	}
}

func TestCoordinatorEvaluationConfig(t *testing.T) {
	_, pubs := keys(t, 3)
	base := Config{Spec: federation.Spec{Method: "bbq", Mexp: 4}, Rounds: federation.Rounds{T: 1, SampleRate: 1}, Clients: pubs}
	for _, tc := range []struct {
		name string
		edit func(*Config)
	}{
		{"secure aggregation", func(c *Config) { c.Secure = &SecureConfig{}; c.Evaluate = &federation.EvalOptions{} }},
		{"infinite ε", func(c *Config) {
			c.Evaluate = &federation.EvalOptions{Privacy: &federation.Privacy{Epsilon: math.Inf(1), Delta: 1e-5}}
		}},
		{"δ = 0", func(c *Config) { c.Evaluate = &federation.EvalOptions{Privacy: &federation.Privacy{Epsilon: 1}} }},
		{"bins", func(c *Config) { c.Evaluate = &federation.EvalOptions{Bins: -1} }},
	} {
		cfg := base
		tc.edit(&cfg)
		if _, err := NewCoordinator(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", tc.name, err)
		}
	}
}
