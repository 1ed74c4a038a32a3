package experiment

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/internal/fileio"
)

// Config is a declared experiment: datasets, grids of run parameters,
// summary tables and plots. ReadConfig and ParseConfig make one from YAML
// and check it; a Config built in Go is checked by Run.
type Config struct {
	// Name names the experiment in the summary and the plots. ReadConfig
	// defaults it to the file's base name without extension.
	Name string
	// Description is free text printed under the summary's title.
	Description string
	// Datasets are the data the grids run on; names are unique.
	Datasets []Dataset
	// Grids hold the runs: every dataset is crossed with each grid, and
	// the cells of all grids are concatenated in order.
	Grids []Grid
	// Summary configures summary.md; the zero value tabulates cwECE and
	// accuracy.
	Summary Summary
	// Plots are the figures to draw; none by default.
	Plots []Plot
}

// Dataset is a logits file and where its clients come from.
type Dataset struct {
	// Name names the dataset in the CSV, tables and plots.
	Name string
	// Logits is the logits file (.npz; see package infer/logits).
	Logits string
	// Partition says where the clients come from.
	Partition PartitionSpec
	// Optional makes a dataset whose logits file does not exist be
	// skipped with a notice instead of failing the experiment, so that
	// one configuration can list every dataset a project may have.
	Optional bool
	// Input says what the logits file's "logits" array holds:
	// logits.InputLogits (also when empty) or logits.InputProbabilities,
	// which are turned into log-probabilities as they are read
	// (logits.File.FromProbabilities).
	Input string
	// ClientsPerRound or SampleRate, when not zero, replace the grids'
	// sampling for this dataset (e.g. 60 of the LEAF clients per round).
	ClientsPerRound int
	SampleRate      float64
}

// PartitionSpec says where a dataset's clients come from: exactly one of
// File, Clients > 0 (a Dirichlet label-skew partition made on the fly) or
// Natural.
type PartitionSpec struct {
	// File is a partition file made by "fedcalib partition" for the
	// logits file (possibly gzip-compressed).
	File string
	// Clients is the number of clients K of a Dirichlet partition made
	// on the fly.
	Clients int
	// Beta is its concentration β; zero means the grids' beta values.
	Beta float64
	// Seed seeds a partition made on the fly; every run of the dataset
	// uses the same partition for a given β, whatever the run's seed.
	Seed uint64
	// Holdout, if set, is the partition file the model was trained
	// with: only the examples it does not use for training (its
	// calibration and test examples) are partitioned, so that a new
	// partition never calibrates or tests on the model's own training
	// data. With Holdout the default Fractions are 0/50/50.
	Holdout string
	// Fractions split each client made on the fly; nil means the
	// paper's 80/10/10 (0/50/50 with Holdout).
	Fractions *federation.Fractions
	// Natural takes the clients from the logits file's client column.
	Natural bool
	// Rule and MinSamples are the natural partition's split rule (""
	// means the file's split column) and minimum examples per user (0
	// keeps every user); see federation.NaturalOptions.
	Rule       federation.SplitRule
	MinSamples int
}

