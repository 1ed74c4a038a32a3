package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// A logits file is read in place, one client at a time.
var _ federation.RowSource = (*logits.File)(nil)

// fedFlags are the flags of federated calibrate runs (without --central).
type fedFlags struct {
	partition                  string
	clients, rounds, perRound  int
	workers                    int
	beta, sampleRate, serverLR float64
	weighting, accountant      string
	epsilon, delta             float64
	clip, clipPos, clipNeg     float64
	alphaZ                     float64
	quiet                      bool
	ledger                     ledgerFlags
}

// fedFlagNames lists the flags that only federated runs take.
var fedFlagNames = []string{
	"clients", "beta", "rounds", "sample-rate", "clients-per-round", "weighting",
	"server-lr", "epsilon", "delta", "clip", "clip-pos", "clip-neg", "dp-alpha-z", "accountant", "workers",
	"ledger", "budget",
}

const fedCalibrateHelp = `

Without --central it simulates a federation: each client's calibration rows
are its local data, and the calibrator is fitted over --rounds rounds in
which each client takes part with probability --sample-rate (or
--clients-per-round k, meaning k/K). The clients are those of --partition
(made by "fedcalib partition"), or of a Dirichlet label-skew partition made
on the fly with --clients and --beta, or, with neither, the client and
split columns of the logits file (each client's split-1 rows are its
calibration data).

bin and bbq run FedBin and FedBBQ (the paper's Algorithm 1): clients send
class-positive and class-negative histograms, which the server sums over
rounds; --weighting all or changed blends the calibrator with the base
model while little data has been seen (the paper's FedBBQ uses all). The
scaling methods run FedAvg on parameter deltas (Algorithm 2), with server
learning rate --server-lr; --clip without --epsilon clips each update
without adding noise.

--epsilon makes the fit (ε, δ) user-level differentially private: clients
clip their contribution (--clip for scaling, --clip-pos and --clip-neg for
each class's histograms) and the server adds Gaussian noise calibrated with
the --accountant over all rounds. The noise comes from --seed, which makes
runs reproducible; it is a simulation, not a release of real data.

Progress is printed per round on stderr (unless --quiet), and one summary
line with the cwECE and accuracy before and after calibration on the global
test split (every client's test rows) and the ε spent. The output records
the privacy parameters and the protocol.`

const fedCalibrateExample = `
  fedcalib calibrate --method bbq --weighting all --logits cifar10.npz --clients 100 --beta 0.1 \
      --rounds 12 --clients-per-round 10 --out fedbbq.json
  fedcalib calibrate --method temp --logits cifar10.npz --partition p.json --rounds 12 --sample-rate 0.1 \
      --epsilon 1 --delta 1e-5 --clip 0.5 --out dp-fedtemp.json
  fedcalib calibrate --method opvector --logits femnist.npz --rounds 12 --clients-per-round 60 --out op.json`

