package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
)

// deadClients enrols clients ks of h and closes their connections at the
// first invitation: killed mid-round.
func (h *harness) deadClients(ctx context.Context, t *testing.T, ks []int, classes int) {
	t.Helper()
	for _, k := range ks {
		errs := make(chan error, 4)
		nc := h.clientConn(t, k, errs)
		anns := make(chan *nats.Msg, 16)
		if _, err := nc.ChanSubscribe(subjInvite(DefaultFederation, h.pubs[k]), anns); err != nil {
			t.Fatal(err)
		}
		go func() {
			defer nc.Close()
			if _, err := request(ctx, nc, DefaultFederation, h.pubs[k], ready{Kind: "ready", Version: Version, Classes: classes}, 20*time.Second, errs); err != nil {
				t.Error(err)
				return
			}
			for range anns {
				return
			}
		}()
	}
}

// TestDropouts: with 30% of the clients killed mid-round, each round
// closes at the deadline with the rest; with too few left, a round is
// announced again and finally fails without releasing anything.
func TestDropouts(t *testing.T) {
	const K, C = 10, 3
	pop := population(t, 1500, C, K)
	spec := federation.Spec{Method: "temp", Epsilon: 4}
	r := federation.Rounds{T: 2, SampleRate: 1, Seed: 8}
	dead := []int{2, 5, 7}
	t.Run("round closes at the deadline", func(t *testing.T) {
		h := newHarness(t, K, t.TempDir())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		wait := h.joinAll(ctx, pop, []int{0, 1, 3, 4, 6, 8, 9})
		h.deadClients(ctx, t, dead, C)
		const timeout = 1500 * time.Millisecond
		var took []time.Duration
		last := time.Time{}
		out, err := h.coordinate(ctx, t, Config{Spec: spec, Rounds: r, MinClients: 5, RoundTimeout: timeout, EnrolTimeout: 20 * time.Second,
			Progress: func(rep RoundReport) {
				if !last.IsZero() {
					took = append(took, time.Since(last))
				}
				last = time.Now()
			}})
		if err != nil {
			t.Fatal(err)
		}
		noErrors(t, wait())
		for _, rec := range out.Rounds {
			if !reflect.DeepEqual(rec.Dropouts, dead) || !reflect.DeepEqual(rec.Participants, []int{0, 1, 3, 4, 6, 8, 9}) || rec.Attempts != 1 {
				t.Errorf("round %+v: want dropouts %v in one attempt", rec, dead)
			}
		}
		for _, d := range took {
			if d < timeout {
				t.Errorf("a round closed after %v, before the deadline %v", d, timeout)
			}
		}
		drop := map[int]bool{}
		for _, k := range dead {
			drop[k] = true
		}
		if want := fit(t, spec, keep{pop, drop}, r); !samePredictions(want.Calibrator, out.Result.Calibrator, C) || !reflect.DeepEqual(want.Privacy, out.Result.Privacy) {
			t.Errorf("the fit with dropouts differs from the simulation without their data")
		}
	})
	t.Run("too few updates: retried, nothing released", func(t *testing.T) {
		h := newHarness(t, K, t.TempDir())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		wait := h.joinAll(ctx, pop, []int{0, 1, 3, 4, 6, 8, 9})
		h.deadClients(ctx, t, dead, C)
		_, err := h.coordinate(ctx, t, Config{Spec: spec, Rounds: r, MinClients: 8, RoundTimeout: 500 * time.Millisecond, MaxAttempts: 2, EnrolTimeout: 20 * time.Second})
		if !errors.Is(err, ErrTooFewClients) {
			t.Fatalf("Run = %v, want ErrTooFewClients", err)
		}
		cancel()
		wait()
		cp := readCheckpoint(t, h)
		var st struct {
			Closed   int               `json:"closed"`
			Releases []json.RawMessage `json:"releases"`
		}
		if err := json.Unmarshal(cp.State, &st); err != nil {
			t.Fatal(err)
		}
		if st.Closed != 0 || len(st.Releases) != 0 || len(cp.Records) != 0 {
			t.Errorf("after a round that never closed: %d rounds closed, %d releases, %d records; want none", st.Closed, len(st.Releases), len(cp.Records))
		}
	})
}

