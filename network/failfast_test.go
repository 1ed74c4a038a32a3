package network

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
)

// TestPermanentJetStreamErrors: a server without JetStream, and more
// replicas than servers, stop the coordinator within 2 seconds with one
// line naming the cause, not after 30 seconds of retries.
func TestPermanentJetStreamErrors(t *testing.T) {
	_, pubs := keys(t, 2)
	cfg := Config{Spec: federation.Spec{Method: "temp"}, Rounds: federation.Rounds{T: 1, SampleRate: 1}, Clients: pubs}
	run := func(t *testing.T, cfg Config, d Dial) error {
		t.Helper()
		c, err := NewCoordinator(cfg)
		if err != nil {
			t.Fatal(err)
		}
		nc, err := d.Connect()
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		start := time.Now()
		_, err = c.Run(ctx, nc)
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("the coordinator gave up after %v, not within 2s", took)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("error on several lines: %q", err)
		}
		return err
	}
	t.Run("no JetStream", func(t *testing.T) {
		seed, pub, err := NewKey()
		if err != nil {
			t.Fatal(err)
		}
		ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, Nkeys: []*server.NkeyUser{{Nkey: pub}}})
		if err != nil {
			t.Fatal(err)
		}
		go ns.Start()
		if !ns.ReadyForConnections(10 * time.Second) {
			t.Fatal("server not ready")
		}
		t.Cleanup(ns.Shutdown)
		err = run(t, cfg, Dial{URL: ns.ClientURL(), Seed: seed}.Coordinator(DefaultFederation))
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "has no JetStream") {
			t.Errorf("Run = %v, want ErrConfig naming JetStream", err)
		}
	})
	t.Run("replicas 5 on a three-node cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("a three-node JetStream cluster takes seconds to elect its leaders")
		}
		seed, _, _ := NewKey()
		_, all := newCluster(t, pubs, seed)
		c := cfg
		c.Replicas = 5
		d := Dial{URL: all(0), Seed: seed}.Coordinator(DefaultFederation)
		// The cluster's JetStream may still be electing its leader: wait
		// for it, so that the 2 seconds are the coordinator's.
		nc, err := d.Connect()
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		for deadline := time.Now().Add(30 * time.Second); ; {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := js.AccountInfo(ctx)
			cancel()
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		nc.Close()
		err = run(t, c, d)
		if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "5 replicas") {
			t.Errorf("Run = %v, want ErrUnreachable naming the replicas", err)
		}
	})
	t.Run("replicas 3 on one server", func(t *testing.T) {
		h := newHarness(t, 2, t.TempDir())
		c := cfg
		c.Clients, c.Replicas = h.pubs, 3
		err := run(t, c, h.srv.Dial())
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "3 replicas") {
			t.Errorf("Run = %v, want ErrConfig naming the replicas", err)
		}
	})
}

// TestAbortAnnounced: when the coordinator gives a run up — too few
// clients enrolled, or a round short of updates after its attempts —
// the enrolled clients learn why and return within 2 seconds with
// ErrAborted and the coordinator's reason.
func TestAbortAnnounced(t *testing.T) {
	const K, C = 4, 3
	pop := population(t, 800, C, K)
	spec := federation.Spec{Method: "temp", Epsilon: 4}
	r := federation.Rounds{T: 2, SampleRate: 1, Seed: 8}
	for _, tc := range []struct {
		name string
		cfg  Config
		dead []int // clients that enrol and die at their first invitation
		want string
	}{
		{"too few enrolled", Config{MinClients: K, EnrolTimeout: 1500 * time.Millisecond}, nil, "enrolled"},
		{"round short of updates", Config{MinClients: K, EnrolTimeout: 20 * time.Second, RoundTimeout: 500 * time.Millisecond, MaxAttempts: 2}, []int{3}, "sampled clients sent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, K, t.TempDir())
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			live := []int{0, 1, 2}
			ended := make([]time.Time, len(live))
			errs := make([]error, len(live))
			done := make(chan struct{})
			go func() {
				defer close(done)
				wait := make(chan struct{}, len(live))
				for i, k := range live {
					go func() {
						_, errs[i] = Join(ctx, h.clientDial(), ClientConfig{Key: h.keys[k], Data: func(w Welcome) (*calib.Set, error) { return pop.Client(w.Client) }})
						ended[i] = time.Now()
						wait <- struct{}{}
					}()
				}
				for range live {
					<-wait
				}
			}()
			h.deadClients(ctx, t, tc.dead, C)
			cfg := tc.cfg
			cfg.Spec, cfg.Rounds = spec, r
			_, err := h.coordinate(ctx, t, cfg)
			gaveUp := time.Now()
			if !errors.Is(err, ErrTooFewClients) {
				t.Fatalf("Run = %v, want ErrTooFewClients", err)
			}
			<-done
			for i, err := range errs {
				if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("client %d: %v, want ErrAborted with the coordinator's reason (%q)", live[i], err, tc.want)
				}
				if d := ended[i].Sub(gaveUp); d > 2*time.Second {
					t.Errorf("client %d left %v after the coordinator gave up", live[i], d)
				}
			}
		})
	}
}

