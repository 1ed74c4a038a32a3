package metrics_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nats-io/nats.go"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/calib/calibtest"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/network"
	"github.com/fedcalib/fedcalib/network/metrics"
)

// synthSet is an overconfident c-class model's logits on n examples.
func synthSet(n, c int) *calib.Set {
	return calibtest.Margin(rand.New(rand.NewPCG(3, 7)), n, c, 1.8, 3)
}

// scrape reads url's metrics with Prometheus's own text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value is the value of the family's series whose labels include
// label=val (any series when label is empty); NaN when there is none.
func value(fams map[string]*dto.MetricFamily, name, label, val string) float64 {
	f, ok := fams[name]
	if !ok {
		return math.NaN()
	}
	for _, m := range f.GetMetric() {
		match := label == ""
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label && lp.GetValue() == val {
				match = true
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return math.NaN()
}

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestMetricsDuringRun runs a private federation of K allow-listed
// clients of which one never joins (a dropout in every round), scrapes
// the coordinator's /metrics after every round and checks each counter
// against the run's record so far; and a client's against its report.
// fixture is an embedded server with K allow-listed keys, the
// coordinator's connection, and a K-client population.
type fixture struct {
	pop  *federation.SetPopulation
	keys []network.Key
	pubs []string
	srv  *network.Server
	nc   *nats.Conn
}

func newFixture(t *testing.T, K, C int) *fixture {
	t.Helper()
	data := synthSet(1200, C)
	part, err := federation.IID(data.Labels, C, K, federation.PartitionOptions{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{keys: make([]network.Key, K), pubs: make([]string, K)}
	if f.pop, err = federation.NewPopulation(data, part, federation.Calibration); err != nil {
		t.Fatal(err)
	}
	for k := range f.keys {
		seed, pub, err := network.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		f.keys[k], f.pubs[k] = network.Key{Seed: seed, Public: pub}, pub
	}
	if f.srv, err = network.NewServer(network.ServerConfig{Listen: "127.0.0.1:0", Store: t.TempDir(), Clients: f.pubs}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.srv.Shutdown)
	if f.nc, err = f.srv.Dial().Connect(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.nc.Close)
	return f
}

// join starts clients 0 … n−1, client 0 observed by obs; wait returns
// their reports and errors.
func (f *fixture) join(ctx context.Context, n int, obs network.ClientObserver, allow []string) (wait func() ([]*network.ClientReport, []error)) {
	var wg sync.WaitGroup
	reports := make([]*network.ClientReport, n)
	errs := make([]error, n)
	for k := range n {
		wg.Go(func() {
			cfg := network.ClientConfig{Key: f.keys[k], AllowList: allow, Data: func(w network.Welcome) (*calib.Set, error) { return f.pop.Client(w.Client) }}
			if k == 0 {
				cfg.Observer = obs
			}
			reports[k], errs[k] = network.Join(ctx, network.Dial{URL: f.srv.URL(), Fingerprint: f.srv.Fingerprint(), ReconnectWait: 100 * time.Millisecond}, cfg)
		})
	}
	return func() ([]*network.ClientReport, []error) { wg.Wait(); return reports, errs }
}

func TestMetricsDuringRun(t *testing.T) {
	const K, C, T, eps = 4, 3, 3, 4.0
	f := newFixture(t, K, C)
	pubs, srv, nc := f.pubs, f.srv, f.nc
	obs := metrics.NewCoordinator(metrics.CoordinatorOptions{Clients: K, EpsilonBudget: eps, Connected: nc.IsConnected, Connections: srv.Connections,
		Reconnects: func() uint64 { return nc.Stats().Reconnects }})
	addr, stop, err := metrics.Serve("127.0.0.1:0", metrics.Handler(obs.Registry(), obs.Ready))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	url := "http://" + addr.String()
	if got := status(t, url+"/healthz"); got != http.StatusOK {
		t.Errorf("/healthz before the run = %d, want 200", got)
	}
	if got := status(t, url+"/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz before the store is open = %d, want 503", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cobs := metrics.NewClient()
	caddr, cstop, err := metrics.Serve("127.0.0.1:0", metrics.Handler(cobs.Registry(), nil))
	if err != nil {
		t.Fatal(err)
	}
	defer cstop()
	wait := f.join(ctx, K-1, cobs, nil) // client K−1 never joins

	var updates, dropouts int
	var checked []string
	coord, err := network.NewCoordinator(network.Config{
		Spec: federation.Spec{Method: "temp", Epsilon: eps}, Rounds: federation.Rounds{T: T, SampleRate: 1, Seed: 8},
		Clients: pubs, MinClients: 2, RoundTimeout: 700 * time.Millisecond, EnrolTimeout: 3 * time.Second,
		Observer: obs,
		Progress: func(rep network.RoundReport) {
			updates += len(rep.Participants)
			dropouts += len(rep.Dropouts)
			fams := scrape(t, url)
			for _, c := range []struct {
				name, label, val string
				want             float64
			}{
				{"fedcalib_coordinator_round", "", "", float64(rep.Round)},
				{"fedcalib_coordinator_rounds", "", "", T},
				{"fedcalib_coordinator_rounds_closed_total", "", "", float64(rep.Round)},
				{"fedcalib_coordinator_round_attempts_total", "", "", float64(rep.Round * rep.Attempts)},
				{"fedcalib_coordinator_updates_accepted_total", "", "", float64(updates)},
				{"fedcalib_coordinator_dropouts_total", "", "", float64(dropouts)},
				{"fedcalib_coordinator_clients_allowed", "", "", K},
				{"fedcalib_coordinator_clients_enrolled", "", "", K - 1},
				{"fedcalib_coordinator_clients_connected", "", "", K}, // K−1 clients and the coordinator
				{"fedcalib_coordinator_nats_connected", "", "", 1},
				{"fedcalib_coordinator_nats_reconnects_total", "", "", 0},
				{"fedcalib_coordinator_privacy_epsilon_spent", "", "", rep.Epsilon},
				{"fedcalib_coordinator_privacy_epsilon_budget", "", "", eps},
				{"fedcalib_coordinator_checkpoint_writes_total", "result", "ok", float64(rep.Round + 1)}, // the first before round 1
				{"fedcalib_coordinator_checkpoint_duration_seconds", "", "", float64(rep.Round + 1)},
				{"fedcalib_coordinator_round_duration_seconds", "", "", float64(rep.Round)},
				{"fedcalib_coordinator_phase_duration_seconds", "phase", "wait", float64(rep.Round)},
			} {
				if got := value(fams, c.name, c.label, c.val); got != c.want {
					t.Errorf("after round %d: %s{%s=%q} = %v, want %v", rep.Round, c.name, c.label, c.val, got, c.want)
				}
			}
			checked = append(checked, fmt.Sprint(rep.Round))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		out *network.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() { out, err := coord.Run(ctx, nc); done <- result{out, err} }()
	// Ready during the enrolment phase, which waits EnrolTimeout for
	// the client that never joins: before any round closed.
	for status(t, url+"/readyz") != http.StatusOK {
		time.Sleep(10 * time.Millisecond)
	}
	if got := value(scrape(t, url), "fedcalib_coordinator_rounds_closed_total", "", ""); got != 0 {
		t.Errorf("ready only after %v rounds closed, want during the enrolment", got)
	}
	res := <-done
	out, err := res.out, res.err
	if err != nil {
		t.Fatal(err)
	}
	reports, errs := wait()
	for k, err := range errs {
		if err != nil {
			t.Errorf("client %d: %v", k, err)
		}
	}
	if len(checked) != T {
		t.Fatalf("scraped after rounds %v, want %d rounds", checked, T)
	}
	// The record, read independently of the Progress sums.
	var recUpdates, recDropouts int
	for _, r := range out.Rounds {
		recUpdates += len(r.Participants)
		recDropouts += len(r.Dropouts)
	}
	if recUpdates != T*(K-1) || recDropouts != T {
		t.Errorf("record: %d updates, %d dropouts; want %d and %d", recUpdates, recDropouts, T*(K-1), T)
	}
	fams := scrape(t, url)
	if got := value(fams, "fedcalib_coordinator_updates_accepted_total", "", ""); got != float64(recUpdates) {
		t.Errorf("updates_accepted_total = %v, record %d", got, recUpdates)
	}
	if got := value(fams, "fedcalib_coordinator_dropouts_total", "", ""); got != float64(recDropouts) {
		t.Errorf("dropouts_total = %v, record %d", got, recDropouts)
	}
	pr := out.Result.Privacy
	if got := value(fams, "fedcalib_coordinator_privacy_epsilon_spent", "", ""); got != pr.Epsilon {
		t.Errorf("privacy_epsilon_spent = %v, record %v", got, pr.Epsilon)
	}
	if got := value(fams, "fedcalib_coordinator_privacy_rho_spent", "", ""); got != pr.Rho {
		t.Errorf("privacy_rho_spent = %v, record %v", got, pr.Rho)
	}
	if math.Abs(pr.Epsilon-eps) > 1e-6*eps {
		t.Errorf("ε spent after the last round = %v, want the budget %v", pr.Epsilon, eps)
	}
	if got := status(t, url+"/readyz"); got != http.StatusOK {
		t.Errorf("/readyz during the run = %d, want 200", got)
	}
	cf := scrape(t, "http://"+caddr.String())
	if got, want := value(cf, "fedcalib_client_rounds_total", "", ""), float64(len(reports[0].Answered)); got != want || want != T {
		t.Errorf("client 0: rounds_total = %v, report %v, want %d", got, want, T)
	}
	if got := value(cf, "fedcalib_client_compute_duration_seconds", "", ""); got != T {
		t.Errorf("client 0: compute_duration_seconds count = %v, want %d", got, T)
	}
	nc.Close()
	if got := status(t, url+"/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz with NATS closed = %d, want 503", got)
	}
}

// TestRefusalReason: every refusal the coordinator and the federation's
// checks write is classed, none as "other".
func TestRefusalReason(t *testing.T) {
	for _, c := range []struct{ reason, want string }{
		{`bad update: federation "x", not "y"`, network.RefusedFederation},
		{"bad update: no round number", network.RefusedRound},
		{"bad update: round 4 is not open (round 3 is)", network.RefusedRound},
		{`bad update: sent as client "2" by client 1`, network.RefusedIdentity},
		{"bad update: an empty message", network.RefusedEncoding},
		{"bad update: 12 bytes is not a whole number of float64s", network.RefusedEncoding},
		{"bad update: a sparse update cut short", network.RefusedEncoding},
		{"bad update: 3 values, want 4", network.RefusedShape},
		{"bad update: value 2 is NaN", network.RefusedValue},
		{"bad update: count 1 is negative (-1)", network.RefusedValue},
		{"bad update: statistic 1 is -2: statistics are ≥ 0", network.RefusedValue},
		{"bad update: the update has norm 9, above the clip norm 1", network.RefusedNorm},
		{"something new", network.RefusedOther},
	} {
		if got := network.RefusalReason(c.reason); got != c.want {
			t.Errorf("RefusalReason(%q) = %q, want %q", c.reason, got, c.want)
		}
	}
}

// TestSecureMetrics: under secure aggregation, every attempt of every
// round times each of the coordinator's five stages once, and the
// observed client counts the rounds whose exchange it completed.
func TestSecureMetrics(t *testing.T) {
	const K, C, T = 4, 3, 2
	f := newFixture(t, K, C)
	obs := metrics.NewCoordinator(metrics.CoordinatorOptions{Clients: K})
	cobs := metrics.NewClient()
	addr, stop, err := metrics.Serve("127.0.0.1:0", metrics.Handler(obs.Registry(), obs.Ready))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	caddr, cstop, err := metrics.Serve("127.0.0.1:0", metrics.Handler(cobs.Registry(), nil))
	if err != nil {
		t.Fatal(err)
	}
	defer cstop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wait := f.join(ctx, K, cobs, f.pubs)
	coord, err := network.NewCoordinator(network.Config{
		Spec: federation.Spec{Method: "temp", Clip: 10}, Rounds: federation.Rounds{T: T, SampleRate: 1, Seed: 8},
		Clients: f.pubs, MinClients: 3, RoundTimeout: 10 * time.Second, EnrolTimeout: 20 * time.Second,
		Secure: &network.SecureConfig{Bits: 64}, Observer: obs,
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := coord.Run(ctx, f.nc)
	if err != nil {
		t.Fatal(err)
	}
	reports, errs := wait()
	for k, err := range errs {
		if err != nil {
			t.Errorf("client %d: %v", k, err)
		}
	}
	attempts := 0
	for _, r := range out.Rounds {
		attempts += r.Attempts
	}
	fams := scrape(t, "http://"+addr.String())
	for _, stage := range []string{"keys", "shares", "masked", "signed", "unmask"} {
		if got := value(fams, "fedcalib_coordinator_secagg_stage_duration_seconds", "stage", stage); got != float64(attempts) {
			t.Errorf("stage %s timed %v times, want one per attempt: %d", stage, got, attempts)
		}
	}
	if got := value(fams, "fedcalib_coordinator_updates_accepted_total", "", ""); got != T*K {
		t.Errorf("updates_accepted_total = %v, want %d", got, T*K)
	}
	cf := scrape(t, "http://"+caddr.String())
	if got, want := value(cf, "fedcalib_client_rounds_total", "", ""), float64(len(reports[0].Answered)); got != want || want != T {
		t.Errorf("client 0: rounds_total = %v, report %v, want %d", got, want, T)
	}
}
