package cli

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/network"
)

// serveFlags are the flags of fedcalib serve.
type serveFlags struct {
	cal calibrateFlags // method, bins-exp, seed, out and the protocol flags of calibrate
	// Transport.
	listen, natsURL, creds, store string
	tlsCert, tlsKey               string
	plaintext, insecure           bool
	sync                          string
	federation                    string
	replicas                      int
	sparse                        bool
	// Clients and rounds.
	clients                    string
	classes, minClients        int
	maxAttempts                int
	roundTimeout, enrolTimeout time.Duration
	// Secure aggregation.
	secure                      bool
	neighbours, threshold, bits int
	noise                       string
	// The evaluation round.
	eval evalRoundFlags
	// Monitoring.
	obs observeFlags
}

// Values of serve --sync.
const (
	syncPeriodic = "periodic" // JetStream's default: synced every two minutes
	syncAlways   = "always"   // every JetStream write synced before its ack
)

// serveProtocolFlags are the flags serve takes from federated calibrate,
// with their definitions, defaults and checks.
var serveProtocolFlags = []string{
	"rounds", "sample-rate", "clients-per-round", "weighting", "server-lr",
	"epsilon", "delta", "clip", "clip-pos", "clip-neg", "dp-alpha-z", "accountant",
}

func newServeCmd() *cobra.Command {
	var fl serveFlags
	// The protocol flags are calibrate's own: registered on a scratch
	// command, then lent to serve, so that their definitions and the
	// checks of fedFlags.check are shared.
	scratch := &cobra.Command{}
	cmd := &cobra.Command{
		Annotations: map[string]string{stopAnnotation: "the rounds finished are committed to --store (or --nats); run serve again on it to resume"},
		Use:         "serve --method METHOD --clients ALLOW.txt (--listen HOST:PORT --store DIR | --nats URL --creds F) --out C.json",
		Short:       "Coordinate a federated calibration across machines (NATS JetStream)",
		Long: `serve is the coordinator of a federated fit whose clients run "fedcalib
join" on their own machines, next to their data; only clipped updates
reach the coordinator. It takes the method, weighting, rounds, sampling
and privacy flags of "fedcalib calibrate" and runs the same protocol.

By default it embeds a NATS server with JetStream (--listen, storage in
--store) that admits only the keys of the allow-list --clients (one NKey
public key a line, from "fedcalib keys new"; the client on line k, from 0,
is client k, as in a simulation over the same partition) with per-client
permissions: a client can publish only its own updates and read only its
own inbox (where each round invites only its participants) and the end of
the run. The listener serves TLS with
--tls-cert/--tls-key, or with a development certificate generated into
--store whose SHA-256 fingerprint is printed for clients to pin
(--tls-fingerprint); --plaintext is allowed on loopback only, or anywhere
with --insecure. With --nats URL --creds F it uses an existing NATS
deployment instead, which must grant the same permissions; --creds is the
coordinator's credentials file (a user JWT, operator mode) or NKey seed
file (an nkey user of the server's configuration file, as "fedcalib keys
new" writes one). docs/NETWORK.md has complete nats-server configurations.

It waits until every allow-listed client enrolled or --enrol-timeout
passed (and fails unless --min-clients did), then runs --rounds rounds
(scalbin runs 2 × --rounds: its temperature stage, then its binning
stage, as calibrate does; it cannot be combined with
--secure-aggregation): each samples its participants (Poisson, rate p,
over the allow-list), invites them, and closes when all answered or
--round-timeout passed, with at least --min-clients accepted updates (or
all participants, when fewer were sampled); otherwise those that did not
answer are invited again, at most --max-attempts times in all, and
nothing is released meanwhile: noise is added and the privacy ledger
charged only when a round closes. An update of the wrong shape, with NaN
or infinite values, negative counts, or above the clip norm is refused
and logged, and that client counts as a dropout.

After every round the server's state, with the privacy ledger, is
committed to JetStream; killed and restarted on the same --store (or
--nats), serve resumes where it stopped and never resets the ledger. The
embedded server hands every write to the operating system at once, so a
killed serve loses nothing, and syncs its files to disk every two minutes
(--sync periodic): a power loss or a crash of the machine can lose up to
the last two minutes of rounds, which a restart runs again with fresh
noise. --sync always syncs every write before acknowledging it, so that
nothing committed is lost even then, at the cost of a disk flush per
round (the checkpoint; updates are held in memory, not written); use it
for private fits on machines that can lose power (see docs/NETWORK.md).

Updates travel dense by default: every value, so every update of a run
has the same size. --sparse-updates lets the clients send a bitmap of the
values that are not zero and those values when that is smaller (binning
with a few dozen rows per client: several times smaller); both are exact,
but a sparse update's size tells a network observer, through TLS, how
many of its values are not zero.

Noise: without --seed the run's seed is drawn at random and the noise of a
private fit comes from crypto/rand, as any release of real data must.
--seed fixes both the sampling and the noise, reproducibly, so that the
calibrator equals "fedcalib calibrate" with the same seed bit for bit —
but every client learns the seed and so the noise: use --seed for tests
only. Non-private weighted binning (--weighting all or changed without
--epsilon) needs each class's number of calibration examples: clients send
their class counts at enrolment, in the clear, in that mode only.

Secure aggregation: with --secure-aggregation every round runs SecAgg+
(Bell et al. 2020) among its participants, so the coordinator learns only
the round's sum, never one client's update: each client divides its update
by its clip norm (each histogram by its own), quantises it to integers
modulo 2^b (--bits) and masks it with pairwise and self masks agreed with
--neighbours others; the coordinator routes the encrypted Shamir shares
(threshold --threshold) and unmasks the sum of the clients that sent their
masked input, dropouts included up to k − t per neighbourhood. Keys are
signed with the clients' NKeys, and the survivors sign the survivor set:
a client unmasks only a set of at least --min-clients (the noise's
planned survivors), connected in the graph, with t signing neighbours per
survivor, and signs one such set per round. The
coordinator cannot check an update it never sees: clients clip their own.
A scaling method needs a bound (--epsilon or --clip); a binning method
without --epsilon sums exact counts (up to 65536 per bin and client).
--noise central (default) adds the Gaussian noise to the unmasked sum, as
without secure aggregation; --noise distributed has each client add its
share of Skellam noise before masking, so nobody sees a noiseless sum, and
needs --epsilon and --accountant rdp. A --bits too small for the
federation's sum is refused. See docs/NETWORK.md for the threat model.

Evaluation: with --evaluate, after the last round every allow-listed
client is invited to one more round in which it sends the per-bin
statistics of its test rows under the fitted calibrator (as eval
--federated computes them); serve prints the federated test metrics,
exactly those of the pooled test rows of the clients that answered, and
with --eval-out writes them as eval --federated --json does.
--eval-epsilon makes that evaluation private: its own release, each
client's statistics clipped to --eval-clip, noise as for the fit.

One coordinator per federation: the embedded server locks --store (a
second serve on it stops at once, naming the first), and under --nats
serve holds a lease in the federation's bucket, renewed every 5 seconds
and lasting 15: a second serve stops at once naming the holder, a serve
started after the holder died takes over once its lease expired, and a
serve that lost its lease stops before releasing anything more.

Progress is printed per round on stderr. The output is a calibrator file
with the privacy record and the list of rounds with their participants
and dropouts. When serve gives the run up (too few clients, a store it
cannot write) it tells the enrolled clients why, and they exit. Exit
status 4 (not 2) marks a failure a retry may cure: no NATS server
answers or the connection was lost, too few clients, another coordinator
holds the federation or --store.`,
		Example: `  fedcalib keys new --out alice.nkey      # on each client machine; collect the public keys
  fedcalib serve --method bbq --weighting all --epsilon 1 --rounds 12 --clients-per-round 10 \
      --clients allow.txt --listen 0.0.0.0:4222 --store coord --out fedbbq.json
  fedcalib join --server tls://coord.example:4222 --tls-fingerprint 3f9a… --key alice.nkey \
      --model model.onnx --data mnist:/data/mnist`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd, scratch, &fl)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.cal.method, "method", "", "calibrator: "+strings.Join(calib.MethodNames(), ", ")+" (required)")
	f.IntVar(&fl.cal.binsExp, "bins-exp", calib.DefaultMexp, binsExpUsage())
	f.Var((*seedValue)(&fl.cal.seed), "seed", "fix the run's seed, 0 to 2^64−1: sampling, client streams and noise become reproducible and known to every client (tests only); without it the seed is random and the noise comes from crypto/rand")
	f.StringVar(&fl.cal.out, "out", "", "calibrator file (JSON) to write at the end (required)")
	fl.cal.fed.register(scratch)
	for _, name := range serveProtocolFlags {
		f.AddFlag(scratch.Flags().Lookup(name))
	}
	for _, name := range []string{"method", "bins-exp", "seed", "out"} {
		scratch.Flags().AddFlag(f.Lookup(name)) // for fedFlags.check
	}
	f.StringVar(&fl.clients, "clients", "", "allow-list: one client NKey public key a line; line k (from 0) is client k (required)")
	f.StringVar(&fl.listen, "listen", "127.0.0.1:4222", "host:port of the embedded NATS server's client listener")
	f.StringVar(&fl.store, "store", "", "directory of the embedded server's JetStream storage, the coordinator's checkpoints and the development certificate (required without --nats)")
	f.StringVar(&fl.natsURL, "nats", "", "use this external NATS deployment (comma-separated URLs) instead of an embedded server")
	f.StringVar(&fl.creds, "creds", "", "with --nats: the coordinator's NATS credentials file (operator mode), or its NKey seed file (a user of the server's configuration), mode 0600")
	f.StringVar(&fl.tlsCert, "tls-cert", "", "PEM certificate of the TLS listener (with --tls-key); default: a development certificate in --store")
	f.StringVar(&fl.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	f.BoolVar(&fl.plaintext, "plaintext", false, "serve without TLS: loopback addresses only, unless --insecure")
	f.BoolVar(&fl.insecure, "insecure", false, "allow --plaintext on a non-loopback address")
	f.StringVar(&fl.sync, "sync", syncPeriodic, "when the embedded server syncs JetStream writes to disk: periodic (every two minutes; a killed process loses nothing, a power loss up to two minutes of rounds) or always (every write: survives a power loss, slower)")
	f.StringVar(&fl.federation, "federation", network.DefaultFederation, "name of the federation (letters, digits, - and _)")
	f.IntVar(&fl.replicas, "replicas", 1, "JetStream replicas of the checkpoint bucket (3 on a three-node cluster)")
	f.BoolVar(&fl.sparse, "sparse-updates", false, "let clients send sparse updates (the values that are not zero) when smaller: exact, fewer bytes, but an update's size then tells a network observer how many values are not zero")
	f.IntVar(&fl.classes, "classes", 0, "number of classes C; 0: that of the first client to enrol (all must agree)")
	f.IntVar(&fl.minClients, "min-clients", 1, "clients that must enrol, and accepted updates a round needs to close")
	f.IntVar(&fl.maxAttempts, "max-attempts", 3, "attempts of a round that stays short of --min-clients before serve gives up")
	f.DurationVar(&fl.roundTimeout, "round-timeout", time.Minute, "how long a round waits for updates")
	f.DurationVar(&fl.enrolTimeout, "enrol-timeout", 5*time.Minute, "how long to wait for every client to enrol before starting with those that did")
	f.BoolVarP(&fl.cal.fed.quiet, "quiet", "q", false, "print no per-round progress")
	f.BoolVar(&fl.secure, "secure-aggregation", false, "run every round under secure aggregation (SecAgg+): the coordinator sees only the sum of the round's updates")
	f.IntVar(&fl.neighbours, "neighbours", 0, "with --secure-aggregation: neighbours k of each client in a round's graph, even (or K − 1: everyone), e.g. --neighbours 40; 0: derived per round from its n participants for 10% dropouts and 5% colluding clients (failure ≤ 2^−20, exposure ≤ 2^−40 a round; see docs/NETWORK.md)")
	f.IntVar(&fl.threshold, "threshold", 0, "with --secure-aggregation: Shamir threshold t, in (k/2, k], e.g. --threshold 24; 0: derived with k, or ⌊k/2⌋ + 1 with --neighbours")
	f.IntVar(&fl.bits, "bits", network.DefaultBits, "with --secure-aggregation: modulus 2^b of the masked sums, b in [2, 64]")
	f.StringVar(&fl.noise, "noise", network.NoiseCentral, "with --secure-aggregation and --epsilon: central (the coordinator adds Gaussian noise to the sum) or distributed (each client adds Skellam noise before masking; needs --accountant rdp)")
	fl.eval.register(f)
	fl.obs.register(f, "coordinator")
	return cmd
}

