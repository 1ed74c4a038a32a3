package experiment

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/federation"
)

// Cell is the parameters of one run. Parameters a run does not use are
// zero (blank in runs.csv): Weighting and Mexp of scaling methods;
// ServerLR and Clip of binning methods; Delta, ClipPos, ClipNeg and
// Accountant of runs without privacy.
type Cell struct {
	// Dataset is the dataset's name.
	Dataset string
	// Method is a federation.Methods name.
	Method string
	// Weighting is the binning methods' weighting.
	Weighting calib.Weighting
	// Rounds is T.
	Rounds int
	// Beta is the Dirichlet β of a partition made on the fly; in a Row,
	// the β of the run's partition (also of a partition file), or 0 for
	// other partitions.
	Beta float64
	// Epsilon is the total ε of a private run, 0 without privacy; Delta
	// its δ.
	Epsilon, Delta float64
	// Mexp is the binning methods' bin exponent M (2^M bins).
	Mexp int
	// Clip is the scaling methods' clip norm C, 0 for no clipping.
	Clip float64
	// ClipPos and ClipNeg are the binning methods' clip norms C₊ and C₋
	// of private runs.
	ClipPos, ClipNeg float64
	// AlphaZ is the weighting's z of private, weighted binning runs
	// (federation.Privacy.AlphaZ); 0 is the paper's rule.
	AlphaZ float64
	// ClientsPerRound is k when the sampling was given as k clients per
	// round, else 0.
	ClientsPerRound int
	// SampleRate is the sample rate p; in a Cell given as clients per
	// round it is 0, and in a Row it is always the p used (k/K).
	SampleRate float64
	// ServerLR is the scaling methods' server learning rate η_S.
	ServerLR float64
	// Accountant is the privacy accountant of private runs.
	Accountant string
	// Seed seeds the run.
	Seed uint64
}

// binning reports whether the cell's method is FedBin or FedBBQ.
func (c *Cell) binning() bool {
	m, err := calib.LookupMethod(c.Method)
	return err == nil && m.Family == calib.Binning
}

// spec returns the federated fit of the cell. A blank (zero) parameter
// means its default, as in federation.Spec.
func (c *Cell) spec() federation.Spec {
	s := federation.Spec{
		Method: c.Method, Mexp: c.Mexp, Weighting: c.Weighting, ServerLR: c.ServerLR, Clip: c.Clip,
	}
	if c.Epsilon > 0 {
		s.Epsilon, s.Delta, s.Accountant = c.Epsilon, c.Delta, c.Accountant
		s.ClipPos, s.ClipNeg, s.AlphaZ = c.ClipPos, c.ClipNeg, c.AlphaZ
	}
	return s
}

// weighted reports whether the cell is a binning run with weighting.
func (c *Cell) weighted() bool {
	return c.binning() && (c.Weighting == calib.WeightAll || c.Weighting == calib.WeightChanged)
}

// Label returns the method's name as the paper's tables write it:
// "FedBBQ", "FedBBQ all weight", "FedTemp"...
func (c *Cell) Label() string {
	name := c.Method
	if m, err := calib.LookupMethod(c.Method); err == nil {
		name = m.Protocol
	}
	if c.Weighting != "" && c.Weighting != calib.WeightNone {
		name += " " + string(c.Weighting) + " weight"
	}
	return name
}

// applies reports whether parameter name (see Params) means something for
// the cell: the weighting and M of binning methods, C and η_S of scaling
// methods, δ and the accountant of private runs, C₊ and C₋ of private
// binning runs, and every other parameter always (a blank ε means no
// privacy, a blank β a natural partition).
func (c *Cell) applies(name string) bool {
	private := c.Epsilon > 0
	switch name {
	case "weighting", "mexp":
		return c.binning()
	case "clip", "server_lr":
		return !c.binning()
	case "delta", "accountant":
		return private
	case "clip_pos", "clip_neg":
		return private && c.binning()
	case "dp_alpha_z":
		return private && c.weighted()
	}
	return true
}

// param returns the value of parameter name (see Params) as runs.csv
// writes it: "" for a blank.
func (c *Cell) param(name string) string {
	num := func(v float64) string {
		if v == 0 {
			return ""
		}
		return formatFloat(v)
	}
	integer := func(v int) string {
		if v == 0 {
			return ""
		}
		return strconv.Itoa(v)
	}
	switch name {
	case "dataset":
		return c.Dataset
	case "method":
		return c.Method
	case "weighting":
		return string(c.Weighting)
	case "rounds":
		return strconv.Itoa(c.Rounds)
	case "beta":
		return num(c.Beta)
	case "epsilon":
		return num(c.Epsilon)
	case "delta":
		return num(c.Delta)
	case "mexp":
		return integer(c.Mexp)
	case "clip":
		return num(c.Clip)
	case "clip_pos":
		return num(c.ClipPos)
	case "clip_neg":
		return num(c.ClipNeg)
	case "dp_alpha_z":
		return num(c.AlphaZ)
	case "clients_per_round":
		return integer(c.ClientsPerRound)
	case "sample_rate":
		return num(c.SampleRate)
	case "server_lr":
		return num(c.ServerLR)
	case "accountant":
		return c.Accountant
	case "seed":
		return strconv.FormatUint(c.Seed, 10)
	}
	panic("experiment: unknown parameter " + name)
}

