package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/internal/fileio"
	"github.com/fedcalib/fedcalib/network"
)

// evalRoundFlags are serve's flags of the evaluation round.
type evalRoundFlags struct {
	evaluate             bool
	epsilon, delta, clip float64
	bins                 int
	out                  string
}

// evalRoundOnly lists the flags that need --evaluate.
var evalRoundOnly = []string{"eval-epsilon", "eval-delta", "eval-clip", "eval-bins", "eval-out"}

// register adds the evaluation round's flags to f.
func (ef *evalRoundFlags) register(f *pflag.FlagSet) {
	f.BoolVar(&ef.evaluate, "evaluate", false, "after the last round, run an evaluation round: the federated test metrics of the fitted calibrator from the clients' summed test statistics")
	f.Float64Var(&ef.epsilon, "eval-epsilon", 0, "with --evaluate: make the evaluation (ε, δ)-differentially private with this ε > 0 (a release of its own)")
	f.Float64Var(&ef.delta, "eval-delta", dp.DefaultDelta, "δ ∈ (0, 1) of --eval-epsilon")
	f.Float64Var(&ef.clip, "eval-clip", federation.DefaultEvalClip, "with --eval-epsilon: L2 clip norm C of each client's statistics (the sensitivity)")
	f.IntVar(&ef.bins, "eval-bins", calib.DefaultMetricBins, "with --evaluate: number of equal-width bins of cwECE and ECE")
	f.StringVar(&ef.out, "eval-out", "", "with --evaluate: also write the federated test metrics to this JSON file (as eval --federated --json)")
}

// options checks the flags and returns the coordinator's evaluation
// options, nil without --evaluate. accountant is the fit's --accountant;
// out and clients are serve's other files.
func (ef *evalRoundFlags) options(changed func(string) bool, accountant string, secure bool, out, clients string) (*federation.EvalOptions, error) {
	if !ef.evaluate {
		for _, name := range evalRoundOnly {
			if changed(name) {
				return nil, fmt.Errorf("--%s sets up the evaluation round: add --evaluate", name)
			}
		}
		return nil, nil
	}
	switch {
	case secure:
		return nil, errors.New("--evaluate under --secure-aggregation is not implemented: drop one of them")
	case ef.bins < 1 || ef.bins > calib.MaxMetricBins:
		return nil, fmt.Errorf("--eval-bins is %d: want 1 to %d bins", ef.bins, calib.MaxMetricBins)
	case !changed("eval-epsilon") && (changed("eval-delta") || changed("eval-clip")):
		return nil, errors.New("--eval-delta and --eval-clip set up a private evaluation and need --eval-epsilon")
	}
	if ef.out != "" {
		if err := checkOut("--eval-out", ef.out, outKind{"a metrics file", ".json"}, out, clients); err != nil {
			return nil, err
		}
		if ef.out == out {
			return nil, fmt.Errorf("--eval-out %s is also --out: name another file", ef.out)
		}
	}
	o := &federation.EvalOptions{Bins: ef.bins}
	if !changed("eval-epsilon") {
		return o, nil
	}
	if err := checkPositive("eval-epsilon", ef.epsilon, "privacy budget ε", "drop --eval-epsilon for an exact evaluation"); err != nil {
		return nil, err
	}
	if !(ef.delta > 0 && ef.delta < 1) {
		return nil, fmt.Errorf("--eval-delta is %v: want δ in (0, 1), e.g. 1e-5", ef.delta)
	}
	if err := checkPositive("eval-clip", ef.clip, "clip norm C", fmt.Sprintf("drop --eval-clip for the default %v", federation.DefaultEvalClip)); err != nil {
		return nil, err
	}
	acc, err := dp.ParseAccountant(accountant)
	if err != nil {
		return nil, fmt.Errorf("--accountant %q: want zcdp or rdp", accountant)
	}
	o.Privacy = &federation.Privacy{Epsilon: ef.epsilon, Delta: ef.delta, Clip: ef.clip, Accountant: acc}
	return o, nil
}

// report prints the evaluation round's line and writes --eval-out; it
// does nothing without an evaluation.
func (ef *evalRoundFlags) report(w io.Writer, o *network.Outcome) error {
	ev := o.Evaluation
	if ev == nil {
		return nil
	}
	m := ev.Metrics
	what := "exact"
	if pr := ev.Privacy; pr != nil {
		what = fmt.Sprintf("private, ε = %.4g spent (δ = %g, %s, σ = %.4g, clip C = %g); N estimated", pr.Epsilon, pr.Delta, pr.Accountant, pr.Sigma, pr.Clip)
	}
	if _, err := fmt.Fprintf(w, "federated test metrics (%d of %d clients, %d rows): cwECE %.3f%%, ECE %.3f%%, accuracy %.2f%%, NLL %.4f, Brier %.4f; %s\n",
		ev.Clients, len(o.EvalRound.Sampled), m.N, 100*m.CWECE, 100*m.ECE, 100*m.Accuracy, m.NLL, m.Brier, what); err != nil {
		return err
	}
	if ef.out == "" {
		return nil
	}
	rep := &fedEvalReport{
		Metrics: m, Federated: true, Clients: ev.Clients, Partition: "the clients of the networked federation",
		Split: "test", Bins: ef.bins, Method: o.Result.Calibrator.Method(), Privacy: ev.Privacy,
	}
	if ev.Stats != nil {
		t := ev.Stats.TopLabel()
		rep.TopLabel = &t
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := fileio.Write(ef.out, append(b, '\n')); err != nil {
		return fmt.Errorf("writing %s: %w", ef.out, err)
	}
	return nil
}
