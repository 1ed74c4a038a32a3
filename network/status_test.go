package network

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fedcalib/fedcalib/federation"
)

// TestReadStoreStatus reads the status of a store while its coordinator
// runs (after each round, the checkpoint just committed) and after it
// stopped, and checks it against the run's record; ε is checked against
// the simulation's privacy record, a second computation.
func TestReadStoreStatus(t *testing.T) {
	const K, C, T = 4, 3, 3
	pop := population(t, 1200, C, K)
	spec := federation.Spec{Method: "temp", Epsilon: 3}
	rounds := federation.Rounds{T: T, SampleRate: 1, Seed: 8}
	store := t.TempDir()
	h := newHarness(t, K, store)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := ReadStoreStatus(ctx, store, ""); !errors.Is(err, ErrNoRun) {
		t.Errorf("before the run: %v, want ErrNoRun", err)
	}
	wait := h.joinAll(ctx, pop, []int{0, 1, 2}) // client 3 never joins
	var during []*Status
	out, err := h.coordinate(ctx, t, Config{Spec: spec, Rounds: rounds, MinClients: 2, RoundTimeout: 700 * time.Millisecond, EnrolTimeout: 3 * time.Second,
		Progress: func(rep RoundReport) {
			st, err := ReadStoreStatus(ctx, store, "")
			if err != nil {
				t.Errorf("after round %d: %v", rep.Round, err)
				return
			}
			if st.Round != rep.Round || st.Epsilon != rep.Epsilon || !reflect.DeepEqual(st.Dropouts, rep.Dropouts) {
				t.Errorf("after round %d (ε %v, dropouts %v): status %+v", rep.Round, rep.Epsilon, rep.Dropouts, st)
			}
			during = append(during, st)
		}})
	if err != nil {
		t.Fatal(err)
	}
	noErrors(t, wait())
	if len(during) != T {
		t.Fatalf("%d statuses during the run, want %d", len(during), T)
	}
	// The lease, as the coordinator writes it: live, then expired.
	putLease := func(holder string, ttl time.Duration) {
		nc, err := h.srv.Dial().Connect()
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := js.KeyValue(ctx, bucketName(DefaultFederation))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, "lease", fmt.Appendf(nil, `{"holder":%q,"token":7,"ttl":%d,"renewed":"2026-11-27T10:00:00Z"}`, holder, ttl)); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := ReadStoreStatus(ctx, store, ""); err != nil || st.Lease != nil {
		t.Errorf("no lease: status %+v, %v", st, err)
	}
	putLease("serve on a", time.Hour)
	if st, err := ReadStoreStatus(ctx, store, ""); err != nil || st.Lease == nil || st.Lease.Holder != "serve on a" || !st.Lease.Live || st.Lease.Expires.Sub(st.Lease.Written) != time.Hour {
		t.Errorf("a live lease: status %+v, %v", st, err)
	}
	putLease("serve on b", time.Nanosecond)
	h.srv.Shutdown()
	st, err := ReadStoreStatus(ctx, store, "")
	if err != nil {
		t.Fatal(err)
	}
	want := fit(t, spec, keep{pop, map[int]bool{3: true}}, rounds)
	if st.Round != T || st.Rounds != T || st.Clients != K || st.Enrolled != K-1 || st.Updates != T*(K-1) || st.DropoutsTotal != T ||
		!reflect.DeepEqual(st.Dropouts, []int{3}) || !reflect.DeepEqual(st.Participants, []int{0, 1, 2}) || st.Method != "temp" || st.EpsilonBudget != 3 {
		t.Errorf("after the run: %+v", st)
	}
	if st.Rho != out.Result.Privacy.Rho || st.Rho <= 0 {
		t.Errorf("ρ = %v, the run's %v", st.Rho, out.Result.Privacy.Rho)
	}
	if st.Epsilon != out.Result.Privacy.Epsilon || math.Abs(st.Epsilon-want.Privacy.Epsilon) > 1e-12 {
		t.Errorf("ε = %v; the run's %v, the simulation's %v", st.Epsilon, out.Result.Privacy.Epsilon, want.Privacy.Epsilon)
	}
	if l := st.Lease; l == nil || l.Holder != "serve on b" || l.Live {
		t.Errorf("an expired lease: %+v", l)
	}
	if age := time.Since(st.Checkpoint); age < 0 || age > time.Minute {
		t.Errorf("checkpoint written %v ago", age)
	}
	if _, err := ReadStoreStatus(ctx, store, "other"); !errors.Is(err, ErrNoRun) {
		t.Errorf("another federation: %v, want ErrNoRun", err)
	}
}
