package metrics

import (
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fedcalib/fedcalib/network"
)

// Prefixes of the metric names.
const (
	coordNS  = "fedcalib_coordinator"
	clientNS = "fedcalib_client"
)

// durationBuckets are the histogram buckets of round, phase, stage and
// checkpoint durations, in seconds: 1 ms to about 17 minutes.
var durationBuckets = prometheus.ExponentialBuckets(0.001, 4, 11)

// CoordinatorOptions describes the run a Coordinator observes. The zero
// value is a run of no known allow-list, not private.
type CoordinatorOptions struct {
	// Clients is the number of allow-listed clients.
	Clients int
	// EpsilonBudget is the ε the run will have spent after its last
	// round; zero for a fit without privacy.
	EpsilonBudget float64
	// Connected, if not nil, reports whether the coordinator's NATS
	// connection is connected (nats.Conn.IsConnected).
	Connected func() bool
	// Reconnects, if not nil, returns how many times the coordinator's
	// NATS connection reconnected (nats.Conn.Stats().Reconnects).
	Reconnects func() uint64
	// Connections, if not nil, returns the number of client connections
	// of the embedded NATS server (network.Server.Connections).
	Connections func() int
}

// Coordinator is a network.Observer that exports a coordinator's run to
// Prometheus. Make one with NewCoordinator; its zero value is not usable.
type Coordinator struct {
	reg       *prometheus.Registry
	opened    atomic.Bool
	connected func() bool

	enrolled, round, rounds              prometheus.Gauge
	closed, attempts, accepted, dropouts prometheus.Counter
	refused                              *prometheus.CounterVec
	roundDur                             prometheus.Histogram
	phaseDur, stageDur                   *prometheus.HistogramVec
	epsSpent, rhoSpent                   prometheus.Gauge
	ckptWrites                           *prometheus.CounterVec
	ckptDur                              prometheus.Histogram
	ckptLast                             prometheus.Gauge
}

// NewCoordinator returns a Coordinator whose metrics, with Go's and the
// process's, are registered in a registry of its own.
func NewCoordinator(o CoordinatorOptions) *Coordinator {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	g := func(name, help string) prometheus.Gauge {
		m := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: coordNS, Name: name, Help: help})
		reg.MustRegister(m)
		return m
	}
	c := func(name, help string) prometheus.Counter {
		m := prometheus.NewCounter(prometheus.CounterOpts{Namespace: coordNS, Name: name, Help: help})
		reg.MustRegister(m)
		return m
	}
	m := &Coordinator{reg: reg, connected: o.Connected}
	g("clients_allowed", "Clients on the allow-list.").Set(float64(o.Clients))
	m.enrolled = g("clients_enrolled", "Clients enrolled in the run.")
	m.round = g("round", "The last round closed (read from the store on a resumed run).")
	m.rounds = g("rounds", "The run's number of rounds (0 until the rounds start, after the enrolment phase).")
	m.closed = c("rounds_closed_total", "Rounds closed by this process.")
	m.attempts = c("round_attempts_total", "Announcements of the rounds closed by this process (one per attempt).")
	m.accepted = c("updates_accepted_total", "Updates aggregated in the rounds closed by this process.")
	m.dropouts = c("dropouts_total", "Sampled clients whose update was not aggregated (refused ones included), in the rounds closed by this process.")
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: coordNS, Name: "updates_refused_total", Help: "Updates refused, by reason class (federation, round, identity, encoding, shape, value, norm, other)."}, []string{"reason"})
	m.roundDur = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: coordNS, Name: "round_duration_seconds", Help: "Wall-clock time of a round, from its first invitation to its committed checkpoint.", Buckets: durationBuckets})
	m.phaseDur = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: coordNS, Name: "phase_duration_seconds", Help: "Time of a round's coordinator phases: wait (for the clients), compute (checking, adding, closing), checkpoint (committing).", Buckets: durationBuckets}, []string{"phase"})
	m.stageDur = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: coordNS, Name: "secagg_stage_duration_seconds", Help: "Time of a secure-aggregation stage, by the messages it collects: keys, shares, masked, signed, unmask.", Buckets: durationBuckets}, []string{"stage"})
	m.ckptWrites = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: coordNS, Name: "checkpoint_writes_total", Help: "Checkpoint writes, by result (ok, error)."}, []string{"result"})
	m.ckptDur = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: coordNS, Name: "checkpoint_duration_seconds", Help: "Latency of a checkpoint write, retries included.", Buckets: durationBuckets})
	reg.MustRegister(m.refused, m.roundDur, m.phaseDur, m.stageDur, m.ckptWrites, m.ckptDur)
	m.ckptLast = g("checkpoint_last_timestamp_seconds", "Unix time of the last checkpoint committed by this process.")
	m.epsSpent = g("privacy_epsilon_spent", "Privacy ε spent so far (0 without privacy).")
	m.rhoSpent = g("privacy_rho_spent", "zCDP ρ spent so far (0 without privacy).")
	g("privacy_epsilon_budget", "Privacy ε the run spends by its last round (0 without privacy).").Set(o.EpsilonBudget)
	for _, r := range []string{"ok", "error"} {
		m.ckptWrites.WithLabelValues(r)
	}
	for _, p := range []string{"wait", "compute", "checkpoint"} {
		m.phaseDur.WithLabelValues(p)
	}
	if o.Connected != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: coordNS, Name: "nats_connected", Help: "1 while the coordinator's NATS connection is connected, else 0."}, func() float64 { return b2f(o.Connected()) }))
	}
	if o.Reconnects != nil {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: coordNS, Name: "nats_reconnects_total", Help: "Times the coordinator's NATS connection reconnected."}, func() float64 { return float64(o.Reconnects()) }))
	}
	if o.Connections != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: coordNS, Name: "clients_connected", Help: "Connections to the embedded NATS server, the coordinator's own included."}, func() float64 { return float64(o.Connections()) }))
	}
	return m
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Registry returns the registry of m's metrics.
func (m *Coordinator) Registry() *prometheus.Registry { return m.reg }