// register adds the federated flags and help to the calibrate command.
func (ff *fedFlags) register(cmd *cobra.Command) {
	cmd.Use = "calibrate --method METHOD --logits F.npz [--central | --partition P.json | --clients K --beta B] --out C.json"
	cmd.Short = "Fit a calibrator, centrally or federated (optionally private), to the calibration rows of a logits file"
	cmd.Long += fedCalibrateHelp
	cmd.Example += fedCalibrateExample
	f := cmd.Flags()
	if c := f.Lookup("central"); c != nil {
		c.Usage = "fit one calibrator on all calibration rows, without federation"
	}
	if s := f.Lookup("seed"); s != nil {
		s.Usage = "random seed, 0 to 2^64−1: fedcal's initial weights and example order, and in federated runs the partition, client sampling and noise; recorded in the output"
	}
	f.StringVar(&ff.partition, "partition", "", "partition file from \"fedcalib partition\" giving the clients; with --central, the rows' split only: fit on its calibration rows, report its test rows")
	f.IntVar(&ff.clients, "clients", 0, "number of clients K of a Dirichlet label-skew partition made on the fly (needs --beta)")
	f.Float64Var(&ff.beta, "beta", 0, "Dirichlet concentration β > 0 of that partition (smaller is more skewed)")
	f.IntVar(&ff.rounds, "rounds", 1, fmt.Sprintf("number of rounds T, 1 to %d", federation.MaxRounds))
	f.Float64Var(&ff.sampleRate, "sample-rate", 1, "probability p ∈ (0, 1] that a client takes part in a round")
	f.IntVar(&ff.perRound, "clients-per-round", 0, "expected clients per round k (sets --sample-rate k/K)")
	f.StringVar(&ff.weighting, "weighting", string(calib.WeightNone), "binning methods: none, all or changed")
	f.Float64Var(&ff.serverLR, "server-lr", 1, "scaling methods: server learning rate η_S > 0")
	f.Float64Var(&ff.epsilon, "epsilon", 0, "make the fit (ε, δ)-differentially private with this total ε > 0")
	f.Float64Var(&ff.delta, "delta", dp.DefaultDelta, "δ ∈ (0, 1) of a private fit")
	f.Float64Var(&ff.clip, "clip", dp.DefaultClip, "scaling methods: L2 clip norm C of each client update (with --epsilon, or alone: clipping without noise)")
	f.Float64Var(&ff.clipPos, "clip-pos", dp.DefaultClipPos, "binning methods with --epsilon: L2 clip norm C₊ of each class-positive histogram (scalbin: of each class's value histograms)")
	f.Float64Var(&ff.clipNeg, "clip-neg", dp.DefaultClipNeg, "binning methods with --epsilon: L2 clip norm C₋ of each class-negative histogram")
	f.Float64Var(&ff.alphaZ, "dp-alpha-z", 0, "binning methods with --epsilon and --weighting: weight each class by a lower confidence bound (z standard deviations) of its noisy count, e.g. 2; 0 = the paper's α̃")
	f.StringVar(&ff.accountant, "accountant", "zcdp", "privacy accounting: zcdp (the paper's) or rdp (credits client sampling)")
	f.IntVar(&ff.workers, "workers", 0, fmt.Sprintf("goroutines running clients, at most %d (0: one per CPU); results do not depend on it", federation.MaxWorkers))
	f.BoolVarP(&ff.quiet, "quiet", "q", false, "print no per-round progress (federated runs; central fits have none)")
	ff.ledger.register(cmd, f)
}

// dispatch runs calibrate without --central as a federated fit and
// reports done; with --central it refuses the federated flags and leaves
// the run to the central code.
func (ff *fedFlags) dispatch(cmd *cobra.Command, fl *calibrateFlags) (done bool, err error) {
	if fl.central {
		if err := refuseFlags(cmd, fedFlagNames, "--%s applies to federated runs: drop it, or drop --central"); err != nil {
			return true, err
		}
		return false, nil
	}
	return true, ff.run(cmd, fl)
}

