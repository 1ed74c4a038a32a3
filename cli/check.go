package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/export"
	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/onnx"
)

// checkReport is what `fedcalib check --json` prints: the calib.Verdict
// with the method, field by field in this order.
type checkReport struct {
	Pass                bool          `json:"pass"`
	Failures            []string      `json:"failures"`
	Method              string        `json:"method"`
	Before              calib.Metrics `json:"before"`
	After               calib.Metrics `json:"after"`
	AccuracyDrop        float64       `json:"accuracy_drop"`
	CWECEImprovement    float64       `json:"cwece_improvement"`
	MaxAccuracyDrop     float64       `json:"max_accuracy_drop"`
	MinCWECEImprovement float64       `json:"min_cwece_improvement"`
	// With --max-nll-increase and --confidence only.
	NLLIncrease    *float64                  `json:"nll_increase,omitempty"`
	MaxNLLIncrease *float64                  `json:"max_nll_increase,omitempty"`
	Confidence     float64                   `json:"confidence,omitempty"`
	Intervals      map[string]calib.Interval `json:"intervals,omitempty"`
}

func newCheckCmd() *cobra.Command {
	var (
		modelPath, calibPath, spec, logitsPath, split, ortLib string
		maxDrop, minGain, maxNLL, confidence                  float64
		bins, batch, resamples                                int
		plan                                                  infer.Options
		seed                                                  uint64
		asJSON                                                bool
		vectorsDir                                            string
		input                                                 inputKind
		rep                                                   reportFlag
	)
	cmd := &cobra.Command{
		Use:   "check (--model M.calibrated.onnx | --model M.onnx --calibrator C.json) --data SPEC",
		Short: "CI gate: fail when calibration costs accuracy or does not improve cwECE",
		Long: `check measures a calibrated model against its own uncalibrated logits and
exits 0 when both bars are met, 1 when one is not (printing which and by
how much), 2 on bad input and 3 when ONNX Runtime cannot be loaded:

  accuracy drop     accuracy(before) − accuracy(after) <= --max-accuracy-drop
  cwECE improvement cwECE(before) − cwECE(after)       >= --min-cwece-improvement

(fractions, not %; the default improvement bar 0 means cwECE must not get
worse; accuracies are compared on counts of correct predictions, so a
drop of exactly --max-accuracy-drop passes). --max-nll-increase X adds a
third bar, NLL(after) − NLL(before) <= X nats.

--confidence L judges each change by its paired bootstrap interval at
level L (--bootstrap resamples of the same examples before and after,
seeded by --seed) instead of its point value, so a gate on a small test
set fails only when the loss is real: accuracy fails when the interval's
lower end of the drop exceeds the bar, cwECE when the upper end of the
improvement falls short of it, NLL when the lower end of the increase
exceeds it. The report prints each interval. What is checked:

  --model M.calibrated.onnx --data SPEC   a model written by "fedcalib export":
      ONNX Runtime runs it once, its logits output gives "before" and its
      probabilities output "after" — the very graph you will serve;
  --model M.onnx --calibrator C.json --data SPEC
      the model's logits, calibrated by the calibrator file in Go;
  --logits F.npz --calibrator C.json
      logits computed earlier (rows of --split, default test when the file
      has a split column), no ONNX Runtime needed;
  --test-vectors DIR [--model M.onnx]
      test vectors written by "fedcalib export --test-vectors DIR": ONNX
      Runtime runs the model (DIR/model.onnx unless --model) on each
      test_data_set_N/input_I.pb and every output_I.pb must match, value by
      value, within 1e-5·(1 + |value|); exit 1 when one does not, 2 when a
      file is missing or malformed.`,
		Example: `  fedcalib check --model mnist.calibrated.onnx --data mnist:data/mnist:test --max-accuracy-drop 0.01
  fedcalib check --model mnist.onnx --calibrator bbq.json --data mnist:data/mnist:test --json
  fedcalib check --logits mnist.npz --calibrator temp.json --min-cwece-improvement 0.005
  # a small test set: fail only on a loss the data are sure of, and guard NLL too
  fedcalib check --logits small.npz --calibrator bbq.json --confidence 0.95 --max-nll-increase 0.01
  fedcalib check --test-vectors mnist-vectors
  # also write the verdict, metrics and diagrams as one HTML page for the CI run
  fedcalib check --logits mnist.npz --calibrator temp.json --report check.html`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if vectorsDir != "" {
				if spec != "" || logitsPath != "" || calibPath != "" || cmd.Flags().Changed("input") {
					return fmt.Errorf("--test-vectors replays a model on its recorded inputs: drop --data, --logits, --calibrator and --input")
				}
				if rep.path != "" {
					return fmt.Errorf("--report is of calibrated probabilities: drop it with --test-vectors")
				}
				return checkVectors(cmd, vectorsDir, modelPath, ortLib, asJSON)
			}
			if err := rep.check(modelPath, calibPath, logitsPath, spec); err != nil {
				return err
			}
			gate := calib.Gate{MaxAccuracyDrop: maxDrop, MinCWECEImprovement: minGain,
				CheckNLL: cmd.Flags().Changed("max-nll-increase"), MaxNLLIncrease: maxNLL}
			if !(maxDrop >= 0 && maxDrop <= 1) {
				return fmt.Errorf("--max-accuracy-drop is %v: want a fraction in [0, 1], e.g. 0.01 for one point", maxDrop)
			}
			if !(minGain >= -1 && minGain <= 1) {
				return fmt.Errorf("--min-cwece-improvement is %v: want a fraction in [-1, 1], e.g. 0.005 (0: cwECE may not get worse)", minGain)
			}
			if gate.CheckNLL && !(maxNLL >= 0 && !math.IsInf(maxNLL, 1)) {
				return fmt.Errorf("--max-nll-increase is %v: want a finite number of nats ≥ 0, e.g. 0.01", maxNLL)
			}
			if cmd.Flags().Changed("confidence") && !(confidence > 0 && confidence < 1) {
				return fmt.Errorf("--confidence is %v: want a level in (0, 1), e.g. 0.95", confidence)
			}
			if resamples < 1 || resamples > calib.MaxBootstrap {
				return fmt.Errorf("--bootstrap is %d: want 1 to %d resamples", resamples, calib.MaxBootstrap)
			}
			if err := gate.Validate(); err != nil {
				return err
			}
			if bins < 1 {
				return fmt.Errorf("--bins is %d: want a positive number of bins", bins)
			}
			var (
				s      *calib.Set
				probs  []float64
				method string
				err    error
			)
			switch {
			case logitsPath != "" && modelPath != "":
				return fmt.Errorf("give --logits or --model, not both")
			case logitsPath != "":
				if calibPath == "" {
					return fmt.Errorf("--logits needs --calibrator C.json")
				}
				s, probs, method, err = checkLogits(cmd.Context(), logitsPath, calibPath, split, input)
			case modelPath != "":
				if spec == "" {
					return fmt.Errorf("--model needs --data SPEC, the labelled data to check on")
				}
				opt := infer.Options{Runtime: ortLib, Batch: batch, Threads: plan.Threads, Runs: plan.Runs,
					Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
				s, probs, method, err = checkModel(cmd, modelPath, calibPath, spec, opt, input)
			default:
				return fmt.Errorf("check needs --model M.onnx (with --data) or --logits F.npz (with --calibrator)")
			}
			if err != nil {
				return err
			}
			v, err := judge(gate, s, probs, bins, confidence, calib.PairedBootstrap{Resamples: resamples, Level: confidence, Seed: seed})
			if err != nil {
				return err
			}
			if err := rep.writeCheck(cmd, s, probs, method, calibPath, modelPath, cmp.Or(logitsPath, spec), v, bins, seed); err != nil {
				return err
			}
			before, after := v.Before, v.After
			rep := checkReport{Pass: v.Pass, Failures: v.Failures, Method: method, Before: v.Before, After: v.After,
				AccuracyDrop: v.AccuracyDrop, CWECEImprovement: v.CWECEImprovement,
				MaxAccuracyDrop: v.MaxAccuracyDrop, MinCWECEImprovement: v.MinCWECEImprovement,
				NLLIncrease: v.NLLIncrease, MaxNLLIncrease: v.MaxNLLIncrease,
				Confidence: v.Confidence, Intervals: v.Intervals}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "%-10s %9s %9s %9s %9s\n", "", "accuracy", "cwECE", "ECE", "NLL")
				fmt.Fprintf(out, "%-10s %8.2f%% %8.3f%% %8.3f%% %9.4f\n", "before", 100*before.Accuracy, 100*before.CWECE, 100*before.ECE, before.NLL)
				fmt.Fprintf(out, "%-10s %8.2f%% %8.3f%% %8.3f%% %9.4f\n", "after", 100*after.Accuracy, 100*after.CWECE, 100*after.ECE, after.NLL)
				printIntervals(out, v)
				if rep.Pass {
					fmt.Fprintf(out, "PASS: %s calibration on %d examples\n", method, s.Len())
				}
			}
			if !rep.Pass {
				return fmt.Errorf("%w: %s", ErrCheckFailed, strings.Join(rep.Failures, "; "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&modelPath, "model", "", `an ONNX model: calibrated by "fedcalib export", or plain with --calibrator`)
	f.StringVar(&calibPath, "calibrator", "", "a calibrator file to apply (with a plain --model, or with --logits)")
	f.StringVar(&spec, "data", "", `labelled data for --model, FORMAT:PATH[:OPTION] as for "fedcalib infer"`)
	f.StringVar(&logitsPath, "logits", "", "check precomputed logits (.npz) instead of running a model")
	registerInput(f, &input)
	f.StringVar(&split, "split", "", "with --logits: rows to check, test, calibration or all (default test when there is a split column)")
	f.Float64Var(&maxDrop, "max-accuracy-drop", calib.AccuracyDropMark, "largest allowed accuracy drop, as a fraction (0.01 = 1 point)")
	f.Float64Var(&minGain, "min-cwece-improvement", 0, "smallest required cwECE improvement, as a fraction (0 = must not get worse)")
	f.Float64Var(&maxNLL, "max-nll-increase", 0, "add an NLL bar: largest allowed NLL(after) − NLL(before), in nats (default: NLL not judged)")
	f.Float64Var(&confidence, "confidence", 0, "judge by paired bootstrap intervals at this level, e.g. 0.95 (default: point values)")
	f.IntVar(&resamples, "bootstrap", calib.DefaultGateResamples, "with --confidence: bootstrap resamples")
	f.Var((*seedValue)(&seed), "seed", "with --confidence: seed of the resamples, 0 to 2^64−1")
	f.IntVar(&bins, "bins", calib.DefaultMetricBins, "equal-width bins of cwECE and ECE")
	f.IntVar(&batch, "batch", infer.DefaultBatch, batchUsage)
	registerThreadFlags(f, &plan)
	f.StringVar(&ortLib, "ort-lib", "", "the ONNX Runtime shared library (default: $"+infer.RuntimeEnv+", then the setup cache)")
	f.StringVar(&vectorsDir, "test-vectors", "", `replay the test vectors of "fedcalib export --test-vectors DIR" (with --model, another model)`)
	f.BoolVar(&asJSON, "json", false, "print a JSON report (pass, failures, before, after, accuracy_drop, cwece_improvement)")
	rep.register(f, "the checked rows, with the verdict, whether it passes or fails")
	return cmd
}

// judge applies gate to the set's softmax probabilities before and probs
// after calibration: by point values, or by paired bootstrap intervals
// when confidence > 0.
func judge(gate calib.Gate, s *calib.Set, probs []float64, bins int, confidence float64, pb calib.PairedBootstrap) (calib.Verdict, error) {
	before, err := calib.Probabilities(s, nil)
	if err != nil {
		return calib.Verdict{}, err
	}
	if confidence > 0 {
		return gate.JudgePaired(before, probs, s.Labels, s.Classes, bins, pb)
	}
	mb, err := calib.Evaluate(before, s.Labels, s.Classes, bins)
	if err != nil {
		return calib.Verdict{}, err
	}
	ma, err := calib.Evaluate(probs, s.Labels, s.Classes, bins)
	if err != nil {
		return calib.Verdict{}, fmt.Errorf("calibrated probabilities: %w", err)
	}
	return gate.Judge(mb, ma), nil
}

// printIntervals prints the bootstrap intervals of a JudgePaired verdict.
func printIntervals(out io.Writer, v calib.Verdict) {
	if v.Intervals == nil {
		return
	}
	fmt.Fprintf(out, "paired bootstrap, %.0f%% intervals:\n", 100*v.Confidence)
	iv := v.Intervals["accuracy_drop"]
	fmt.Fprintf(out, "  accuracy drop      %+.2f points  [%+.2f, %+.2f]\n", 100*v.AccuracyDrop, 100*iv.Lo, 100*iv.Hi)
	iv = v.Intervals["cwece_improvement"]
	fmt.Fprintf(out, "  cwECE improvement  %+.3f points [%+.3f, %+.3f]\n", 100*v.CWECEImprovement, 100*iv.Lo, 100*iv.Hi)
	if iv, ok := v.Intervals["nll_increase"]; ok {
		fmt.Fprintf(out, "  NLL increase       %+.4f nats  [%+.4f, %+.4f]\n", *v.NLLIncrease, iv.Lo, iv.Hi)
	}
}

// checkLogits reads logits (within the memory budget of ctx) and a
// calibrator file.
// The rows are read as --input says, else as the logits file records,
// else as the calibrator was fitted (provenance.input); a calibrator
// fitted on the other kind is refused (checkFitted).
func checkLogits(ctx context.Context, logitsPath, calibPath, split string, input inputKind) (*calib.Set, []float64, string, error) {
	explicit := input != ""
	c, file, err := calib.ReadFile(calibPath)
	if err != nil {
		return nil, nil, "", err
	}
	if input, err = fittedInput(input, calibPath, file); err != nil {
		return nil, nil, "", err
	}
	f, err := logits.ReadBudget(logitsPath, memoryBudget(ctx))
	if err != nil {
		return nil, nil, "", err
	}
	if f.Input != "" && !explicit {
		input = "" // what the file records, checked against the calibrator below
	}
	if err := convertInput(f, logitsPath, input); err != nil {
		return nil, nil, "", err
	}
	if err := checkFitted(calibPath, file, f.Input, logitsPath); err != nil {
		return nil, nil, "", err
	}
	_, rows, err := evalRows(f, split, logitsPath)
	if err != nil {
		return nil, nil, "", err
	}
	s := f.Set(rows)
	if c.Classes() != s.Classes {
		return nil, nil, "", fmt.Errorf("%s is for %d classes but %s has %d", calibPath, c.Classes(), logitsPath, s.Classes)
	}
	if err := calib.MatchClassNames(logitsPath, f.ClassNames, calibPath, file.Provenance.ClassNames); err != nil {
		return nil, nil, "", err
	}
	probs, err := calib.Probabilities(s, c)
	return s, probs, c.Method(), err
}

// checkModel runs a model over the data, once: a calibrated model gives
// both its logits and its probabilities output from the same runs; a
// plain one gives logits that the calibrator file calibrates.
func checkModel(cmd *cobra.Command, modelPath, calibPath, spec string, opt infer.Options, input inputKind) (*calib.Set, []float64, string, error) {
	m, err := onnx.ReadFile(modelPath)
	if err != nil {
		return nil, nil, "", err
	}
	method, calibrated := m.MetadataValue(export.KeyMethod)
	if calibrated && calibPath != "" {
		return nil, nil, "", fmt.Errorf("%s is already calibrated (%s): drop --calibrator", modelPath, method)
	}
	if !calibrated && calibPath == "" {
		return nil, nil, "", fmt.Errorf("%s has no calibration appended: pass --calibrator C.json, or export one with `fedcalib export`", modelPath)
	}
	if calibrated && input.String() != logits.InputLogits {
		return nil, nil, "", fmt.Errorf("--input %s: %s is calibrated (%s) and gives its own probabilities: drop --input", input.String(), modelPath, method)
	}
	var (
		c    calib.Calibrator
		file *calib.File
	)
	if calibrated {
		opt.Output, _ = m.MetadataValue(export.KeyLogits)
		probsName, _ := m.MetadataValue(export.KeyOutput)
		opt.Extra = []string{probsName}
	} else {
		// The model's output is read as the calibrator was fitted: its
		// recorded kind, --input, or a Softmax that makes the output; a
		// mismatch is refused as export refuses it.
		if c, file, err = calib.ReadFile(calibPath); err != nil {
			return nil, nil, "", err
		}
		kind, err := export.InputKind(m, opt.Output, string(input), file.Provenance.Input)
		if err != nil {
			return nil, nil, "", fmt.Errorf("%s with %s: %w", modelPath, calibPath, err)
		}
		input = inputKind(kind)
	}
	res, err := runInfer(cmd.Context(), modelPath, spec, opt)
	if err != nil {
		return nil, nil, "", err
	}
	f := res.File()
	kind, from := input.String(), "--input"
	if k, ok := m.MetadataValue(export.KeyInput); calibrated && ok {
		kind, from = k, export.KeyInput // what export found the calibrated output to hold
	}
	if err := f.ConvertInput(kind); err != nil {
		return nil, nil, "", fmt.Errorf("%s: %s %s: %w", modelPath, from, kind, err)
	}
	s := f.Set(nil)
	if !calibrated {
		if c.Classes() != s.Classes {
			return nil, nil, "", fmt.Errorf("%s is for %d classes but %s has %d", calibPath, c.Classes(), modelPath, s.Classes)
		}
		if err := calib.MatchClassNames(modelPath, res.ClassNames, calibPath, file.Provenance.ClassNames); err != nil {
			return nil, nil, "", err
		}
		probs, err := calib.Probabilities(s, c)
		return s, probs, c.Method(), err
	}
	p := res.Extra[0]
	if p.Columns != res.Classes {
		return nil, nil, "", fmt.Errorf("%s: the probabilities output has %d×%d values, the logits %d×%d", modelPath, res.Len(), p.Columns, res.Len(), res.Classes)
	}
	probs := make([]float64, len(p.Values))
	for i, v := range p.Values {
		probs[i] = float64(v)
	}
	return s, probs, method, nil
}