// Ready reports whether the coordinator has opened its store and, if it
// was given a Connected function, is connected to NATS.
func (m *Coordinator) Ready() bool {
	return m.opened.Load() && (m.connected == nil || m.connected())
}

// Opened implements network.Observer.
func (m *Coordinator) Opened() { m.opened.Store(true) }

// Started implements network.Observer.
func (m *Coordinator) Started(resumedAfter, rounds int) {
	m.round.Set(float64(resumedAfter))
	m.rounds.Set(float64(rounds))
}

// Enrolled implements network.Observer.
func (m *Coordinator) Enrolled(clients int) { m.enrolled.Set(float64(clients)) }

// RoundClosed implements network.Observer.
func (m *Coordinator) RoundClosed(o network.RoundObservation) {
	m.round.Set(float64(o.Round))
	m.closed.Inc()
	m.attempts.Add(float64(o.Attempts))
	m.accepted.Add(float64(o.Updates))
	m.dropouts.Add(float64(o.Dropouts))
	for _, r := range o.Refused {
		m.refused.WithLabelValues(r).Inc()
	}
	m.roundDur.Observe(o.Duration.Seconds())
	m.phaseDur.WithLabelValues("compute").Observe(o.Compute.Seconds())
	m.phaseDur.WithLabelValues("checkpoint").Observe(o.Commit.Seconds())
	m.phaseDur.WithLabelValues("wait").Observe(max(o.Duration-o.Compute-o.Commit, 0).Seconds())
	if o.Private {
		m.epsSpent.Set(o.Epsilon)
		m.rhoSpent.Set(o.Rho)
	}
}

// Checkpoint implements network.Observer.
func (m *Coordinator) Checkpoint(latency time.Duration, err error) {
	if err != nil {
		m.ckptWrites.WithLabelValues("error").Inc()
		return
	}
	m.ckptWrites.WithLabelValues("ok").Inc()
	m.ckptDur.Observe(latency.Seconds())
	m.ckptLast.Set(float64(time.Now().UnixNano()) / 1e9)
}

// SecureStage implements network.Observer.
func (m *Coordinator) SecureStage(stage string, d time.Duration) {
	m.stageDur.WithLabelValues(stage).Observe(d.Seconds())
}

// Client is a network.ClientObserver that exports a client's run to
// Prometheus. Make one with NewClient; its zero value is not usable.
type Client struct {
	reg               *prometheus.Registry
	answered, refused prometheus.Counter
	compute, send     prometheus.Histogram
}

// NewClient returns a Client whose metrics, with Go's and the process's,
// are registered in a registry of its own.
func NewClient() *Client {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Client{
		reg:      reg,
		answered: prometheus.NewCounter(prometheus.CounterOpts{Namespace: clientNS, Name: "rounds_total", Help: "Rounds the client sent an update in (the evaluation round included; under secure aggregation, whose exchange it completed)."}),
		refused:  prometheus.NewCounter(prometheus.CounterOpts{Namespace: clientNS, Name: "updates_refused_total", Help: "Updates the coordinator refused."}),
		compute:  prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: clientNS, Name: "compute_duration_seconds", Help: "Time to compute an update.", Buckets: durationBuckets}),
		send:     prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: clientNS, Name: "send_duration_seconds", Help: "Time to send an update until the coordinator's answer (under secure aggregation: the round's whole exchange).", Buckets: durationBuckets}),
	}
	reg.MustRegister(m.answered, m.refused, m.compute, m.send)
	return m
}

// Registry returns the registry of m's metrics.
func (m *Client) Registry() *prometheus.Registry { return m.reg }

// Answered implements network.ClientObserver.
func (m *Client) Answered(round int, compute, send time.Duration, taken bool) {
	m.answered.Inc()
	if !taken {
		m.refused.Inc()
	}
	m.compute.Observe(compute.Seconds())
	m.send.Observe(send.Seconds())
}

// Handler returns the HTTP handler of /metrics (reg's metrics), /healthz
// and /readyz (200 when ready returns true, else 503; ready nil is always
// ready), as the package doc describes.
func Handler(reg *prometheus.Registry, ready func() bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ready != nil && !ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// Serve listens on addr (host:port; port 0 picks one) and serves h in a
// goroutine. It returns the address it listens on and a function that
// stops the server. Errors wrap the listener's.
func Serve(addr string, h http.Handler) (net.Addr, func(), error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics listener: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }() // returns when stopped
	return l.Addr(), func() { srv.Close() }, nil
}

// Compile-time checks.
var (
	_ network.Observer       = (*Coordinator)(nil)
	_ network.ClientObserver = (*Client)(nil)
)
