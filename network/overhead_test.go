package network_test

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/network"
)

// TestSecureOverhead measures what secure aggregation costs over NATS:
// K in-process clients on the embedded server (plaintext loopback), 3
// rounds of FedBBQ at M = 7 over 10 classes (2,560 values an update),
// every client every round, without and with --secure-aggregation (b =
// 32, default k and t). It logs the mean payload bytes a client sends and
// receives per round (ClientReport.Sent and Received, announcements
// included) and the coordinator's compute time and wall time per round
// (RoundReport.Compute). docs/BENCHMARKS.md quotes it. It runs only when
// FEDCALIB_SECURE_BENCH is set to the number of clients (e.g. 100 or
// 1000).
func TestSecureOverhead(t *testing.T) {
	K, _ := strconv.Atoi(os.Getenv("FEDCALIB_SECURE_BENCH"))
	if K < 2 {
		t.Skip("FEDCALIB_SECURE_BENCH is not set to a number of clients")
	}
	const C, T = 10, 3
	pop := synthPopulation(t, 200*K, C, K)
	spec := federation.Spec{Method: "bbq", Mexp: 7}
	for _, sc := range []*network.SecureConfig{nil, {}} {
		ks, pubs := newKeys(t, K)
		srv, err := network.NewServer(network.ServerConfig{Listen: "127.0.0.1:0", Store: t.TempDir(), Clients: pubs, Plaintext: true})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		var wg sync.WaitGroup
		reps := make([]*network.ClientReport, K)
		for k := range K {
			wg.Go(func() {
				var err error
				reps[k], err = network.Join(ctx, network.Dial{URL: srv.URL()}, network.ClientConfig{Key: ks[k], EnrolTimeout: 5 * time.Minute, Data: func(w network.Welcome) (*calib.Set, error) { return pop.Client(w.Client) }})
				if err != nil {
					t.Errorf("client %d: %v", k, err)
				}
			})
		}
		var compute time.Duration
		var wall []time.Duration
		last := time.Time{}
		c, err := network.NewCoordinator(network.Config{
			Spec: spec, Rounds: federation.Rounds{T: T, SampleRate: 1, Seed: 1}, Clients: pubs, MinClients: K,
			RoundTimeout: 4 * time.Minute, EnrolTimeout: 5 * time.Minute, Secure: sc,
			Progress: func(r network.RoundReport) {
				compute += r.Compute
				now := time.Now()
				if !last.IsZero() {
					wall = append(wall, now.Sub(last))
				}
				last = now
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		nc, err := srv.Dial().Connect()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Run(ctx, nc); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		nc.Close()
		cancel()
		srv.Shutdown()
		var sent, recv int64
		for _, r := range reps {
			sent += r.Sent
			recv += r.Received
		}
		mode := "plain"
		if sc != nil {
			mode = "secure"
		}
		var w time.Duration
		for _, d := range wall {
			w += d
		}
		t.Logf("%s, %d clients: per client per round: sent %d B, received %d B; coordinator compute %v per round, wall %v per round (rounds 2–3)",
			mode, K, sent/int64(K*T), recv/int64(K*T), (compute / T).Round(time.Microsecond), (w / time.Duration(max(len(wall), 1))).Round(time.Millisecond))
	}
}

// synthPopulation is an IID population of an overconfident c-class
// model's logits.
func synthPopulation(t *testing.T, n, c, K int) federation.Population {
	rng := rand.New(rand.NewPCG(1, 2))
	s := &calib.Set{Logits: make([]float64, n*c), Labels: make([]int, n), Classes: c}
	for i := range n {
		y := rng.IntN(c)
		s.Labels[i] = y
		for j := range c {
			z := rng.NormFloat64()
			if j == y {
				z += 1.8
			}
			s.Logits[i*c+j] = 3 * z
		}
	}
	p, err := federation.IID(s.Labels, c, K, federation.PartitionOptions{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	pop, err := federation.NewPopulation(s, p, federation.Calibration)
	if err != nil {
		t.Fatal(err)
	}
	return pop
}
