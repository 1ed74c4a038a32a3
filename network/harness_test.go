package network

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/calib/calibtest"
	"github.com/fedcalib/fedcalib/federation"
)

// synthSet is an overconfident c-class model's logits on n examples.
func synthSet(n, c int, seed uint64) *calib.Set {
	return calibtest.Margin(rand.New(rand.NewPCG(seed, 7)), n, c, 1.8, 3)
}

// population returns a K-client IID population of synthetic data.
func population(t testing.TB, n, c, K int) *federation.SetPopulation {
	t.Helper()
	data := synthSet(n, c, 3)
	p, err := federation.IID(data.Labels, c, K, federation.PartitionOptions{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	pop, err := federation.NewPopulation(data, p, federation.Calibration)
	if err != nil {
		t.Fatal(err)
	}
	return pop
}

// keys makes n client identities.
func keys(t testing.TB, n int) ([]Key, []string) {
	t.Helper()
	ks := make([]Key, n)
	pubs := make([]string, n)
	for i := range ks {
		seed, pub, err := NewKey()
		if err != nil {
			t.Fatal(err)
		}
		ks[i], pubs[i] = Key{Seed: seed, Public: pub}, pub
	}
	return ks, pubs
}

// harness is an embedded server with its allow-listed client keys.
type harness struct {
	srv   *Server
	keys  []Key
	pubs  []string
	admin []byte // the seed of a user with every permission (ServerConfig.admin)
}

func newHarness(t testing.TB, K int, store string) *harness {
	t.Helper()
	ks, pubs := keys(t, K)
	h := &harness{keys: ks, pubs: pubs}
	h.start(t, "127.0.0.1:0", store)
	return h
}

func (h *harness) start(t testing.TB, listen, store string) {
	t.Helper()
	if h.admin == nil {
		h.admin = adminSeed(t)
	}
	srv, err := NewServer(ServerConfig{Listen: listen, Store: store, Clients: h.pubs, admin: publicOf(t, h.admin)})
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	t.Cleanup(srv.Shutdown)
}

// adminSeed returns a new seed for ServerConfig.admin.
func adminSeed(t testing.TB) []byte {
	t.Helper()
	seed, _, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return seed
}

// publicOf returns the public key of seed.
func publicOf(t testing.TB, seed []byte) string {
	t.Helper()
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// adminConn connects to h's server as the user with every permission,
// in process.
func (h *harness) adminConn(t testing.TB) *nats.Conn {
	t.Helper()
	d := h.srv.Dial()
	d.Seed, d.inboxPrefix = h.admin, ""
	nc, err := d.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// clientDial is the dial settings of a client of h.
func (h *harness) clientDial() Dial {
	return Dial{URL: h.srv.URL(), Fingerprint: h.srv.Fingerprint(), ReconnectWait: 100 * time.Millisecond}
}

// coordinate runs a coordinator over h's server.
func (h *harness) coordinate(ctx context.Context, t testing.TB, cfg Config) (*Outcome, error) {
	t.Helper()
	cfg.Clients = h.pubs
	c, err := NewCoordinator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := h.srv.Dial().Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	return c.Run(ctx, nc)
}

// joinAll starts a client goroutine for each k in ks over pop; wait
// returns their errors.
func (h *harness) joinAll(ctx context.Context, pop federation.Population, ks []int) (wait func() []error) {
	var wg sync.WaitGroup
	errs := make([]error, len(ks))
	for i, k := range ks {
		wg.Go(func() {
			_, errs[i] = Join(ctx, h.clientDial(), ClientConfig{
				Key:  h.keys[k],
				Data: func(w Welcome) (*calib.Set, error) { return pop.Client(w.Client) },
			})
		})
	}
	return func() []error { wg.Wait(); return errs }
}

func upTo(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// samePredictions reports whether a and b calibrate a probe set
// identically, bit for bit.
func samePredictions(a, b calib.Calibrator, c int) bool {
	probe := synthSet(200, c, 99)
	pa, pb := make([]float64, len(probe.Logits)), make([]float64, len(probe.Logits))
	a.Predict(pa, probe.Logits)
	b.Predict(pb, probe.Logits)
	for i := range pa {
		if math.Float64bits(pa[i]) != math.Float64bits(pb[i]) {
			return false
		}
	}
	return true
}

// fit is the in-process simulation of spec over pop.
func fit(t testing.TB, spec federation.Spec, pop federation.Population, r federation.Rounds) *federation.Result {
	t.Helper()
	f, err := spec.Fitter()
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Fit(context.Background(), pop, r)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func noErrors(t testing.TB, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Errorf("client %d: %v", i, err)
		}
	}
}

// permissionError waits for a permissions violation on errs.
func permissionError(errs <-chan error) error {
	select {
	case err := <-errs:
		if errors.Is(err, nats.ErrPermissionViolation) {
			return err
		}
		return nil
	case <-time.After(3 * time.Second):
		return nil
	}
}
