package cli

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/internal/fileio"
	"github.com/fedcalib/fedcalib/report"
)

// reportOut is the kind of file --out of report and --report write.
var reportOut = outKind{"a report", ".html"}

func newReportCmd() *cobra.Command {
	var (
		logitsPath, partPath, split, out, ledgerPath, modelPath, title string
		calibPaths                                                     []string
		bins, resamples                                                int
		level, maxDrop, minGain                                        float64
		seed                                                           uint64
		input                                                          inputKind
	)
	cmd := &cobra.Command{
		Use:   "report --logits F.npz [--calibrator C.json ...] --out report.html",
		Short: "Write a calibration report: one self-contained HTML page with the diagrams, metrics and records",
		Long: `report writes one HTML file to attach to a CI run or a pull request: inline
CSS and SVG, no script, nothing loaded from anywhere, readable on a phone
and printable. For the rows of --split of a logits file (default test when
it has a split column, else all; --partition takes the splits from a
partition file) and each --calibrator, it shows:

  the CI gate's verdict on the first calibrator (the bars of "fedcalib
      check": --max-accuracy-drop, --min-cwece-improvement);
  the metrics (cwECE, ECE, adaptive ECE, KS error, adaptive cwECE,
      debiased cwCE, smooth ECE, accuracy, NLL, Brier, the ε a private fit
      spent) with percentile bootstrap intervals at
      --level from --bootstrap resamples seeded by --seed;
  reliability diagrams as the field draws them, uncalibrated and calibrated
      side by side: per-bin accuracy bars with the gap to the diagonal
      shaded and the counts beneath (bins with fewer than max(10, N/100)
      examples faint), with --bins equal-width and equal-mass bins; the
      smoothed diagram of relplot with its bootstrap band; per class;
  each calibrator's fit record (method, parameters summarised, convergence
      where recorded, provenance), its privacy record and, with --ledger,
      the ledger's spend per dataset;
  the provenance: model sha256 (of --model, else from the calibrator file),
      the logits file and its sha256, the fedcalib version and the command.

The same inputs and --seed give the same file. "fedcalib check --report"
and "fedcalib calibrate --report" write the same report.`,
		Example: `  fedcalib report --logits cifar10.npz --calibrator temp.json --out report.html
  fedcalib report --logits mnist.npz --partition p.json --calibrator bbq.json --calibrator temp.json \
      --ledger privacy-ledger.json --model mnist.onnx --out report.html
  fedcalib report --logits cifar10.npz --bins 10 --bootstrap 1000 --seed 7 --out base-model.html`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if logitsPath == "" {
				return fmt.Errorf("report needs --logits F.npz, the logits to report on")
			}
			if out == "" {
				return fmt.Errorf("report needs --out report.html, the file to write")
			}
			if err := checkOut("--out", out, reportOut, append([]string{logitsPath, partPath, ledgerPath, modelPath}, calibPaths...)...); err != nil {
				return err
			}
			if err := checkReportFlags(bins, resamples, level); err != nil {
				return err
			}
			gate := calib.Gate{MaxAccuracyDrop: maxDrop, MinCWECEImprovement: minGain}
			if err := gate.Validate(); err != nil {
				return fmt.Errorf("--max-accuracy-drop, --min-cwece-improvement: %w", err)
			}
			f, err := readLogitsIn(cmd.Context(), logitsPath, input)
			if err != nil {
				return err
			}
			if partPath != "" {
				if err := applyPartition(f, partPath, logitsPath); err != nil {
					return err
				}
			}
			name, rows, err := evalRows(f, split, logitsPath)
			if err != nil {
				return err
			}
			if resamples == 0 {
				resamples = -1 // --bootstrap 0: no intervals (report.Input's 0 is its default)
			}
			in := report.Input{Title: title, Set: f.Set(rows), ClassNames: f.ClassNames, Bins: bins,
				Resamples: resamples, Level: level, Seed: seed, Gate: &gate,
				Data: rowsDescription(logitsPath, len(rows), name)}
			if in.DataSHA256, err = fileio.SHA256(logitsPath); err != nil {
				return err
			}
			if modelPath != "" {
				if in.ModelSHA256, err = fileio.SHA256(modelPath); err != nil {
					return err
				}
			}
			for _, p := range calibPaths {
				c, err := reportCalibrator(in.Set, logitsPath, f.ClassNames, p)
				if err != nil {
					return err
				}
				if in.ClassNames == nil && c.File != nil {
					in.ClassNames = c.File.Provenance.ClassNames
				}
				in.Calibrators = append(in.Calibrators, c)
			}
			if ledgerPath != "" {
				if in.Ledger, err = dp.ReadLedgerFile(ledgerPath); err != nil {
					return err
				}
				in.LedgerPath = ledgerPath
			}
			return writeReport(cmd, out, in)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&logitsPath, "logits", "", "logits file (.npz with logits [N, C], labels [N], optional split [N]) (required)")
	registerInput(fl, &input)
	fl.StringArrayVar(&calibPaths, "calibrator", nil, "calibrator file (JSON) to report on, against the uncalibrated model; repeat to compare several (the first is judged by the gate)")
	fl.StringVar(&partPath, "partition", "", "take the rows' client and split from this partition file instead of the logits file")
	fl.StringVar(&split, "split", "", `rows to report on: test, calibration or all (default test when the file has a split column, else all)`)
	fl.StringVar(&out, "out", "", "the report to write, an .html file (required)")
	fl.StringVar(&ledgerPath, "ledger", "", "privacy ledger file whose spend per dataset the report shows")
	fl.StringVar(&modelPath, "model", "", "the ONNX model the logits came from, whose sha256 the report records (default: the calibrator's provenance)")
	fl.StringVar(&title, "title", "", `the report's title (default "Calibration report")`)
	fl.Float64Var(&maxDrop, "max-accuracy-drop", calib.AccuracyDropMark, "the gate's largest allowed accuracy drop, as a fraction (0.01 = 1 point), as for check")
	fl.Float64Var(&minGain, "min-cwece-improvement", 0, "the gate's smallest required cwECE improvement, as a fraction, as for check")
	registerReportStats(fl, &bins, &resamples, &level, &seed)
	return cmd
}