// freePorts returns n free loopback ports.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// readCheckpoint reads the coordinator's checkpoint from h's server.
func readCheckpoint(t *testing.T, h *harness) checkpoint {
	t.Helper()
	nc := h.adminConn(t)
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), bucketName(DefaultFederation))
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), checkpointKey)
	if err != nil {
		t.Fatal(err)
	}
	var cp checkpoint
	if err := json.Unmarshal(e.Value(), &cp); err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestResume: a coordinator stopped after a round and a new one on the
// same store finish with the calibrator, privacy record and ledger of an
// uninterrupted run, also from a store in the format of fedcalib before
// wire version 3, and for scalbin stopped in its second stage; a store
// of another run is refused.
func TestResume(t *testing.T) {
	const K, C = 8, 3
	pop := population(t, 1500, C, K)
	r := federation.Rounds{T: 4, SampleRate: 0.75, Seed: 21}
	for _, tc := range []struct {
		spec  federation.Spec
		older bool // the store is made over into the format before wire version 3
		stop  int  // the round after which the first coordinator stops
	}{
		{federation.Spec{Method: "temp", Epsilon: 3}, false, 2},
		{federation.Spec{Method: "bbq", Mexp: 3, Weighting: "all", Epsilon: 3}, true, 2},
		{federation.Spec{Method: calib.MethodScalingBinning, Mexp: 4, Epsilon: 3}, false, 5}, // of 2T = 8
	} {
		spec := tc.spec
		t.Run(spec.Method, func(t *testing.T) {
			h := newHarness(t, K, t.TempDir())
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			wait := h.joinAll(ctx, pop, upTo(K))
			cfg := Config{Spec: spec, Rounds: r, MinClients: 1, RoundTimeout: 10 * time.Second, EnrolTimeout: 20 * time.Second}
			cctx, stop := context.WithCancel(ctx)
			first := cfg
			first.Progress = func(rep RoundReport) {
				if rep.Round == tc.stop {
					stop()
				}
			}
			if _, err := h.coordinate(cctx, t, first); !errors.Is(err, context.Canceled) {
				t.Fatalf("the first coordinator returned %v, want it cancelled", err)
			}
			if tc.older {
				olderStore(t, h)
			}
			other := cfg
			other.Rounds.Seed++
			if _, err := h.coordinate(ctx, t, other); !errors.Is(err, ErrStore) || !strings.Contains(err.Error(), fmt.Sprintf("seed: stored %d, now %d", r.Seed, r.Seed+1)) {
				t.Errorf("a run with another seed resumed the store: %v; want ErrStore naming the seeds", err)
			}
			out, err := h.coordinate(ctx, t, cfg)
			if err != nil {
				t.Fatal(err)
			}
			noErrors(t, wait())
			want := fit(t, spec, pop, r)
			if out.ResumedAfter != tc.stop || len(out.Rounds) != len(want.Rounds) {
				t.Errorf("resumed after round %d with %d records, want %d and %d", out.ResumedAfter, len(out.Rounds), tc.stop, len(want.Rounds))
			}
			if !samePredictions(want.Calibrator, out.Result.Calibrator, C) || !reflect.DeepEqual(want.Privacy, out.Result.Privacy) {
				t.Errorf("the resumed fit differs from the simulation")
			}
			if !reflect.DeepEqual(want.Ledger.Releases(), out.Result.Ledger.Releases()) {
				t.Errorf("ledger %v, simulation %v", out.Result.Ledger.Releases(), want.Ledger.Releases())
			}
			if tc.older {
				js, kv := stateBucket(t, h)
				if _, err := js.Stream(ctx, oldStreamName(DefaultFederation)); !errors.Is(err, jetstream.ErrStreamNotFound) {
					t.Errorf("the update stream of the older store is still there: %v", err)
				}
				if _, err := kv.Get(ctx, settingsKey); err != nil {
					t.Errorf("no settings in the store after resuming an older one: %v", err)
				}
			}
		})
	}
}

// stateBucket returns a JetStream context and the state bucket of h's
// server, over a connection closed at the end of the test.
func stateBucket(t *testing.T, h *harness) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	nc := h.adminConn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), bucketName(DefaultFederation))
	if err != nil {
		t.Fatal(err)
	}
	return js, kv
}