// Grid lists values for each run parameter and stands for their cross
// product. An empty list means the default given for it; Method, Rounds
// and Seed have none. Parameters a cell does not use are blanked (see
// Cell).
type Grid struct {
	// Method: names of the calibrator registry, calib.MethodNames(),
	// e.g. "bbq" or "temp".
	Method []string
	// Weighting of the binning methods: "none" (default), "all" or
	// "changed".
	Weighting []string
	// Rounds T ≥ 1.
	Rounds []int
	// Beta: the Dirichlet concentrations β of datasets whose partition
	// is made on the fly without a β of its own.
	Beta []float64
	// Epsilon: total ε of private runs; 0 means a run without privacy.
	// Default: 0 only.
	Epsilon []float64
	// Delta ∈ (0, 1) of private runs; default 1e-5.
	Delta []float64
	// Mexp: the binning methods' bin exponent M (2^M bins), 1 to
	// calib.MaxMexp; default each method's calib.Method.DefaultMexp
	// (calib.DefaultMexp; calib.IsotonicMexp for isotonic).
	Mexp []int
	// Clip: the scaling methods' L2 clip norm C of a client update; 0
	// means no clipping, which private runs refuse. Empty means 0 without
	// privacy and dp.DefaultClip with it.
	Clip []float64
	// ClipPos and ClipNeg: the binning methods' clip norms C₊ and C₋ of
	// private runs; defaults dp.DefaultClipPos and dp.DefaultClipNeg.
	ClipPos, ClipNeg []float64
	// AlphaZ: the z of the weighting of private, weighted binning runs
	// (federation.Privacy.AlphaZ, beyond the paper); 0, the default, is
	// the paper's rule.
	AlphaZ []float64
	// SampleRate p ∈ (0, 1] or ClientsPerRound k (p = k/K); at most one
	// of them; default SampleRate 0.1 (10 of the paper's 100 clients).
	SampleRate      []float64
	ClientsPerRound []int
	// ServerLR: the scaling methods' server learning rate η_S > 0;
	// default 1.
	ServerLR []float64
	// Accountant of private runs: "zcdp" (default, the paper's) or "rdp".
	Accountant []string
	// Seed seeds each run: client sampling, local randomness and noise.
	Seed []uint64
}

// Summary configures summary.md.
type Summary struct {
	// Metrics are tabulated one table each; empty means cwece and
	// accuracy. See Metrics for the names.
	Metrics []string
}

// Plot is one figure: Y against X, one line per series, each point the
// mean over seeds with its standard deviation as error bar, and the base
// model dashed. One file is drawn per dataset: DIR/NAME-DATASET.FORMAT.
type Plot struct {
	// Name is the file name stem.
	Name string
	// Title defaults to "DATASET: Y vs X".
	Title string
	// X is a parameter (see Params).
	X string
	// Y is a metric (see Metrics).
	Y string
	// Series are the parameters (see Params, and "method" for the method
	// and its weighting) that tell lines apart; empty means method. Other
	// parameters that vary in the plotted runs are added to the series
	// too, so that different settings are never averaged together.
	Series []string
	// LogX draws X on a log scale.
	LogX bool
	// Where keeps only the runs whose parameter (or "dataset", "method",
	// "weighting") has the given value, written as in runs.csv ("none"
	// for blank).
	Where map[string]string
	// Format is "png" (default), "svg" or "pdf".
	Format string
}

// Params returns the names of the run parameters, as the CSV columns,
// plots and filters call them.
func Params() []string {
	return []string{"method", "weighting", "rounds", "beta", "epsilon", "delta", "mexp", "clip", "clip_pos", "clip_neg",
		"dp_alpha_z", "clients_per_round", "sample_rate", "server_lr", "accountant", "seed"}
}

// Metrics returns the names of the per-run results that summaries and
// plots take.
func Metrics() []string {
	return []string{"cwece", "ece", "accuracy", "nll", "brier", "bytes_sent", "bytes_received", "participants", "epsilon_spent", "sigma"}
}

