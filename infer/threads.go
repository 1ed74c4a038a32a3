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
// decides how ONNX Runtime uses the cores, batchRows the only code that
// sizes the batches of concurrent runs, and readerPlan the only code that
// decides the priority of Infer's read-ahead goroutine.

// DefaultThreads returns the intra-op threads a session gets when
// Options.Threads or GraphOptions.Threads is zero: runtime.GOMAXPROCS(0),
// the number of cores this process may use (it follows the CPU quota of
// a container, where runtime.NumCPU would count the host's cores).
func DefaultThreads() int { return runtime.GOMAXPROCS(0) }

// batchRows returns the records of batch k (counting from 0), which
// starts after read records of total (−1 when unknown), when runs runs
// of at most most records each are in flight at once (runs > 1). When
// the total is known, a batch's share is 1/(2·runs) of the records left,
// rounded up (guided self-scheduling); else it is most. Batch k of the
// first runs takes k+1 sixteenths of most (a sixteenth at least 1), or
// its share if smaller, so that each run starts once a few records are
// read rather than a whole batch, the cores idle meanwhile, and the runs
// finish their first batches at different times (a run reads its next
// batch while no other does); the later ones take their share, between
// that sixteenth and most: the batches shrink towards the end, so that
// when the last is taken the other runs are at most a small batch from
// the end instead of a whole one. The logits do not depend on the
// batches (TestThreadPlanSameLogits).
func batchRows(k, read, total, runs, most int) int {
	least, share := max(most/16, 1), most
	if total >= 0 {
		share = max((total-read+2*runs-1)/(2*runs), 1)
	}
	if k < runs {
		return min((k+1)*least, share, most)
	}
	return min(max(share, least), most)
}

// runBatchBytes is the most input bytes a batch of concurrent runs
// holds (a record at least; runBatch). A run's activations grow with its
// batch, by about 30 times the input on the convolutional networks
// measured, and concurrent runs hold theirs at once: on mnist-tiny, two
// runs of 256 records each (800 KB of input) ran at 0.86× the records/s
// of runs capped at 83, whose activations stay in the caches (batches of
// 32 to 128 ran alike), and a ResNet-50 shape ran as fast one image per
// run as sixteen (docs/BENCHMARKS.md, "infer: concurrent runs' batches
// capped at 256 KiB of input"). An LSTM's batch of token ids is small, so
// it keeps Options.Batch (which ran as fast as 64 or 128 there).
const runBatchBytes = 256 << 10

// runBatch returns the most records a batch of concurrent runs takes
// when each run may take batch records of recordBytes input bytes each:
// batch, or fewer so that the batch holds at most runBatchBytes, one
// record at least.
func runBatch(batch, recordBytes int) int {
	if recordBytes <= 0 {
		return batch
	}
	return min(batch, max(1, runBatchBytes/recordBytes))
}

// runPlan returns how Session.Infer runs a model for opt (package
// documentation, "The thread plan"): the intra-op threads of each model
// run and how many runs it keeps in flight at once, each on its own batch.
// At the zero Options that is as many runs as the cores this process may
// use (DefaultThreads), at most maxRuns, each on one thread, or on an
// equal share of the cores where there are more than maxRuns of them
// (the largest number of runs up to maxRuns that divides the cores): a
// run on one thread has no barriers to wait at, so a reader or another
// process that takes a core for a while slows one run, not every thread
// of a parallel operator. Given Threads, or reading between runs
// (Sequential), one run at a time unless Runs says otherwise; given Runs
// alone, the cores shared out among them (at least one thread each).
func runPlan(opt Options) (threads, runs int) {
	threads, runs = opt.Threads, opt.Runs
	cores := DefaultThreads()
	if runs == 0 {
		runs = 1
		if threads == 0 && !opt.Sequential {
			for r := min(cores, maxRuns); r > 1; r-- {
				if cores%r == 0 {
					runs = r
					break
				}
			}
		}
	}
	if threads == 0 {
		threads = max(1, cores/runs)
	}
	return threads, runs
}

