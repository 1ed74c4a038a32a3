package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/internal/fileio"
)

// ledgerFlags are calibrate's privacy-ledger flags: the ledger lives in
// dp (dp.Reserve, format fedcalib.ledger/v1); these only name the file
// and the budget.
type ledgerFlags struct {
	path   string
	budget float64
}

const ledgerHelp = `

--ledger F accumulates the privacy spent on each dataset across private
runs in the file F (made on the first run). A dataset is its labels: runs
on logits files with the same labels, of any model, spend from one
budget. Before fitting, calibrate computes what the run will spend from
its noise plan and refuses the run if the dataset's total would exceed
--budget ε (under zcdp ρ adds across runs, under rdp the RDP curves add);
it records the run once the fit has succeeded, before the calibrator is
written. Runs sharing a ledger take turns (a lock on F.lock), so two runs
cannot both spend the last of a budget; a link to a ledger is followed,
so the file it names is updated and locked. All runs on one dataset must use
the same --accountant and --delta. "fedcalib privacy --ledger F" prints
the spend.`

const ledgerExample = `
  fedcalib calibrate --method temp --logits cifar10.npz --partition p.json --rounds 12 --sample-rate 0.1 \
      --epsilon 0.5 --ledger privacy-ledger.json --budget 2 --out run1.json`

// register adds the ledger flags and their help.
func (lf *ledgerFlags) register(cmd *cobra.Command, f *pflag.FlagSet) {
	cmd.Long += ledgerHelp
	cmd.Example += ledgerExample
	f.StringVar(&lf.path, "ledger", "", "with --epsilon: privacy ledger file accumulating the ε spent on this dataset across runs")
	f.Float64Var(&lf.budget, "budget", 0, "with --ledger: total ε > 0 this dataset may spend over all runs; a run that would exceed it is refused before fitting")
}

// check reports the first problem of the ledger flags.
func (lf *ledgerFlags) check(changed func(string) bool) error {
	switch {
	case changed("budget") && !changed("ledger"):
		return errors.New("--budget limits the spend recorded in a ledger: add --ledger F")
	case changed("ledger") && !changed("epsilon"):
		return errors.New("--ledger records the privacy of private runs and needs --epsilon")
	case changed("ledger") && lf.path == "":
		return errors.New("--ledger is empty: name the ledger file, e.g. --ledger privacy-ledger.json")
	case changed("budget") && !(lf.budget > 0 && lf.budget < math.Inf(1)):
		return fmt.Errorf("--budget is %v: want a finite ε > 0 (drop --budget to record without a limit)", lf.budget)
	}
	return nil
}

// checkFiles refuses a ledger that is one of the files the run reads
// (inputs: its logits, partition, calibrators), since the run would
// write its spend over it; see fileio.CheckOutput.
func (lf *ledgerFlags) checkFiles(inputs ...string) error {
	if lf.path == "" {
		return nil
	}
	if err := fileio.CheckOutput(lf.path, inputs...); err != nil {
		return fmt.Errorf("--ledger %w", err)
	}
	return nil
}

// reserve admits the private run of spec over the data fingerprinted by
// fp (its labels and classes) into the ledger, charging what its noise plan will spend,
// and returns the reservation to commit once the fit succeeds; nil
// without --ledger.
func (lf *ledgerFlags) reserve(spec federation.Spec, fp federation.Fingerprint, logitsPath, out string, r federation.Rounds) (*dp.Reservation, error) {
	if lf.path == "" {
		return nil, nil
	}
	o, err := spec.Options()
	if err != nil {
		return nil, err
	}
	if o.Privacy == nil {
		return nil, errors.New("--ledger records the privacy of private runs and needs --epsilon")
	}
	plan, err := federation.PlanNoise(spec.Method, fp.Classes, o.Privacy, r.T, r.SampleRate)
	if err != nil {
		return nil, err
	}
	m, err := calib.LookupMethod(spec.Method)
	if err != nil {
		return nil, err
	}
	return lf.reserveCharge(fp, logitsPath, dp.Charge{
		Accountant: o.Privacy.Accountant,
		Delta:      o.Privacy.Delta,
		Release:    dp.Release{Mechanism: m.Protocol, Noise: plan.Mechanisms, SampleRate: r.SampleRate, Rounds: r.T},
		Method:     spec.Method,
		Calibrator: out,
	})
}

// reserveCharge admits c, a run on the data of logitsPath fingerprinted
// by fp, into the ledger: it fills in the dataset's key and description
// and the budget.
func (lf *ledgerFlags) reserveCharge(fp federation.Fingerprint, logitsPath string, c dp.Charge) (*dp.Reservation, error) {
	c.Budget = lf.budget
	if c.Budget == 0 {
		c.Budget = math.Inf(1)
	}
	c.Dataset = fp.LabelsSHA256
	c.Description = fmt.Sprintf("%s: %d examples, %d classes", filepath.Base(logitsPath), fp.Examples, fp.Classes)
	return dp.Reserve(lf.path, c)
}

// commit records the reserved run r (nil: no ledger) and says on w what
// the dataset has now spent.
func (lf *ledgerFlags) commit(w io.Writer, r *dp.Reservation) error {
	if r == nil {
		return nil
	}
	if err := r.Commit(time.Now()); err != nil {
		return err
	}
	limit := "no budget"
	if lf.budget > 0 {
		limit = fmt.Sprintf("budget %v", lf.budget)
	}
	_, err := fmt.Fprintf(w, "ledger %s: this run spent ε %.4g; the dataset has spent ε %.4g in all (%s)\n", lf.path, r.RunEpsilon(), r.Spent(), limit)
	return err
}

// runPrivacyLedger prints the ledger file at path: as text, or with
// asJSON the file itself.
func runPrivacyLedger(cmd *cobra.Command, path string, asJSON bool) error {
	if err := refuseFlags(cmd, []string{"epsilon", "delta", "method", "classes", "rounds", "steps", "sample-rate", "accountant", "noise-multiplier", "clip", "clip-pos", "clip-neg"}, "--ledger prints a ledger and takes no --%s: drop it"); err != nil {
		return err
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("--ledger %s does not exist: \"fedcalib calibrate --epsilon E --ledger %s\" makes it", path, path)
	}
	f, err := dp.ReadLedgerFile(path)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(f)
	}
	return f.WriteText(cmd.OutOrStdout())
}
