package cli

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/fedcalib/fedcalib/experiment"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/internal/fileio"
)

func newExperimentCmd() *cobra.Command {
	var (
		configPath, out string
		workers         int
		quiet, fresh    bool
	)
	cmd := &cobra.Command{
		Annotations: map[string]string{stopAnnotation: "the runs finished are saved in --out's runs.csv with every row it held before (each file replaced whole); run it again to resume"},
		Use:         "experiment --config FILE.yaml --out DIR",
		Short:       "Run a declared grid of federated calibration experiments from cached logits",
		Long: `experiment runs the grid of federated calibration runs that a YAML
configuration declares — datasets (a logits file and its clients) crossed
with methods, weighting, rounds T, β, ε, δ, the BBQ exponent M, the clip
norms C, C₊ and C₋, the sampling and the seeds — the way the paper's tables
and figures are made, and writes into --out:

  runs.csv      one row per run: parameters, test cwECE, ECE, accuracy, NLL
                and Brier after calibration and for the base model, the
                accuracy-drop flag (more than 1 point), ε spent, and the
                bytes a client sends and receives per round
  timings.csv   measured times per run: client compute per round, wall time
  summary.md    Markdown tables, mean (standard deviation) over seeds, with
                the paper's * for runs that lose accuracy
  timings.md    client compute time per round and wall time per method
  NAME-DATASET.png   each plot the configuration asks for

Cells run in parallel, --workers at a time, each seeded by its own
parameters, so runs.csv is byte-identical for the same configuration and
inputs whatever the number of workers (timings.csv is a measurement and is
not). A cell already in --out/runs.csv with the same parameters and input
files is not recomputed, so an interrupted experiment (Ctrl-C saves what
is finished) or an extended grid resumes; --fresh recomputes every cell.
Every other row of runs.csv stays as it was, byte for byte — those of
another configuration, of parameters no longer in the grid, of earlier
input files, and the rows of cells not yet recomputed when a run (--fresh
included) is interrupted — and runs.csv and timings.csv are only ever
replaced whole (a temporary file renamed over them). The summaries and
plots are made from this configuration's rows.

The configuration format is documented in package experiment
and by the committed configurations under integration/experiments/.
A progress bar is drawn on a terminal unless --quiet.`,
		Example: `  fedcalib experiment --config integration/experiments/table1.yaml --out results/table1
  FEDCALIB_LOGITS=/data/logits fedcalib experiment --config table2.yaml --out results/table2 --workers 2
  fedcalib experiment --config integration/experiments/table4-time.yaml --out results/table4 --workers 1 --fresh`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case configPath == "":
				return errors.New("experiment needs --config FILE.yaml, the experiment to run")
			case strings.TrimSpace(out) == "":
				return errors.New("experiment needs --out DIR, the directory to write results into")
			case workers < 0 || workers > federation.MaxWorkers:
				return fmt.Errorf("--workers is %d: want 0 to %d (0 means one per CPU)", workers, federation.MaxWorkers)
			}
			if err := checkOutDir("--out", out, configPath); err != nil {
				return err
			}
			cfg, err := experiment.ReadConfig(configPath)
			if err != nil {
				return err
			}
			// No file the experiment writes may be one it reads.
			inputs := append([]string{configPath}, cfg.Inputs()...)
			for _, name := range experiment.OutputFiles() {
				if err := fileio.CheckOutput(filepath.Join(out, name), inputs...); err != nil {
					return fmt.Errorf("--out %w", err)
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			opt := experiment.Options{Workers: workers, Fresh: fresh, MemoryBudget: memoryBudget(cmd.Context())}
			stderr := cmd.ErrOrStderr()
			f, isFile := stderr.(*os.File)
			var bar *progressbar.ProgressBar
			if !quiet && isFile && term.IsTerminal(int(f.Fd())) {
				opt.Progress = func(p experiment.Progress) {
					if bar == nil {
						bar = progressbar.NewOptions(p.Total,
							progressbar.OptionSetWriter(stderr),
							progressbar.OptionSetDescription(cfg.Name),
							progressbar.OptionShowCount(),
							progressbar.OptionSetPredictTime(true),
							progressbar.OptionSetWidth(30),
							progressbar.OptionThrottle(100*time.Millisecond),
							progressbar.OptionClearOnFinish(),
						)
					}
					bar.Set(p.Done)
				}
			}
			rep, err := experiment.Run(ctx, cfg, out, opt)
			if bar != nil {
				bar.Finish()
			}
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			for _, s := range rep.Skipped {
				fmt.Fprintln(w, s)
			}
			fmt.Fprintf(w, "%s: %d runs (%d computed, %d reused) in %v", cfg.Name, len(rep.Rows), rep.Computed, rep.Reused, rep.Wall.Round(time.Millisecond))
			if rep.Kept > len(rep.Rows)-rep.Computed-rep.Reused {
				fmt.Fprintf(w, "; runs.csv also keeps %d other rows as they were", rep.Kept-(len(rep.Rows)-rep.Computed-rep.Reused))
			}
			fmt.Fprintln(w)
			for _, f := range rep.Files {
				fmt.Fprintf(w, "wrote %s\n", f)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&configPath, "config", "", "experiment configuration (YAML) to run (required)")
	fl.StringVar(&out, "out", "", "directory for runs.csv, summary.md, timings and plots; created if needed, reused to resume (required)")
	fl.IntVar(&workers, "workers", 0, fmt.Sprintf("cells run at once, at most %d (0: one per CPU); results do not depend on it", federation.MaxWorkers))
	fl.BoolVar(&fresh, "fresh", false, "recompute every cell, ignoring the results already in --out")
	fl.BoolVarP(&quiet, "quiet", "q", false, "draw no progress bar")
	return cmd
}
