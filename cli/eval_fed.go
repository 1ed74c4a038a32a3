package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// evalFedFlags are eval's federated-evaluation flags. The privacy flags
// are calibrate's (fedFlags: --epsilon, --delta, --clip, --accountant,
// --workers, --ledger, --budget) with the same checks.
type evalFedFlags struct {
	federated bool
	ff        fedFlags
}

// evalFedOnly lists the flags that only eval --federated takes.
var evalFedOnly = []string{"epsilon", "delta", "clip", "accountant", "workers", "ledger", "budget"}

const evalFedHelp = `

--federated evaluates as a federation would, without pooling the rows:
each client (of --partition, or of the logits file's client column)
accumulates the per-bin statistics of its own test rows (--split
calibration: its calibration rows; a client without rows of that split is
skipped, so clients with test rows only are fine) — per class and bin the count, the sum
of the probabilities and the number labelled, the same over the top
probability, the NLL and Brier sums — and the server sums them. The
metrics come from the sums, never from averaging per-client metrics, and
equal those of the pooled rows exactly.

--epsilon makes the evaluation (ε, δ) user-level differentially private:
each client clips its statistics, as one vector, to L2 norm --clip C
(default 100, about a client of 30 rows of 10 classes; larger clients are
scaled down), the server adds Gaussian noise of σ = z·C to every summed
statistic (one release, z from --accountant) and computes the metrics from
the noisy statistics, made valid first (counts ≥ 0, each bin's confidence
sum within the bin, numbers labelled within [0, count]). The noise comes
from --seed: a simulation, not a release of real data. The noise alone
makes a cwECE of about bins·σ/N (N rows), printed with the result; when
that exceeds the cwECE measured, the metrics are mostly noise and eval
warns on stderr (few rows over few clients need a large ε and few
--bins). A private
evaluation measures one model: the calibrator, or without --calibrator
the base model. --ledger records it, kind "evaluation", in the privacy
ledger with the fits on the same data. docs/CALIBRATION.md has the
details.`

const evalFedExample = `
  fedcalib eval --logits cifar10.npz --partition p.json --calibrator temp.json --federated
  # private: σ = 64 at ε = 8 and C = 100; over 100,000 test rows in 5 bins the noise alone makes
  # a cwECE of 5·64/100,000 ≈ 0.3%, below what it measures (a few thousand rows would be noise)
  fedcalib eval --logits femnist.npz --calibrator temp.json --federated \
      --epsilon 8 --delta 1e-5 --clip 100 --bins 5 --seed 7 --ledger privacy-ledger.json --json`

// registerFederatedEval adds --federated and its flags to the eval
// command cmd, whose RunE it wraps.
func registerFederatedEval(cmd *cobra.Command) {
	ef := &evalFedFlags{}
	ff := &ef.ff
	cmd.Long += evalFedHelp
	cmd.Example += evalFedExample
	f := cmd.Flags()
	f.BoolVar(&ef.federated, "federated", false, "evaluate as a federation: sum each client's per-bin statistics (exactly the pooled metrics; with --epsilon, privately)")
	f.Float64Var(&ff.epsilon, "epsilon", 0, "with --federated: make the evaluation (ε, δ)-differentially private with this ε > 0")
	f.Float64Var(&ff.delta, "delta", dp.DefaultDelta, "δ ∈ (0, 1) of a private evaluation")
	f.Float64Var(&ff.clip, "clip", federation.DefaultEvalClip, "with --epsilon: L2 clip norm C of each client's statistics vector (the sensitivity)")
	f.StringVar(&ff.accountant, "accountant", "zcdp", "with --epsilon: privacy accounting, zcdp or rdp")
	f.IntVar(&ff.workers, "workers", 0, fmt.Sprintf("with --federated: goroutines running clients, at most %d (0: one per CPU); results do not depend on it", federation.MaxWorkers))
	f.StringVar(&ff.ledger.path, "ledger", "", "with --epsilon: privacy ledger file accumulating the ε spent on this dataset across runs")
	f.Float64Var(&ff.ledger.budget, "budget", 0, "with --ledger: total ε > 0 this dataset may spend over all runs; an evaluation that would exceed it is refused")
	inner := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if !ef.federated {
			if err := refuseFlags(cmd, evalFedOnly, "--%s applies to federated evaluation: add --federated"); err != nil {
				return err
			}
			return inner(cmd, args)
		}
		return ef.run(cmd)
	}
}