// ReadConfig reads the YAML configuration at path (see ParseConfig).
// Relative paths in it are relative to its directory.
func ReadConfig(path string) (*Config, error) {
	b, err := fileio.ReadLimited(path, maxConfigBytes)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(b, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if c.Name == "" {
		c.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return c, nil
}

// Inputs returns the files the experiment reads: each dataset's logits,
// partition and holdout files, those that are named.
func (c *Config) Inputs() []string {
	var out []string
	for _, d := range c.Datasets {
		for _, p := range []string{d.Logits, d.Partition.File, d.Partition.Holdout} {
			if p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// MaxCells is the most runs a configuration may declare: its datasets
// times the cross product of each grid's lists, counted before runs that
// coincide are merged. The paper's largest table has a few hundred; the
// bound stops a small file from declaring billions of cells (and the
// memory to list them).
const MaxCells = 100000

// size returns the number of cells g declares for one dataset, before
// coinciding cells are merged, as a float64 (it may be astronomically
// large).
func (g *Grid) size() float64 {
	n := 1.0
	for _, k := range []int{
		len(g.Method), len(g.Weighting), len(g.Rounds), len(g.Beta), len(g.Epsilon), len(g.Delta),
		len(g.Mexp), len(g.Clip), len(g.ClipPos), len(g.ClipNeg), len(g.AlphaZ),
		len(g.ClientsPerRound) + len(g.SampleRate), len(g.ServerLR), len(g.Accountant), len(g.Seed),
	} {
		n *= float64(max(k, 1))
	}
	return n
}

// maxConfigBytes is the largest configuration ReadConfig reads.
const maxConfigBytes = 16 << 20

// ParseConfig parses a YAML configuration and checks it. Every parameter
// of a grid takes one value or a list; "none" is ε of a run without
// privacy and a clip norm of no clipping. Paths expand environment
// variables ($VAR, ${VAR}, ${VAR:-default}; an unset variable without a
// default is an error) and a leading ~, and relative paths are joined to
// dir. Unknown keys are errors.
func ParseConfig(data []byte, dir string) (*Config, error) {
	var raw rawConfig
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty configuration")
		}
		return nil, yamlError(err)
	}
	c, err := raw.config(dir)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Validate reports the first problem of c, naming the field.
func (c *Config) Validate() error {
	if len(c.Datasets) == 0 {
		return errors.New("datasets: none given; list at least one {name, logits, partition}")
	}
	names := map[string]bool{}
	for i := range c.Datasets {
		d := &c.Datasets[i]
		if err := d.validate(); err != nil {
			return fmt.Errorf("datasets[%d]: %w", i, err)
		}
		if names[d.Name] {
			return fmt.Errorf("datasets[%d]: name %q is used twice", i, d.Name)
		}
		names[d.Name] = true
	}
	if len(c.Grids) == 0 {
		return errors.New("grid: none given")
	}
	for i := range c.Grids {
		if err := c.Grids[i].validate(); err != nil {
			return fmt.Errorf("%s: %w", gridName(c, i), err)
		}
		for j := range c.Datasets {
			if err := c.Grids[i].fits(&c.Datasets[j]); err != nil {
				return fmt.Errorf("%s and datasets[%d] (%s): %w", gridName(c, i), j, c.Datasets[j].Name, err)
			}
		}
	}
	total := 0.0
	for i := range c.Grids {
		total += c.Grids[i].size()
	}
	if total *= float64(len(c.Datasets)); total > MaxCells {
		return fmt.Errorf("the grids declare %.4g runs over %d dataset(s), more than %d: split the experiment into several configurations", total, len(c.Datasets), MaxCells)
	}
	for _, m := range c.Summary.Metrics {
		if !slices.Contains(Metrics(), m) {
			return fmt.Errorf("summary.metrics: unknown metric %q: want one of %s", m, strings.Join(Metrics(), ", "))
		}
	}
	plots := map[string]bool{}
	for i := range c.Plots {
		if err := c.Plots[i].validate(); err != nil {
			return fmt.Errorf("plots[%d]: %w", i, err)
		}
		if plots[c.Plots[i].Name] {
			return fmt.Errorf("plots[%d]: name %q is used twice", i, c.Plots[i].Name)
		}
		plots[c.Plots[i].Name] = true
	}
	return nil
}

func gridName(c *Config, i int) string {
	if len(c.Grids) == 1 {
		return "grid"
	}
	return fmt.Sprintf("grids[%d]", i)
}

func (d *Dataset) validate() error {
	switch {
	case d.Name == "":
		return errors.New("name: missing")
	case strings.ContainsAny(d.Name, "/\\\n\"") || strings.TrimSpace(d.Name) != d.Name:
		return fmt.Errorf("name %q: use letters, digits, spaces and punctuation other than / \\ \" (it names plot files)", d.Name)
	case d.Logits == "":
		return errors.New("logits: missing; give the logits file (.npz)")
	case d.Input != "" && d.Input != logits.InputLogits && d.Input != logits.InputProbabilities:
		return fmt.Errorf("input %q: want %s or %s", d.Input, logits.InputLogits, logits.InputProbabilities)
	case d.ClientsPerRound < 0:
		return fmt.Errorf("clients_per_round is %d: want ≥ 1", d.ClientsPerRound)
	case d.SampleRate != 0 && !(d.SampleRate > 0 && d.SampleRate <= 1):
		return fmt.Errorf("sample_rate is %v: want 0 < p ≤ 1", d.SampleRate)
	case d.ClientsPerRound != 0 && d.SampleRate != 0:
		return errors.New("clients_per_round and sample_rate both set the sampling: give one")
	}
	if err := d.Partition.validate(); err != nil {
		return fmt.Errorf("partition: %w", err)
	}
	return nil
}

func (p *PartitionSpec) validate() error {
	kinds := 0
	for _, set := range []bool{p.File != "", p.Clients != 0, p.Natural} {
		if set {
			kinds++
		}
	}
	if kinds != 1 {
		return errors.New("give exactly one of file: P.json, clients: K (with beta and seed), or natural: true")
	}
	switch {
	case p.Clients < 0:
		return fmt.Errorf("clients is %d: need at least 1", p.Clients)
	case p.Beta != 0 && (!(p.Beta > 0) || math.IsInf(p.Beta, 1)):
		return fmt.Errorf("beta is %v: want a finite β > 0", p.Beta)
	case p.Clients == 0 && (p.Beta != 0 || p.Holdout != ""):
		return errors.New("beta and holdout apply to a partition made on the fly (clients: K)")
	case p.File != "" && (p.Seed != 0 || p.Fractions != nil):
		return errors.New("a partition file fixes its seed and fractions: drop seed and fractions")
	case !p.Natural && (p.Rule != "" || p.MinSamples != 0):
		return errors.New("rule and min_samples apply to natural partitions")
	case p.MinSamples < 0:
		return fmt.Errorf("min_samples is %d: want ≥ 0", p.MinSamples)
	}
	if p.Rule != "" {
		switch p.Rule {
		case federation.RuleFractions, federation.RuleGiven, federation.RuleLEAFSample:
		default:
			return fmt.Errorf("rule %q: want %s, %s or %s", p.Rule, federation.RuleFractions, federation.RuleGiven, federation.RuleLEAFSample)
		}
	}
	if f := p.Fractions; f != nil {
		sum := f.Train + f.Calibration + f.Test
		if f.Train < 0 || f.Calibration <= 0 || f.Test < 0 || math.Abs(sum-1) > 1e-9 {
			return fmt.Errorf("fractions %v/%v/%v: want train, calibration > 0 and test that sum to 1", f.Train, f.Calibration, f.Test)
		}
	}
	return nil
}

// fractions returns the split fractions of a partition made on the fly.
func (p *PartitionSpec) fractions() federation.Fractions {
	switch {
	case p.Fractions != nil:
		return *p.Fractions
	case p.Holdout != "":
		return federation.Fractions{Calibration: 0.5, Test: 0.5}
	}
	return federation.DefaultFractions()
}

func (g *Grid) validate() error {
	if len(g.Method) == 0 {
		return errors.New("method: missing; list methods among " + strings.Join(calib.MethodNames(), ", "))
	}
	for i, m := range g.Method {
		if _, err := calib.LookupMethod(m); err != nil {
			return fmt.Errorf("method[%d]: unknown method %q: want one of %s", i, m, strings.Join(calib.MethodNames(), ", "))
		}
	}
	for i, w := range g.Weighting {
		if _, err := calib.ParseWeighting(w); err != nil {
			return fmt.Errorf("weighting[%d]: %w", i, err)
		}
	}
	if len(g.Rounds) == 0 {
		return errors.New("rounds: missing; list the numbers of rounds T")
	}
	for i, t := range g.Rounds {
		if t < 1 || t > federation.MaxRounds {
			return fmt.Errorf("rounds[%d] is %d: want 1 to %d rounds", i, t, federation.MaxRounds)
		}
	}
	if len(g.Seed) == 0 {
		return errors.New("seed: missing; list the seeds of the repeated runs, e.g. [1, 2, 3, 4, 5]")
	}
	positive := func(name, what string, vs []float64, zero string) error {
		for i, v := range vs {
			if v == 0 && zero != "" {
				continue
			}
			if !(v > 0) || math.IsInf(v, 1) {
				want := "a finite number > 0"
				if zero != "" {
					want += ", or none " + zero
				}
				return fmt.Errorf("%s[%d]: %s is %v: want %s", name, i, what, v, want)
			}
		}
		return nil
	}
	checks := []struct {
		name, what string
		vs         []float64
		zero       string
	}{
		{"beta", "β", g.Beta, ""},
		{"epsilon", "ε", g.Epsilon, "for no privacy"},
		{"clip", "clip norm C", g.Clip, "for no clipping"},
		{"clip_pos", "clip norm C₊", g.ClipPos, ""},
		{"clip_neg", "clip norm C₋", g.ClipNeg, ""},
		{"server_lr", "server learning rate", g.ServerLR, ""},
	}
	for _, c := range checks {
		if err := positive(c.name, c.what, c.vs, c.zero); err != nil {
			return err
		}
	}
	for i, z := range g.AlphaZ {
		if !(z >= 0) || math.IsInf(z, 1) {
			return fmt.Errorf("dp_alpha_z[%d] is %v: want a finite z ≥ 0 (0 is the paper's weighting)", i, z)
		}
	}
	for i, d := range g.Delta {
		if !(d > 0 && d < 1) {
			return fmt.Errorf("delta[%d]: δ is %v: want 0 < δ < 1", i, d)
		}
	}
	for i, m := range g.Mexp {
		if m < 1 || m > calib.MaxMexp {
			return fmt.Errorf("mexp[%d] is %d: want M in [1, %d] (2^M bins)", i, m, calib.MaxMexp)
		}
	}
	if len(g.SampleRate) > 0 && len(g.ClientsPerRound) > 0 {
		return errors.New("sample_rate and clients_per_round both set the sampling: give one")
	}
	for i, p := range g.SampleRate {
		if !(p > 0 && p <= 1) {
			return fmt.Errorf("sample_rate[%d] is %v: want 0 < p ≤ 1", i, p)
		}
	}
	for i, k := range g.ClientsPerRound {
		if k < 1 {
			return fmt.Errorf("clients_per_round[%d] is %d: want ≥ 1", i, k)
		}
	}
	for i, a := range g.Accountant {
		if _, err := dp.ParseAccountant(a); err != nil {
			return fmt.Errorf("accountant[%d]: %w", i, err)
		}
	}
	hasDP := slices.ContainsFunc(g.Epsilon, func(e float64) bool { return e > 0 })
	if !hasDP && slices.ContainsFunc(g.AlphaZ, func(z float64) bool { return z != 0 }) {
		return errors.New("dp_alpha_z: applies to private runs, and epsilon has no value > 0: give one or drop dp_alpha_z")
	}
	if hasDP && slices.Contains(g.Clip, 0) && slices.ContainsFunc(g.Method, isScaling) {
		return errors.New("clip: none with a private ε: a private scaling run needs a clip norm C > 0")
	}
	return nil
}

// fits reports whether the grid's β values suit the dataset's partition.
func (g *Grid) fits(d *Dataset) error {
	onTheFly := d.Partition.Clients > 0
	switch {
	case len(g.Beta) > 0 && !onTheFly:
		return errors.New("the grid varies beta but the dataset's partition is fixed (a file or natural): give it partition {clients: K, seed: S}")
	case len(g.Beta) > 0 && d.Partition.Beta != 0:
		return errors.New("both the grid and the dataset's partition give beta: keep one")
	case onTheFly && len(g.Beta) == 0 && d.Partition.Beta == 0:
		return errors.New("the partition is made on the fly but no beta is given: set partition.beta or the grid's beta")
	}
	if onTheFly {
		// A partition file's or the data's clients are counted when the
		// data is read; these are known now.
		for i, k := range g.ClientsPerRound {
			if k > d.Partition.Clients {
				return fmt.Errorf("clients_per_round[%d] is %d: the partition has %d clients", i, k, d.Partition.Clients)
			}
		}
		if k := d.ClientsPerRound; k > d.Partition.Clients {
			return fmt.Errorf("clients_per_round is %d: the partition has %d clients", k, d.Partition.Clients)
		}
	}
	return nil
}

func (p *Plot) validate() error {
	isParam := func(s string) bool { return slices.Contains(Params(), s) }
	switch {
	case p.Name == "" || strings.ContainsAny(p.Name, "/\\ ") || strings.HasPrefix(p.Name, "."):
		return fmt.Errorf("name %q: give a file name stem without slashes or spaces", p.Name)
	case !isParam(p.X) || p.X == "method" || p.X == "weighting" || p.X == "accountant" || p.X == "seed":
		return fmt.Errorf("x %q: want a numeric parameter: rounds, beta, epsilon, delta, mexp, clip, clip_pos, clip_neg, dp_alpha_z, clients_per_round, sample_rate or server_lr", p.X)
	case !slices.Contains(Metrics(), p.Y):
		return fmt.Errorf("y %q: want a metric: %s", p.Y, strings.Join(Metrics(), ", "))
	}
	for _, s := range p.Series {
		if !isParam(s) || s == "seed" || s == p.X {
			return fmt.Errorf("series %q: want parameters other than x and seed", s)
		}
	}
	for k := range p.Where {
		if !isParam(k) && k != "dataset" {
			return fmt.Errorf("where: unknown parameter %q", k)
		}
	}
	switch p.Format {
	case "", "png", "svg", "pdf":
	default:
		return fmt.Errorf("format %q: want png, svg or pdf", p.Format)
	}
	return nil
}

// isScaling reports whether method is of the scaling family; an unknown
// method (refused by validate) is not.
func isScaling(method string) bool {
	m, err := calib.LookupMethod(method)
	return err == nil && m.Family == calib.Scaling
}

// The YAML form of a configuration.

type rawConfig struct {
	Name        string       `yaml:"name"`
	Description string       `yaml:"description"`
	Datasets    []rawDataset `yaml:"datasets"`
	Grid        *rawGrid     `yaml:"grid"`
	Grids       []rawGrid    `yaml:"grids"`
	Summary     struct {
		Metrics list[string] `yaml:"metrics"`
	} `yaml:"summary"`
	Plots []rawPlot `yaml:"plots"`
}

type rawDataset struct {
	Name            string       `yaml:"name"`
	Logits          string       `yaml:"logits"`
	Partition       rawPartition `yaml:"partition"`
	Optional        bool         `yaml:"optional"`
	Input           string       `yaml:"input"`
	ClientsPerRound int          `yaml:"clients_per_round"`
	SampleRate      float64      `yaml:"sample_rate"`
}

type rawPartition struct {
	File       string                `yaml:"file"`
	Clients    int                   `yaml:"clients"`
	Beta       float64               `yaml:"beta"`
	Seed       uint64                `yaml:"seed"`
	Holdout    string                `yaml:"holdout"`
	Fractions  *federation.Fractions `yaml:"fractions"`
	Natural    bool                  `yaml:"natural"`
	Rule       string                `yaml:"rule"`
	MinSamples int                   `yaml:"min_samples"`
}

type rawGrid struct {
	Method          list[string]  `yaml:"method"`
	Weighting       list[string]  `yaml:"weighting"`
	Rounds          list[int]     `yaml:"rounds"`
	Beta            list[float64] `yaml:"beta"`
	Epsilon         list[noneOr]  `yaml:"epsilon"`
	Delta           list[float64] `yaml:"delta"`
	Mexp            list[int]     `yaml:"mexp"`
	Clip            list[noneOr]  `yaml:"clip"`
	ClipPos         list[float64] `yaml:"clip_pos"`
	ClipNeg         list[float64] `yaml:"clip_neg"`
	AlphaZ          list[float64] `yaml:"dp_alpha_z"`
	SampleRate      list[float64] `yaml:"sample_rate"`
	ClientsPerRound list[int]     `yaml:"clients_per_round"`
	ServerLR        list[float64] `yaml:"server_lr"`
	Accountant      list[string]  `yaml:"accountant"`
	Seed            list[uint64]  `yaml:"seed"`
}

type rawPlot struct {
	Name   string            `yaml:"name"`
	Title  string            `yaml:"title"`
	X      string            `yaml:"x"`
	Y      string            `yaml:"y"`
	Series list[string]      `yaml:"series"`
	LogX   bool              `yaml:"log_x"`
	Where  map[string]string `yaml:"where"`
	Format string            `yaml:"format"`
}

// list is a YAML value given as one scalar or a sequence.
type list[T any] []T

func (l *list[T]) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.SequenceNode {
		var v []T
		if err := n.Decode(&v); err != nil {
			return err
		}
		*l = v
		return nil
	}
	var v T
	if err := n.Decode(&v); err != nil {
		return err
	}
	*l = []T{v}
	return nil
}

// noneOr is a number, or "none" (0).
type noneOr float64

func (v *noneOr) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Value == "none" {
		*v = 0
		return nil
	}
	var f float64
	if err := n.Decode(&f); err != nil {
		return fmt.Errorf("line %d: %q is neither a number nor none", n.Line, n.Value)
	}
	if f == 0 {
		// Zero is reserved for none; say so rather than guess.
		return fmt.Errorf("line %d: 0 is not allowed: write none for no privacy or no clipping", n.Line)
	}
	*v = noneOr(f)
	return nil
}

func (r *rawConfig) config(dir string) (*Config, error) {
	c := &Config{Name: r.Name, Description: strings.TrimSpace(r.Description), Summary: Summary{Metrics: r.Summary.Metrics}}
	for i, d := range r.Datasets {
		ds := Dataset{
			Name: d.Name, Optional: d.Optional, Input: d.Input, ClientsPerRound: d.ClientsPerRound, SampleRate: d.SampleRate,
			Partition: PartitionSpec{
				Clients: d.Partition.Clients, Beta: d.Partition.Beta, Seed: d.Partition.Seed,
				Fractions: d.Partition.Fractions, Natural: d.Partition.Natural,
				Rule: federation.SplitRule(d.Partition.Rule), MinSamples: d.Partition.MinSamples,
			},
		}
		var err error
		if ds.Logits, err = expandPath(d.Logits, dir); err != nil {
			return nil, fmt.Errorf("datasets[%d].logits: %w", i, err)
		}
		if ds.Partition.File, err = expandPath(d.Partition.File, dir); err != nil {
			return nil, fmt.Errorf("datasets[%d].partition.file: %w", i, err)
		}
		if ds.Partition.Holdout, err = expandPath(d.Partition.Holdout, dir); err != nil {
			return nil, fmt.Errorf("datasets[%d].partition.holdout: %w", i, err)
		}
		c.Datasets = append(c.Datasets, ds)
	}
	switch {
	case r.Grid != nil && len(r.Grids) > 0:
		return nil, errors.New("grid and grids: give one (grids is a list of grids)")
	case r.Grid != nil:
		c.Grids = []Grid{r.Grid.grid()}
	default:
		for _, g := range r.Grids {
			c.Grids = append(c.Grids, g.grid())
		}
	}
	for _, p := range r.Plots {
		c.Plots = append(c.Plots, Plot{
			Name: p.Name, Title: p.Title, X: p.X, Y: p.Y, Series: p.Series, LogX: p.LogX, Where: p.Where, Format: p.Format,
		})
	}
	return c, nil
}

func (g *rawGrid) grid() Grid {
	floats := func(vs []noneOr) []float64 {
		if vs == nil {
			return nil
		}
		out := make([]float64, len(vs))
		for i, v := range vs {
			out[i] = float64(v)
		}
		return out
	}
	return Grid{
		Method: g.Method, Weighting: g.Weighting, Rounds: g.Rounds, Beta: g.Beta,
		Epsilon: floats(g.Epsilon), Delta: g.Delta, Mexp: g.Mexp, Clip: floats(g.Clip),
		ClipPos: g.ClipPos, ClipNeg: g.ClipNeg, AlphaZ: g.AlphaZ, SampleRate: g.SampleRate, ClientsPerRound: g.ClientsPerRound,
		ServerLR: g.ServerLR, Accountant: g.Accountant, Seed: g.Seed,
	}
}

// yamlError rewrites the YAML decoder's errors as one line in the
// configuration's words.
func yamlError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, len(te.Errors))
	for i, e := range te.Errors {
		if k := strings.Index(e, " not found in type "); k >= 0 && strings.Contains(e, "field ") {
			j := strings.Index(e, "field ")
			e = e[:j] + "unknown key " + e[j+len("field "):k]
		}
		e = strings.ReplaceAll(e, "experiment.raw", "")
		if s, ok := strings.CutSuffix(e, " into uint64"); ok { // seeds are the only uint64 keys
			e = fmt.Sprintf("%s as a seed: seeds are integers from 0 to %d", s, uint64(math.MaxUint64))
		}
		msgs[i] = strings.TrimSpace(e)
	}
	return fmt.Errorf("configuration: %s", strings.Join(msgs, "; "))
}

