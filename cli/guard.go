package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// Defaults of calibrate's --guard tolerances: how much worse than the
// base model a calibrator may make the held-out cwECE (a fraction: 0.001
// is 0.1 point) and NLL (nats) before --guard refuses it.
const (
	defaultGuardCWECE = 0.001
	defaultGuardNLL   = 0.001
)

// guardFlags are calibrate's --guard flags: a bar on the held-out (test
// split) change in cwECE and NLL that the fitted calibrator must clear
// before anything is written.
type guardFlags struct {
	on         bool
	cwece, nll float64
}

func (g *guardFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&g.on, "guard", false, "exit 1 and write nothing when the calibrator makes the test rows' cwECE or NLL worse than the base model's beyond the tolerances")
	f.Float64Var(&g.cwece, "guard-cwece-tolerance", defaultGuardCWECE, "with --guard: allowed cwECE worsening, as a fraction (0.001 = 0.1 point)")
	f.Float64Var(&g.nll, "guard-nll-tolerance", defaultGuardNLL, "with --guard: allowed NLL worsening, in nats")
}

// check reports a flag problem of the guard.
func (g *guardFlags) check(cmd *cobra.Command) error {
	changed := cmd.Flags().Changed
	if !g.on && (changed("guard-cwece-tolerance") || changed("guard-nll-tolerance")) {
		return fmt.Errorf("--guard-cwece-tolerance and --guard-nll-tolerance need --guard")
	}
	if !(g.cwece >= 0 && g.cwece <= 1) {
		return fmt.Errorf("--guard-cwece-tolerance is %v: want a fraction in [0, 1], e.g. 0.001 for 0.1 point", g.cwece)
	}
	return g.gate().Validate()
}

// gate is the guard's bar: cwECE and NLL may get worse by at most the
// tolerances; accuracy is not judged (the drop warning reports it).
func (g *guardFlags) gate() calib.Gate {
	return calib.Gate{MaxAccuracyDrop: 1, MinCWECEImprovement: -g.cwece, CheckNLL: true, MaxNLLIncrease: g.nll}
}

// judge applies the guard to the base model's (before) and the
// calibrator's (after) metrics on n held-out rows; held is false when
// there are none. It returns nil when the guard is off or passes, and an
// error wrapping ErrCheckFailed (exit 1) naming out, which was not
// written, when it fails.
func (g *guardFlags) judge(before, after calib.Metrics, held bool, out string) error {
	if !g.on {
		return nil
	}
	if !held {
		return fmt.Errorf("--guard: the logits have no test rows (split %d) to judge the calibrator on; %s not written", logits.SplitTest, out)
	}
	v := g.gate().Judge(before, after)
	if v.Pass {
		return nil
	}
	return &guardError{fmt.Sprintf("--guard: on the test rows %s; %s not written", strings.Join(v.Failures, "; "), out)}
}

// guardError is a failed guard: exit 1, like a failed check.
type guardError struct{ msg string }

func (e *guardError) Error() string { return e.msg }
func (e *guardError) Unwrap() error { return ErrCheckFailed }

// heldOutLine describes the held-out change in the calibrate summary.
func heldOutLine(n int, before, after calib.Metrics) string {
	return fmt.Sprintf("; test (%d rows) cwECE %.3f%% → %.3f%%, NLL %.4f → %.4f",
		n, 100*before.CWECE, 100*after.CWECE, before.NLL, after.NLL)
}
