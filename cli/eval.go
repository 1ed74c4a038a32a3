package cli

import (
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
	// adaptive ECE (from each row's top confidence, 8 bytes a row) in
	// every eval but a federated one.
	TopLabel calib.TopLabel `json:"top_label"`
	// BeforeTopLabel is TopLabel of the uncalibrated probabilities; nil
	// without a calibrator.
	BeforeTopLabel *calib.TopLabel `json:"before_top_label,omitempty"`
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
with the file only by 8 bytes a row and calibrator (each row's top
confidence, for the adaptive ECE) beyond a few MiB per core; --bootstrap
and --partition read it whole, as they need every row.

Given --calibrator more than once, eval compares the calibrators in one
table: one row each, with the ε they spent, and "*" marking an accuracy
drop of more than 1 point (the paper's asterisk); --json then prints
{"before": …, "calibrators": [{"file", "method", "epsilon", metrics…}]}.

Every eval but a federated one prints the adaptive ECE, the top-label ECE
over equal-mass bins (tied confidences ordered wrong before right, so it
does not depend on the row order). --json also gives the top-label errors
beyond ECE (key top_label, and before_top_label with a calibrator):
adaptive_ece, maximum (mce), root-mean-square (rmsce) and debiased
(debiased_ce, Kumar et al. 2019) calibration error and the signed gap,
mean confidence − accuracy (> 0: over-confident). --bootstrap N resamples
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
			accs, err := in.measure(cmd.Context(), cals, bins)
			if err != nil {
				return err
			}
			rep, err := evaluate(accs, cals)
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
				paths, err := plotReliability(plotDir, accs, cals)
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
		return in, nil
	}
	a, err := logits.Open(path)
	if err != nil {
		return nil, err
	}
	in.close = a.Close
	a.SetMemoryBudget(memoryBudget(ctx))
	if in.split, in.want, err = evalSplit(a.Has("split"), split, path); err == nil {
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
	return in, nil
}

// measure is measureChunks of the input's rows; it fails when the split
// has none.
func (in *evalInput) measure(ctx context.Context, cals []calib.Calibrator, bins int) ([]*calib.Accumulator, error) {
	accs, err := measureChunksTops(ctx, in.src, cals, bins, true)
	if err != nil {
		if named := (namedFile{}); errors.As(err, &named) {
			return nil, named.error
		}
		return nil, fmt.Errorf("%s: %w", in.path, err)
	}
	if accs[0].N() == 0 {
		return nil, noRows(in.path, in.split, in.want, in.rows)
	}
	return accs, nil
}

// evaluate returns the report of accs, accumulated by measure for cals:
// the uncalibrated metrics (cals[0] is nil) and, when cals has a
// calibrator, the calibrated ones.
func evaluate(accs []*calib.Accumulator, cals []calib.Calibrator) (*evalReport, error) {
	ms, err := metricsOf(accs)
	if err != nil {
		return nil, err
	}
	rep := &evalReport{Metrics: ms[0], Bins: accs[0].Bins(), TopLabel: accs[0].TopLabel()}
	if len(cals) > 1 {
		before := rep.TopLabel
		rep.Metrics, rep.Before, rep.Method = ms[1], &ms[0], cals[1].Method()
		rep.TopLabel, rep.BeforeTopLabel = accs[1].TopLabel(), &before
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
	accs, err := in.measure(ctx, cals, bins)
	if err != nil {
		return err
	}
	ms, err := metricsOf(accs)
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
// that c (nil: softmax) predicts for s, and their adaptive ECE.
func bootstrapEval(rep *evalReport, s *calib.Set, c calib.Calibrator, bins, resamples int, level float64, seed uint64) error {
	p, err := calib.Probabilities(s, c)
	if err != nil {
		return err
	}
	t, err := calib.TopLabelErrors(p, s.Labels, s.Classes, bins)
	if err != nil {
		return err
	}
	rep.TopLabel.AdaptiveECE = t.AdaptiveECE
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
	if a := rep.TopLabel.AdaptiveECE; a != nil {
		line := fmt.Sprintf("adaptive ECE (%d equal-mass bins) %.3f%%", min(rep.Bins, rep.N), 100**a)
		if b := rep.BeforeTopLabel; b != nil && b.AdaptiveECE != nil {
			line = fmt.Sprintf("adaptive ECE (%d equal-mass bins) %.3f%% → %.3f%%", min(rep.Bins, rep.N), 100**b.AdaptiveECE, 100**a)
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	if bs := rep.Bootstrap; bs != nil {
		iv := bs.Intervals
		pct := func(k string) string { return fmt.Sprintf("[%.3f%%, %.3f%%]", 100*iv[k].Lo, 100*iv[k].Hi) }
		_, err := fmt.Fprintf(w, "\n%g%% bootstrap intervals (%d resamples, seed %d): cwECE %s, ECE %s, accuracy [%.2f%%, %.2f%%], NLL [%.4f, %.4f]\nadaptive ECE %s, signed gap %+.3f%% (> 0: over-confident) %s\n",
			100*bs.Level, bs.Resamples, bs.Seed, pct("cwece"), pct("ece"), 100*iv["accuracy"].Lo, 100*iv["accuracy"].Hi,
			iv["nll"].Lo, iv["nll"].Hi, pct("adaptive_ece"), 100*rep.TopLabel.SignedGap, pct("signed_gap"))
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

// accuracyWarning is dropWarning for calibrator c fitted centrally on the
// rows fitted of f: measured on f's test rows, or on the fitted rows when
// f has no split column or no test rows.
func accuracyWarning(ctx context.Context, f *logits.File, fitted rowSel, c calib.Calibrator) (string, error) {
	sel, on := fitted, "the fitted rows"
	if test := selectSplit(logits.SplitTest); f.Split != nil && test.count(f) > 0 {
		sel, on = test, "the test rows"
	}
	accs, err := measure(ctx, f, sel, []calib.Calibrator{nil, c}, 0)
	if err != nil {
		return "", err
	}
	ms, err := metricsOf(accs)
	if err != nil {
		return "", err
	}
	return dropWarning(ms[0], ms[1], on), nil
}
