package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
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

// TestStoreLock: a second embedded server on a store in use is refused,
// naming the holder, and starts once the first has shut down.
func TestStoreLock(t *testing.T) {
	_, pubs := keys(t, 1)
	store := t.TempDir()
	cfg := ServerConfig{Listen: "127.0.0.1:0", Store: store, Clients: pubs}
	first, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewServer(cfg)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d ", os.Getpid())) || strings.Contains(err.Error(), "\n") {
		t.Errorf("second server on the store: %v; want ErrLocked naming pid %d, on one line", err, os.Getpid())
	}
	first.Shutdown()
	again, err := NewServer(cfg)
	if err != nil {
		t.Fatalf("after the first shut down: %v", err)
	}
	again.Shutdown()
}

// fedEnv is where TestOneCoordinator runs: a server or cluster, the
// clients' dial settings and a new coordinator connection.
type fedEnv struct {
	keys     []Key
	pubs     []string
	client   func(k int) Dial
	coord    func(t *testing.T) *nats.Conn
	admin    func(t *testing.T) *nats.Conn
	replicas int
}

func embeddedEnv(t *testing.T, K int) fedEnv {
	h := newHarness(t, K, t.TempDir())
	return fedEnv{keys: h.keys, pubs: h.pubs, replicas: 1,
		client: func(int) Dial { return h.clientDial() },
		coord: func(t *testing.T) *nats.Conn {
			nc, err := h.srv.Dial().Connect()
			if err != nil {
				t.Fatal(err)
			}
			return nc
		},
		admin: func(t *testing.T) *nats.Conn { return h.adminConn(t) },
	}
}

func clusterEnv(t *testing.T, K int) fedEnv {
	ks, pubs := keys(t, K)
	coordSeed, _, _ := NewKey()
	_, all := newCluster(t, pubs, coordSeed)
	return fedEnv{keys: ks, pubs: pubs, replicas: 3,
		client: func(k int) Dial { return Dial{URL: all(k), ReconnectWait: 100 * time.Millisecond} },
		coord: func(t *testing.T) *nats.Conn {
			nc, err := Dial{URL: all(0), Seed: coordSeed, ReconnectWait: 100 * time.Millisecond}.Coordinator(DefaultFederation).Connect()
			if err != nil {
				t.Fatal(err)
			}
			return nc
		},
	}
}

