package network_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/network"
)

// TestSecureUtility is the experiment behind docs/RESULTS.md's "Secure
// aggregation and distributed noise": Table 2's MNIST setting (100
// clients of the Dirichlet β = 0.1 partition, T = 12, p = 0.1, (ε, δ) =
// (1, 10⁻⁵), C = 0.5, [C₊, C₋] = [10, 50], M = 7) over the embedded NATS
// server with 100 in-process clients, under secure aggregation with
// central and with distributed noise (both RDP accounting), for FedTemp
// and weighted FedBBQ. It runs only when FEDCALIB_SECURE_UTILITY names
// the mnist-tiny logits of all 70,000 MNIST images (fedcalib infer
// --data mnist:$(make -s mnist-dir):all) and logs one line per run.
// FEDCALIB_SECURE_UTILITY_P=1 samples every client every round (p = 1,
// where the central RDP accountant has no sampling to amplify either) with
// --min-clients 90 instead of 5. FEDCALIB_SECURE_UTILITY_MODES lists the
// modes to run, comma-separated, among central-rdp, distributed-rdp
// (the default: both) and central-zcdp (Table 2's accounting).
func TestSecureUtility(t *testing.T) {
	path := os.Getenv("FEDCALIB_SECURE_UTILITY")
	if path == "" {
		t.Skip("FEDCALIB_SECURE_UTILITY names no logits file")
	}
	lf, err := logits.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	data := lf.Set(nil)
	part, err := federation.ReadPartition("../models/partitions/mnist-dir0.1-k100.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	cal, err := federation.NewPopulation(data, part, federation.Calibration)
	if err != nil {
		t.Fatal(err)
	}
	test, err := federation.NewPopulation(data, part, federation.Test)
	if err != nil {
		t.Fatal(err)
	}
	var testSet calib.Set
	testSet.Classes = data.Classes
	for k := range test.Len() {
		s, _ := test.Client(k)
		testSet.Logits = append(testSet.Logits, s.Logits...)
		testSet.Labels = append(testSet.Labels, s.Labels...)
	}
	base, _ := calib.Evaluate(softmaxAll(&testSet), testSet.Labels, testSet.Classes, 15)
	t.Logf("base: cwECE %.3f%% accuracy %.2f%%", 100*base.CWECE, 100*base.Accuracy)
	K := cal.Len()
	seeds := []uint64{1, 2, 3}
	rate, minClients := 0.1, 5
	if os.Getenv("FEDCALIB_SECURE_UTILITY_P") == "1" {
		rate, minClients = 1, 90
	}
	for _, spec := range []federation.Spec{
		{Method: "temp", Epsilon: 1, Delta: 1e-5, Clip: 0.5, Accountant: "rdp"},
		{Method: "bbq", Mexp: 7, Weighting: calib.WeightAll, Epsilon: 1, Delta: 1e-5, ClipPos: 10, ClipNeg: 50, Accountant: "rdp"},
	} {
		for _, mode := range strings.Split(or(os.Getenv("FEDCALIB_SECURE_UTILITY_MODES"), "central-rdp,distributed-rdp"), ",") {
			noise, acc, _ := strings.Cut(mode, "-")
			spec.Accountant = acc
			for _, seed := range seeds {
				r := federation.Rounds{T: 12, SampleRate: rate, Seed: seed}
				start := time.Now()
				out := runSecure(t, spec, r, cal, K, minClients, &network.SecureConfig{Noise: noise})
				m, err := calib.EvaluateSet(&testSet, out.Result.Calibrator, 15)
				if err != nil {
					t.Fatal(err)
				}
				p := out.Result.Privacy
				t.Logf("p %v, %s %s %s seed %d: cwECE %.3f%% accuracy %.2f%% ε %.4f σ %.4g (%v)", rate, spec.Method, noise, acc, seed, 100*m.CWECE, 100*m.Accuracy, p.Epsilon, p.Sigma, time.Since(start).Round(time.Second))
			}
		}
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func softmaxAll(s *calib.Set) []float64 {
	p, _ := calib.Probabilities(s, nil)
	return p
}

// newKeys returns k new client identities and their public keys (the
// allow-list of a server).
func newKeys(t *testing.T, k int) ([]network.Key, []string) {
	t.Helper()
	ks := make([]network.Key, k)
	pubs := make([]string, k)
	for i := range ks {
		seed, pub, err := network.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		ks[i], pubs[i] = network.Key{Seed: seed, Public: pub}, pub
	}
	return ks, pubs
}

// runSecure runs a coordinator and K in-process clients over an embedded
// server.
func runSecure(t *testing.T, spec federation.Spec, r federation.Rounds, pop federation.Population, K, minClients int, sc *network.SecureConfig) *network.Outcome {
	t.Helper()
	ks, pubs := newKeys(t, K)
	srv, err := network.NewServer(network.ServerConfig{Listen: "127.0.0.1:0", Store: t.TempDir(), Clients: pubs, Plaintext: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for k := range K {
		wg.Go(func() {
			d := network.Dial{URL: srv.URL(), ReconnectWait: 100 * time.Millisecond}
			if _, err := network.Join(ctx, d, network.ClientConfig{Key: ks[k], EnrolTimeout: 3 * time.Minute, Data: func(w network.Welcome) (*calib.Set, error) { return pop.Client(w.Client) }}); err != nil {
				t.Errorf("client %d: %v", k, err)
			}
		})
	}
	c, err := network.NewCoordinator(network.Config{Spec: spec, Rounds: r, Clients: pubs, MinClients: minClients, RoundTimeout: 40 * time.Second, EnrolTimeout: 3 * time.Minute, Secure: sc})
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
		t.Fatal(fmt.Errorf("%s: %w", spec.Method, err))
	}
	wg.Wait()
	return out
}
