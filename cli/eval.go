package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/calib/diagram"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// evalReport is what `fedcalib eval --json` prints: the metrics of the
// evaluated probabilities (calibrated when a calibrator is given) at the
// top level, and the uncalibrated metrics under "before" then.
type evalReport struct {
	calib.Metrics
	// Split names the evaluated rows: "test", "calibration" or "all".
	Split string `json:"split"`
	// Bins is the number of equal-width bins of cwECE and ECE.
	Bins int `json:"bins"`
	// Method is the calibrator's method; empty without a calibrator.
	Method string `json:"method,omitempty"`
	// ClassNames names the classes in label order, from the logits file
	// or else the calibrator; nil when neither names them.
	ClassNames []string `json:"class_names,omitempty"`
	// Before holds the uncalibrated metrics; nil without a calibrator.
	Before *calib.Metrics `json:"before,omitempty"`
	// TopLabel holds the top-label calibration errors beyond ECE of the
	// evaluated (calibrated, with a calibrator) probabilities; the
	// adaptive ECE and the KS error (from each row's top confidence, 8
	// bytes a row) in every eval but a federated one.
	TopLabel calib.TopLabel `json:"top_label"`
	// BeforeTopLabel is TopLabel of the uncalibrated probabilities; nil
	// without a calibrator.
	BeforeTopLabel *calib.TopLabel `json:"before_top_label,omitempty"`
	// Classwise holds the classwise errors over equal-mass bins of the
	// evaluated probabilities; nil where they were not computed (a
	// federated eval).
	Classwise *calib.Classwise `json:"classwise,omitempty"`
	// BeforeClasswise is Classwise of the uncalibrated probabilities; nil
	// without a calibrator.
	BeforeClasswise *calib.Classwise `json:"before_classwise,omitempty"`
	// Bootstrap holds --bootstrap's intervals of every metric of the
	// evaluated probabilities; nil without --bootstrap.
	Bootstrap *bootstrapReport `json:"bootstrap,omitempty"`
}

// bootstrapReport is what eval --bootstrap adds.
type bootstrapReport struct {
	Resamples int             `json:"resamples"`
	Level     float64         `json:"level"`
	Seed      uint64          `json:"seed"`
	Intervals calib.Bootstrap `json:"intervals"`
}