// olderStore makes h's store over into the format of fedcalib before wire
// version 3: the settings inside the checkpoint, and an update stream that
// captures the updates.
func olderStore(t *testing.T, h *harness) {
	t.Helper()
	ctx := context.Background()
	js, kv := stateBucket(t, h)
	s, err := kv.Get(ctx, settingsKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kv.Get(ctx, checkpointKey)
	if err != nil {
		t.Fatal(err)
	}
	var cp map[string]json.RawMessage
	if err := json.Unmarshal(c.Value(), &cp); err != nil {
		t.Fatal(err)
	}
	if _, ok := cp["settings"]; ok {
		t.Fatal("the checkpoint holds the settings already")
	}
	cp["settings"] = s.Value()
	b, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, checkpointKey, b); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, settingsKey); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: oldStreamName(DefaultFederation), Subjects: []string{subjUpdateAll(DefaultFederation)}}); err != nil {
		t.Fatal(err)
	}
}

// newCluster starts a three-node cluster of embedded servers with
// clustered JetStream, admitting the clients pubs and the coordinator's
// key coordSeed; all(i) lists every node's URL, starting at node i%3.
func newCluster(t *testing.T, pubs []string, coordSeed []byte) (nodes []*Server, all func(first int) string) {
	t.Helper()
	ports := freePorts(t, 6)
	var urls []string
	for i := range 3 {
		var routes []string
		for j := range 3 {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3+j]))
			}
		}
		srv, err := NewServer(ServerConfig{
			Listen: fmt.Sprintf("127.0.0.1:%d", ports[i]), Store: t.TempDir(), Clients: pubs, CoordinatorSeed: coordSeed,
			Plaintext: true, Name: fmt.Sprintf("node%d", i),
			Cluster: &ClusterConfig{Listen: fmt.Sprintf("127.0.0.1:%d", ports[3+i]), Routes: routes},
		})
		if err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		stop := func() { once.Do(srv.Shutdown) }
		t.Cleanup(stop)
		nodes = append(nodes, srv)
		urls = append(urls, srv.URL())
	}
	return nodes, func(first int) string {
		return urls[first%3] + "," + urls[(first+1)%3] + "," + urls[(first+2)%3]
	}
}

// TestCluster: on three embedded servers with routes and JetStream
// replicas 3, stopping one node mid-run does not stop the federation.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node JetStream cluster takes seconds to elect its leaders")
	}
	const K, C = 6, 3
	pop := population(t, 1200, C, K)
	spec := federation.Spec{Method: "temp", Epsilon: 3}
	r := federation.Rounds{T: 4, SampleRate: 1, Seed: 5}
	ks, pubs := keys(t, K)
	coordSeed, _, _ := NewKey()
	nodes, all := newCluster(t, pubs, coordSeed)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, K)
	for k := range K {
		wg.Go(func() {
			_, errs[k] = Join(ctx, Dial{URL: all(k), ReconnectWait: 100 * time.Millisecond}, ClientConfig{
				Key: ks[k], EnrolTimeout: time.Minute,
				Data: func(w Welcome) (*calib.Set, error) { return pop.Client(w.Client) },
			})
		})
	}
	c, err := NewCoordinator(Config{Spec: spec, Rounds: r, Clients: pubs, MinClients: K, RoundTimeout: 20 * time.Second, EnrolTimeout: time.Minute, Replicas: 3,
		Progress: func(rep RoundReport) {
			if rep.Round == 2 {
				go nodes[1].Shutdown() // the node some clients and maybe the stream leader are on
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := Dial{URL: all(1), Seed: coordSeed, ReconnectWait: 100 * time.Millisecond}.Coordinator(DefaultFederation).Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	out, err := c.Run(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	noErrors(t, errs)
	want := fit(t, spec, pop, r)
	if !samePredictions(want.Calibrator, out.Result.Calibrator, C) {
		t.Errorf("the cluster's fit differs from the simulation")
	}
	for _, rec := range out.Rounds {
		if len(rec.Dropouts) != 0 {
			t.Errorf("round %d lost clients %v", rec.Round, rec.Dropouts)
		}
	}
}