// serveConfig checks the flags and returns the coordinator's settings.
func serveConfig(cmd, scratch *cobra.Command, fl *serveFlags) (network.Config, error) {
	changed := cmd.Flags().Changed
	var cfg network.Config
	switch {
	case fl.cal.method == "":
		return cfg, fmt.Errorf("serve needs --method: one of %s", strings.Join(calib.MethodNames(), ", "))
	case fl.clients == "":
		return cfg, errors.New("serve needs --clients ALLOW.txt, the clients' public keys (\"fedcalib keys new\" prints one)")
	case fl.natsURL == "" && fl.store == "":
		return cfg, errors.New("serve needs --store DIR for the embedded server's storage (or --nats URL --creds F)")
	case fl.natsURL != "" && (changed("listen") || changed("store") || changed("tls-cert") || changed("plaintext") || changed("sync")):
		return cfg, errors.New("--nats uses an external NATS server: drop --listen, --store, --tls-cert, --plaintext and --sync")
	case fl.sync != syncPeriodic && fl.sync != syncAlways:
		return cfg, fmt.Errorf("--sync %q: want %s or %s", fl.sync, syncPeriodic, syncAlways)
	case fl.creds != "" && fl.natsURL == "":
		return cfg, errors.New("--creds goes with --nats URL")
	case (fl.tlsCert == "") != (fl.tlsKey == ""):
		return cfg, errors.New("--tls-cert and --tls-key go together")
	case fl.plaintext && fl.tlsCert != "":
		return cfg, errors.New("--plaintext serves no TLS: drop --tls-cert")
	case fl.roundTimeout <= 0 || fl.enrolTimeout <= 0:
		return cfg, errors.New("--round-timeout and --enrol-timeout must be positive, e.g. 30s")
	case fl.maxAttempts < 1 || fl.replicas < 1 || fl.minClients < 1:
		return cfg, errors.New("--max-attempts, --replicas and --min-clients must be at least 1")
	case fl.classes < 0 || fl.classes == 1:
		return cfg, fmt.Errorf("--classes %d: want at least 2 (or 0: from the clients)", fl.classes)
	}
	if !fl.secure && (changed("neighbours") || changed("threshold") || changed("bits") || changed("noise")) {
		return cfg, errors.New("--neighbours, --threshold, --bits and --noise go with --secure-aggregation")
	}
	if err := network.ValidFederation(fl.federation); err != nil {
		return cfg, fmt.Errorf("--federation: %w", err)
	}
	// fedFlags.check is calibrate's; its "logits" input is the allow-list,
	// which --out must not overwrite either.
	probe := fl.cal
	probe.logits = fl.clients
	if err := fl.cal.fed.check(scratch, &probe); err != nil {
		return cfg, err
	}
	keys, err := network.ReadAllowList(fl.clients)
	if err != nil {
		return cfg, fmt.Errorf("--clients %w", err)
	}
	if fl.minClients > len(keys) {
		return cfg, fmt.Errorf("--min-clients %d is more than the %d clients of %s", fl.minClients, len(keys), fl.clients)
	}
	ff := &fl.cal.fed
	rate := ff.sampleRate
	if changed("clients-per-round") {
		if rate, err = federation.SampleRateFor(ff.perRound, len(keys)); err != nil {
			return cfg, fmt.Errorf("--clients-per-round: %w", err)
		}
	}
	// The same spec as federated calibrate builds from these flags.
	spec := ff.spec(cmd, fl.cal.method, fl.cal.binsExp)
	if _, err := spec.Fitter(); err != nil {
		return cfg, err
	}
	seeded := changed("seed")
	cfg = network.Config{
		Federation: fl.federation, Spec: spec,
		Rounds:      federation.Rounds{T: ff.rounds, SampleRate: rate, Seed: fl.cal.seed},
		DrawSeed:    !seeded,
		SecureNoise: !seeded,
		Clients:     keys, Classes: fl.classes, MinClients: fl.minClients,
		RoundTimeout: fl.roundTimeout, EnrolTimeout: fl.enrolTimeout,
		MaxAttempts: fl.maxAttempts, Replicas: fl.replicas, SparseUpdates: fl.sparse,
	}
	if fl.secure {
		cfg.Secure = &network.SecureConfig{Neighbours: fl.neighbours, Threshold: fl.threshold, Bits: fl.bits, Noise: fl.noise}
	}
	if cfg.Evaluate, err = fl.eval.options(changed, ff.accountant, fl.secure, fl.cal.out, fl.clients); err != nil {
		return cfg, err
	}
	return cfg, nil
}