// check reports the first problem of the federated flags.
func (ff *fedFlags) check(cmd *cobra.Command, fl *calibrateFlags) error {
	changed := cmd.Flags().Changed
	switch {
	case fl.method == "":
		return fmt.Errorf("calibrate needs --method: one of %s", strings.Join(calib.MethodNames(), ", "))
	case fl.logits == "":
		return errors.New("calibrate needs --logits F.npz, the logits file to fit on")
	case ff.partition != "" && (changed("clients") || changed("beta")):
		return errors.New("--partition gives the clients: drop --clients and --beta")
	case changed("clients") && !changed("beta"):
		return errors.New("--clients makes a Dirichlet label-skew partition and needs --beta (or make one with \"fedcalib partition\")")
	case changed("beta") && !changed("clients"):
		return errors.New("--beta needs --clients, the number of clients K")
	case changed("clients") && ff.clients < 1:
		return fmt.Errorf("--clients is %d: need at least 1 client", ff.clients)
	case changed("sample-rate") && changed("clients-per-round"):
		return errors.New("--sample-rate and --clients-per-round both set the sampling: give one")
	case !(ff.sampleRate > 0 && ff.sampleRate <= 1):
		return fmt.Errorf("--sample-rate is %v: want 0 < p ≤ 1", ff.sampleRate)
	case changed("clients-per-round") && ff.perRound < 1:
		return fmt.Errorf("--clients-per-round is %d: want at least 1 client per round", ff.perRound)
	}
	for _, err := range []error{
		checkRange("rounds", ff.rounds, 1, federation.MaxRounds, "a number of rounds T"),
		checkRange("workers", ff.workers, 0, federation.MaxWorkers, "a number of goroutines (0: one per CPU)"),
	} {
		if err != nil {
			return err
		}
	}
	if changed("beta") {
		if err := checkPositive("beta", ff.beta, "Dirichlet concentration β", "e.g. 0.1 for strong label skew, 100 for almost none"); err != nil {
			return err
		}
	}
	if _, err := calib.LookupMethod(fl.method); err != nil {
		return fmt.Errorf("--method %q: want one of %s", fl.method, strings.Join(calib.MethodNames(), ", "))
	}
	hybrid := false
	if m, _ := calib.LookupMethod(fl.method); m.Family == calib.Hybrid {
		hybrid = true
		if changed("ledger") && ff.accountant == dp.RDP.String() {
			// A ledger entry is one release; scalbin's two stages are
			// one under zCDP only (ρ adds up).
			return fmt.Errorf("--ledger with --accountant rdp: the ledger records a run as one release, and %s's two stages make one only under zcdp: use --accountant zcdp or drop --ledger", fl.method)
		}
		if fl.binsExp < 1 || fl.binsExp > calib.MaxMexp {
			return fmt.Errorf("--bins-exp %d: want M in [1, %d] (2^M fine bins)", fl.binsExp, calib.MaxMexp)
		}
	}
	if binningMethod(fl.method) {
		if fl.binsExp < 1 || fl.binsExp > calib.MaxMexp {
			return fmt.Errorf("--bins-exp %d: want M in [1, %d] (2^M bins)", fl.binsExp, calib.MaxMexp)
		}
		for _, name := range []string{"server-lr", "clip"} {
			if changed(name) {
				return fmt.Errorf("--%s applies to scaling methods, not %s: drop it", name, fl.method)
			}
		}
	} else {
		for _, name := range []string{"bins-exp", "weighting", "clip-pos", "clip-neg", "dp-alpha-z"} {
			if changed(name) && !(hybrid && (name == "bins-exp" || name == "clip-pos")) {
				return fmt.Errorf("--%s applies to binning methods, not %s: drop it", name, fl.method)
			}
		}
		// Explicit values are checked here, not left to become defaults.
		if changed("server-lr") {
			if err := checkPositive("server-lr", ff.serverLR, "server learning rate η_S", "drop --server-lr for the default 1"); err != nil {
				return err
			}
		}
		if changed("clip") {
			fix := "drop --clip to fit without clipping"
			if changed("epsilon") {
				fix = fmt.Sprintf("drop --clip for the default %v", dp.DefaultClip)
			}
			if err := checkPositive("clip", ff.clip, "clip norm C", fix); err != nil {
				return err
			}
		}
	}
	if _, err := calib.ParseWeighting(ff.weighting); err != nil {
		return fmt.Errorf("--weighting: %w", err)
	}
	if err := ff.checkPrivacy(changed); err != nil {
		return err
	}
	if err := ff.ledger.checkFiles(fl.logits, ff.partition); err != nil {
		return err
	}
	return checkOut("--out", fl.out, calibratorOut, fl.logits, ff.partition, ff.ledger.path)
}

