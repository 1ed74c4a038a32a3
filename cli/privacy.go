package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/federation"
)

// privacyFlags holds the flags of the privacy command.
type privacyFlags struct {
	epsilon, delta         float64
	method                 string
	classes, rounds, steps int
	sampleRate             float64
	accountant             string
	noiseMultiplier        float64
	clip, clipPos, clipNeg float64
	json                   bool
}

// privacyReport is what privacy prints. Pointer and omitempty fields are
// left out where they do not apply.
type privacyReport struct {
	Method          string   `json:"method,omitempty"`
	Accountant      string   `json:"accountant"`
	Epsilon         float64  `json:"epsilon"`
	Delta           float64  `json:"delta"`
	Rho             *float64 `json:"rho,omitempty"`
	NoiseMultiplier *float64 `json:"noise_multiplier,omitempty"`
	Classes         int      `json:"classes,omitempty"`
	Rounds          int      `json:"rounds,omitempty"`
	Steps           int      `json:"steps,omitempty"`
	PerRound        int      `json:"mechanisms_per_round,omitempty"`
	SampleRate      float64  `json:"sample_rate,omitempty"`
	Sigma           *float64 `json:"sigma,omitempty"`
	SigmaPos        *float64 `json:"sigma_pos,omitempty"`
	SigmaNeg        *float64 `json:"sigma_neg,omitempty"`
	Order           float64  `json:"rdp_order,omitempty"`
}

