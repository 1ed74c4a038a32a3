package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// calibrateFlags holds the flags of the calibrate command, grouped by what
// they control.
type calibrateFlags struct {
	// Data and output.
	logits, out string
	input       inputKind
	// Protocol.
	central bool
	// Calibrator.
	method  string
	binsExp int
	seed    uint64
	// dirichlet's --lambda and --mu, and the fixed regularisation they
	// ask for (nil: neither given; set by checkODIR).
	lambda, mu float64
	odir       *calib.ODIR
	// The fit's iteration cap (0: the default) and dirichlet's variant,
	// folds and grids.
	maxIter          int
	variant          string
	folds            int
	lambdaGrid, muGr []float64
	dirichlet        *calib.DirichletSettings // set by checkFitFlags
	// Federated runs (calibrate_fed.go).
	fed fedFlags
	// The held-out bar (guard.go).
	guard guardFlags
	// --report (report.go).
	report reportFlag
	// --select (select.go).
	sel selectFlags
}

func newCalibrateCmd() *cobra.Command {
	var fl calibrateFlags
	cmd := &cobra.Command{
		Use:   "calibrate --central --method METHOD --logits F.npz --out C.json",
		Short: "Fit a calibrator to the calibration rows of a logits file",
		Long: `calibrate fits a post-hoc calibrator to labelled logits and writes it as a
calibrator sidecar file (versioned JSON, numbers only), which "fedcalib eval
--calibrator" applies and the export commands append to a model.

With --central it fits one calibrator on every calibration row of the
logits file (split 1), or on every row when the file has no split column;
with --partition P as well, the rows' split is P's, pooled over its
clients (fit on its calibration rows, report its test rows), so held-out
data such as a test set can be split for an honest fit.

Methods (M is --bins-exp):
` + methodHelp() + `
The scaling fits minimise the mean negative log-likelihood (plus a weak
Gaussian prior around the identity, and dirichlet's ODIR penalty) to a
stated tolerance: temp by a bounded search on log T in [0.01, 100] (steps
below 1e-12); vector, matrix, dirichlet and opvector by L-BFGS until the
largest gradient component is below 1e-7, for at most --max-iterations
iterations (default 2000); fedcal by epochs of SGD from a network
initialised from --seed until an epoch changes the NLL by less than 1e-4
(relative), for at most --max-iterations epochs (default 500). The
calibrator file records how the fit ended (provenance.fit: converged,
iterations, objective, parameters at a bound), and the summary line
WARNs when it did not converge or a parameter ended at a bound (T at 0.01
or 100). dirichlet clamps the log-probabilities at log 2^-52 (about −36);
--variant picks full (W and b), diag (diagonal W and b) or fixdiag
(W = aI); its ODIR weights λ (off-diagonal) and μ (bias) are chosen from
--lambda-grid × --mu-grid (default 0 and C(C−1)·10^k, resp. C·10^k, for
k = −4, −2, 0, 2) by --folds-fold cross-validation on the rows (folds
drawn from --seed; --lambda and --mu fix them; a federated fit uses
1e-3), and the summary line prints the chosen values. It prints one
summary line, with the cwECE of the fitted rows before and after
(in-sample) and, when the file has test rows (split 2), their cwECE and
NLL before and after (held out), and a WARNING when the calibrator makes
the test rows' NLL worse. With --guard it exits 1 and writes nothing when the calibrator
makes the test rows' cwECE or NLL worse than the base model's by more than
--guard-cwece-tolerance (default 0.001, 0.1 point) or --guard-nll-tolerance
(default 0.001 nats); a federated fit is judged the same way (its privacy
cost is spent and recorded in the ledger all the same). It writes
the output atomically and never over an input.`,
		Example: `  fedcalib calibrate --central --method temp --logits cifar10.npz --out temp.json
  fedcalib calibrate --central --method bbq --bins-exp 5 --logits cifar10.npz --out bbq.json
  # isotonic regression fitted exactly, as scikit-learn's IsotonicRegression per class
  fedcalib calibrate --central --method isotonic --logits cifar10.npz --out isotonic.json
  fedcalib calibrate --central --method fedcal --seed 7 --logits femnist.npz --out fedcal.json
  # split held-out data in halves: fit on one, report on the other
  fedcalib partition --data-or-logits test.npz --scheme iid --clients 1 --fractions 0,0.5,0.5 --out halves.json
  fedcalib calibrate --central --method temp --logits test.npz --partition halves.json --out temp.json
  # refuse a calibrator that makes the held-out test rows worse
  fedcalib calibrate --central --method vector --guard --logits cifar10.npz --out vector.json
  # diagonal Dirichlet, λ and μ from 10 folds of a grid of your own
  fedcalib calibrate --central --method dirichlet --variant diag --folds 10 --mu-grid 0,0.01,1 --logits c100.npz --out dir.json
  # allow a slow fit more iterations
  fedcalib calibrate --central --method matrix --max-iterations 20000 --logits c100.npz --out matrix.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCalibrate(cmd, &fl)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.logits, "logits", "", "logits file (.npz with logits [N, C], labels [N], optional split [N]) (required)")
	registerInput(f, &fl.input)
	f.StringVar(&fl.out, "out", "", "calibrator sidecar file (JSON) to write (required)")
	f.BoolVar(&fl.central, "central", false, "fit one calibrator on all calibration rows, without federation (required)")
	f.StringVar(&fl.method, "method", "", "calibrator: "+strings.Join(calib.MethodNames(), ", ")+" (required)")
	f.IntVar(&fl.binsExp, "bins-exp", calib.DefaultMexp, binsExpUsage())
	f.Var((*seedValue)(&fl.seed), "seed", "random seed, 0 to 2^64−1 (fedcal's initial weights and example order); recorded in the output")
	f.Float64Var(&fl.lambda, "lambda", calib.DefaultDirichletLambda, "dirichlet only: fix the ODIR weight λ ≥ 0 of W's off-diagonal entries (with --mu, default 1e-3) instead of cross-validating λ = μ (central) or taking 1e-3 (federated)")
	f.Float64Var(&fl.mu, "mu", calib.DefaultDirichletMu, "dirichlet only: fix the ODIR weight μ ≥ 0 of the bias (with --lambda, default 1e-3); see --lambda")
	f.IntVar(&fl.maxIter, "max-iterations", 0, "cap on the iterations of an L-BFGS fit (vector, matrix, dirichlet, opvector; 0: 2000) or the epochs of fedcal's (0: 500), e.g. --max-iterations 20000")
	f.StringVar(&fl.variant, "variant", "", "dirichlet only: full (W and b, the default), diag (diagonal W and b) or fixdiag (W = aI, no b)")
	f.IntVar(&fl.folds, "folds", calib.DefaultDirichletFolds, "dirichlet only: cross-validation folds choosing λ and μ, ≥ 2 (1: none, λ = μ = 0 unless --lambda/--mu), e.g. --folds 10")
	f.Float64SliceVar(&fl.lambdaGrid, "lambda-grid", nil, "dirichlet only: the λ values cross-validation tries, e.g. --lambda-grid 0,0.1,10,1000 (default 0 and C(C−1)·10^k, k = −4, −2, 0, 2)")
	f.Float64SliceVar(&fl.muGr, "mu-grid", nil, "dirichlet only: the μ values cross-validation tries, e.g. --mu-grid 0,0.01,1 (default 0 and C·10^k, k = −4, −2, 0, 2)")
	fl.fed.register(cmd)
	fl.sel.register(cmd)
	fl.guard.register(cmd)
	fl.report.register(f, "the calibrator on the test rows (else the fitted rows)")
	cmd.Example += "\n  # also write the calibration report\n  fedcalib calibrate --central --method temp --logits cifar10.npz --out temp.json --report temp.html"
	return cmd
}

func runCalibrate(cmd *cobra.Command, fl *calibrateFlags) error {
	if err := fl.guard.check(cmd); err != nil {
		return err
	}
	if err := fl.checkODIR(cmd); err != nil {
		return err
	}
	if err := fl.report.check(fl.logits, fl.out, fl.fed.partition, fl.fed.ledger.path); err != nil {
		return err
	}
	if err := fl.checkFitFlags(cmd); err != nil {
		return err
	}
	if done, err := fl.sel.dispatch(cmd, fl); done {
		return err
	}
	if done, err := fl.fed.dispatch(cmd, fl); done {
		return err
	}
	if err := checkCalibrateFlags(cmd, fl); err != nil {
		return err
	}
	f, err := readLogitsIn(cmd.Context(), fl.logits, fl.input)
	if err != nil {
		return err
	}
	boundHeap(f)
	if part := fl.fed.partition; part != "" {
		// The partition's split, pooled over its clients: fit on its
		// calibration rows, report on its test rows.
		if err := applyPartition(f, part, fl.logits); err != nil {
			return err
		}
	}
	sel := selectSplit(logits.SplitCalibration) // every row without a split column
	n := sel.count(f)
	desc := fmt.Sprintf("%d calibration rows", n)
	if fl.fed.partition != "" {
		desc += " of " + filepath.Base(fl.fed.partition)
	}
	var nllWarning string
	if f.Split == nil {
		desc = fmt.Sprintf("all %d rows", n)
	}
	switch {
	case f.Len() == 0:
		return fmt.Errorf("%s holds no rows: there is nothing to fit on; make it again from data with examples (fedcalib infer)", fl.logits)
	case n == 0:
		return fmt.Errorf("%s has no calibration rows (split %d) among its %d to fit on: mark some rows as calibration data (split column 1), or fit federatedly with --partition", fl.logits, logits.SplitCalibration, f.Len())
	}
	m, err := calib.LookupMethod(fl.method)
	if err != nil {
		return fmt.Errorf("--method: %w", err)
	}
	if m.HasBins() && !cmd.Flags().Changed("bins-exp") {
		fl.binsExp = m.DefaultMexp()
		if m.ExactCentral() {
			fl.binsExp = 0 // the exact fit, on the rows themselves
		}
	}
	if err := m.CheckSize(f.Classes, 1<<fl.binsExp); err != nil {
		return fmt.Errorf("%s: %w", fl.logits, err)
	}
	c, err := fitCentral(cmd.Context(), f, sel, m, fl)
	if err != nil {
		return fmt.Errorf("%s: fitting %s: %w", fl.logits, fl.method, err)
	}
	accs, err := measure(cmd.Context(), f, sel, []calib.Calibrator{nil, c}, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", fl.logits, err)
	}
	ms, err := metricsOf(accs)
	if err != nil {
		return fmt.Errorf("%s: %w", fl.logits, err)
	}
	before, after := ms[0], ms[1]
	held := ""
	// The accuracy warning is judged on the test rows when there are
	// some, else on the fitted rows: the metrics measured here.
	warning := dropWarning(before, after, "the fitted rows")
	test := selectSplit(logits.SplitTest)
	nTest := 0
	if f.Split != nil {
		nTest = test.count(f)
	}
	if nTest > 0 {
		accs, err := measure(cmd.Context(), f, test, []calib.Calibrator{nil, c}, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", fl.logits, err)
		}
		ts, err := metricsOf(accs)
		if err != nil {
			return fmt.Errorf("%s: %w", fl.logits, err)
		}
		if err := fl.guard.judge(ts[0], ts[1], true, fl.out); err != nil {
			return err
		}
		held = heldOutLine(nTest, ts[0], ts[1])
		warning = dropWarning(ts[0], ts[1], "the test rows")
		if ts[1].NLL > ts[0].NLL {
			nllWarning = fmt.Sprintf("; WARNING: the calibrator makes the test rows' NLL worse, %.4f → %.4f", ts[0].NLL, ts[1].NLL)
		}
	} else if err := fl.guard.judge(calib.Metrics{}, calib.Metrics{}, false, fl.out); err != nil {
		return err
	}
	prov := calib.Provenance{
		Data:     fmt.Sprintf("%s: %s", filepath.Base(fl.logits), desc),
		Protocol: "central",
		Seed:     calib.Seed(fl.seed),
		Tool:     Version(),
	}
	prov.Input = f.Input // the kind read: --input, or what the file records
	prov.ClassNames = f.ClassNames
	prov.FitMetrics = &calib.FitMetrics{Rows: n, Before: before, After: after}
	rep := fitReportOf(c)
	prov.Fit = rep
	if err := calib.WriteFile(fl.out, c, nil, prov); err != nil {
		return fmt.Errorf("writing %s: %w", fl.out, err)
	}
	var testRows []int
	if nTest > 0 {
		testRows = test.indices(f)
	}
	repRows, repDesc := reportRows(testRows, sel.indices(f))
	if err := fl.report.writeCalibrated(cmd, f, fl.logits, repRows, repDesc, fl.out, ""); err != nil {
		return err
	}
	detail := fitDetail(c, rep)
	if w := rep.Warning(); w != "" {
		warning += "; WARNING: " + w
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: %s fitted on %s of %s, %d classes%s; cwECE on them %.3f%% → %.3f%%%s%s%s\n",
		fl.out, fl.method, desc, fl.logits, f.Classes, detail, 100*before.CWECE, 100*after.CWECE, held, warning, nllWarning)
	return err
}

// fitReportOf returns the report of c's last fit, or nil for a
// calibrator without an iterative fit.
func fitReportOf(c calib.Calibrator) *calib.FitReport {
	if r, ok := c.(calib.FitReporter); ok {
		return r.LastFit()
	}
	return nil
}

// fitDetail describes the fitted parameters worth a glance: T, the form
// of isotonic (exact with its breakpoints, or its bins), or
// dirichlet's variant and chosen regularisation.
func fitDetail(c calib.Calibrator, rep *calib.FitReport) string {
	if t, ok := c.(*calib.Temperature); ok {
		return fmt.Sprintf(", T = %.4g", t.T)
	}
	if b, ok := c.(*calib.Isotonic); ok {
		if b.Exact() {
			return fmt.Sprintf(", exact, %d breakpoints", b.Breakpoints())
		}
		return fmt.Sprintf(", %d bins per class", b.Bins)
	}
	if rep == nil || rep.Dirichlet == nil {
		return ""
	}
	d := rep.Dirichlet
	how := "fixed"
	if d.Folds > 0 {
		how = fmt.Sprintf("%d-fold cross-validation, held-out NLL %.4f", d.Folds, d.HeldOutNLL)
	}
	return fmt.Sprintf(", %s variant, λ = %g, μ = %g (%s)", d.Variant, d.Lambda, d.Mu, how)
}

// fitCentral fits method m, with the settings of fl, to the rows sel of f.
// A binning method with bins (fl.binsExp > 0; 0 is the exact fit of a
// method whose ExactCentral, fitted as the other methods below) is
// fitted as its Fit would, but from one-vs-all
// histograms accumulated chunk by chunk (eachChunk), so no float64 copy
// of the rows is made; the counts are exact, so the calibrator is the
// same. A calibrator that fits float32 rows in place (calib.Float32Fitter:
// temp, scalbin, exact isotonic) reads the file's block; other methods
// fit a float64 copy of the selected rows.
func fitCentral(ctx context.Context, f *logits.File, sel rowSel, m calib.Method, fl *calibrateFlags) (calib.Calibrator, error) {
	if m.Family == calib.Binning && fl.binsExp > 0 {
		src := newFileChunks(f, sel)
		hs := make([]*calib.Histograms, src.workers())
		for w := range hs {
			hs[w] = calib.NewHistograms(f.Classes, 1<<fl.binsExp)
		}
		err := eachChunk(ctx, src, func(w int, s *calib.Set) error { return hs[w].Accumulate(s) })
		if err != nil {
			return nil, err
		}
		for _, h := range hs[1:] {
			if err := hs[0].Add(h); err != nil {
				return nil, err
			}
		}
		return m.FromHistograms(hs[0])
	}
	// calib.Settings.Seed is signed; the same bits seed the same generator.
	c, err := calib.New(m.Name, calib.Settings{Mexp: fl.binsExp, Seed: int64(fl.seed), ODIR: fl.odir, MaxIterations: fl.maxIter, Dirichlet: fl.dirichlet})
	if err != nil {
		return nil, err
	}
	if ff, ok := c.(calib.Float32Fitter); ok {
		// The file's float32 block in place: no float64 copy of the rows.
		r := &calib.Float32Rows{Logits: f.Logits, Labels: f.Labels, Rows: sel.indices(f), Classes: f.Classes}
		if err := ff.FitFloat32(r); err != nil {
			return nil, err
		}
		return c, nil
	}
	if err := c.Fit(setOf(f, sel)); err != nil {
		return nil, err
	}
	return c, nil
}

// checkODIR checks --lambda and --mu and, when either is given, sets
// fl.odir to the fixed regularisation they ask for. It leaves a missing or
// unknown --method to the checks that follow.
func (fl *calibrateFlags) checkODIR(cmd *cobra.Command) error {
	changed := cmd.Flags().Changed
	if !changed("lambda") && !changed("mu") {
		return nil
	}
	for _, v := range []struct {
		flag string
		v    float64
	}{{"lambda", fl.lambda}, {"mu", fl.mu}} {
		if !(v.v >= 0) || math.IsInf(v.v, 1) {
			return fmt.Errorf("--%s %v: want a finite number ≥ 0 (0: no regularisation)", v.flag, v.v)
		}
	}
	if m, err := calib.LookupMethod(fl.method); err == nil && m.CheckODIR(&calib.ODIR{}) != nil {
		return fmt.Errorf("--lambda and --mu set dirichlet's regularisation, not %s's: drop them", fl.method)
	}
	fl.odir = &calib.ODIR{Lambda: fl.lambda, Mu: fl.mu}
	return nil
}

// checkFitFlags checks --max-iterations and dirichlet's --variant,
// --folds, --lambda-grid and --mu-grid, and sets fl.dirichlet from them.
// It leaves a missing or unknown --method to the checks that follow.
func (fl *calibrateFlags) checkFitFlags(cmd *cobra.Command) error {
	changed := cmd.Flags().Changed
	if fl.maxIter < 0 {
		return fmt.Errorf("--max-iterations %d: want ≥ 0 (0: the default)", fl.maxIter)
	}
	m, err := calib.LookupMethod(fl.method)
	if err != nil {
		return nil
	}
	if changed("max-iterations") && m.Family != calib.Scaling {
		return fmt.Errorf("--max-iterations caps the iterative fits of the scaling methods, not %s's: drop it", fl.method)
	}
	if changed("max-iterations") && !fl.central {
		return errors.New("--max-iterations caps a central fit; a federated fit runs --rounds rounds: drop it")
	}
	var set []string
	for _, name := range []string{"variant", "folds", "lambda-grid", "mu-grid"} {
		if changed(name) {
			set = append(set, "--"+name)
		}
	}
	if len(set) == 0 {
		return nil
	}
	switch {
	case fl.method != calib.MethodDirichlet:
		return fmt.Errorf("%s set(s) dirichlet's fit, not %s's: drop it", strings.Join(set, ", "), fl.method)
	case !fl.central:
		return fmt.Errorf("%s set(s) a central dirichlet fit; a federated one fits the fixed --lambda and --mu: drop it", strings.Join(set, ", "))
	case fl.folds < 1:
		return fmt.Errorf("--folds %d: want ≥ 2 folds, or 1 for no cross-validation", fl.folds)
	case fl.odir != nil && (changed("folds") || changed("lambda-grid") || changed("mu-grid")):
		return errors.New("--lambda and --mu fix the regularisation that --folds, --lambda-grid and --mu-grid choose: give one or the other")
	}
	fl.dirichlet = &calib.DirichletSettings{Variant: fl.variant, Folds: fl.folds, LambdaGrid: fl.lambdaGrid, MuGrid: fl.muGr}
	if _, err := calib.New(calib.MethodDirichlet, calib.Settings{Dirichlet: fl.dirichlet}); err != nil {
		return fmt.Errorf("--variant, --folds, --lambda-grid, --mu-grid: %w", err)
	}
	return nil
}

// checkCalibrateFlags reports the first flag problem of calibrate.
func checkCalibrateFlags(cmd *cobra.Command, fl *calibrateFlags) error {
	switch {
	case !fl.central:
		return errors.New("calibrate needs --central: fit one calibrator on all calibration rows of --logits")
	case fl.method == "":
		return fmt.Errorf("calibrate needs --method: one of %s", strings.Join(calib.MethodNames(), ", "))
	case fl.logits == "":
		return errors.New("calibrate needs --logits F.npz, the logits file to fit on")
	case strings.TrimSpace(fl.out) == "":
		return errors.New("calibrate needs --out C.json, the calibrator file to write")
	}
	m, err := calib.LookupMethod(fl.method)
	if err != nil {
		return fmt.Errorf("--method %q: want one of %s", fl.method, strings.Join(calib.MethodNames(), ", "))
	}
	binning := m.HasBins() // the binning methods and scalbin
	if cmd.Flags().Changed("bins-exp") && !binning {
		return fmt.Errorf("--bins-exp sets the bins of binning methods, not of %s: drop it", fl.method)
	}
	if binning && (fl.binsExp < 1 || fl.binsExp > calib.MaxMexp) {
		return fmt.Errorf("--bins-exp %d: want M in [1, %d] (2^M bins)", fl.binsExp, calib.MaxMexp)
	}
	return checkOut("--out", fl.out, calibratorOut, fl.logits, fl.fed.partition)
}

// binsExpUsage is the usage of --bins-exp: its range, and the binning
// methods whose default (calib.Method.DefaultMexp) is not the flag's.
func binsExpUsage() string {
	u := fmt.Sprintf("binning methods and scalbin only: use 2^M bins per class (scalbin, eqmass: the fine bins of their equal-mass bins), M in [1, %d]", calib.MaxMexp)
	for _, m := range calib.Methods() {
		switch {
		case m.ExactCentral():
			u += fmt.Sprintf("; without it a central %s fit is exact (no bins) and a federated one takes M = %d", m.Name, m.DefaultMexp())
		case m.HasBins() && m.DefaultMexp() != calib.DefaultMexp:
			u += fmt.Sprintf("; %s defaults to M = %d", m.Name, m.DefaultMexp())
		}
	}
	return u
}

// methodHelp lists the registry's methods, one a line, for help texts.
func methodHelp() string {
	var b strings.Builder
	for _, m := range calib.Methods() {
		fmt.Fprintf(&b, "  %-9s %s\n", m.Name, m.Summary)
	}
	return b.String()
}