// run is a federated calibrate run.
func (ff *fedFlags) run(cmd *cobra.Command, fl *calibrateFlags) error {
	if err := ff.check(cmd, fl); err != nil {
		return err
	}
	if err := ff.ledger.check(cmd.Flags().Changed); err != nil {
		return err
	}
	changed := cmd.Flags().Changed
	// The partition is made before the logits are read; the clients'
	// rows are converted to float64 one client at a time, from the
	// file's float32 block, when the protocol asks for them.
	var (
		p      *federation.Partition
		source string
	)
	f, err := readColumnsFirst(cmd.Context(), fl.logits, fl.input, func(f *logits.File) (err error) {
		p, source, err = ff.partitionFor(f, fl)
		return err
	})
	if err != nil {
		return err
	}
	pop, err := federation.NewRowPopulation(f, p, federation.Calibration)
	if err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	rate := ff.sampleRate
	if changed("clients-per-round") {
		if rate, err = federation.SampleRateFor(ff.perRound, p.Len()); err != nil {
			return fmt.Errorf("--clients-per-round: %w", err)
		}
	}
	spec := ff.spec(cmd, fl.method, fl.binsExp)
	spec.ODIR = fl.odir
	fitter, err := spec.Fitter()
	if err != nil {
		return err
	}
	rounds := federation.Rounds{T: ff.rounds, SampleRate: rate, Seed: fl.seed, Workers: ff.workers}
	if !ff.quiet {
		rounds.Progress = progressPrinter(cmd.ErrOrStderr())
	}
	// The ledger admits the run on its plan before the fit and records it
	// after, holding its lock in between.
	reservation, err := ff.ledger.reserve(spec, p.Data, fl.logits, fl.out, rounds)
	if err != nil {
		return err
	}
	defer reservation.Cancel()
	res, err := fitter.Fit(cmd.Context(), pop, rounds)
	if err != nil {
		return fmt.Errorf("%s: %w", fl.logits, err)
	}
	if err := ff.ledger.commit(cmd.ErrOrStderr(), reservation); err != nil {
		return err
	}
	prov := calib.Provenance{
		Data:     fmt.Sprintf("%s: calibration rows of %d clients (%s)", filepath.Base(fl.logits), p.Len(), source),
		Protocol: res.Protocol,
		Clients:  p.Len(),
		Seed:     calib.Seed(fl.seed),
		Tool:     Version(),
	}
	prov.Input = f.Input // the kind read: --input, or what the file records
	prov.ClassNames = f.ClassNames
	prov.Fit = res.Fit
	if binningMethod(fl.method) {
		prov.Weighting = ff.weighting
	}
	test, err := testMetrics(cmd.Context(), f, p, res.Calibrator)
	if err != nil {
		return err
	}
	if fit, err := splitMetrics(cmd.Context(), f, p, federation.Calibration, res.Calibrator); err != nil {
		return err
	} else if fit != nil {
		prov.FitMetrics = &calib.FitMetrics{Rows: fit[0].N, Before: fit[0], After: fit[1]}
	}
	if test != nil {
		err = fl.guard.judge(test[0], test[1], true, fl.out)
	} else {
		err = fl.guard.judge(calib.Metrics{}, calib.Metrics{}, false, fl.out)
	}
	if err != nil {
		return err
	}
	if err := calib.WriteFile(fl.out, res.Calibrator, res.Privacy, prov); err != nil {
		return fmt.Errorf("writing %s: %w", fl.out, err)
	}
	repRows, repDesc := reportRows(p.Rows(federation.Test), p.Rows(federation.Calibration))
	if err := fl.report.writeCalibrated(cmd, f, fl.logits, repRows, repDesc, fl.out, ff.ledger.path); err != nil {
		return err
	}
	line := fedSummary(fl, p, res, rounds, test)
	_, err = fmt.Fprintln(cmd.OutOrStdout(), line)
	return err
}

