package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/internal/fileio"
	"github.com/fedcalib/fedcalib/network"
)

// joinFlags are the flags of fedcalib join.
type joinFlags struct {
	server, key, fingerprint, ca, federation string
	allow                                    string
	insecure, quiet                          bool
	model, data                              string
	logits, partition                        string
	input                                    inputKind
	clientID                                 int
	enrolTimeout, wait                       time.Duration
	obs                                      observeFlags
}

func newJoinCmd() *cobra.Command {
	var fl joinFlags
	cmd := &cobra.Command{
		Use:   "join --server URL --key F.nkey (--model M.onnx --data SPEC | --logits F.npz [--partition P.json] [--client-id i])",
		Short: "Take part in a networked federated calibration as a client",
		Long: `join is a client of a "fedcalib serve" coordinator. It connects with its
key (from "fedcalib keys new"; its public key must be on the coordinator's
allow-list), enrols, and in every round that samples it computes its
update from its own calibration data — exactly as the simulation does —
and sends only that clipped update. Logits and labels never leave the
machine.

The local data is either a model and a dataset (--model M.onnx --data
SPEC: ONNX Runtime runs the model here; every record is calibration data),
or a logits file: with --partition, or a client column in the file, the
calibration rows of client --client-id of that partition (default: this
client's index k in the federation, its line in the allow-list) — the
rows "fedcalib calibrate" gives client k — and otherwise the file's
calibration rows (split 1, or every row without a split column).

When the coordinator runs an evaluation round (serve --evaluate), a client
of a logits file answers it with the per-bin statistics of its test rows
(the same client's test split, or the file's split-2 rows) under the
fitted calibrator; a client of --model --data takes no part in it.

TLS: pin the coordinator's development certificate with
--tls-fingerprint (serve prints it), or verify a user certificate with
--ca (or the system's roots for a tls:// URL). Plaintext nats:// URLs are
accepted for loopback only, unless --insecure.

A coordinator not up yet is waited for with --wait D: the first
connection is tried again every second for up to D.

It exits when the coordinator announces the end of the run: with status
0, or with status 4 when the coordinator gave the run up (it says why),
as for every failure a retry may cure (no server answers, the connection
was lost); other failures exit 2.`,
		Example: `  fedcalib join --server tls://coord.example:4222 --tls-fingerprint 3f9a… --key site-a.nkey \
      --model model.onnx --data mnist:/data/mnist
  fedcalib join --server tls://127.0.0.1:4222 --tls-fingerprint 3f9a… --key c7.nkey \
      --logits cifar10.npz --partition p.json --wait 10m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runJoin(cmd, &fl)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.server, "server", "", "the coordinator's NATS URL(s), tls://host:port or nats://host:port (required)")
	f.StringVar(&fl.key, "key", "", "the client's key file from \"fedcalib keys new\", or a NATS credentials file (required)")
	f.StringVar(&fl.fingerprint, "tls-fingerprint", "", "pin the server's TLS certificate by its SHA-256 fingerprint (serve prints it)")
	f.StringVar(&fl.ca, "ca", "", "PEM file of the certificate authority that signed the server's certificate")
	f.BoolVar(&fl.insecure, "insecure", false, "allow a plaintext nats:// connection to a non-loopback server")
	f.StringVar(&fl.federation, "federation", network.DefaultFederation, "name of the federation to join")
	f.StringVar(&fl.allow, "clients", "", "the federation's allow-list (the file serve --clients reads), e.g. --clients allow.txt: under secure aggregation the client then refuses a round naming participant keys not on it; without it, it trusts the coordinator's list")
	f.StringVar(&fl.model, "model", "", "ONNX model to run on --data")
	f.StringVar(&fl.data, "data", "", "dataset spec of the local data (see \"fedcalib infer --help\")")
	f.StringVar(&fl.logits, "logits", "", "logits file of the local data (.npz)")
	registerInput(f, &fl.input)
	f.StringVar(&fl.partition, "partition", "", "with --logits: partition file giving the clients' rows")
	f.IntVar(&fl.clientID, "client-id", -1, "with --logits: the partition's client to be (default: this client's index in the federation)")
	f.DurationVar(&fl.enrolTimeout, "enrol-timeout", 30*time.Second, "how long to wait for the coordinator to answer")
	f.DurationVar(&fl.wait, "wait", 0, "keep trying the first connection this long while no server answers (a coordinator not up yet), e.g. --wait 5m; 0: try once")
	f.BoolVarP(&fl.quiet, "quiet", "q", false, "print no per-round lines")
	fl.obs.register(f, "client")
	return cmd
}

func checkJoinFlags(cmd *cobra.Command, fl *joinFlags) error {
	changed := cmd.Flags().Changed
	switch {
	case fl.server == "":
		return errors.New("join needs --server URL, the coordinator's address (tls://host:port)")
	case fl.key == "":
		return errors.New("join needs --key F, the client's key file (\"fedcalib keys new\" makes one)")
	case (fl.model != "") != (fl.data != ""):
		return errors.New("--model and --data go together")
	case (fl.model != "") == (fl.logits != ""):
		return errors.New("join needs its local data: --model M.onnx --data SPEC, or --logits F.npz")
	case fl.logits == "" && (fl.partition != "" || changed("client-id")):
		return errors.New("--partition and --client-id go with --logits")
	case changed("client-id") && fl.clientID < 0:
		return fmt.Errorf("--client-id %d: want a client index ≥ 0", fl.clientID)
	case fl.fingerprint != "" && fl.ca != "":
		return errors.New("--tls-fingerprint and --ca both say which certificate to trust: give one")
	case fl.enrolTimeout <= 0:
		return errors.New("--enrol-timeout must be positive, e.g. 30s")
	case fl.wait < 0:
		return errors.New("--wait must be 0 or positive, e.g. 5m")
	}
	if err := fl.obs.check(); err != nil {
		return err
	}
	return network.ValidFederation(fl.federation)
}

func runJoin(cmd *cobra.Command, fl *joinFlags) error {
	if err := checkJoinFlags(cmd, fl); err != nil {
		return err
	}
	key, err := network.ReadKey(fl.key)
	if err != nil {
		return fmt.Errorf("--key %w", err)
	}
	// The local inputs are checked, and a logits file read, before
	// connecting: a missing file or a client out of range is a fix to make
	// here, not something to find after enrolling.
	pre, err := joinPrecheck(cmd.Context(), fl)
	if err != nil {
		return err
	}
	d := network.Dial{URL: fl.server, Fingerprint: fl.fingerprint, Insecure: fl.insecure, Name: "fedcalib join " + key.Public, Wait: fl.wait}
	if fl.ca != "" {
		pem, err := fileio.ReadLimited(fl.ca, 16<<20)
		if err != nil {
			return fmt.Errorf("--ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--ca %s holds no PEM certificate", fl.ca)
		}
		d.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	stderr := cmd.ErrOrStderr()
	level := slog.LevelInfo
	if fl.quiet {
		level = slog.LevelWarn
	}
	var allow []string
	if fl.allow != "" {
		var err error
		if allow, err = network.ReadAllowList(fl.allow); err != nil {
			return fmt.Errorf("--clients: %w", err)
		}
	}
	var cfg network.ClientConfig // its Data logs with its Log, set below
	cfg = network.ClientConfig{
		AllowList:    allow,
		Federation:   fl.federation,
		Key:          key,
		EnrolTimeout: fl.enrolTimeout,
		Data: func(w network.Welcome) (*calib.Set, error) {
			return joinRows(cmd, fl, pre, w, federation.Calibration)
		},
		Enrolled: func(w network.Welcome) {
			if !fl.quiet {
				fl.obs.enrolled(stderr, cfg.Log, w)
			}
		},
	}
	if fl.logits != "" {
		// The test rows of the same file or partition, for an evaluation
		// round (serve --evaluate).
		cfg.TestData = func(w network.Welcome) (*calib.Set, error) { return joinRows(cmd, fl, pre, w, federation.Test) }
	}
	mon, err := fl.obs.client(&cfg, stderr, level)
	if err != nil {
		return err
	}
	defer mon.close()
	rep, err := network.Join(cmd.Context(), d, cfg)
	if err != nil {
		return err
	}
	refused := ""
	if n := len(rep.Refused); n > 0 {
		refused = fmt.Sprintf("; refused %s of the coordinator (%s)", plural(n, "request"), rep.Refused[0])
	}
	fit, evaluated := 0, ""
	rounds := rep.Rounds
	if rounds == 0 { // the run had ended before the client enrolled
		rounds = rep.Welcome.Rounds
	}
	for _, t := range rep.Answered {
		if t > rounds {
			evaluated = ", and its test statistics in the evaluation round"
		} else {
			fit++
		}
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "client %d of federation %s: sent updates in %d of %s%s%s\n",
		rep.Welcome.Client, rep.Welcome.Federation, fit, plural(rounds, "round"), evaluated, refused)
	return err
}

// joinPrecheck checks join's local inputs before it connects: the model
// file exists, or the logits file (read here, and returned) and the
// partition fit, with --client-id among the partition's clients.
func joinPrecheck(ctx context.Context, fl *joinFlags) (*logits.File, error) {
	if fl.model != "" {
		if _, err := os.Stat(fl.model); err != nil {
			return nil, fmt.Errorf("--model: %w", err)
		}
		return nil, nil
	}
	f, err := readLogitsIn(ctx, fl.logits, fl.input)
	if err != nil {
		return nil, err
	}
	if fl.partition == "" && f.Client == nil {
		return f, nil
	}
	src := federation.Source{File: fl.partition}
	p, _, err := src.Partition(f.IntLabels(), f.Classes, f.Client, f.Split)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fl.logits, err)
	}
	if n := p.Len(); fl.clientID >= n {
		return nil, fmt.Errorf("--client-id %d: the partition has %d clients (0 to %d)", fl.clientID, n, n-1)
	}
	return f, nil
}

// joinRows returns the client's rows of split s: its calibration rows,
// or its test rows (none, without a split column or partition), from the
// logits file pre (read by joinPrecheck; not modified) or the model and
// data.
func joinRows(cmd *cobra.Command, fl *joinFlags, pre *logits.File, w network.Welcome, s federation.Split) (*calib.Set, error) {
	if fl.model != "" {
		res, err := runInfer(cmd.Context(), fl.model, fl.data, infer.Options{Batch: infer.DefaultBatch})
		if err != nil {
			return nil, err
		}
		f := res.File()
		recordInput(f, fl.model, "") // a Softmax model gives probabilities
		if err := convertInput(f, fl.model, fl.input); err != nil {
			return nil, err
		}
		return f.Set(nil), nil
	}
	g := *pre // the fields set to nil below stay in pre
	f := &g
	if fl.partition == "" && f.Client == nil {
		if s == federation.Test {
			if f.Split == nil {
				return f.Set([]int{}), nil
			}
			return f.Set(f.Rows(logits.SplitTest)), nil
		}
		rows := f.Rows(logits.SplitCalibration)
		if rows != nil && len(rows) == 0 {
			return nil, fmt.Errorf("%s has no calibration rows (split %d)", fl.logits, logits.SplitCalibration)
		}
		return f.Set(rows), nil
	}
	// The population code of federated calibrate: the same partition
	// gives client i the same rows, read from the file's float32 block.
	src := federation.Source{File: fl.partition, Seed: w.Seed}
	p, _, err := src.Partition(f.IntLabels(), f.Classes, f.Client, f.Split)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fl.logits, err)
	}
	f.Client, f.Split = nil, nil // the partition has them now
	pop, err := federation.NewRowPopulation(f, p, s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fl.logits, err)
	}
	id := w.Client
	if fl.clientID >= 0 {
		id = fl.clientID
	}
	if id >= pop.Len() {
		return nil, fmt.Errorf("client %d: the partition has %d clients (--client-id)", id, pop.Len())
	}
	return pop.Client(id)
}