// TestJoinWaits: a client started before its server keeps trying its
// first connection for Dial.Wait and then takes part in the run; without
// Wait it gives up at once with ErrUnreachable.
func TestJoinWaits(t *testing.T) {
	const K, C = 2, 3
	pop := population(t, 400, C, K)
	ks, pubs := keys(t, K)
	port := freePorts(t, 1)[0]
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	d := Dial{URL: "nats://" + listen, ReconnectWait: 100 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	data := func(w Welcome) (*calib.Set, error) { return pop.Client(w.Client) }
	start := time.Now()
	if _, err := Join(ctx, d, ClientConfig{Key: ks[0], Data: data}); !errors.Is(err, ErrUnreachable) || time.Since(start) > 2*time.Second {
		t.Errorf("without Wait: %v after %v, want ErrUnreachable at once", err, time.Since(start))
	}
	d.Wait = 30 * time.Second
	var wg sync.WaitGroup
	errs := make([]error, K)
	for k := range K {
		wg.Go(func() { _, errs[k] = Join(ctx, d, ClientConfig{Key: ks[k], Data: data}) })
	}
	time.Sleep(1500 * time.Millisecond) // the clients try in vain meanwhile
	srv, err := NewServer(ServerConfig{Listen: listen, Store: t.TempDir(), Clients: pubs, Plaintext: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	c, err := NewCoordinator(Config{Spec: federation.Spec{Method: "temp"}, Rounds: federation.Rounds{T: 1, SampleRate: 1, Seed: 1}, Clients: pubs, MinClients: K, EnrolTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := srv.Dial().Connect()
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
	if got := out.Rounds[0].Participants; len(got) != K {
		t.Errorf("participants %v, want both clients", got)
	}
}

// TestEnrolledAfterReady: ClientConfig.Enrolled is called once the
// coordinator accepted the ready request, and not at all when it refused
// it (here, data of 3 classes in a federation of 5).
func TestEnrolledAfterReady(t *testing.T) {
	const K, C = 2, 3
	pop := population(t, 400, C, K)
	h := newHarness(t, K, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data := func(w Welcome) (*calib.Set, error) { return pop.Client(w.Client) }
	var mu sync.Mutex
	var enrolled []int
	var wg sync.WaitGroup
	errs := make([]error, K)
	for k := range K {
		wg.Go(func() {
			_, errs[k] = Join(ctx, h.clientDial(), ClientConfig{Key: h.keys[k], Data: data, EnrolTimeout: 5 * time.Second,
				Enrolled: func(w Welcome) { mu.Lock(); enrolled = append(enrolled, w.Client); mu.Unlock() }})
		})
	}
	_, err := h.coordinate(ctx, t, Config{Spec: federation.Spec{Method: "temp"}, Rounds: federation.Rounds{T: 1, SampleRate: 1}, Classes: 5, MinClients: 1, EnrolTimeout: 2 * time.Second})
	if !errors.Is(err, ErrTooFewClients) {
		t.Errorf("Run = %v, want ErrTooFewClients", err)
	}
	wg.Wait()
	for k, err := range errs {
		if !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), "3 classes, the federation 5") {
			t.Errorf("client %d: %v, want its ready refused", k, err)
		}
	}
	if len(enrolled) != 0 {
		t.Errorf("Enrolled called for clients %v, whose ready was refused", enrolled)
	}
	// And with data the federation takes: once each, after the ready.
	h2 := newHarness(t, K, t.TempDir())
	enrolled = nil
	wait := func() []error {
		var wg sync.WaitGroup
		errs := make([]error, K)
		for k := range K {
			wg.Go(func() {
				_, errs[k] = Join(ctx, h2.clientDial(), ClientConfig{Key: h2.keys[k], Data: data,
					Enrolled: func(w Welcome) { mu.Lock(); enrolled = append(enrolled, w.Client); mu.Unlock() }})
			})
		}
		return func() []error { wg.Wait(); return errs }()
	}
	done := make(chan []error)
	go func() { done <- wait() }()
	if _, err := h2.coordinate(ctx, t, Config{Spec: federation.Spec{Method: "temp"}, Rounds: federation.Rounds{T: 1, SampleRate: 1}, MinClients: K, EnrolTimeout: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	noErrors(t, <-done)
	slices.Sort(enrolled)
	if !slices.Equal(enrolled, []int{0, 1}) {
		t.Errorf("Enrolled called for %v, want [0 1]", enrolled)
	}
}
