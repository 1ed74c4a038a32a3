package infer

import (
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ort "github.com/yalue/onnxruntime_go"
)

// A peer is the bare loop a user would write with onnxruntime_go: one
// session with the intra-op threads set and every other option at ONNX
// Runtime's defaults (spinning on) unless spin says otherwise, run over
// input tensors built beforehand (the records decoded and preprocessed
// as Infer feeds them) into output tensors allocated beforehand.
type peer struct {
	sess *ort.DynamicAdvancedSession
	ins  []ort.Value
	outs []ort.Value
}

// newPeer opens model as a peer on threads intra-op threads (0:
// DefaultThreads), with spinning at ONNX Runtime's default (spin "") or
// set to spin ("0" or "1"), over batches; s gives the input and output
// names and the classes.
func newPeer(b *testing.B, model string, s *Session, batches []*Batch, threads int, spin string) *peer {
	b.Helper()
	so, err := ort.NewSessionOptions()
	if err != nil {
		b.Fatal(err)
	}
	defer so.Destroy()
	if threads == 0 {
		threads = DefaultThreads()
	}
	if err := so.SetIntraOpNumThreads(threads); err != nil {
		b.Fatal(err)
	}
	if spin != "" {
		if err := so.AddSessionConfigEntry(intraSpinKey, spin); err != nil {
			b.Fatal(err)
		}
	}
	sess, err := ort.NewDynamicAdvancedSession(model, []string{s.in.Name}, []string{s.out.Name}, so)
	if err != nil {
		b.Fatal(err)
	}
	p := &peer{sess: sess}
	b.Cleanup(func() {
		destroyAll(p.ins)
		destroyAll(p.outs)
		sess.Destroy()
	})
	for _, bt := range batches {
		var in ort.Value
		var err error
		if bt.Int != nil {
			in, err = ort.NewTensor(ort.Shape(slices.Clone(bt.Shape)), bt.Int)
		} else {
			in, err = ort.NewTensor(ort.Shape(slices.Clone(bt.Shape)), bt.Float)
		}
		if err != nil {
			b.Fatal(err)
		}
		p.ins = append(p.ins, in)
		out, err := ort.NewEmptyTensor[float32](ort.NewShape(bt.Shape[0], int64(s.classes)))
		if err != nil {
			b.Fatal(err)
		}
		p.outs = append(p.outs, out)
	}
	return p
}