// maxRuns is the most runs the thread plan keeps in flight by default.
// Each run holds its own activations (a ResNet-50 about 25 MB per
// record, one record a batch under runBatchBytes), so memory grows with
// the runs; past a few cores, intra-op threads share the work of a run
// well enough.
const maxRuns = 4

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
	promote    atomic.Bool   // set once the reader is to leave background priority
	background bool          // whether the reader starts at background priority after its first batch
	always     bool          // lower the reader even on a busy machine (tests)
	floor      time.Duration // the least patience; zero means minPatience

	wall0 time.Time     // when the first batch began
	cpu0  time.Duration // the reader thread's CPU time then
}

// start is called by the reader before its first batch, which it reads
// at normal priority while the model waits for it: it moves the calling
// goroutine onto an OS thread of its own and notes the time and the
// thread's CPU time, for enter.
func (p *readerPlan) start() {
	runtime.LockOSThread()
	p.wall0, p.cpu0 = time.Now(), threadCPU()
}

// enter is called by the reader after its first batch, before the
// second (which it reads while the model runs). It puts the reader's
// thread at background priority (Linux's SCHED_IDLE: it runs only on a
// core no thread of normal priority wants, and one that wakes preempts
// it at once) and reports whether it did. It does not when the first
// batch showed the machine saturated (saturated), nor when other
// processes keep it busy (othersLoad at least quietLoad), for a
// background thread would then wait for every one of them, nor where the
// system refuses. The
// goroutine never unlocks the thread after lowering it, so the thread
// ends with it and no other goroutine ever runs at that priority; a
// thread of an unprivileged process cannot leave SCHED_IDLE, which is why
// promotion hands the reading to a new goroutine instead.
func (p *readerPlan) enter() bool {
	cpu := threadCPU()
	others, ok := othersLoad()
	if !p.always && (!ok || others >= quietLoad || cpu < 0 || p.cpu0 < 0 || saturated(time.Since(p.wall0), cpu-p.cpu0)) {
		runtime.UnlockOSThread()
		return false
	}
	if setBackground(gettid()) != nil {
		runtime.UnlockOSThread()
		return false
	}
	return true
}

// quietLoad is the load, in cores, that other processes may put on the
// machine for the reader to go to background priority: below it the
// machine is taken to be quiet. A background thread waits for every
// runnable thread of normal priority, so on a busy machine it would be
// starved; there the reader stays at normal priority (the plan of
// Options.ForegroundReader).
const quietLoad = 0.5

// othersFrom returns the load of other processes, in cores, from the
// 1-minute load average load1 and this process's CPU time cpu over the
// wall seconds it has run (its own average use, which the load average
// counts too), never below 0.
func othersFrom(load1, cpu, wall float64) float64 {
	own := 0.0
	if wall > 0 {
		own = cpu / wall
	}
	return max(0, load1-own)
}

// saturated reports whether a reader that took wall to read its first
// batch, of which it ran cpu on a core, waited for a core: more than
// twice its CPU time and 2 ms besides. The model does not run then, so
// the wait was for other processes: the machine has no idle core for a
// background thread.
func saturated(wall, cpu time.Duration) bool {
	return wall > 2*cpu+2*time.Millisecond
}

// promoted reports whether the reader is to continue at normal priority.
func (p *readerPlan) promoted() bool { return p.promote.Load() }

// patience returns how long Infer waits for a batch before it promotes
// the reader, after spending busy (its model run and bookkeeping) on the
// previous batch: as long as the model ran, and at least minPatience
// (shorter waits are the scheduler's noise). A wait that long means the
// reader did not keep up even with the model's cores left to it — the
// machine has become busy with other work, to which a background thread
// yields, or reading costs more than running — so the reader continues
// at normal priority for the rest of the data. With busy zero (before
// the first run) it returns zero: no promotion.
func (p *readerPlan) patience(busy time.Duration) time.Duration {
	if busy <= 0 {
		return 0
	}
	floor := p.floor
	if floor == 0 {
		floor = minPatience
	}
	return max(busy, floor)
}

// minPatience is the least time Infer waits for a batch before it
// promotes the reader: a thread that wakes takes tens of microseconds to
// run, so shorter waits say nothing about the machine.
const minPatience = time.Millisecond

// promoteNow promotes the reader: it pauses before its next record and a
// goroutine of normal priority continues.
func (p *readerPlan) promoteNow() { p.promote.Store(true) }
