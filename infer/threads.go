package infer

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	ort "github.com/yalue/onnxruntime_go"
)

// This file holds the thread plan (package documentation, "The thread
// plan"): DefaultThreads and threadPlan.apply are the only code that
// decides how ONNX Runtime uses the cores, and readerPlan the only code
// that decides the priority of Infer's read-ahead goroutine.

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

// readerPlan is the read-ahead goroutine's part of the thread plan
// (package documentation, "The thread plan"). The zero value is a plan
// whose reader has not been promoted.
type readerPlan struct {
	promote atomic.Bool // set once the reader is to leave background priority
}

// enter moves the calling goroutine onto an OS thread of its own and puts
// that thread at background priority (nice backgroundNice, the lowest:
// a thread of normal priority that wakes preempts it), and reports
// whether it could. The goroutine never unlocks the thread, so the thread
// ends with it and no other goroutine ever runs at that priority; a
// thread of an unprivileged process cannot come back from it, which is
// why promotion hands the reading to a new goroutine instead.
func (p *readerPlan) enter() bool {
	runtime.LockOSThread()
	return setBackground(gettid()) == nil
}

// promoted reports whether the reader is to continue at normal priority.
func (p *readerPlan) promoted() bool { return p.promote.Load() }

// patience returns how long Infer waits for a batch before it promotes
// the reader, after spending busy (its model run and bookkeeping) on the
// previous batch: as long as the model ran. A wait that long means the
// reader did not keep up even with the model's cores left to it — the
// machine is busy with other work, to which a background thread yields,
// or reading costs more than running — so the reader continues at normal
// priority for the rest of the data. With busy zero (before the first
// run) it returns zero: no promotion.
func (p *readerPlan) patience(busy time.Duration) time.Duration { return busy }

// promoteNow promotes the reader: it pauses before its next record and a
// goroutine of normal priority continues.
func (p *readerPlan) promoteNow() { p.promote.Store(true) }