// fedEvalReport is what eval --federated --json prints.
type fedEvalReport struct {
	calib.Metrics
	// Federated is true: the metrics come from summed client statistics.
	Federated bool `json:"federated"`
	// Clients is the number of clients summed; Partition says where
	// they came from.
	Clients   int    `json:"clients"`
	Partition string `json:"partition"`
	// Split, Bins, Method and ClassNames are as in evalReport.
	Split      string   `json:"split"`
	Bins       int      `json:"bins"`
	Method     string   `json:"method,omitempty"`
	ClassNames []string `json:"class_names,omitempty"`
	// Before holds the base model's metrics when a calibrator was
	// evaluated without privacy; nil otherwise.
	Before *calib.Metrics `json:"before,omitempty"`
	// TopLabel holds the top-label errors of an exact evaluation (not
	// the adaptive ECE); nil when private.
	TopLabel *calib.TopLabel `json:"top_label,omitempty"`
	// Privacy records a private evaluation (ε spent, δ, ρ, σ, clip); nil
	// when not private.
	Privacy *calib.Privacy `json:"privacy,omitempty"`
}

// check reports the first problem of the flags of eval --federated.
func (ef *evalFedFlags) check(cmd *cobra.Command) error {
	changed := cmd.Flags().Changed
	for _, name := range []string{"bootstrap", "level", "plot"} {
		if changed(name) {
			return fmt.Errorf("--%s needs every probability in one place: drop it, or drop --federated", name)
		}
	}
	if paths, _ := cmd.Flags().GetStringArray("calibrator"); len(paths) > 1 {
		return errors.New("--federated evaluates one calibrator: give --calibrator at most once")
	}
	if changed("seed") && !changed("epsilon") {
		return errors.New("--seed seeds the noise of --epsilon (or --bootstrap, without --federated): add --epsilon or drop --seed")
	}
	ff := &ef.ff
	if changed("clip") {
		if !changed("epsilon") {
			return errors.New("--clip sets up privacy and needs --epsilon")
		}
		if err := checkPositive("clip", ff.clip, "clip norm C", fmt.Sprintf("drop --clip for the default %v", federation.DefaultEvalClip)); err != nil {
			return err
		}
	}
	if err := checkRange("workers", ff.workers, 0, federation.MaxWorkers, "a number of goroutines (0: one per CPU)"); err != nil {
		return err
	}
	if err := ff.checkPrivacy(changed); err != nil {
		return err
	}
	return ff.ledger.check(changed)
}