// rowsDescription describes n rows of split name ("test", "calibration"
// or "all") of the logits file at path.
func rowsDescription(path string, n int, name string) string {
	if name == "all" {
		return fmt.Sprintf("%s, all %d rows", filepath.Base(path), n)
	}
	return fmt.Sprintf("%s, %d %s rows", filepath.Base(path), n, name)
}

// registerReportStats adds the flags of the report's statistics.
func registerReportStats(fl *pflag.FlagSet, bins, resamples *int, level *float64, seed *uint64) {
	fl.IntVar(bins, "bins", calib.DefaultMetricBins, "bins of the metrics and of the reliability diagrams")
	fl.IntVar(resamples, "bootstrap", report.DefaultResamples, fmt.Sprintf("bootstrap resamples of the intervals and of the smoothed diagram's band, 0 for none (at most %d)", calib.MaxBootstrap))
	fl.Float64Var(level, "level", calib.DefaultBootstrapLevel, "confidence level of the intervals and the band")
	fl.Var((*seedValue)(seed), "seed", "seed of the resamples, 0 to 2^64−1; the same seed gives the same report")
}

// checkReportFlags reports the first problem of the statistics flags.
func checkReportFlags(bins, resamples int, level float64) error {
	switch {
	case bins < 1:
		return fmt.Errorf("--bins is %d: want a positive number of bins", bins)
	case resamples < 0 || resamples > calib.MaxBootstrap:
		return fmt.Errorf("--bootstrap is %d: want 0 to %d resamples (e.g. 200)", resamples, calib.MaxBootstrap)
	case !(level > 0 && level < 1):
		return fmt.Errorf("--level is %v: want a confidence level in (0, 1), e.g. 0.95", level)
	}
	return nil
}

// reportCalibrator reads the calibrator file at path and returns its
// probabilities on s, the rows of the logits file logitsPath whose class
// names are names.
func reportCalibrator(s *calib.Set, logitsPath string, names []string, path string) (report.Calibrated, error) {
	c, file, err := calib.ReadFile(path)
	if err != nil {
		return report.Calibrated{}, err
	}
	if c.Classes() != s.Classes {
		return report.Calibrated{}, fmt.Errorf("%s is for %d classes but %s has %d", path, c.Classes(), logitsPath, s.Classes)
	}
	if err := calib.MatchClassNames(logitsPath, names, path, file.Provenance.ClassNames); err != nil {
		return report.Calibrated{}, err
	}
	probs, err := calib.Probabilities(s, c)
	if err != nil {
		return report.Calibrated{}, fmt.Errorf("%s on %s: %w", path, logitsPath, err)
	}
	return report.Calibrated{Label: strings.TrimSuffix(filepath.Base(path), ".json"), Path: path, Probs: probs, File: file}, nil
}