func newPrivacyCmd() *cobra.Command {
	var fl privacyFlags
	var ledger string
	cmd := &cobra.Command{
		Use:   "privacy --epsilon E [--delta D] [--method M ...] | --noise-multiplier Z ... | --ledger F",
		Short: "Convert privacy budgets and calibrate the noise of a private fit",
		Long: `privacy answers three questions about user-level differential privacy, by
the flags it is given:

  --epsilon E --delta D
      the zCDP budget ρ equivalent to (ε, δ), by the exact conversion of
      Canonne, Kamath and Steinke (2020).
  --method M --epsilon E --delta D [--rounds T --classes c --sample-rate q
  --accountant zcdp|rdp]
      the noise multiplier of a private federated fit: the standard deviation
      of the noise per unit of clip norm, and σ at the clip norms given.
      Scaling methods (` + strings.Join(calib.MethodsOf(calib.Scaling), ", ") + `) noise one clipped update
      per round: σ = C·√(T/(2ρ)). Binning methods (` + strings.Join(calib.MethodsOf(calib.Binning), ", ") + `) noise 2c
      histograms per round: σ = C₊ or C₋ times √(2cT/(2ρ)). scalbin noises
      T rounds of one update (--clip C) then T rounds of 2c value
      histograms (--clip-pos C₊), one multiplier z for all: under zcdp
      σ = C·√((1+2c)T/(2ρ)) and σ₊ = C₊·√((1+2c)T/(2ρ)). --method
      evaluation is a private federated evaluation (eval --federated
      --epsilon): one release of every client's statistics clipped to
      --clip C (default 100), σ = C/√(2ρ).
  --noise-multiplier Z --steps T --delta D [--sample-rate q --accountant]
      the ε spent by T steps of the Gaussian mechanism with noise multiplier
      Z, each on a Poisson sample of rate q.

zcdp is the paper's accounting; it takes no credit for sampling clients, so
--sample-rate below 1 changes nothing there. rdp accounts the
Poisson-subsampled Gaussian mechanism (Mironov, Talwar, Zhang 2019) and
converts with the bound of Balle et al. (2020) over the orders of Google's
dp_accounting: with q < 1 the same (ε, δ) needs less noise.

It prints one "key value" line per quantity, or with --json one object
with the keys epsilon, delta, rho (zcdp), noise_multiplier and the inputs.

With --ledger F it prints instead the privacy spent on each dataset in
the ledger file F that "fedcalib calibrate --ledger F" and "fedcalib eval
--federated --ledger F" keep: per dataset the total ε at its δ and
accountant, and one line per run, fit or evaluation (with --json, the file
itself).`,
		Example: `  fedcalib privacy --epsilon 1 --delta 1e-5
  fedcalib privacy --method bbq --classes 10 --rounds 30 --epsilon 1 --delta 1e-5
  fedcalib privacy --method temp --rounds 12 --epsilon 1 --sample-rate 0.1 --accountant rdp --json
  fedcalib privacy --method evaluation --epsilon 1 --delta 1e-5 --clip 100
  fedcalib privacy --noise-multiplier 1.1 --sample-rate 0.01 --steps 1000 --delta 1e-5 --accountant rdp
  fedcalib privacy --ledger privacy-ledger.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("ledger") {
				return runPrivacyLedger(cmd, ledger, fl.json)
			}
			return runPrivacy(cmd, &fl)
		},
	}
	f := cmd.Flags()
	f.Float64Var(&fl.epsilon, "epsilon", 0, "privacy budget ε > 0 (required, except with --noise-multiplier)")
	f.Float64Var(&fl.delta, "delta", dp.DefaultDelta, "δ ∈ (0, 1)")
	f.StringVar(&fl.method, "method", "", "calibrator whose noise to calibrate: "+strings.Join(calib.MethodNames(), ", ")+"; or evaluation (eval --federated --epsilon)")
	f.IntVar(&fl.classes, "classes", 0, "with a binning --method: number of classes c ≥ 2 (required there)")
	f.IntVar(&fl.rounds, "rounds", 1, fmt.Sprintf("with --method: number of rounds T, 1 to %d", federation.MaxRounds))
	f.Float64Var(&fl.sampleRate, "sample-rate", 1, "probability q ∈ (0, 1] that a client takes part in a round (credited by rdp only)")
	f.StringVar(&fl.accountant, "accountant", "zcdp", "privacy accounting: zcdp (the paper's) or rdp (credits client sampling)")
	f.Float64Var(&fl.noiseMultiplier, "noise-multiplier", 0, "compute ε for this noise multiplier z > 0 (noise standard deviation / L2 sensitivity)")
	f.IntVar(&fl.steps, "steps", 1, "with --noise-multiplier: number of steps T ≥ 1")
	f.Float64Var(&fl.clip, "clip", dp.DefaultClip, fmt.Sprintf("with a scaling --method: L2 clip norm C > 0 of each client update, for σ; with --method evaluation, of each client's statistics (default %v)", federation.DefaultEvalClip))
	f.Float64Var(&fl.clipPos, "clip-pos", dp.DefaultClipPos, "with a binning --method: L2 clip norm C₊ > 0 of each class-positive histogram, for σ₊")
	f.Float64Var(&fl.clipNeg, "clip-neg", dp.DefaultClipNeg, "with a binning --method: L2 clip norm C₋ > 0 of each class-negative histogram, for σ₋")
	f.BoolVar(&fl.json, "json", false, "print one JSON object instead of key-value lines")
	f.StringVar(&ledger, "ledger", "", "print the privacy spent per dataset recorded in this ledger file (from calibrate --ledger)")
	return cmd
}

func runPrivacy(cmd *cobra.Command, fl *privacyFlags) error {
	if err := checkPrivacyFlags(cmd, fl); err != nil {
		return err
	}
	acc, err := dp.ParseAccountant(fl.accountant)
	if err != nil {
		return fmt.Errorf("--accountant %q: want zcdp or rdp", fl.accountant)
	}
	var rep *privacyReport
	switch {
	case cmd.Flags().Changed("noise-multiplier"):
		rep, err = privacyEpsilon(fl, acc)
	case cmd.Flags().Changed("method"):
		rep, err = privacyNoise(fl, acc, cmd.Flags().Changed("clip"))
	default:
		rep, err = privacyRho(fl)
	}
	if err != nil {
		return err
	}
	if fl.json {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.writeText(cmd.OutOrStdout())
}

// checkPrivacyFlags reports the first flag problem of privacy, naming the
// flag and what it wants.
func checkPrivacyFlags(cmd *cobra.Command, fl *privacyFlags) error {
	changed := cmd.Flags().Changed
	nm, method := changed("noise-multiplier"), changed("method")
	// onlyWith reports flags given outside the mode that uses them.
	onlyWith := func(mode string, ok bool, flags ...string) error {
		for _, f := range flags {
			if changed(f) && !ok {
				return fmt.Errorf("--%s only applies %s: drop it", f, mode)
			}
		}
		return nil
	}
	binning := binningMethod(fl.method)
	mm, _ := calib.LookupMethod(fl.method)
	hybrid := mm.Family == calib.Hybrid // scalbin: clip C, clip-pos C₊, classes
	evaluation := method && fl.method == federation.EvaluationProtocol
	for _, err := range []error{
		onlyWith("to fits, not to --method evaluation (one release of every client)", !evaluation, "rounds", "classes", "sample-rate"),
		onlyWith("with --noise-multiplier", nm, "steps"),
		onlyWith("with --method", method, "rounds", "classes"),
		onlyWith("with a scaling --method ("+strings.Join(calib.MethodsOf(calib.Scaling), ", ")+")", method && !binning, "clip"),
		onlyWith("with a binning --method", method && binning, "clip-neg"),
		onlyWith("with a binning --method or scalbin", method && (binning || hybrid), "clip-pos"),
		onlyWith("with --method or --noise-multiplier (ρ needs no sampling rate)", method || nm, "sample-rate"),
	} {
		if err != nil {
			return err
		}
	}
	switch {
	case nm && method:
		return errors.New("--noise-multiplier computes ε for a given noise, --method the noise for a given ε: use one")
	case nm && changed("epsilon"):
		return errors.New("--noise-multiplier computes ε: drop --epsilon")
	case !nm && !changed("epsilon"):
		return errors.New("privacy needs --epsilon ε > 0 (or --noise-multiplier z to compute ε)")
	case !nm && !(fl.epsilon > 0 && fl.epsilon < math.Inf(1)):
		return fmt.Errorf("--epsilon %v: want a finite ε > 0", fl.epsilon)
	case !(fl.delta > 0 && fl.delta < 1):
		return fmt.Errorf("--delta %v: want δ in (0, 1), e.g. 1e-5", fl.delta)
	case !(fl.sampleRate > 0 && fl.sampleRate <= 1):
		return fmt.Errorf("--sample-rate %v: want q in (0, 1]", fl.sampleRate)
	case fl.accountant != "zcdp" && fl.accountant != "rdp":
		return fmt.Errorf("--accountant %q: want zcdp or rdp", fl.accountant)
	case !nm && !method && fl.accountant != "zcdp":
		return errors.New("ρ is the zCDP budget: --accountant rdp needs --method or --noise-multiplier")
	case nm && !(fl.noiseMultiplier > 0 && fl.noiseMultiplier < math.Inf(1)):
		return fmt.Errorf("--noise-multiplier %v: want a finite z > 0", fl.noiseMultiplier)
	case nm && fl.steps < 1:
		return fmt.Errorf("--steps %d: want T ≥ 1", fl.steps)
	}
	if !method {
		return nil
	}
	if evaluation {
		if changed("clip") && dp.CheckClip("clip", fl.clip) != nil {
			return fmt.Errorf("--clip %v: want a finite clip norm > 0", fl.clip)
		}
		return nil
	}
	if _, err := calib.LookupMethod(fl.method); err != nil {
		return fmt.Errorf("--method %q: want one of %s, or evaluation", fl.method, strings.Join(calib.MethodNames(), ", "))
	}
	switch {
	case fl.rounds < 1 || fl.rounds > federation.MaxRounds:
		return fmt.Errorf("--rounds %d: want T from 1 to %d, the rounds a fit takes", fl.rounds, federation.MaxRounds)
	case (binning || hybrid) && !changed("classes"):
		return fmt.Errorf("--method %s needs --classes c, the number of classes (2c histograms per round)", fl.method)
	case (binning || hybrid) && (fl.classes < 2 || fl.classes > calib.MaxSize/2):
		// calib.MaxSize/2 classes fill a calibrator with one bin per class.
		return fmt.Errorf("--classes %d: want c from 2 to %d, the classes a binning fit can hold", fl.classes, calib.MaxSize/2)
	}
	for _, c := range []struct {
		flag string
		v    float64
		use  bool
	}{{"clip", fl.clip, !binning}, {"clip-pos", fl.clipPos, binning || hybrid}, {"clip-neg", fl.clipNeg, binning}} {
		if c.use && dp.CheckClip(c.flag, c.v) != nil {
			return fmt.Errorf("--%s %v: want a finite clip norm > 0", c.flag, c.v)
		}
	}
	return nil
}

// privacyRho converts (ε, δ) to ρ.
func privacyRho(fl *privacyFlags) (*privacyReport, error) {
	rho, err := dp.ZCDPRho(fl.epsilon, fl.delta)
	if err != nil {
		return nil, err
	}
	return &privacyReport{Accountant: dp.ZCDP.String(), Epsilon: fl.epsilon, Delta: fl.delta, Rho: &rho}, nil
}

// privacyNoise calibrates the noise of a fit with --method: the noise
// plan a fit with these settings adds (federation.PlanNoise).
func privacyNoise(fl *privacyFlags, acc dp.Accountant, clipChanged bool) (*privacyReport, error) {
	var plan *federation.NoisePlan
	var err error
	if fl.method == federation.EvaluationProtocol {
		p := &federation.Privacy{Epsilon: fl.epsilon, Delta: fl.delta, Accountant: acc}
		if clipChanged {
			p.Clip = fl.clip
		}
		plan, err = federation.PlanEvalNoise(p)
	} else {
		plan, err = federation.PlanNoise(fl.method, fl.classes, &federation.Privacy{
			Epsilon: fl.epsilon, Delta: fl.delta, Clip: fl.clip, ClipPos: fl.clipPos, ClipNeg: fl.clipNeg, Accountant: acc,
		}, fl.rounds, fl.sampleRate)
	}
	if err != nil {
		return nil, err
	}
	z := plan.Multiplier
	rep := &privacyReport{
		Method: fl.method, Accountant: acc.String(), Epsilon: fl.epsilon, Delta: fl.delta,
		NoiseMultiplier: &z, Rounds: fl.rounds, PerRound: plan.PerRound(), SampleRate: fl.sampleRate,
	}
	switch plan.Family {
	case calib.Binning:
		rep.Classes = fl.classes
		sp, sn := plan.Mechanisms[0].Sigma, plan.Mechanisms[1].Sigma
		rep.SigmaPos, rep.SigmaNeg = &sp, &sn
	case calib.Hybrid: // σ of the update of T, σ₊ of the value histograms
		rep.Classes = fl.classes
		s, sp := plan.Mechanisms[0].Sigma, plan.Mechanisms[1].Sigma
		rep.Sigma, rep.SigmaPos = &s, &sp
	default:
		s := plan.Sigma()
		rep.Sigma = &s
	}
	if acc == dp.ZCDP {
		rho, err := dp.ZCDPRho(fl.epsilon, fl.delta)
		if err != nil {
			return nil, err
		}
		rep.Rho = &rho
	}
	return rep, nil
}

// privacyEpsilon computes the ε spent by --steps steps with
// --noise-multiplier.
func privacyEpsilon(fl *privacyFlags, acc dp.Accountant) (*privacyReport, error) {
	z := fl.noiseMultiplier
	spent, err := dp.SpentBy(acc, z, fl.steps, fl.sampleRate, fl.delta)
	if err != nil {
		return nil, fmt.Errorf("--noise-multiplier: %w", err)
	}
	rep := &privacyReport{Accountant: acc.String(), Epsilon: spent.Epsilon, Delta: fl.delta, NoiseMultiplier: &z,
		Steps: fl.steps, SampleRate: fl.sampleRate, Order: spent.Order}
	if acc == dp.ZCDP {
		rep.Rho = &spent.Rho
	}
	return rep, nil
}

// writeText prints r as aligned "key value" lines, keys as in the JSON.
func (r *privacyReport) writeText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(key, value string) { fmt.Fprintf(tw, "%s\t%s\n", key, value) }
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', 10, 64) }
	if r.Method != "" {
		line("method", r.Method)
	}
	line("accountant", r.Accountant)
	line("epsilon", num(r.Epsilon))
	line("delta", num(r.Delta))
	if r.Rho != nil {
		line("rho", num(*r.Rho))
	}
	for _, kv := range []struct {
		key string
		v   int
	}{{"classes", r.Classes}, {"rounds", r.Rounds}, {"steps", r.Steps}, {"mechanisms_per_round", r.PerRound}} {
		if kv.v != 0 {
			line(kv.key, strconv.Itoa(kv.v))
		}
	}
	if r.SampleRate != 0 {
		line("sample_rate", num(r.SampleRate))
	}
	if r.Order != 0 {
		line("rdp_order", num(r.Order))
	}
	for _, kv := range []struct {
		key string
		v   *float64
	}{{"noise_multiplier", r.NoiseMultiplier}, {"sigma", r.Sigma}, {"sigma_pos", r.SigmaPos}, {"sigma_neg", r.SigmaNeg}} {
		if kv.v != nil {
			line(kv.key, num(*kv.v))
		}
	}
	return tw.Flush()
}