// spec is the federated fit the flags of cmd ask for: clipping only
// when --clip or --epsilon is given, privacy only with --epsilon. calibrate
// and serve both build their protocol with it.
func (ff *fedFlags) spec(cmd *cobra.Command, method string, binsExp int) federation.Spec {
	changed := cmd.Flags().Changed
	if !changed("bins-exp") {
		binsExp = 0 // the method's default, calib.Method.DefaultMexp
	}
	spec := federation.Spec{Method: method, Mexp: binsExp, Weighting: calib.Weighting(ff.weighting), ServerLR: ff.serverLR}
	if changed("clip") || changed("epsilon") {
		spec.Clip = ff.clip
	}
	if changed("epsilon") {
		spec.Epsilon, spec.Delta, spec.Accountant = ff.epsilon, ff.delta, ff.accountant
		spec.ClipPos, spec.ClipNeg, spec.AlphaZ = ff.clipPos, ff.clipNeg, ff.alphaZ
	}
	return spec
}

// partitionFor returns the partition of the run and says where it came
// from.
func (ff *fedFlags) partitionFor(f *logits.File, fl *calibrateFlags) (*federation.Partition, string, error) {
	src := federation.Source{File: ff.partition, Clients: ff.clients, Beta: ff.beta, Seed: fl.seed}
	p, desc, err := src.Partition(f.IntLabels(), f.Classes, f.Client, f.Split)
	switch {
	case errors.Is(err, federation.ErrNoClientColumn):
		return nil, "", fmt.Errorf("%s has no client column, so calibrate needs --central, or clients from --partition P.json or --clients K --beta B", fl.logits)
	case err != nil && ff.partition != "" && !errors.Is(err, federation.ErrMismatch):
		return nil, "", err // ReadPartition names the file
	case err != nil:
		return nil, "", fmt.Errorf("%s: %w", fl.logits, err)
	}
	return p, desc, nil
}

// progressPrinter returns a Progress callback printing one line per
// round, numbered out of the run's rounds (2T for scalbin).
func progressPrinter(w io.Writer) func(federation.RoundStats) {
	return func(s federation.RoundStats) {
		eps := ""
		if s.Epsilon > 0 {
			eps = fmt.Sprintf(", ε spent %.4g", s.Epsilon)
		}
		if s.Skipped() {
			fmt.Fprintf(w, "round %d/%d: no client sampled, skipped%s\n", s.Round, s.Rounds, eps)
			return
		}
		fmt.Fprintf(w, "round %d/%d: %d clients, %d B up and %d B down each, mean compute %v%s\n",
			s.Round, s.Rounds, s.Participants, s.UploadBytes, s.DownloadBytes, s.ComputeMean().Round(1000), eps)
	}
}

// testMetrics returns the metrics of the base model and of calibrator c
// on the partition's test rows, or nil when it has none.
func testMetrics(ctx context.Context, f *logits.File, p *federation.Partition, c calib.Calibrator) ([]calib.Metrics, error) {
	return splitMetrics(ctx, f, p, federation.Test, c)
}

// splitMetrics returns the metrics of the base model and of calibrator c
// on the rows of split of every client of p, pooled (the simulation holds
// them all), or nil when there are none.
func splitMetrics(ctx context.Context, f *logits.File, p *federation.Partition, split federation.Split, c calib.Calibrator) ([]calib.Metrics, error) {
	rows := p.Rows(split)
	if len(rows) == 0 {
		return nil, nil
	}
	accs, err := measure(ctx, f, selectRows(rows), []calib.Calibrator{nil, c}, 0)
	if err != nil {
		return nil, err
	}
	return metricsOf(accs)
}

