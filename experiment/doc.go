// Package experiment runs declared grids of federated calibration
// experiments from cached logits and reports them as the paper does
// (Maddock, Cormode and Maple, "Private Federated Multiclass Post-hoc
// Calibration", ICLR 2026: Tables 1–4 and the figures varying T, β, ε, M
// and the clip norms).
//
// # Configurations
//
// A Config, read from YAML by ReadConfig, names datasets (a logits file
// and where its clients come from: a partition file, a Dirichlet label-skew
// partition made on the fly, or the natural partition of the file's
// client column) and one or more grids. A grid lists values for each
// parameter of a run — method, weighting, rounds T, β, ε, δ, the BBQ
// exponent M, the clip norms C, C₊ and C₋, the sample rate p or clients per
// round, the server learning rate, the accountant and the seeds — and
// stands for their cross product. Parameters that do not apply to a run
// (the weighting of FedTemp, the clip norms of a non-private FedBBQ) are
// blanked, and runs that then coincide are run once. Paths may use
// environment variables ($VAR, ${VAR}, ${VAR:-default}) and a leading ~,
// and relative paths are relative to the configuration file.
//
// # Runs
//
// Run executes every cell of the grids on a pool of worker goroutines, one
// cell per worker, each cell seeded by its own parameters, so that the
// results do not depend on the number of workers or on scheduling. Each
// cell is identified by a hash of its parameters and of the bytes of its
// input files; a cell already present in the output directory's runs.csv
// is read back instead of recomputed, so an interrupted or extended
// experiment resumes where it stopped (runs.csv is checkpointed, always
// atomically, while the experiment runs).
//
// # Outputs
//
// runs.csv holds one row per cell, in grid order, with the parameters, the
// test cwECE, ECE, accuracy, NLL and Brier score after calibration, the
// base model's, the accuracy-drop flag (test accuracy down by more than 1
// percentage point, the paper's asterisk), the privacy spent and the bytes
// a client sends and receives per round. It holds no measured times, so
// the same configuration gives a byte-identical runs.csv on any machine
// and with any number of workers. Measured times (client compute time per
// round, wall time per run) go to timings.csv and timings.md. summary.md
// holds Markdown tables with the mean and standard deviation over seeds,
// and each plot of the configuration is drawn with gonum/plot.
package experiment
