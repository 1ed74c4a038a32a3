package cli

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// selectFlags are calibrate's private-selection flags (--select).
type selectFlags struct {
	on      bool
	share   float64
	holdOut float64
	clip    float64
	mexps   []int
}

// selectFlagNames lists the flags that only calibrate --select takes.
var selectFlagNames = []string{"select-share", "select-holdout", "select-bins-exp", "select-clip"}

// ErrBaseWins is wrapped by the error of calibrate --select when the
// base model beat every candidate: no calibrator is written (its privacy
// is spent all the same). It wraps ErrCheckFailed: the command exits 1.
var ErrBaseWins error = baseWinsError{}

// baseWinsError is ErrBaseWins.
type baseWinsError struct{}

func (baseWinsError) Error() string {
	return "the base model beat every calibrator on the held-out rows"
}

func (baseWinsError) Unwrap() error { return ErrCheckFailed }

const selectHelp = `

--select (federated, with --epsilon, accountant zcdp) chooses privately
between the base model and calibrators of --method instead of fitting
one: each client holds out --select-holdout of its calibration rows
(default 0.3, drawn from --seed); the candidates are fitted privately on
the rest — a binning method once per bin exponent of --select-bins-exp
(default 4,6,8,10: 16 to 1,024 bins), another method once — and each
candidate and the base model is evaluated privately on the held-out rows
by the private federated evaluation of "eval --federated --epsilon"
(each client's statistics clipped to L2 norm --select-clip, default 100,
Gaussian noise on their sum; a client of n held-out rows of c classes has
a norm of about n·√(c+2), and a clip above it only adds noise). The one of lowest noisy cwECE is written, its privacy record
holding the run's total ε, the split and every candidate's noisy cwECE
(privacy.selection). If the base model wins, calibrate writes nothing
and exits 1 with a message saying so: no calibrator beat not
calibrating. The budget --epsilon is split in zCDP ρ: --select-share
(default 0.2) of it goes to the evaluations, evenly, the rest to the
fits, evenly; each fit and evaluation draws its noise from a stream of
its own derived from --seed. --ledger records the whole run as one
entry. --guard, --report and --bins-exp do not apply.`

const selectExample = `
  # choose privately among the base model and FedIsotonic at 16 to 1,024 bins
  fedcalib calibrate --method isotonic --logits mnist.npz --rounds 4 --epsilon 1 --select \
      --select-share 0.2 --select-bins-exp 4,6,8,10 --select-clip 20 --seed 7 --ledger privacy-ledger.json --out sel.json`

// register adds the selection flags and their help.
func (sf *selectFlags) register(cmd *cobra.Command) {
	cmd.Long += selectHelp
	cmd.Example += selectExample
	f := cmd.Flags()
	f.BoolVar(&sf.on, "select", false, "federated, with --epsilon: choose privately among the base model and candidate calibrators by noisy cwECE on held-out rows")
	f.Float64Var(&sf.share, "select-share", federation.DefaultSelectShare, "with --select: share in (0, 1) of the budget (zCDP ρ) spent evaluating the candidates")
	f.Float64Var(&sf.holdOut, "select-holdout", federation.DefaultHoldOut, "with --select: share in (0, 1) of each client's calibration rows held out to evaluate on")
	f.Float64Var(&sf.clip, "select-clip", federation.DefaultEvalClip, "with --select: L2 clip norm C of each client's held-out statistics")
	f.IntSliceVar(&sf.mexps, "select-bins-exp", []int{4, 6, 8, 10}, "with --select and a binning method: the bin exponents M (2^M bins) of the candidates")
}

// dispatch runs calibrate --select and reports done; without --select
// it refuses the selection flags and leaves the run to the others.
func (sf *selectFlags) dispatch(cmd *cobra.Command, fl *calibrateFlags) (done bool, err error) {
	if !sf.on {
		if err := refuseFlags(cmd, selectFlagNames, "--%s applies to private selection: add --select"); err != nil {
			return true, err
		}
		return false, nil
	}
	return true, sf.run(cmd, fl)
}