// writeReport builds the report of in, with the tool's version and cmd's
// command line, checks it and writes it atomically to path.
func writeReport(cmd *cobra.Command, path string, in report.Input) error {
	in.Tool = Version()
	in.Command = commandLine(cmd)
	r, err := report.Build(in)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := r.WriteHTML(&buf); err != nil {
		return err
	}
	if err := report.Check(buf.Bytes()); err != nil {
		return fmt.Errorf("%s: %w", path, err) // a defect of the template
	}
	if err := fileio.Write(path, buf.Bytes()); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	_, err = fmt.Fprintf(cmd.ErrOrStderr(), "report: %s\n", path)
	return err
}

// commandLine returns cmd's command line as given: its path and the flags
// set, in the order of their names.
func commandLine(cmd *cobra.Command) string {
	parts := []string{cmd.CommandPath()}
	cmd.Flags().Visit(func(f *pflag.Flag) {
		vals := []string{f.Value.String()}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			vals = sv.GetSlice()
		}
		for _, v := range vals {
			if f.Value.Type() == "bool" {
				parts = append(parts, "--"+f.Name)
				continue
			}
			parts = append(parts, "--"+f.Name, v)
		}
	})
	return strings.Join(parts, " ")
}

// reportFlag is the --report flag of check and calibrate.
type reportFlag struct {
	path string
}

// register adds --report to f; what says what the report is of.
func (rf *reportFlag) register(f *pflag.FlagSet, what string) {
	f.StringVar(&rf.path, "report", "", "also write a calibration report (an .html file, as \"fedcalib report\" writes) of "+what)
}

// check refuses a --report path that cannot be written or is an input.
func (rf *reportFlag) check(inputs ...string) error {
	if rf.path == "" {
		return nil
	}
	return checkOut("--report", rf.path, reportOut, inputs...)
}

// writeCalibrated writes the report of the calibrator file just written
// at calibPath on rows of f (described by rowsDesc), with the privacy
// ledger at ledgerPath when not empty.
func (rf *reportFlag) writeCalibrated(cmd *cobra.Command, f *logits.File, logitsPath string, rows []int, rowsDesc, calibPath, ledgerPath string) error {
	if rf.path == "" {
		return nil
	}
	in := report.Input{Set: f.Set(rows), ClassNames: f.ClassNames, Resamples: report.DefaultResamples}
	in.Data = fmt.Sprintf("%s, %d %s", filepath.Base(logitsPath), in.Set.Len(), rowsDesc)
	var err error
	if in.DataSHA256, err = fileio.SHA256(logitsPath); err != nil {
		return err
	}
	c, err := reportCalibrator(in.Set, logitsPath, f.ClassNames, calibPath)
	if err != nil {
		return err
	}
	in.Calibrators = []report.Calibrated{c}
	if ledgerPath != "" {
		if in.Ledger, err = dp.ReadLedgerFile(ledgerPath); err != nil {
			return err
		}
		in.LedgerPath = ledgerPath
	}
	return writeReport(cmd, rf.path, in)
}

// reportRows returns the rows calibrate's report is of and their
// description: the test rows when there are any (held out), else the
// fitted rows (nil: every row).
func reportRows(test, fitted []int) ([]int, string) {
	if len(test) > 0 {
		return test, "test rows (held out)"
	}
	return fitted, "calibration rows (in-sample: there are no test rows)"
}

// writeCheck writes check's report: the rows s it checked (data
// describes them), the probabilities probs of method after calibration
// (by the calibrator file calibPath, when not empty), the model at
// modelPath (when not empty) and the verdict v.
func (rf *reportFlag) writeCheck(cmd *cobra.Command, s *calib.Set, probs []float64, method, calibPath, modelPath, data string, v calib.Verdict, bins int, seed uint64) error {
	if rf.path == "" {
		return nil
	}
	c := report.Calibrated{Label: method, Method: method, Probs: probs}
	in := report.Input{Set: s, Bins: bins, Seed: seed, Verdict: &v, Data: fmt.Sprintf("%s, %d rows", data, s.Len())}
	if modelPath != "" {
		var err error
		if in.ModelSHA256, err = fileio.SHA256(modelPath); err != nil {
			return err
		}
	}
	if calibPath != "" {
		_, file, err := calib.ReadFile(calibPath)
		if err != nil {
			return err
		}
		c.Label, c.Path, c.File = strings.TrimSuffix(filepath.Base(calibPath), ".json"), calibPath, file
		in.ClassNames = file.Provenance.ClassNames
	}
	in.Calibrators = []report.Calibrated{c}
	return writeReport(cmd, rf.path, in)
}