// fedSummary is the line calibrate prints after a federated fit; test is
// testMetrics' result.
func fedSummary(fl *calibrateFlags, p *federation.Partition, res *federation.Result, r federation.Rounds, test []calib.Metrics) string {
	var b strings.Builder
	warning := ""
	fmt.Fprintf(&b, "%s: %s over %d clients, %s, p = %.4g", fl.out, res.Protocol, p.Len(), plural(r.T, "round"), r.SampleRate)
	if test == nil {
		b.WriteString("; no test rows to evaluate")
	} else {
		before, after := test[0], test[1]
		fmt.Fprintf(&b, "; test (%d rows) cwECE %.3f%% → %.3f%%, accuracy %.2f%% → %.2f%%, NLL %.4f → %.4f",
			before.N, 100*before.CWECE, 100*after.CWECE, 100*before.Accuracy, 100*after.Accuracy, before.NLL, after.NLL)
		warning = dropWarning(before, after, "the test rows")
		if after.NLL > before.NLL {
			warning += fmt.Sprintf("; WARNING: the calibrator makes the test rows' NLL worse, %.4f → %.4f", before.NLL, after.NLL)
		}
	}
	if w := res.Fit.Warning(); w != "" {
		warning += "; WARNING: " + w
	}
	if pr := res.Privacy; pr != nil {
		fmt.Fprintf(&b, "; ε = %.4g spent (δ = %g, %s, σ = %.4g)", pr.Epsilon, pr.Delta, pr.Accountant, pr.Sigma)
	} else {
		b.WriteString("; not private")
	}
	b.WriteString(warning)
	return b.String()
}

// plural returns "1 round", "2 rounds".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// binningMethod reports whether method is of the registry's binning
// family.
func binningMethod(method string) bool {
	m, err := calib.LookupMethod(method)
	return err == nil && m.Family == calib.Binning
}

// checkPrivacy reports the first problem of the privacy flags of a
// federated run: an explicit value is used or refused, never replaced by
// a default.
func (ff *fedFlags) checkPrivacy(changed func(string) bool) error {
	if !changed("epsilon") {
		for _, name := range []string{"delta", "clip-pos", "clip-neg", "accountant", "dp-alpha-z"} {
			if changed(name) {
				return fmt.Errorf("--%s sets up privacy and needs --epsilon", name)
			}
		}
		return nil
	}
	if math.IsInf(ff.epsilon, 1) {
		return errors.New("--epsilon is +Inf: want a finite ε > 0; to fit without privacy, drop --epsilon")
	}
	if err := checkPositive("epsilon", ff.epsilon, "privacy budget ε", ""); err != nil {
		return err
	}
	if !(ff.delta > 0 && ff.delta < 1) {
		return fmt.Errorf("--delta is %v: want δ in (0, 1), e.g. 1e-5", ff.delta)
	}
	for _, c := range []struct {
		name string
		v    float64
		what string
		def  float64
	}{{"clip-pos", ff.clipPos, "clip norm C₊", dp.DefaultClipPos}, {"clip-neg", ff.clipNeg, "clip norm C₋", dp.DefaultClipNeg}} {
		if changed(c.name) {
			if err := checkPositive(c.name, c.v, c.what, fmt.Sprintf("drop --%s for the default %v", c.name, c.def)); err != nil {
				return err
			}
		}
	}
	if changed("dp-alpha-z") {
		if !(ff.alphaZ >= 0) || math.IsInf(ff.alphaZ, 1) {
			return fmt.Errorf("--dp-alpha-z is %v: want a finite z ≥ 0, e.g. 2 (0 is the paper's weighting)", ff.alphaZ)
		}
		if !weighted(ff.weighting) {
			return fmt.Errorf("--dp-alpha-z sets the weighting's class weights and needs --weighting all or changed, not %s", ff.weighting)
		}
	}
	if _, err := dp.ParseAccountant(ff.accountant); err != nil {
		return fmt.Errorf("--accountant %q: want zcdp or rdp", ff.accountant)
	}
	return nil
}

// weighted reports whether w names a server-side weighting other than
// none.
func weighted(w string) bool {
	return w == string(calib.WeightAll) || w == string(calib.WeightChanged)
}