// check reports the first problem of the flags of calibrate --select.
func (sf *selectFlags) check(cmd *cobra.Command, fl *calibrateFlags) error {
	changed := cmd.Flags().Changed
	switch {
	case fl.central:
		return errors.New("--select chooses among federated private fits: drop --central")
	case !changed("epsilon"):
		return errors.New("--select spends part of a privacy budget on the choice: add --epsilon")
	case fl.fed.accountant != dp.ZCDP.String():
		return fmt.Errorf("--select records its fits and evaluations as one zCDP release: use --accountant zcdp, not %s", fl.fed.accountant)
	case !(sf.share > 0 && sf.share < 1):
		return fmt.Errorf("--select-share is %v: want a share of the budget in (0, 1), e.g. 0.2", sf.share)
	case !(sf.holdOut > 0 && sf.holdOut < 1):
		return fmt.Errorf("--select-holdout is %v: want a share of the calibration rows in (0, 1), e.g. 0.3", sf.holdOut)
	}
	if err := checkPositive("select-clip", sf.clip, "clip norm C", fmt.Sprintf("drop --select-clip for the default %v", federation.DefaultEvalClip)); err != nil {
		return err
	}
	for _, name := range []string{"guard", "report", "bins-exp"} {
		if changed(name) {
			return fmt.Errorf("--%s does not apply to --select: drop it", name)
		}
	}
	if binningMethod(fl.method) {
		if len(sf.mexps) == 0 {
			return errors.New("--select-bins-exp is empty: list the bin exponents M of the candidates, e.g. 4,6,8,10")
		}
		for _, m := range sf.mexps {
			if m < 1 || m > calib.MaxMexp {
				return fmt.Errorf("--select-bins-exp %d: want M in [1, %d] (2^M bins)", m, calib.MaxMexp)
			}
		}
	} else if changed("select-bins-exp") {
		return fmt.Errorf("--select-bins-exp lists bin counts of a binning method, not %s: drop it", fl.method)
	}
	return nil
}

// candidate is a calibrator fitted for a selection.
type candidate struct {
	name string
	mexp int // 0: the method's default
	res  *federation.Result
}