// expandPath expands environment variables and a leading ~ in path and
// joins a relative result to dir. The empty path stays empty.
func expandPath(path, dir string) (string, error) {
	if path == "" {
		return "", nil
	}
	s, err := expandEnv(path)
	if err != nil {
		return "", err
	}
	if s == "~" || strings.HasPrefix(s, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		s = filepath.Join(home, s[1:])
	}
	if !filepath.IsAbs(s) && dir != "" {
		s = filepath.Join(dir, s)
	}
	return filepath.Clean(s), nil
}

// expandEnv expands $NAME, ${NAME} and ${NAME:-default} (the default
// itself expanded) in s, as a POSIX shell does, except that an unset (or
// empty) variable without a default is an error rather than nothing.
func expandEnv(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' {
			b.WriteByte(s[i])
			continue
		}
		rest := s[i+1:]
		var name, def string
		hasDef := false
		switch {
		case strings.HasPrefix(rest, "{"):
			end := closingBrace(rest)
			if end < 0 {
				return "", fmt.Errorf("%q: unclosed ${", s)
			}
			body := rest[1:end]
			name = body
			if k := strings.Index(body, ":-"); k >= 0 {
				name, def, hasDef = body[:k], body[k+2:], true
			}
			i += end + 1
		default:
			n := 0
			for n < len(rest) && (rest[n] == '_' || isAlnum(rest[n])) {
				n++
			}
			if n == 0 || rest[0] >= '0' && rest[0] <= '9' {
				b.WriteByte('$')
				continue
			}
			name = rest[:n]
			i += n
		}
		if name == "" || strings.IndexFunc(name, func(r rune) bool { return r != '_' && (r > 127 || !isAlnum(byte(r))) }) >= 0 {
			return "", fmt.Errorf("%q: bad variable name %q", s, name)
		}
		if v := os.Getenv(name); v != "" {
			b.WriteString(v)
			continue
		}
		if !hasDef {
			return "", fmt.Errorf("%q: $%s is not set; set it or write ${%s:-default}", s, name, name)
		}
		d, err := expandEnv(def)
		if err != nil {
			return "", err
		}
		b.WriteString(d)
	}
	return b.String(), nil
}

// closingBrace returns the index in s (which starts with "{") of the brace
// that closes it, counting nested ${...}, or -1.
func closingBrace(s string) int {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// formatFloat writes v in the shortest form that reads back exactly.
func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