func runServe(cmd, scratch *cobra.Command, fl *serveFlags) error {
	cfg, err := serveConfig(cmd, scratch, fl)
	if err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	mon, err := fl.obs.coordinator(&cfg, stderr, fl.obs.level(fl.cal.fed.quiet, true))
	if err != nil {
		return err
	}
	defer mon.close()
	if !fl.cal.fed.quiet {
		cfg.Progress = serveProgress(stderr, cfg.Log, fl.obs.json())
	}
	// The embedded server locks --store (network.ErrLocked), so no other
	// coordinator reaches its bucket: take the lease at once. Under --nats
	// another coordinator's live lease stops this one (network.ErrLeased).
	cfg.Exclusive = fl.natsURL == ""
	coord, err := network.NewCoordinator(cfg)
	if err != nil {
		return err
	}
	var dial network.Dial
	if fl.natsURL != "" {
		if fl.creds == "" {
			return errors.New("--nats needs --creds F, the coordinator's NATS credentials file or NKey seed file")
		}
		// A credentials file (operator mode: a user JWT and its seed) or a
		// bare NKey seed (a user of the server's configuration file).
		key, err := network.ReadKey(fl.creds)
		if err != nil {
			return fmt.Errorf("--creds %w", err)
		}
		dial = network.Dial{URL: fl.natsURL, Creds: key.Creds, Name: "fedcalib coordinator", Insecure: fl.insecure}.Coordinator(fl.federation)
		if key.Creds == "" {
			dial.Seed = key.Seed
		}
	} else {
		if err := os.MkdirAll(fl.store, 0o700); err != nil {
			return fmt.Errorf("--store: %w", err)
		}
		sc := network.ServerConfig{
			Listen: fl.listen, Store: fl.store, Federation: fl.federation, Clients: cfg.Clients,
			Plaintext: fl.plaintext, Insecure: fl.insecure, SyncAlways: fl.sync == syncAlways,
		}
		if fl.tlsCert != "" {
			c, err := tls.LoadX509KeyPair(fl.tlsCert, fl.tlsKey)
			if err != nil {
				return fmt.Errorf("--tls-cert/--tls-key: %w", err)
			}
			sc.Certificate = &c
		}
		srv, err := network.NewServer(sc)
		if errors.Is(err, network.ErrLocked) {
			return fmt.Errorf("--store %w", err)
		} else if err != nil {
			return fmt.Errorf("--listen %s: %w", fl.listen, err)
		}
		defer srv.Shutdown()
		mon.srv.Store(srv)
		for _, w := range srv.Warnings() {
			fl.obs.warning(stderr, cfg.Log, w)
		}
		fl.obs.serving(stderr, cfg.Log, fl.federation, srv.URL(), srv.Fingerprint())
		dial = srv.Dial()
	}
	nc, err := dial.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	mon.nc.Store(nc)
	out, err := coord.Run(cmd.Context(), nc)
	if err != nil {
		return storeAdvice(err, fl)
	}
	prov := calib.Provenance{
		Data:     fmt.Sprintf("networked federation %s of %d clients (%s)", fl.federation, len(cfg.Clients), fl.clients),
		Protocol: out.Result.Protocol,
		Clients:  len(cfg.Clients),
		Seed:     calib.Seed(out.Seed),
		Tool:     Version(),
	}
	if binningMethod(fl.cal.method) {
		prov.Weighting = fl.cal.fed.weighting
	}
	if err := network.WriteCalibrator(fl.cal.out, out, prov); err != nil {
		return fmt.Errorf("writing %s: %w", fl.cal.out, err)
	}
	if _, err := fmt.Fprintln(cmd.OutOrStdout(), serveSummary(fl.cal.out, out)); err != nil {
		return err
	}
	return fl.eval.report(cmd.OutOrStdout(), out)
}

