package network

import (
	"context"
	"math"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fedcalib/fedcalib/federation"
)

// eventRecorder is an Observer that records the events it receives.
type eventRecorder struct {
	mu       sync.Mutex
	events   []string // "opened", "started", "round"
	enrolled []int
	rounds   []RoundObservation
	commits  int
	failed   int
	stages   map[string]int
}

func (r *eventRecorder) Opened() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "opened")
}
func (r *eventRecorder) Started(resumedAfter, rounds int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "started")
}
func (r *eventRecorder) Enrolled(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.enrolled = append(r.enrolled, n)
}
func (r *eventRecorder) RoundClosed(o RoundObservation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "round")
	r.rounds = append(r.rounds, o)
}
func (r *eventRecorder) Checkpoint(d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed++
		return
	}
	r.commits++
}
func (r *eventRecorder) SecureStage(stage string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stages == nil {
		r.stages = map[string]int{}
	}
	r.stages[stage]++
}

// TestObserverEvents: with rogue clients whose updates the coordinator
// refuses (a NaN, above the clip norm, the wrong shape), the observer
// hears the store opened before the rounds start, each enrolment, one
// checkpoint per round plus the first, and each round as the run records
// it, with the refusals classed by the coordinator's own reasons.
func TestObserverEvents(t *testing.T) {
	const K, C, T = 6, 3, 2
	pop := population(t, 900, C, K)
	spec := federation.Spec{Method: "temp", Epsilon: 4}
	h := newHarness(t, K, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wait := h.joinAll(ctx, pop, upTo(3))
	for k, u := range map[int][]float64{3: {math.NaN()}, 4: {0.9}, 5: {0.1, 0.1}} {
		set, _ := pop.Client(k)
		h.rogue(ctx, t, k, set, func([]float64) ([][]float64, []string) { return [][]float64{u}, []string{"x"} })
	}
	rec := &eventRecorder{}
	out, err := h.coordinate(ctx, t, Config{Spec: spec, Rounds: federation.Rounds{T: T, SampleRate: 1, Seed: 3},
		MinClients: 3, RoundTimeout: 5 * time.Second, EnrolTimeout: 20 * time.Second, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	noErrors(t, wait())
	if want := []string{"opened", "started", "round", "round"}; !reflect.DeepEqual(rec.events, want) {
		t.Errorf("events %v, want %v", rec.events, want)
	}
	if want := []int{1, 2, 3, 4, 5, 6, K}; !reflect.DeepEqual(rec.enrolled, want) {
		t.Errorf("enrolled %v, want %v", rec.enrolled, want)
	}
	if rec.commits != T+1 || rec.failed != 0 {
		t.Errorf("%d checkpoints committed, %d failed; want %d and 0", rec.commits, rec.failed, T+1)
	}
	for i, o := range rec.rounds {
		r := out.Rounds[i]
		refused := slices.Clone(o.Refused)
		slices.Sort(refused)
		if o.Round != r.Round || o.Attempts != r.Attempts || o.Updates != len(r.Participants) || o.Dropouts != len(r.Dropouts) ||
			!reflect.DeepEqual(refused, []string{RefusedNorm, RefusedShape, RefusedValue}) {
			t.Errorf("round %d observed %+v; recorded %+v", r.Round, o, r)
		}
		if o.Duration <= 0 || o.Compute <= 0 || o.Commit <= 0 || o.Compute+o.Commit > o.Duration {
			t.Errorf("round %d: duration %v, compute %v, commit %v", r.Round, o.Duration, o.Compute, o.Commit)
		}
	}
	if last := rec.rounds[len(rec.rounds)-1]; !last.Private || last.Epsilon != out.Result.Privacy.Epsilon || last.Rho != out.Result.Privacy.Rho {
		t.Errorf("last round: private %v ε %v ρ %v; the run's ε %v ρ %v", last.Private, last.Epsilon, last.Rho, out.Result.Privacy.Epsilon, out.Result.Privacy.Rho)
	}
}