// runConcurrently runs the batches on w goroutines at once, batch i on
// goroutine i mod w (the loop a user would write for runs in parallel).
func (p *peer) runConcurrently(b *testing.B, w int) {
	var wg sync.WaitGroup
	for g := range w {
		wg.Go(func() {
			for i := g; i < len(p.ins); i += w {
				if err := p.sess.Run(p.ins[i:i+1], p.outs[i:i+1]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// runSessions runs the batches on one goroutine per peer, batch i on
// peer i mod len(ps): runs in parallel each on a session of its own (no
// memory arena or other state shared between the runs).
func runSessions(b *testing.B, ps []*peer) {
	var wg sync.WaitGroup
	for g, p := range ps {
		wg.Go(func() {
			for i := g; i < len(p.ins); i += len(ps) {
				if err := p.sess.Run(p.ins[i:i+1], p.outs[i:i+1]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func (p *peer) run(b *testing.B) {
	for i := range p.ins {
		if err := p.sess.Run(p.ins[i:i+1], p.outs[i:i+1]); err != nil {
			b.Fatal(err)
		}
	}
}

// settle is how long BenchmarkInferOverhead waits before each variant:
// ONNX Runtime's pool threads spin for a while after a run of a session
// that lets them, taking the cores from whatever runs next.
const settle = 100 * time.Millisecond

// rebatch returns the rows of batches cut into batches of rows rows
// (the last may be smaller).
func rebatch(batches []*Batch, rows int) []*Batch {
	all := &Batch{Shape: slices.Clone(batches[0].Shape)}
	all.Shape[0] = 0
	for _, bt := range batches {
		all.Shape[0] += bt.Shape[0]
		all.Float = append(all.Float, bt.Float...)
		all.Int = append(all.Int, bt.Int...)
	}
	size := (len(all.Float) + len(all.Int)) / int(all.Shape[0])
	var out []*Batch
	for r := 0; r < int(all.Shape[0]); r += rows {
		n := min(rows, int(all.Shape[0])-r)
		bt := &Batch{Shape: slices.Clone(all.Shape)}
		bt.Shape[0] = int64(n)
		if all.Float != nil {
			bt.Float = all.Float[r*size : (r+n)*size]
		} else {
			bt.Int = all.Int[r*size : (r+n)*size]
		}
		out = append(out, bt)
	}
	return out
}

// cpuTime returns the CPU time (user + system) this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkInferOverhead runs, in every iteration and in rotating order,
// the variants named by FEDCALIB_BENCH_VARIANTS (comma-separated; default
// "peer,peer-nospin,infer"):
//
//	peer         the bare onnxruntime_go loop (newPeer) at ONNX Runtime's
//	             defaults, spinning pool threads included: the loop a user
//	             would write, over the records decoded beforehand;
//	peer-nospin  the same with spinning off (session.intra_op.allow_spinning 0);
//	peer-par     one intra-op thread, the batches run on as many goroutines
//	             at once as the threads the others get (batch i on
//	             goroutine i mod threads);
//	peer-sessions  the same with a session of its own for each goroutine;
//	infer        data.Open + Session.Infer end to end at the default thread
//	             plan (threads.go): reading, decoding, preprocessing, runs,
//	             labels, checks;
//	infer-1run   the same with one run at a time (Options.Runs 1) on all
//	             the threads: the plan before the concurrent runs;
//	infer-spin   the same with Options.Spin;
//	infer-seq    the same with Options.Sequential;
//	infer-fg     the same with Options.ForegroundReader (the reader at
//	             normal priority throughout: the plan before issue #32's);
//	infer-bg     the same with the reader at background priority however
//	             busy the machine (readerPlan.always: no quiet-machine or
//	             saturation check; promotion still applies);
//	infer-less1  the same on one intra-op thread fewer (at least 1),
//	             leaving a core to the reader;
//	infer-spare  the same with GOMAXPROCS one above the runs while they
//	             run, as the commands do (cli.spareProc);
//	infer-uncapped  the same with concurrent runs' batches not capped at
//	             runBatchBytes of input (the plan before);
//	infer-mN     the same with Options.Batch N (e.g. infer-m64);
//	infer-xN     the same with batches of at most N records, not capped
//	             at runBatchBytes;
//
// A peer's name may end in -bN for the same over batches of N records
// (e.g. peer-b64, peer-sessions-b81).
//
// All get the same intra-op threads (FEDCALIB_BENCH_THREADS, else
// DefaultThreads). It reports each variant's median records/s and, against
// each variant before it, the median over iterations of the paired ratios
// of records/s ("infer/peer", higher is faster) and of process CPU time
// ("infer-cpu/peer"). On a shared machine, whose load changes from second to
// second, the paired ratios are the figures to read.
func BenchmarkInferOverhead(b *testing.B) {
	s, spec := benchSession(b)
	batches, n := benchBatches(b, s, spec)
	model := os.Getenv("FEDCALIB_BENCH_MODEL")
	if model == "" {
		model = "testdata/cnn.onnx"
	}
	names := strings.Split(os.Getenv("FEDCALIB_BENCH_VARIANTS"), ",")
	if names[0] == "" {
		names = []string{"peer", "peer-nospin", "infer"}
	}
	infer := func(opt Options, hook ...func(*Session)) func() {
		o := benchOptions(b)
		o.Spin, o.Sequential, o.ForegroundReader, o.Runs = opt.Spin, opt.Sequential, opt.ForegroundReader, opt.Runs
		if opt.Threads != 0 {
			o.Threads = opt.Threads
		}
		if opt.Batch != 0 {
			o.Batch = opt.Batch
		}
		si, err := OpenSession(model, o)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { si.Close() })
		for _, h := range hook {
			h(si)
		}
		return func() { runInfer(b, si, spec, n) }
	}
	threads := s.opt.Threads
	run := make([]func(), len(names))
	all := batches
	for k, name := range names {
		// A peer's name may end in -bN: the peer over batches of N records.
		batches := all
		if i := strings.LastIndex(name, "-b"); strings.HasPrefix(name, "peer") && i > 0 {
			if m, err := strconv.Atoi(name[i+2:]); err == nil && m > 0 {
				batches, name = rebatch(all, m), name[:i]
			}
		}
		switch name {
		case "peer", "peer-nospin", "peer-spin":
			p := newPeer(b, model, s, batches, threads, map[string]string{"peer": "", "peer-nospin": "0", "peer-spin": "1"}[name])
			run[k] = func() { p.run(b) }
		case "peer-par":
			w := threads
			if w == 0 {
				w = DefaultThreads()
			}
			p := newPeer(b, model, s, batches, 1, "")
			run[k] = func() { p.runConcurrently(b, w) }
		case "peer-sessions":
			w := threads
			if w == 0 {
				w = DefaultThreads()
			}
			ps := make([]*peer, w)
			for g := range ps {
				ps[g] = newPeer(b, model, s, batches, 1, "")
			}
			run[k] = func() { runSessions(b, ps) }
		case "infer":
			run[k] = infer(Options{})
		case "infer-1run":
			run[k] = infer(Options{Runs: 1})
		case "infer-spin":
			run[k] = infer(Options{Spin: true})
		case "infer-seq":
			run[k] = infer(Options{Sequential: true})
		case "infer-fg":
			run[k] = infer(Options{ForegroundReader: true})
		case "infer-bg":
			run[k] = infer(Options{}, func(si *Session) { si.planHook = func(p *readerPlan) { p.always = true } })
		case "infer-spare":
			f := infer(Options{})
			run[k] = func() {
				// What the commands do (cli.spareProc): one P more than
				// the runs while they run.
				procs := runtime.GOMAXPROCS(0)
				runtime.GOMAXPROCS(max(procs, DefaultThreads()) + 1)
				f()
				runtime.GOMAXPROCS(procs)
			}
		case "infer-uncapped":
			run[k] = infer(Options{}, func(si *Session) { si.batchHook = func(b *batcher) { b.runBytes = false } })
		case "infer-less1":
			t := threads
			if t == 0 {
				t = DefaultThreads()
			}
			run[k] = infer(Options{Threads: max(1, t-1)})
		default:
			if m, err := strconv.Atoi(strings.TrimPrefix(name, "infer-m")); err == nil && m > 0 {
				run[k] = infer(Options{Batch: m})
				continue
			}
			if m, err := strconv.Atoi(strings.TrimPrefix(name, "infer-x")); err == nil && m > 0 {
				run[k] = infer(Options{Batch: m}, func(si *Session) { si.batchHook = func(b *batcher) { b.runBytes = false } })
				continue
			}
			b.Fatalf("FEDCALIB_BENCH_VARIANTS: unknown variant %q", name)
		}
	}
	wall := make([][]time.Duration, len(names))
	cpu := make([][]time.Duration, len(names))
	rotate := 0
	for b.Loop() {
		for j := range names {
			k := (rotate + j) % len(names)
			// Let the pool threads of the variant before, which may
			// spin after its last run, go to sleep first.
			time.Sleep(settle)
			t0, c0 := time.Now(), cpuTime(b)
			run[k]()
			wall[k] = append(wall[k], time.Since(t0))
			cpu[k] = append(cpu[k], cpuTime(b)-c0)
		}
		rotate++
	}
	median := func(x []float64) float64 {
		slices.Sort(x)
		if len(x)%2 == 0 {
			return (x[len(x)/2-1] + x[len(x)/2]) / 2
		}
		return x[len(x)/2]
	}
	for k, name := range names {
		rate := make([]float64, len(wall[k]))
		for i := range rate {
			rate[i] = float64(n) / wall[k][i].Seconds()
		}
		b.ReportMetric(median(rate), name+"-rec/s")
		for j := range k {
			speed := make([]float64, len(wall[k]))
			work := make([]float64, len(wall[k]))
			for i := range speed {
				speed[i] = wall[j][i].Seconds() / wall[k][i].Seconds()
				work[i] = cpu[k][i].Seconds() / cpu[j][i].Seconds()
			}
			b.ReportMetric(median(speed), name+"/"+names[j])
			b.ReportMetric(median(work), name+"-cpu/"+names[j])
		}
	}
}