// run is eval --federated.
func (ef *evalFedFlags) run(cmd *cobra.Command) error {
	if err := ef.check(cmd); err != nil {
		return err
	}
	fl := cmd.Flags()
	path, _ := fl.GetString("logits")
	partPath, _ := fl.GetString("partition")
	split, _ := fl.GetString("split")
	bins, _ := fl.GetInt("bins")
	asJSON, _ := fl.GetBool("json")
	calibPaths, _ := fl.GetStringArray("calibrator")
	var seed uint64
	if v, ok := fl.Lookup("seed").Value.(*seedValue); ok {
		seed = uint64(*v)
	}
	switch {
	case path == "":
		return errors.New("eval needs --logits F.npz, the logits file to evaluate")
	case bins < 1 || bins > calib.MaxMetricBins:
		return fmt.Errorf("--bins is %d: want 1 to %d bins", bins, calib.MaxMetricBins)
	}
	if err := ef.ff.ledger.checkFiles(append([]string{path, partPath}, calibPaths...)...); err != nil {
		return err
	}
	s := federation.Test
	switch split {
	case "", "test":
		split = "test"
	case "calibration":
		s = federation.Calibration
	default:
		return fmt.Errorf("--split %q: --federated evaluates each client's test or calibration rows", split)
	}
	var in inputKind // the zero value: logits
	if v, ok := fl.Lookup("input").Value.(*inputKind); ok {
		in = *v
	}
	var (
		p      *federation.Partition
		source string
	)
	f, err := readColumnsFirst(cmd.Context(), path, in, func(f *logits.File) (err error) {
		// Clients without calibration rows are kept: the evaluation
		// skips each client without rows of the split it measures.
		p, source, err = federation.Source{File: partPath, ForEvaluation: true}.Partition(f.IntLabels(), f.Classes, f.Client, f.Split)
		switch {
		case errors.Is(err, federation.ErrNoClientColumn):
			return fmt.Errorf("%s has no client column, so --federated needs the clients from --partition P.json", path)
		case err != nil && partPath != "" && !errors.Is(err, federation.ErrMismatch):
			return err // ReadPartition names the file
		case err != nil:
			return fmt.Errorf("%s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	pop, err := federation.NewRowPopulation(f, p, s)
	if err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	names := classNames{names: f.ClassNames, from: path}
	var cal calib.Calibrator
	calibPath := ""
	if len(calibPaths) == 1 {
		calibPath = calibPaths[0]
		c, file, err := calib.ReadFile(calibPath)
		if err != nil {
			return err
		}
		if err := names.add(calibPath, file.Provenance.ClassNames); err != nil {
			return err
		}
		cal = c
	}
	ff := &ef.ff
	o := federation.EvalOptions{Bins: bins, Seed: seed, Workers: ff.workers}
	var reservation *dp.Reservation
	if fl.Changed("epsilon") {
		acc, err := dp.ParseAccountant(ff.accountant)
		if err != nil {
			return fmt.Errorf("--accountant: %w", err)
		}
		o.Privacy = &federation.Privacy{Epsilon: ff.epsilon, Delta: ff.delta, Clip: ff.clip, Accountant: acc}
		plan, err := federation.PlanEvalNoise(o.Privacy)
		if err != nil {
			return err
		}
		if ff.ledger.path != "" {
			method := "base"
			if cal != nil {
				method = cal.Method()
			}
			reservation, err = ff.ledger.reserveCharge(p.Data, path, dp.Charge{
				Accountant: acc, Delta: ff.delta, Release: federation.EvalRelease(plan),
				Method: method, Calibrator: calibPath, Kind: dp.KindEvaluation,
			})
			if err != nil {
				return err
			}
			defer reservation.Cancel()
		}
	}
	res, err := federation.Evaluate(cmd.Context(), pop, cal, o)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	rep := &fedEvalReport{
		Metrics: res.Metrics, Federated: true, Clients: res.Clients, Partition: source,
		Split: split, Bins: bins, ClassNames: names.names, Privacy: res.Privacy,
	}
	if cal != nil {
		rep.Method = cal.Method()
	}
	if res.Stats != nil {
		t := res.Stats.TopLabel()
		rep.TopLabel = &t
		if cal != nil {
			before, err := federation.Evaluate(cmd.Context(), pop, nil, federation.EvalOptions{Bins: bins, Workers: ff.workers})
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			rep.Before = &before.Metrics
		}
	}
	if err := ff.ledger.commit(cmd.ErrOrStderr(), reservation); err != nil {
		return err
	}
	if w := noiseWarning(rep); w != "" {
		fmt.Fprintln(cmd.ErrOrStderr(), w)
	}
	out := cmd.OutOrStdout()
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return printFedEval(out, path, rep)
}

// noiseFloor returns the calibration error that a private evaluation's
// noise alone makes: each of the bins of a class adds noise of σ to both
// sums whose difference is its calibration gap, so the gaps of a class
// are off by about bins·σ/N in all (N the noisy number of rows), and so
// is its ECE, and cwECE, their mean. 0 without privacy.
func noiseFloor(rep *fedEvalReport) float64 {
	if rep.Privacy == nil || rep.N < 1 {
		return 0
	}
	return float64(rep.Bins) * rep.Privacy.Sigma / float64(rep.N)
}

// noiseWarning returns a warning when a private evaluation's noise is
// larger than the statistic it measures: when its noise floor exceeds the
// cwECE it reports (the metrics are then mostly noise, however plausible
// they look); "" otherwise.
func noiseWarning(rep *fedEvalReport) string {
	floor := noiseFloor(rep)
	if rep.Privacy == nil || !(floor >= rep.CWECE) {
		return ""
	}
	return fmt.Sprintf("warning: the noise (σ = %.4g per statistic, over %d bins and %d rows) alone makes a cwECE of about %.3g%%, more than the %.3g%% measured: these metrics are mostly noise; evaluate more rows, or use fewer --bins, a larger --epsilon or a smaller --clip",
		rep.Privacy.Sigma, rep.Bins, rep.N, 100*floor, 100*rep.CWECE)
}

// printFedEval writes the report of eval --federated as a table.
func printFedEval(w io.Writer, path string, rep *fedEvalReport) error {
	what := "exact: summed client statistics, equal to the pooled rows"
	if rep.Privacy != nil {
		what = "private: noisy summed client statistics, N estimated"
	}
	fmt.Fprintf(w, "%s: federated evaluation over %d clients (%s) of %d %s rows, %d classes, %d bins\n%s\n",
		path, rep.Clients, rep.Partition, rep.N, rep.Split, rep.Classes, rep.Bins, what)
	if len(rep.ClassNames) > 0 {
		fmt.Fprintf(w, "class names: %s\n", strings.Join(rep.ClassNames, ", "))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tcwECE\tECE\taccuracy\tNLL\tBrier\t")
	row := func(name string, m calib.Metrics) {
		fmt.Fprintf(tw, "%s\t%.3f%%\t%.3f%%\t%.2f%%\t%.4f\t%.4f\t\n", name, 100*m.CWECE, 100*m.ECE, 100*m.Accuracy, m.NLL, m.Brier)
	}
	if rep.Before != nil {
		row("uncalibrated", *rep.Before)
	}
	name := rep.Method
	if name == "" {
		name = "uncalibrated"
	}
	row(name, rep.Metrics)
	if err := tw.Flush(); err != nil {
		return err
	}
	if pr := rep.Privacy; pr != nil {
		_, err := fmt.Fprintf(w, "\nε = %.4g spent (δ = %g, %s, ρ = %.4g), σ = %.4g per statistic, clip C = %g; the noise alone makes a cwECE of about %.3g%%\n",
			pr.Epsilon, pr.Delta, pr.Accountant, pr.Rho, pr.Sigma, pr.Clip, 100*noiseFloor(rep))
		return err
	}
	return nil
}
