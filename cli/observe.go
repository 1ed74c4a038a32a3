package cli

import (
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/fedcalib/fedcalib/network"
	"github.com/fedcalib/fedcalib/network/metrics"
)

// Values of --log-format.
const (
	logText = "text" // key=value lines, without the time, for a terminal
	logJSON = "json" // one JSON object a line, with the time, for a log collector
)

// observeFlags are the monitoring flags of serve and join: --metrics and
// --log-format.
type observeFlags struct {
	metrics   string // host:port of the metrics listener; empty: none
	logFormat string
}

// register registers the flags on f; who is "coordinator" or "client".
func (o *observeFlags) register(f *pflag.FlagSet, who string) {
	f.StringVar(&o.metrics, "metrics", "", "serve the "+who+"'s Prometheus metrics on /metrics, with /healthz and /readyz, at this host:port, e.g. --metrics 127.0.0.1:9464 (see docs/NETWORK.md)")
	f.StringVar(&o.logFormat, "log-format", logText, "format of the log on stderr: text (key=value lines) or json (one object a line, with the time; keys in docs/NETWORK.md), e.g. --log-format json")
}

// check checks the flags' values.
func (o *observeFlags) check() error {
	if o.logFormat != logText && o.logFormat != logJSON {
		return fmt.Errorf("--log-format %q: want %s or %s", o.logFormat, logText, logJSON)
	}
	return nil
}

// json reports whether the log is JSON.
func (o *observeFlags) json() bool { return o.logFormat == logJSON }

// logger returns the logger of --log-format on w, at level.
func (o *observeFlags) logger(w io.Writer, level slog.Level) *slog.Logger {
	if o.json() {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: dropTime}))
}

// monitor is what a running serve or join monitors: its NATS connection
// and embedded server, set once they exist, read by the metrics
// listener's goroutines.
type monitor struct {
	nc   atomic.Pointer[nats.Conn]
	srv  atomic.Pointer[network.Server]
	stop func()
}

// connected reports whether the NATS connection is set and connected.
func (m *monitor) connected() bool {
	nc := m.nc.Load()
	return nc != nil && nc.IsConnected()
}

// reconnects returns how many times the NATS connection reconnected.
func (m *monitor) reconnects() uint64 {
	if nc := m.nc.Load(); nc != nil {
		return nc.Stats().Reconnects
	}
	return 0
}

// connections returns the embedded server's connections, 0 without one.
func (m *monitor) connections() int {
	if s := m.srv.Load(); s != nil {
		return s.Connections()
	}
	return 0
}

// close stops the metrics listener, if any.
func (m *monitor) close() {
	if m.stop != nil {
		m.stop()
	}
}

// coordinator sets cfg's log, from --log-format, and with --metrics its
// Observer, and starts the metrics listener, which close stops.
func (o *observeFlags) coordinator(cfg *network.Config, stderr io.Writer, level slog.Level) (*monitor, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	cfg.Log = o.logger(stderr, level)
	m := &monitor{}
	if o.metrics == "" {
		return m, nil
	}
	obs := metrics.NewCoordinator(metrics.CoordinatorOptions{
		Clients: len(cfg.Clients), EpsilonBudget: cfg.Spec.Epsilon,
		Connected: m.connected, Reconnects: m.reconnects, Connections: m.connections,
	})
	addr, stop, err := metrics.Serve(o.metrics, metrics.Handler(obs.Registry(), obs.Ready))
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", o.metrics, err)
	}
	o.servingMetrics(stderr, cfg.Log, addr.String())
	cfg.Observer, m.stop = obs, stop
	return m, nil
}

// client sets cfg's log, from --log-format, and with --metrics its
// Observer, and starts the metrics listener, which close stops. A client
// is ready once connected.
func (o *observeFlags) client(cfg *network.ClientConfig, stderr io.Writer, level slog.Level) (*monitor, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	cfg.Log = o.logger(stderr, level)
	m := &monitor{}
	if o.metrics == "" {
		return m, nil
	}
	obs := metrics.NewClient()
	addr, stop, err := metrics.Serve(o.metrics, metrics.Handler(obs.Registry(), nil))
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", o.metrics, err)
	}
	o.servingMetrics(stderr, cfg.Log, addr.String())
	cfg.Observer, m.stop = obs, stop
	return m, nil
}

// logProgress logs one record per round closed, with the keys
// docs/NETWORK.md lists: serve's progress under --log-format json.
func logProgress(log *slog.Logger) func(network.RoundReport) {
	return func(r network.RoundReport) {
		msg := "round closed"
		if r.Round > r.Rounds {
			msg = "evaluation round closed"
		}
		log.Info(msg, "round", r.Round, "rounds", r.Rounds, "sampled", len(r.Sampled),
			"aggregated", len(r.Participants), "dropouts", len(r.Dropouts), "refused", len(r.Refused),
			"attempts", r.Attempts, "epsilon", r.Epsilon)
	}
}

// serving reports where serve listens: a line on stderr, or a log record
// under --log-format json.
func (o *observeFlags) serving(w io.Writer, log *slog.Logger, fed, url, fingerprint string) {
	switch {
	case o.json():
		log.Info("serving federation", "federation", fed, "url", url, "fingerprint", fingerprint)
	case fingerprint != "":
		fmt.Fprintf(w, "serving federation %s at %s (TLS certificate SHA-256 %s)\n", fed, url, fingerprint)
	default:
		fmt.Fprintf(w, "serving federation %s at %s (plaintext)\n", fed, url)
	}
}

// warning reports what the operator should know (network.Server's
// Warnings): a "warning:" line on stderr, or a log record under
// --log-format json.
func (o *observeFlags) warning(w io.Writer, log *slog.Logger, msg string) {
	if o.json() {
		log.Warn(msg)
		return
	}
	fmt.Fprintf(w, "warning: %s\n", msg)
}

// servingMetrics reports where the metrics are served: a line on stderr,
// or a log record under --log-format json.
func (o *observeFlags) servingMetrics(w io.Writer, log *slog.Logger, addr string) {
	url := "http://" + addr + "/metrics"
	if o.json() {
		log.Info("serving metrics", "url", url)
		return
	}
	fmt.Fprintf(w, "serving metrics at %s\n", url)
}

// level is the log level of serve and join: Info for their per-round
// records (join's text lines; serve's under --log-format json), Warn
// with --quiet or for serve's text log, whose progress lines
// serveProgress prints instead.
func (o *observeFlags) level(quiet, serve bool) slog.Level {
	if quiet || (serve && !o.json()) {
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// enrolled reports join's enrolment: a line on stderr, or a log record
// under --log-format json.
func (o *observeFlags) enrolled(w io.Writer, log *slog.Logger, wel network.Welcome) {
	if o.json() {
		log.Info("enrolled", "client", wel.Client, "clients", wel.Clients, "federation", wel.Federation, "method", wel.Spec.Method, "rounds", wel.Rounds)
		return
	}
	fmt.Fprintf(w, "enrolled as client %d of %d in federation %s: %s, %s\n", wel.Client, wel.Clients, wel.Federation, wel.Spec.Method, plural(wel.Rounds, "round"))
}
