package infer

import (
	"fmt"
	"runtime"

	ort "github.com/yalue/onnxruntime_go"
)

// This file holds the thread plan (package documentation, "The thread
// plan"): DefaultThreads and threadPlan.apply are the only code that
// decides how ONNX Runtime uses the cores.

// DefaultThreads returns the intra-op threads a session gets when
// Options.Threads or GraphOptions.Threads is zero: runtime.GOMAXPROCS(0),
// the number of cores this process may use (it follows the CPU quota of
// a container, where runtime.NumCPU would count the host's cores).
func DefaultThreads() int { return runtime.GOMAXPROCS(0) }

// Spinning config entries of ONNX Runtime's session options.
const (
	intraSpinKey = "session.intra_op.allow_spinning"
	interSpinKey = "session.inter_op.allow_spinning"
)

// threadPlan is what newORTSession needs to know of the thread plan.
type threadPlan struct {
	threads int  // intra-op threads; 0 means DefaultThreads()
	spin    bool // whether idle pool threads spin
}

// apply sets p on so.
func (p threadPlan) apply(so *ort.SessionOptions) error {
	n := p.threads
	if n == 0 {
		n = DefaultThreads()
	}
	if err := so.SetIntraOpNumThreads(n); err != nil {
		return fmt.Errorf("setting %d threads: %w", n, err)
	}
	if err := so.SetInterOpNumThreads(1); err != nil {
		return fmt.Errorf("setting inter-op threads: %w", err)
	}
	spin := "0"
	if p.spin {
		spin = "1"
	}
	for _, k := range []string{intraSpinKey, interSpinKey} {
		if err := so.AddSessionConfigEntry(k, spin); err != nil {
			return fmt.Errorf("setting %s: %w", k, err)
		}
	}
	return nil
}
