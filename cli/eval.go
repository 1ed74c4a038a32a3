package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/calib/diagram"
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
	// Before holds the uncalibrated metrics; nil without a calibrator.
	Before *calib.Metrics `json:"before,omitempty"`
}

func newEvalCmd() *cobra.Command {
	var (
		logitsPath, calibPath, split, plotDir string
		bins                                  int
		asJSON                                bool
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
brier at the top level.`,
		Example: `  fedcalib eval --logits cifar10.npz
  fedcalib eval --logits cifar10.npz --calibrator bbq.json --json
  fedcalib eval --logits cifar10.npz --split all --bins 20`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if logitsPath == "" {
				return fmt.Errorf("eval needs --logits F.npz, the logits file to evaluate")
			}
			if bins < 1 {
				return fmt.Errorf("--bins is %d: want a positive number of bins", bins)
			}
			f, err := logits.Read(logitsPath)
			if err != nil {
				return err
			}
			splitName, rows, err := evalRows(f, split, logitsPath)
			if err != nil {
				return err
			}
			s := f.Set(rows)
			var c calib.Calibrator
			if calibPath != "" {
				if c, _, err = calib.ReadFile(calibPath); err != nil {
					return err
				}
			}
			rep, err := evaluate(s, c, bins)
			if err != nil {
				return fmt.Errorf("%s: %w", logitsPath, err)
			}
			rep.Split = splitName
			out := cmd.OutOrStdout()
			if plotDir != "" {
				paths, err := plotReliability(plotDir, s, c, bins)
				if err != nil {
					return err
				}
				if !asJSON {
					fmt.Fprintf(out, "reliability diagrams: %s\n", strings.Join(paths, ", "))
				}
			}
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
	fl.StringVar(&calibPath, "calibrator", "", "calibrator sidecar file (JSON) to apply before measuring; the uncalibrated metrics are shown too")
	fl.StringVar(&split, "split", "", `rows to evaluate: test, calibration or all (default test when the file has a split column, else all)`)
	fl.IntVar(&bins, "bins", calib.DefaultMetricBins, "number of equal-width bins of cwECE and ECE")
	fl.BoolVar(&asJSON, "json", false, "print the metrics as JSON (fractions, not %)")
	fl.StringVar(&plotDir, "plot", "", "also draw reliability diagrams (top label and per class, before and after, PNG and SVG) into this directory")
	return cmd
}

// evalRows returns the name and indices of the rows that split selects.
func evalRows(f *logits.File, split, path string) (string, []int, error) {
	var want int
	switch split {
	case "":
		if f.Split == nil {
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
		return "", nil, fmt.Errorf("--split %q: want test, calibration or all", split)
	}
	if want != logits.AllRows && f.Split == nil {
		return "", nil, fmt.Errorf("%s has no split column, so it has no %s rows: pass --split all", path, split)
	}
	rows := f.Rows(want)
	if len(rows) == 0 {
		return "", nil, fmt.Errorf("%s has no %s rows (split %d): pass another --split", path, split, want)
	}
	return split, rows, nil
}

// evaluate measures s uncalibrated and, when c is not nil, calibrated.
func evaluate(s *calib.Set, c calib.Calibrator, bins int) (*evalReport, error) {
	before, err := calib.EvaluateSet(s, nil, bins)
	if err != nil {
		return nil, err
	}
	rep := &evalReport{Metrics: before, Bins: bins}
	if c == nil {
		return rep, nil
	}
	after, err := calib.EvaluateSet(s, c, bins)
	if err != nil {
		return nil, err
	}
	rep.Metrics, rep.Before, rep.Method = after, &before, c.Method()
	return rep, nil
}

// plotReliability draws the reliability diagrams of s before and, when c
// is not nil, after calibration into dir.
func plotReliability(dir string, s *calib.Set, c calib.Calibrator, bins int) ([]string, error) {
	rel := func(c calib.Calibrator) (*calib.Reliability, error) {
		p, err := calib.Probabilities(s, c)
		if err != nil {
			return nil, err
		}
		return calib.NewReliability(p, s.Labels, s.Classes, bins)
	}
	before, err := rel(nil)
	if err != nil {
		return nil, err
	}
	var after *calib.Reliability
	title := "Uncalibrated"
	if c != nil {
		if after, err = rel(c); err != nil {
			return nil, err
		}
		title = c.Method()
	}
	return diagram.Write(dir, before, after, diagram.Options{Title: title})
}

// printEval writes rep as a readable table.
func printEval(w io.Writer, path string, rep *evalReport) error {
	fmt.Fprintf(w, "%s: %d %s examples, %d classes, %d bins\n\n", path, rep.N, rep.Split, rep.Classes, rep.Bins)
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
	return tw.Flush()
}