// key returns the canonical text of the cell's parameters.
func (c *Cell) key() string {
	var b strings.Builder
	b.WriteString("dataset=" + c.Dataset)
	for _, p := range Params() {
		b.WriteString("|" + p + "=" + c.param(p))
	}
	return b.String()
}

// cellID returns the identifier of a cell over input data with the given
// fingerprint: 16 hex digits of a SHA-256.
func cellID(c *Cell, inputs string) string {
	h := sha256.Sum256([]byte("fedcalib.experiment/v1\n" + inputs + "\n" + c.key()))
	return hex.EncodeToString(h[:8])
}

// Cells returns the cells of the experiment without running anything:
// each dataset crossed with each grid, in order (see Grid), every cell
// listed once. It returns an error for a cell that cannot run, such as a
// private scaling run without a clip norm.
func (c *Config) Cells() ([]Cell, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var out []Cell
	seen := map[string]bool{}
	for i := range c.Datasets {
		for g := range c.Grids {
			cells, err := c.Grids[g].cells(&c.Datasets[i])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", gridName(c, g), err)
			}
			for _, cell := range cells {
				if k := cell.key(); !seen[k] {
					seen[k] = true
					out = append(out, cell)
				}
			}
		}
	}
	return out, nil
}

// cells expands grid g over dataset d into normalised cells, in order:
// method, weighting, rounds, β, ε, δ, M, C, C₊, C₋, z, sampling, η_S,
// accountant, seed (the last varies fastest). Cells that coincide after
// blanking are listed once.
func (g *Grid) cells(d *Dataset) ([]Cell, error) {
	or := func(v []float64, def float64) []float64 {
		if len(v) == 0 {
			return []float64{def}
		}
		return v
	}
	weightings := g.Weighting
	if len(weightings) == 0 {
		weightings = []string{string(calib.WeightNone)}
	}
	betas := or(g.Beta, d.Partition.Beta)
	if d.Partition.Clients == 0 {
		betas = []float64{0}
	}
	mexps := g.Mexp
	if len(mexps) == 0 {
		mexps = []int{0} // each binning method's default (normalise)
	}
	clips := g.Clip
	if len(clips) == 0 {
		clips = []float64{-1} // the default of each cell
	}
	type sampling struct {
		k int
		p float64
	}
	var samplings []sampling
	switch {
	case d.ClientsPerRound > 0:
		samplings = []sampling{{k: d.ClientsPerRound}}
	case d.SampleRate > 0:
		samplings = []sampling{{p: d.SampleRate}}
	case len(g.ClientsPerRound) > 0:
		for _, k := range g.ClientsPerRound {
			samplings = append(samplings, sampling{k: k})
		}
	default:
		for _, p := range or(g.SampleRate, 0.1) {
			samplings = append(samplings, sampling{p: p})
		}
	}
	accountants := g.Accountant
	if len(accountants) == 0 {
		accountants = []string{dp.ZCDP.String()}
	}
	seen := map[string]bool{}
	var out []Cell
	for _, method := range g.Method {
		for _, w := range weightings {
			for _, t := range g.Rounds {
				for _, beta := range betas {
					for _, eps := range or(g.Epsilon, 0) {
						for _, delta := range or(g.Delta, 1e-5) {
							for _, m := range mexps {
								for _, clip := range clips {
									for _, cp := range or(g.ClipPos, dp.DefaultClipPos) {
										for _, cn := range or(g.ClipNeg, dp.DefaultClipNeg) {
											for _, z := range or(g.AlphaZ, 0) {
												for _, s := range samplings {
													for _, lr := range or(g.ServerLR, 1) {
														for _, acc := range accountants {
															for _, seed := range g.Seed {
																c := Cell{
																	Dataset: d.Name, Method: method, Weighting: calib.Weighting(w), Rounds: t,
																	Beta: beta, Epsilon: eps, Delta: delta, Mexp: m, Clip: clip,
																	ClipPos: cp, ClipNeg: cn, AlphaZ: z, ClientsPerRound: s.k, SampleRate: s.p,
																	ServerLR: lr, Accountant: acc, Seed: seed,
																}
																if err := c.normalise(); err != nil {
																	return nil, err
																}
																if k := c.key(); !seen[k] {
																	seen[k] = true
																	out = append(out, c)
																}
															}
														}
													}
												}
											}
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
	return out, nil
}

// normalise blanks the parameters c does not use and resolves the default
// clip norm (Clip < 0).
func (c *Cell) normalise() error {
	private := c.Epsilon > 0
	if c.binning() {
		c.Clip, c.ServerLR = 0, 0
		if c.Mexp == 0 {
			m, _ := calib.LookupMethod(c.Method) // binning: a known method
			c.Mexp = m.DefaultMexp()
		}
	} else {
		c.Weighting, c.Mexp, c.ClipPos, c.ClipNeg = "", 0, 0, 0
		switch {
		case c.Clip < 0 && private:
			c.Clip = dp.DefaultClip
		case c.Clip < 0:
			c.Clip = 0
		case c.Clip == 0 && private:
			return fmt.Errorf("%s with ε = %v: clip none; a private scaling run needs a clip norm C > 0", c.Label(), c.Epsilon)
		}
	}
	if !private {
		c.Delta, c.ClipPos, c.ClipNeg, c.Accountant = 0, 0, 0, ""
	}
	if !private || !c.weighted() {
		c.AlphaZ = 0
	}
	return nil
}