// TestOneCoordinator: while coordinator A runs, a second one (B) refuses
// to start at once, naming A; after A dies (its connection gone, its
// lease left behind), B takes over once the lease expired and resumes
// after A's last closed round, charging no round twice: the result, its
// privacy record and its ledger equal the simulation's. On the embedded
// server and on a three-node cluster with replicas 3.
func TestOneCoordinator(t *testing.T) {
	const K, C = 4, 3
	pop := population(t, 800, C, K)
	spec := federation.Spec{Method: "temp", Epsilon: 3}
	r := federation.Rounds{T: 4, SampleRate: 1, Seed: 9}
	const ttl = 1500 * time.Millisecond
	for _, env := range []struct {
		name string
		make func(*testing.T, int) fedEnv
	}{{"embedded", embeddedEnv}, {"cluster", clusterEnv}} {
		t.Run(env.name, func(t *testing.T) {
			if env.name == "cluster" && testing.Short() {
				t.Skip("a three-node JetStream cluster takes seconds to elect its leaders")
			}
			e := env.make(t, K)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			errs := make([]error, K)
			for k := range K {
				wg.Go(func() {
					_, errs[k] = Join(ctx, e.client(k), ClientConfig{Key: e.keys[k], EnrolTimeout: time.Minute,
						Data: func(w Welcome) (*calib.Set, error) { return pop.Client(w.Client) }})
				})
			}
			cfg := Config{Spec: spec, Rounds: r, Clients: e.pubs, MinClients: K, RoundTimeout: 20 * time.Second, EnrolTimeout: time.Minute,
				Replicas: e.replicas, LeaseTTL: ttl}
			b := cfg
			b.Holder = "coordinator B"
			cb, err := NewCoordinator(b)
			if err != nil {
				t.Fatal(err)
			}
			a := cfg
			a.Holder = "coordinator A"
			ncA := e.coord(t)
			var refused error
			var refusedIn time.Duration
			a.Progress = func(rep RoundReport) {
				switch rep.Round {
				case 1: // B, while A runs
					nc := e.coord(t)
					defer nc.Close()
					start := time.Now()
					_, refused = cb.Run(ctx, nc)
					refusedIn = time.Since(start)
				case 2: // A dies
					ncA.Close()
				}
			}
			ca, err := NewCoordinator(a)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ca.Run(ctx, ncA); err == nil {
				t.Fatal("A finished after its connection closed")
			}
			if !errors.Is(refused, ErrLeased) || !strings.Contains(refused.Error(), "coordinator A") || refusedIn > 2*time.Second {
				t.Errorf("B while A runs: %v after %v; want ErrLeased naming coordinator A within 2s", refused, refusedIn)
			}
			// B again, until A's lease has expired.
			died := time.Now()
			var out *Outcome
			for {
				nc := e.coord(t)
				out, err = cb.Run(ctx, nc)
				nc.Close()
				if !errors.Is(err, ErrLeased) {
					break
				}
				if time.Since(died) > 10*ttl {
					t.Fatalf("B still refused %v after A died: %v", time.Since(died), err)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(died); took < ttl {
				t.Errorf("B took over %v after A died, before A's lease (%v) expired", took, ttl)
			}
			wg.Wait()
			noErrors(t, errs)
			want := fit(t, spec, pop, r)
			if out.ResumedAfter != 2 || len(out.Rounds) != r.T {
				t.Errorf("B resumed after round %d with %d records, want 2 and %d", out.ResumedAfter, len(out.Rounds), r.T)
			}
			for i, rec := range out.Rounds {
				if rec.Round != i+1 {
					t.Errorf("record %d is of round %d", i, rec.Round)
				}
			}
			if !samePredictions(want.Calibrator, out.Result.Calibrator, C) || !reflect.DeepEqual(want.Privacy, out.Result.Privacy) ||
				!reflect.DeepEqual(want.Ledger.Releases(), out.Result.Ledger.Releases()) {
				t.Errorf("the fit taken over differs from the simulation: privacy %+v, want %+v", out.Result.Privacy, want.Privacy)
			}
		})
	}
}

// TestLeaseLost: a coordinator whose lease another took (the lease and
// the checkpoint rewritten under it) stops with ErrLeaseLost before it
// releases anything more: no progress of a later round, no invitation of
// the round after, no end of the run, and the checkpoint is the other's.
func TestLeaseLost(t *testing.T) {
	const K, C = 3, 3
	pop := population(t, 600, C, K)
	spec := federation.Spec{Method: "temp", Epsilon: 3}
	r := federation.Rounds{T: 4, SampleRate: 1, Seed: 4}
	h := newHarness(t, K, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cctx, stopClients := context.WithCancel(ctx)
	wait := h.joinAll(cctx, pop, upTo(K))
	admin := h.adminConn(t)
	var mu sync.Mutex
	var invited []int // the rounds invited
	done := false
	if _, err := admin.Subscribe(subjInviteAll(DefaultFederation), func(m *nats.Msg) {
		var a Announcement
		if json.Unmarshal(m.Data, &a) == nil {
			mu.Lock()
			if a.Done {
				done = true
			} else if len(invited) == 0 || invited[len(invited)-1] != a.Round {
				invited = append(invited, a.Round)
			}
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	admin.Flush()
	js, _ := jetstream.New(admin)
	var progress []int
	var theirs []byte
	_, err := h.coordinate(ctx, t, Config{Spec: spec, Rounds: r, MinClients: K, RoundTimeout: 10 * time.Second, EnrolTimeout: 20 * time.Second, LeaseTTL: 3 * time.Second,
		Progress: func(rep RoundReport) {
			progress = append(progress, rep.Round)
			if rep.Round != 1 {
				return
			}
			// Another coordinator takes over: its lease, its checkpoint.
			kv, err := js.KeyValue(ctx, bucketName(DefaultFederation))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(lease{Holder: "the thief", Token: 1 << 40, TTL: time.Minute, Renewed: time.Now()})
			if _, err := kv.Put(ctx, leaseKey, b); err != nil {
				t.Fatal(err)
			}
			e, err := kv.Get(ctx, checkpointKey)
			if err != nil {
				t.Fatal(err)
			}
			var cp checkpoint
			json.Unmarshal(e.Value(), &cp)
			cp.Lease = 1 << 40
			theirs, _ = json.Marshal(cp)
			if _, err := kv.Put(ctx, checkpointKey, theirs); err != nil {
				t.Fatal(err)
			}
		}})
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Run = %v, want ErrLeaseLost", err)
	}
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(progress, []int{1}) || done || len(invited) == 0 || invited[len(invited)-1] > 2 {
		t.Errorf("after losing its lease in round 1: progress of rounds %v, invitations of rounds %v, end announced %v; want [1], none after round 2, no end", progress, invited, done)
	}
	if cp := readCheckpoint(t, h); cp.Lease != 1<<40 || len(cp.Records) != 1 {
		t.Errorf("the checkpoint has lease %d and %d records: the coordinator that lost its lease wrote it", cp.Lease, len(cp.Records))
	}
	stopClients()
	wait()
}