// storeAdvice adds to a store mismatch (network.ErrStore) where the run
// lives and how to start another: a --store directory, or the bucket of
// the federation on the --nats deployment.
func storeAdvice(err error, fl *serveFlags) error {
	if !errors.Is(err, network.ErrStore) {
		return err
	}
	if fl.natsURL != "" {
		return fmt.Errorf("%w (the run lives in the bucket fedcalib_%s of --nats %s: resume it with its flags, or start the new run under another --federation)", err, fl.federation, fl.natsURL)
	}
	return fmt.Errorf("%w (the run lives in --store %s: resume it with its flags, or start the new run with another --store)", err, fl.store)
}

// serveProgress prints one line per round on w, or, with asJSON, logs
// one record per round on log (logProgress).
func serveProgress(w io.Writer, log *slog.Logger, asJSON bool) func(network.RoundReport) {
	if asJSON {
		return logProgress(log)
	}
	return func(r network.RoundReport) {
		eps := ""
		if r.Epsilon > 0 {
			eps = fmt.Sprintf(", ε spent %.4g", r.Epsilon)
		}
		if len(r.Sampled) == 0 {
			fmt.Fprintf(w, "round %d/%d: no client sampled, skipped%s\n", r.Round, r.Rounds, eps)
			return
		}
		if r.Round > r.Rounds {
			fmt.Fprintf(w, "evaluation round: %d of %d clients sent their test statistics, %d dropped out (%d refused)%s\n",
				len(r.Participants), len(r.Sampled), len(r.Dropouts), len(r.Refused), eps)
			return
		}
		fmt.Fprintf(w, "round %d/%d: %d of %d sampled clients aggregated, %d dropped out (%d refused), %s%s\n",
			r.Round, r.Rounds, len(r.Participants), len(r.Sampled), len(r.Dropouts), len(r.Refused), plural(r.Attempts, "attempt"), eps)
	}
}

// serveSummary is the line serve prints at the end.
func serveSummary(path string, o *network.Outcome) string {
	var b strings.Builder
	agg, drop := 0, 0
	for _, r := range o.Rounds {
		agg += len(r.Participants)
		drop += len(r.Dropouts)
	}
	fmt.Fprintf(&b, "%s: %s, %s, %d updates aggregated, %d dropouts", path, o.Result.Protocol, plural(len(o.Rounds), "round"), agg, drop)
	if o.ResumedAfter > 0 {
		fmt.Fprintf(&b, " (resumed after round %d)", o.ResumedAfter)
	}
	if pr := o.Result.Privacy; pr != nil {
		fmt.Fprintf(&b, "; ε = %.4g spent (δ = %g, %s, σ = %.4g)", pr.Epsilon, pr.Delta, pr.Accountant, pr.Sigma)
		if sa := pr.SecureAggregation; sa != nil {
			fmt.Fprintf(&b, "; secure aggregation, %s noise, b = %d", sa.Noise, sa.Bits)
		}
	} else {
		b.WriteString("; not private")
	}
	return b.String()
}