// run is calibrate --select.
func (sf *selectFlags) run(cmd *cobra.Command, fl *calibrateFlags) error {
	ff := &fl.fed
	if err := ff.check(cmd, fl); err != nil {
		return err
	}
	if err := sf.check(cmd, fl); err != nil {
		return err
	}
	if err := ff.ledger.check(cmd.Flags().Changed); err != nil {
		return err
	}
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
	pfit, pheld, err := federation.HoldOut(p, sf.holdOut, federation.SelectSeed(fl.seed, 0))
	if err != nil {
		return fmt.Errorf("--select-holdout: %w", err)
	}
	fitPop, err := federation.NewRowPopulation(f, pfit, federation.Calibration)
	if err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	heldPop, err := federation.NewRowPopulation(f, pheld, federation.Calibration)
	if err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	rate := ff.sampleRate
	if cmd.Flags().Changed("clients-per-round") {
		if rate, err = federation.SampleRateFor(ff.perRound, p.Len()); err != nil {
			return fmt.Errorf("--clients-per-round: %w", err)
		}
	}
	cands := []candidate{{name: fl.method}}
	if binningMethod(fl.method) {
		cands = cands[:0]
		for _, m := range sf.mexps {
			cands = append(cands, candidate{name: fmt.Sprintf("%s M=%d", fl.method, m), mexp: m})
		}
	}
	plan, err := federation.PlanSelection(ff.epsilon, ff.delta, sf.share, len(cands), len(cands)+1)
	if err != nil {
		return err
	}
	// Plan every release before any runs: the ledger admits the run on
	// their sum.
	specs := make([]federation.Spec, len(cands))
	releases := make([]dp.Release, 0, 2*len(cands)+1)
	for j, c := range cands {
		spec := ff.spec(cmd, fl.method, c.mexp)
		spec.Mexp = c.mexp
		spec.ODIR = fl.odir
		spec.Epsilon = plan.FitEpsilon
		o, err := spec.Options()
		if err != nil {
			return err
		}
		np, err := federation.PlanNoise(fl.method, f.Classes, o.Privacy, ff.rounds, rate)
		if err != nil {
			return err
		}
		specs[j] = spec
		releases = append(releases, dp.Release{Mechanism: c.name, Noise: np.Mechanisms, SampleRate: rate, Rounds: ff.rounds})
	}
	evalPriv := &federation.Privacy{Epsilon: plan.EvalEpsilon, Delta: ff.delta, Clip: sf.clip, Accountant: dp.ZCDP}
	evalPlan, err := federation.PlanEvalNoise(evalPriv)
	if err != nil {
		return err
	}
	for range len(cands) + 1 {
		releases = append(releases, federation.EvalRelease(evalPlan))
	}
	mech := fmt.Sprintf("selection of %s", fl.method)
	total, err := federation.SelectionRelease(mech, releases...)
	if err != nil {
		return err
	}
	var reservation *dp.Reservation
	if ff.ledger.path != "" {
		reservation, err = ff.ledger.reserveCharge(p.Data, fl.logits, dp.Charge{
			Accountant: dp.ZCDP, Delta: ff.delta, Release: total, Method: fl.method, Calibrator: fl.out,
		})
		if err != nil {
			return err
		}
		defer reservation.Cancel()
	}
	// The fits, then the evaluations, each on a seed of its own.
	for j := range cands {
		fitter, err := specs[j].Fitter()
		if err != nil {
			return err
		}
		r := federation.Rounds{T: ff.rounds, SampleRate: rate, Seed: federation.SelectSeed(fl.seed, 1+j), Workers: ff.workers}
		if cands[j].res, err = fitter.Fit(cmd.Context(), fitPop, r); err != nil {
			return fmt.Errorf("%s: %s: %w", fl.logits, cands[j].name, err)
		}
	}
	sel := &calib.Selection{
		Epsilon: ff.epsilon, Share: sf.share, HeldOut: sf.holdOut,
		EvalSigma: evalPlan.Sigma(), EvalClip: sf.clip,
	}
	for _, r := range releases[:len(cands)] {
		sel.FitRho += r.Rho()
	}
	for _, r := range releases[len(cands):] {
		sel.SelectRho += r.Rho()
	}
	sel.Rho = total.Rho()
	if sel.Epsilon, err = dp.ZCDPEpsilon(sel.Rho, ff.delta); err != nil {
		return err
	}
	best := 0
	for k := range len(cands) + 1 {
		var c calib.Calibrator
		name := "base"
		if k > 0 {
			c, name = cands[k-1].res.Calibrator, cands[k-1].name
		}
		o := federation.EvalOptions{Privacy: evalPriv, Seed: federation.SelectSeed(fl.seed, 1+len(cands)+k), Workers: ff.workers}
		ev, err := federation.Evaluate(cmd.Context(), heldPop, c, o)
		if err != nil {
			return fmt.Errorf("%s: evaluating %s: %w", fl.logits, name, err)
		}
		sel.Candidates = append(sel.Candidates, calib.Candidate{Name: name, NoisyCWECE: ev.Metrics.CWECE})
		if ev.Metrics.CWECE < sel.Candidates[best].NoisyCWECE {
			best = k
		}
	}
	sel.Candidates[best].Winner = true
	if err := ff.ledger.commit(cmd.ErrOrStderr(), reservation); err != nil {
		return err
	}
	if err := printSelection(cmd.ErrOrStderr(), sel); err != nil {
		return err
	}
	if best == 0 {
		return fmt.Errorf("%w (noisy cwECE %.3f%%): %s not written; ε %.4g spent; serve the base model uncalibrated",
			ErrBaseWins, 100*sel.Candidates[0].NoisyCWECE, fl.out, sel.Epsilon)
	}
	win := cands[best-1]
	priv := *win.res.Privacy
	priv.Selection = sel
	prov := calib.Provenance{
		Data:     fmt.Sprintf("%s: calibration rows of %d clients (%s), %.3g held out for selection", filepath.Base(fl.logits), p.Len(), source, sf.holdOut),
		Protocol: win.res.Protocol,
		Clients:  p.Len(),
		Seed:     calib.Seed(fl.seed),
		Tool:     Version(),
	}
	prov.Input = f.Input
	prov.ClassNames = f.ClassNames
	if binningMethod(fl.method) {
		prov.Weighting = ff.weighting
	}
	test, err := testMetrics(cmd.Context(), f, p, win.res.Calibrator)
	if err != nil {
		return err
	}
	if err := calib.WriteFile(fl.out, win.res.Calibrator, &priv, prov); err != nil {
		return fmt.Errorf("writing %s: %w", fl.out, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s won a private selection among %d candidates", fl.out, win.name, len(sel.Candidates))
	if test != nil {
		fmt.Fprintf(&b, "; test (%d rows) cwECE %.3f%% → %.3f%%", test[0].N, 100*test[0].CWECE, 100*test[1].CWECE)
	}
	fmt.Fprintf(&b, "; ε = %.4g spent in all (δ = %g, zcdp; ρ %.4g fits + %.4g selection)", sel.Epsilon, ff.delta, sel.FitRho, sel.SelectRho)
	_, err = fmt.Fprintln(cmd.OutOrStdout(), b.String())
	return err
}

// printSelection writes the candidates of a selection and their noisy
// cwECE.
func printSelection(w io.Writer, s *calib.Selection) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "candidate\tnoisy cwECE (held-out rows)\t")
	for _, c := range s.Candidates {
		mark := ""
		if c.Winner {
			mark = "  ← chosen"
		}
		fmt.Fprintf(tw, "%s\t%.3f%%%s\t\n", c.Name, 100*c.NoisyCWECE, mark)
	}
	return tw.Flush()
}