func newEvalCmd() *cobra.Command {
	var (
		logitsPath, split, plotDir, partPath string
		calibPaths                           []string
		bins, resamples                      int
		level                                float64
		seed                                 uint64
		asJSON                               bool
		input                                inputKind
	)
	cmd := &cobra.Command{
		Use:   "eval --logits F.npz [--calibrator C.json]",
		Short: "Measure calibration (cwECE, ECE) and accuracy of logits, optionally calibrated",
		Long: `eval measures the classwise ECE (cwECE, the primary metric), top-label
ECE, accuracy, negative log-likelihood and Brier score of the softmax
probabilities of a logits file, or, with --calibrator, of the probabilities
the calibrator predicts (and then also of the uncalibrated ones, as "before").

Both ECEs use equal-width bins: a probability v falls in bin
min(floor(v·bins), bins−1). The table prints cwECE, ECE and accuracy in %;
--json prints fractions, with keys n, classes, accuracy, cwece, ece, nll and
brier at the top level. The class names of the logits file (its classes
array) or else of the calibrator head the report (class_names in JSON);
names that differ between the two, in number or order, are an error.

--partition takes the rows' splits from a partition file (as "fedcalib
calibrate --partition" does), so --split test evaluates on the union of the
clients' test splits.

eval reads the logits file a block of rows at a time, so its memory grows
with the file only by 8 bytes a row and calibrator beyond a few MiB per
core and 256 MiB: each row's top confidence (for the adaptive ECE and KS
error), and its class probabilities for the classwise equal-mass errors,
as many classes a pass over the file as fit in 256 MiB (one pass for
40,000 rows of 400 classes or 1,500,000 rows of 10 classes, with a
calibrator), and down to one class a pass beyond. --bootstrap and
--partition read the file whole, as they need every row.

Given --calibrator more than once, eval compares the calibrators in one
table: one row each, with the ε they spent, and "*" marking an accuracy
drop of more than 1 point (the paper's asterisk); --json then prints
{"before": …, "calibrators": [{"file", "method", "epsilon", metrics…}]}.

Every eval but a federated one prints the adaptive ECE, the top-label ECE
over equal-mass bins (tied confidences ordered wrong before right, so it
does not depend on the row order), and the Kolmogorov–Smirnov error
(Gupta et al. 2021: the largest gap between the cumulative sums of
confidence and accuracy, read where the confidence changes); and, over
each class's equal-mass bins (ties: rows not of the class first), the
adaptive cwECE, the debiased classwise error of Kumar et al. (2019) and
the mean classwise KS error. --json also gives the top-label errors
beyond ECE (key top_label, and before_top_label with a calibrator):
adaptive_ece, ks, maximum (mce), root-mean-square (rmsce) and debiased
(debiased_ce, equal-width bins) calibration error and the signed gap,
mean confidence − accuracy (> 0: over-confident); and the classwise ones
(key classwise, and before_classwise): adaptive_cwece, debiased_cwce and
cw_ks. --bootstrap N resamples
the examples N times (seeded by --seed) and gives percentile intervals at
--level for every metric; docs/CALIBRATION.md has every formula.`,
		Example: `  fedcalib eval --logits cifar10.npz
  fedcalib eval --logits cifar10.npz --calibrator bbq.json --json
  fedcalib eval --logits cifar10.npz --split all --bins 20
  fedcalib eval --logits cifar10.npz --calibrator temp.json --bootstrap 1000 --seed 7
  fedcalib eval --logits mnist.npz --partition p.json --calibrator temp.json --calibrator bbq.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if logitsPath == "" {
				return fmt.Errorf("eval needs --logits F.npz, the logits file to evaluate")
			}
			if bins < 1 {
				return fmt.Errorf("--bins is %d: want a positive number of bins", bins)
			}
			switch changed := cmd.Flags().Changed; {
			case changed("bootstrap") && (resamples < 1 || resamples > calib.MaxBootstrap):
				return fmt.Errorf("--bootstrap is %d: want 1 to %d resamples (e.g. 1000)", resamples, calib.MaxBootstrap)
			case !(level > 0 && level < 1):
				return fmt.Errorf("--level is %v: want a confidence level in (0, 1), e.g. 0.95", level)
			case !changed("bootstrap") && (changed("level") || changed("seed")):
				return fmt.Errorf("--level and --seed set up --bootstrap: give --bootstrap N too")
			case changed("bootstrap") && len(calibPaths) > 1:
				return fmt.Errorf("--bootstrap intervals are for one calibrator: give --calibrator at most once")
			}
			if plotDir != "" {
				if err := checkOutDir("--plot", plotDir, append([]string{logitsPath, partPath}, calibPaths...)...); err != nil {
					return err
				}
			}
			// --bootstrap resamples rows and --partition selects them: both
			// need the file in memory; otherwise it is read a block at a time.
			in, err := openEvalInput(cmd.Context(), logitsPath, input, partPath, split, resamples > 0 || partPath != "")
			if err != nil {
				return err
			}
			defer in.close()
			b := terminalBar(cmd.ErrOrStderr(), "eval", "")
			defer b.finish()
			if len(calibPaths) > 1 {
				if plotDir != "" {
					return fmt.Errorf("--plot draws one calibrator: give --calibrator once")
				}
				return compareCalibrators(cmd.Context(), cmd.OutOrStdout(), b, in, calibPaths, bins, asJSON)
			}
			steps := 1 + len(calibPaths)
			if plotDir != "" {
				steps++
			}
			b.set(0, steps)
			cals := []calib.Calibrator{nil}
			names := classNames{names: in.names, from: logitsPath}
			if len(calibPaths) == 1 {
				c, file, err := calib.ReadFile(calibPaths[0])
				if err != nil {
					return err
				}
				if err := names.add(calibPaths[0], file.Provenance.ClassNames); err != nil {
					return err
				}
				if err := checkFitted(calibPaths[0], file, string(in.kind), logitsPath); err != nil {
					return err
				}
				cals = append(cals, c)
			}
			m, err := in.measure(cmd.Context(), cals, bins, true)
			if err != nil {
				return err
			}
			rep, err := evaluate(m, cals)
			if err != nil {
				return fmt.Errorf("%s: %w", logitsPath, err)
			}
			rep.Split = in.split
			rep.ClassNames = names.names
			if resamples > 0 {
				b.describe("eval: bootstrap")
				if err := bootstrapEval(rep, setOf(in.f, in.sel), cals[len(cals)-1], bins, resamples, level, seed); err != nil {
					return fmt.Errorf("%s: %w", logitsPath, err)
				}
			}
			b.set(1+len(calibPaths), steps)
			out := cmd.OutOrStdout()
			if plotDir != "" {
				b.describe("eval: plotting")
				paths, err := plotReliability(plotDir, m.accs, cals)
				if err != nil {
					return err
				}
				b.set(steps, steps)
				if !asJSON {
					fmt.Fprintf(out, "reliability diagrams: %s\n", strings.Join(paths, ", "))
				}
			}
			b.finish()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return printEval(out, logitsPath, rep)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&logitsPath, "logits", "", "logits file (.npz with logits [N, C], labels [N], optional split [N]) (required)")
	registerInput(fl, &input)
	fl.StringArrayVar(&calibPaths, "calibrator", nil, "calibrator sidecar file (JSON) to apply before measuring; the uncalibrated metrics are shown too (repeat to compare several)")
	fl.StringVar(&partPath, "partition", "", "take the rows' client and split from this partition file instead of the logits file")
	fl.StringVar(&split, "split", "", `rows to evaluate: test, calibration or all (default test when the file has a split column, else all)`)
	fl.IntVar(&bins, "bins", calib.DefaultMetricBins, "number of equal-width bins of cwECE and ECE")
	fl.BoolVar(&asJSON, "json", false, "print the metrics as JSON (fractions, not %)")
	fl.IntVar(&resamples, "bootstrap", 0, fmt.Sprintf("also give percentile bootstrap confidence intervals of every metric from this many resamples of the examples (1 to %d, e.g. 1000); holds every probability in memory", calib.MaxBootstrap))
	fl.Float64Var(&level, "level", calib.DefaultBootstrapLevel, "confidence level of --bootstrap's intervals")
	fl.Var((*seedValue)(&seed), "seed", "seed of --bootstrap's resampling, 0 to 2^64−1; the same seed gives the same intervals")
	fl.StringVar(&plotDir, "plot", "", "also draw reliability diagrams (top label and per class, before and after, PNG and SVG) into this directory")
	registerFederatedEval(cmd)
	return cmd
}

// evalSplit returns the name and the split value (logits.AllRows for
// every row) of the rows that split selects, or an error when the file
// at path has no split column (hasSplit) and split needs one.
func evalSplit(hasSplit bool, split, path string) (string, int, error) {
	var want int
	switch split {
	case "":
		if !hasSplit {
			split, want = "all", logits.AllRows
		} else {
			split, want = "test", logits.SplitTest
		}
	case "all":
		want = logits.AllRows
	case "test":
		want = logits.SplitTest
	case "calibration":
		want = logits.SplitCalibration
	default:
		return "", 0, fmt.Errorf("--split %q: want test, calibration or all", split)
	}
	if want != logits.AllRows && !hasSplit {
		return "", 0, fmt.Errorf("%s has no split column, so it has no %s rows: pass --split all", path, split)
	}
	return split, want, nil
}

// noRows is the error of a selected split without rows, in a file of
// total rows: an empty file says so, since no --split helps.
func noRows(path, split string, want, total int) error {
	if total == 0 {
		return fmt.Errorf("%s holds no rows: there is nothing to measure; make it again from data with examples (fedcalib infer)", path)
	}
	return fmt.Errorf("%s has no %s rows (split %d) among its %d: pass another --split", path, split, want, total)
}

// evalRows returns the name and indices of the rows that split selects.
func evalRows(f *logits.File, split, path string) (string, []int, error) {
	name, want, err := evalSplit(f.Split != nil, split, path)
	if err != nil {
		return "", nil, err
	}
	rows := f.Rows(want)
	if len(rows) == 0 {
		return "", nil, noRows(path, name, want, f.Len())
	}
	return name, rows, nil
}

// evalInput is what eval measures: the rows of one split of a logits
// file, held in memory (f and sel) or read a block at a time (f nil).
type evalInput struct {
	path    string
	split   string // the split's name: test, calibration or all
	want    int    // the split's value, or logits.AllRows
	classes int
	rows    int // of the file
	names   []string
	src     chunkSource
	f       *logits.File
	sel     rowSel
	close   func() error
	// kind is what the rows are read as: --input, or what the file
	// records (recordedInput).
	kind inputKind
	// reopen returns a new source of the same rows, from the start, and
	// the function that closes it, for another pass over them.
	reopen func() (chunkSource, func() error, error)
	// keepBytes, when not 0, replaces classwiseBytes (tests).
	keepBytes int64
	// hasSplit is whether the file has a split column.
	hasSplit bool
}

// openEvalInput opens the logits file at path, holding input, for
// measuring the rows split selects: read whole when whole is set (and
// then with the client and split columns of the partition file partPath
// when it is not empty), else a block at a time; within the memory
// budget of ctx.
func openEvalInput(ctx context.Context, path string, input inputKind, partPath, split string, whole bool) (*evalInput, error) {
	in := &evalInput{path: path, close: func() error { return nil }}
	if whole {
		f, err := readLogitsIn(ctx, path, input)
		if err != nil {
			return nil, err
		}
		boundHeap(f)
		if partPath != "" {
			if err := applyPartition(f, partPath, path); err != nil {
				return nil, err
			}
		}
		if in.split, in.want, err = evalSplit(f.Split != nil, split, path); err != nil {
			return nil, err
		}
		in.f, in.sel, in.classes, in.names, in.kind, in.rows = f, selectSplit(in.want), f.Classes, f.ClassNames, inputKind(f.Input), f.Len()
		in.src = newFileChunks(f, in.sel)
		in.reopen = func() (chunkSource, func() error, error) {
			return newFileChunks(f, in.sel), func() error { return nil }, nil
		}
		return in, nil
	}
	a, err := logits.Open(path)
	if err != nil {
		return nil, err
	}
	in.close = a.Close
	a.SetMemoryBudget(memoryBudget(ctx))
	in.hasSplit = a.Has("split")
	if in.split, in.want, err = evalSplit(in.hasSplit, split, path); err == nil {
		in.names, err = a.ClassNames()
	}
	var recorded string
	if err == nil {
		recorded, err = a.Input()
	}
	if err == nil {
		input, err = recordedInput(input, recorded, path)
	}
	var blocks *logits.Blocks
	if err == nil {
		blocks, err = a.Blocks()
	}
	if err != nil {
		a.Close()
		return nil, err
	}
	in.close = func() error { return errors.Join(blocks.Close(), a.Close()) }
	in.classes, in.rows = a.NumClasses(), a.Len()
	in.kind = input
	in.src = &streamChunks{blocks: blocks, classes: in.classes, split: in.want, input: input, rows: a.Len()}
	in.reopen = func() (chunkSource, func() error, error) {
		b, err := a.Blocks()
		if err != nil {
			return nil, nil, err
		}
		return &streamChunks{blocks: b, classes: in.classes, split: in.want, input: input, rows: a.Len()}, b.Close, nil
	}
	return in, nil
}

// classwiseBytes is the memory that eval's records of class
// probabilities, for the classwise equal-mass errors, may take in one
// pass over the rows before it takes more passes; past it, memory grows
// by 8 bytes a row and calibrator, one class a pass (classwisePlan).
// Another pass takes every softmax (or calibrator) again, as much CPU as
// the first: 256 MiB keeps 10⁶ rows × 10 classes and 2·10⁵ × 100 in one
// pass (docs/BENCHMARKS.md, "eval's CPU time").
const classwiseBytes = 256 << 20

// classwisePlan returns how many classes the first pass over rows rows
// keeps the probabilities of for sets sets of probabilities (beside their
// top confidences) and how many each later pass keeps: as many as fit in
// classwiseBytes at 8 bytes a row, class and set, and at least one a
// pass.
func classwisePlan(rows, sets, classes int, budget int64) (first, per int) {
	// 8 bytes a row, and about 128 for the headers of a class's records.
	fit := budget / max(1, (8*int64(rows)+128)*int64(sets))
	return int(min(int64(classes), max(0, fit-1))), int(min(int64(classes), max(1, fit)))
}

// measure is measureChunks of the input's rows, keeping their top
// confidences (for the adaptive ECE and KS error); it fails when the
// split has none. With classwise, it also returns the classwise
// equal-mass errors of each calibrator, from the rows' class
// probabilities kept a group of classes at a time (classwisePlan), the
// first group in the same pass, each other group in another pass over
// the rows.
func (in *evalInput) measure(ctx context.Context, cals []calib.Calibrator, bins int, classwise bool) (*measured, error) {
	fail := func(err error) error {
		if named := (namedFile{}); errors.As(err, &named) {
			return named.error
		}
		return fmt.Errorf("%s: %w", in.path, err)
	}
	first, per := 0, 0
	if classwise {
		first, per = classwisePlan(in.rows, len(cals), in.classes, cmp.Or(in.keepBytes, classwiseBytes))
	}
	// The records of a pass, and the file when it is held.
	held := (8*int64(in.rows) + 128) * int64(len(cals)) * int64(1+max(first, per))
	if in.f != nil {
		held += int64(4 * len(in.f.Logits))
	}
	boundHeapHeld(held)
	// The rows the split selects, when known without a pass: a guess
	// that is too large would reserve memory for nothing.
	rows := 0
	if in.f != nil {
		rows = in.sel.count(in.f)
	} else if in.want == logits.AllRows || !in.hasSplit {
		rows = in.rows
	}
	accs, err := measureChunksKeep(ctx, in.src, cals, bins, keepSpec{tops: true, hi: first, rows: rows})
	if err != nil {
		return nil, fail(err)
	}
	if accs[0].N() == 0 {
		return nil, noRows(in.path, in.split, in.want, in.rows)
	}
	m := &measured{accs: accs, top: make([]calib.TopLabel, len(cals))}
	parts := make([][]calib.ClassErrors, len(cals))
	for a, acc := range accs {
		m.top[a] = acc.TopLabel()
		if classwise {
			parts[a] = acc.ClassErrors(0)
		}
		acc.Forget() // before the records of another pass
	}
	if !classwise {
		return m, nil
	}
	for lo := first; lo < in.classes; lo += per {
		src, closeSrc, err := in.reopen()
		if err != nil {
			return nil, err
		}
		// One equal-width bin: these passes want the records, not the
		// statistics, whose memory follows classes × bins.
		more, err := measureChunksKeep(ctx, src, cals, 1, keepSpec{lo: lo, hi: min(lo+per, in.classes), rows: accs[0].N()})
		if err := errors.Join(err, closeSrc()); err != nil {
			return nil, fail(err)
		}
		for a := range more {
			parts[a] = append(parts[a], more[a].ClassErrors(accs[0].Bins())...)
		}
	}
	m.classwise = make([]calib.Classwise, len(cals))
	for a := range cals {
		for _, p := range parts[a] {
			if len(parts[a]) != in.classes || p.N != accs[a].N() {
				return nil, fmt.Errorf("%s changed while it was read: another pass over its rows found other rows", in.path)
			}
		}
		m.classwise[a] = calib.CombineClasswise(parts[a])
	}
	return m, nil
}

// measured is what evalInput.measure returns for each calibrator: the
// statistics of its probabilities, their top-label errors (with the
// adaptive ECE and KS error) and, when asked for, their classwise
// equal-mass errors (else nil).
type measured struct {
	accs      []*calib.Accumulator
	top       []calib.TopLabel
	classwise []calib.Classwise
}

// evaluate returns the report of m, measured for cals: the uncalibrated
// metrics (cals[0] is nil) and, when cals has a calibrator, the
// calibrated ones.
func evaluate(m *measured, cals []calib.Calibrator) (*evalReport, error) {
	ms, err := metricsOf(m.accs)
	if err != nil {
		return nil, err
	}
	rep := &evalReport{Metrics: ms[0], Bins: m.accs[0].Bins(), TopLabel: m.top[0]}
	if m.classwise != nil {
		rep.Classwise = &m.classwise[0]
	}
	if len(cals) > 1 {
		rep.Metrics, rep.Before, rep.Method = ms[1], &ms[0], cals[1].Method()
		rep.TopLabel, rep.BeforeTopLabel = m.top[1], &m.top[0]
		if m.classwise != nil {
			rep.Classwise, rep.BeforeClasswise = &m.classwise[1], &m.classwise[0]
		}
	}
	return rep, nil
}

// applyPartition replaces f's client and split columns by those of the
// partition file at path, after checking it was made for f's labels.
func applyPartition(f *logits.File, path, logitsPath string) error {
	p, err := federation.ReadPartition(path)
	if err != nil {
		return err
	}
	if err := p.Check(f.IntLabels(), f.Classes); err != nil {
		return fmt.Errorf("%s and %s: %w", path, logitsPath, err)
	}
	f.Client, f.Split = p.Columns()
	return nil
}

// calibratorRow is one calibrator of a comparison.
type calibratorRow struct {
	File    string   `json:"file"`
	Method  string   `json:"method"`
	Epsilon *float64 `json:"epsilon"` // nil when not private
	calib.Metrics
}

// compareCalibrators evaluates several calibrator files on the rows sel
// of f, in one pass, and prints one row each, showing its progress on b
// (which may be nil).
func compareCalibrators(ctx context.Context, w io.Writer, b *bar, in *evalInput, paths []string, bins int, asJSON bool) error {
	logitsPath, split := in.path, in.split
	b.set(0, 1)
	cals := []calib.Calibrator{nil}
	rows := make([]calibratorRow, len(paths))
	names := classNames{names: in.names, from: logitsPath}
	for i, path := range paths {
		c, file, err := calib.ReadFile(path)
		if err != nil {
			return err
		}
		if c.Classes() != in.classes {
			return fmt.Errorf("%s is for %d classes but %s has %d", path, c.Classes(), logitsPath, in.classes)
		}
		if err := names.add(path, file.Provenance.ClassNames); err != nil {
			return err
		}
		if err := checkFitted(path, file, string(in.kind), logitsPath); err != nil {
			return err
		}
		cals = append(cals, c)
		rows[i] = calibratorRow{File: path, Method: c.Method()}
		if file.Privacy != nil {
			eps := file.Privacy.Total() // with a selection, its total
			rows[i].Epsilon = &eps
		}
	}
	m, err := in.measure(ctx, cals, bins, false)
	if err != nil {
		return err
	}
	ms, err := metricsOf(m.accs)
	if err != nil {
		return fmt.Errorf("%s: %w", logitsPath, err)
	}
	before := ms[0]
	for i := range rows {
		rows[i].Metrics = ms[1+i]
	}
	b.set(1, 1)
	b.finish()
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Split       string          `json:"split"`
			Bins        int             `json:"bins"`
			ClassNames  []string        `json:"class_names,omitempty"`
			Before      calib.Metrics   `json:"before"`
			Calibrators []calibratorRow `json:"calibrators"`
		}{split, bins, names.names, before, rows})
	}
	printEvalHead(w, logitsPath, before.N, split, before.Classes, bins, names.names)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "calibrator\tcwECE\tECE\taccuracy\tNLL\tε\t")
	line := func(name string, m calib.Metrics, eps *float64) {
		e, star := "-", ""
		if eps != nil {
			e = strconv.FormatFloat(*eps, 'g', 6, 64) // 0.9999999999999999 reads as 1
		}
		if calib.AccuracyDropped(before, m) {
			star = "*"
		}
		fmt.Fprintf(tw, "%s\t%.3f%%\t%.3f%%\t%.2f%%%s\t%.4f\t%s\t\n", name, 100*m.CWECE, 100*m.ECE, 100*m.Accuracy, star, m.NLL, e)
	}
	line("uncalibrated", before, nil)
	for _, r := range rows {
		line(strings.TrimSuffix(filepath.Base(r.File), ".json"), r.Metrics, r.Epsilon)
	}
	return tw.Flush()
}

// plotReliability draws into dir the reliability diagrams of accs,
// accumulated by measure for cals: before and, when cals has a
// calibrator, after calibration.
func plotReliability(dir string, accs []*calib.Accumulator, cals []calib.Calibrator) ([]string, error) {
	var after *calib.Reliability
	title := "Uncalibrated"
	if len(cals) > 1 {
		after, title = accs[1].Reliability(), cals[1].Method()
	}
	return diagram.Write(dir, accs[0].Reliability(), after, diagram.Options{Title: title})
}

// bootstrapEval adds to rep the bootstrap intervals of the probabilities
// that c (nil: softmax) predicts for s.
func bootstrapEval(rep *evalReport, s *calib.Set, c calib.Calibrator, bins, resamples int, level float64, seed uint64) error {
	p, err := calib.Probabilities(s, c)
	if err != nil {
		return err
	}
	iv, err := calib.BootstrapIntervals(p, s.Labels, s.Classes, bins, resamples, level, seed)
	if err != nil {
		return err
	}
	rep.Bootstrap = &bootstrapReport{Resamples: resamples, Level: level, Seed: seed, Intervals: iv}
	return nil
}

// printEvalHead writes the first lines of eval's report: what was
// evaluated and, when known, the class names.
func printEvalHead(w io.Writer, path string, n int, split string, classes, bins int, names []string) {
	fmt.Fprintf(w, "%s: %d %s examples, %d classes, %d bins\n", path, n, split, classes, bins)
	if len(names) > 0 {
		fmt.Fprintf(w, "class names: %s\n", strings.Join(names, ", "))
	}
	fmt.Fprintln(w)
}

// printEval writes rep as a readable table.
func printEval(w io.Writer, path string, rep *evalReport) error {
	printEvalHead(w, path, rep.N, rep.Split, rep.Classes, rep.Bins, rep.ClassNames)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tcwECE\tECE\taccuracy\tNLL\tBrier\t")
	row := func(name string, m calib.Metrics) {
		fmt.Fprintf(tw, "%s\t%.3f%%\t%.3f%%\t%.2f%%\t%.4f\t%.4f\t\n", name, 100*m.CWECE, 100*m.ECE, 100*m.Accuracy, m.NLL, m.Brier)
	}
	if rep.Before == nil {
		row("uncalibrated", rep.Metrics)
	} else {
		row("uncalibrated", *rep.Before)
		row(rep.Method, rep.Metrics)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// pct prints a fraction in %, with its value before calibration
	// first when there is one.
	pct := func(before *float64, v float64) string {
		if before != nil {
			return fmt.Sprintf("%.3f%% → %.3f%%", 100**before, 100*v)
		}
		return fmt.Sprintf("%.3f%%", 100*v)
	}
	if a := rep.TopLabel.AdaptiveECE; a != nil {
		var ba, bk *float64
		if b := rep.BeforeTopLabel; b != nil {
			ba, bk = b.AdaptiveECE, b.KS
		}
		line := fmt.Sprintf("adaptive ECE (%d equal-mass bins) %s", min(rep.Bins, rep.N), pct(ba, *a))
		if k := rep.TopLabel.KS; k != nil {
			line += ", KS error " + pct(bk, *k)
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	if cw := rep.Classwise; cw != nil {
		var b calib.Classwise
		have := rep.BeforeClasswise != nil
		if have {
			b = *rep.BeforeClasswise
		}
		at := func(v float64) *float64 {
			if !have {
				return nil
			}
			return &v
		}
		if _, err := fmt.Fprintf(w, "classwise, %d equal-mass bins: adaptive cwECE %s, debiased (Kumar et al.) %s, KS error %s\n",
			min(rep.Bins, rep.N), pct(at(b.AdaptiveCWECE), cw.AdaptiveCWECE), pct(at(b.DebiasedCWCE), cw.DebiasedCWCE), pct(at(b.KS), cw.KS)); err != nil {
			return err
		}
	}
	if bs := rep.Bootstrap; bs != nil {
		iv := bs.Intervals
		pct := func(k string) string { return fmt.Sprintf("[%.3f%%, %.3f%%]", 100*iv[k].Lo, 100*iv[k].Hi) }
		_, err := fmt.Fprintf(w, "\n%g%% bootstrap intervals (%d resamples, seed %d): cwECE %s, ECE %s, accuracy [%.2f%%, %.2f%%], NLL [%.4f, %.4f]\nadaptive ECE %s, KS error %s, signed gap %+.3f%% (> 0: over-confident) %s\nadaptive cwECE %s, debiased cwCE %s, classwise KS error %s\n",
			100*bs.Level, bs.Resamples, bs.Seed, pct("cwece"), pct("ece"), 100*iv["accuracy"].Lo, 100*iv["accuracy"].Hi,
			iv["nll"].Lo, iv["nll"].Hi, pct("adaptive_ece"), pct("ks"), 100*rep.TopLabel.SignedGap, pct("signed_gap"),
			pct("adaptive_cwece"), pct("debiased_cwce"), pct("cw_ks"))
		return err
	}
	return nil
}

// dropWarning returns the warning that ends calibrate's summary line when
// accuracy measured on the rows named by on drops from before to after by
// more than calib.AccuracyDropMark (calib.AccuracyDropped), else "".
func dropWarning(before, after calib.Metrics, on string) string {
	if !calib.AccuracyDropped(before, after) {
		return ""
	}
	return fmt.Sprintf("; WARNING: accuracy on %s drops from %.2f%% to %.2f%%, by more than %g point",
		on, 100*before.Accuracy, 100*after.Accuracy, 100*calib.AccuracyDropMark)
}
