package infer

import (
	"context"
	"math"
	"reflect"
	"runtime"
	"slices"
	"testing"
	"time"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/fedcalib/fedcalib/infer/data"
)

// TestThreadPlan checks the session options the thread plan sets: pool
// threads sleep unless Spin asks them to spin, for intra- and inter-op
// pools alike.
func TestThreadPlan(t *testing.T) {
	requireRuntime(t)
	for _, tc := range []struct {
		plan threadPlan
		want string // both spinning entries
	}{
		{threadPlan{}, "0"},
		{threadPlan{threads: 1}, "0"},
		{threadPlan{threads: 3, spin: true}, "1"},
	} {
		so, err := ort.NewSessionOptions()
		if err != nil {
			t.Fatal(err)
		}
		if err := tc.plan.apply(so); err != nil {
			t.Fatalf("%+v: %v", tc.plan, err)
		}
		for _, k := range []string{intraSpinKey, interSpinKey} {
			if got, err := so.GetSessionConfigEntry(k); err != nil || got != tc.want {
				t.Errorf("%+v: %s = %q (%v), want %q", tc.plan, k, got, err, tc.want)
			}
		}
		so.Destroy()
	}
}

// TestDefaultThreads checks the thread plan's choice of intra-op threads
// and concurrent runs on 1 to 16 cores, and that the default follows GOMAXPROCS
// (the cores the process may use), not the machine's CPU count.
func TestDefaultThreads(t *testing.T) {
	for _, tc := range []struct {
		cores         int
		opt           Options
		threads, runs int
	}{
		{1, Options{}, 1, 1},
		{2, Options{}, 1, 2},
		{3, Options{}, 1, 3},
		{4, Options{}, 1, 4},
		{5, Options{}, 5, 1}, // no number of runs from 2 to maxRuns divides 5
		{6, Options{}, 2, 3},
		{16, Options{}, 4, 4},
		{4, Options{Threads: 2}, 2, 1},
		{4, Options{Sequential: true}, 4, 1},
		{4, Options{Runs: 2}, 2, 2},
		{4, Options{Runs: 3}, 1, 3},
		{4, Options{Runs: 8}, 1, 8},
		{4, Options{Runs: 3, Threads: 3}, 3, 3},
		{4, Options{Runs: 2, Sequential: true}, 2, 2},
	} {
		func() {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(tc.cores))
			if threads, runs := runPlan(tc.opt); threads != tc.threads || runs != tc.runs {
				t.Errorf("runPlan(%+v) on %d cores = %d threads, %d runs; want %d, %d", tc.opt, tc.cores, threads, runs, tc.threads, tc.runs)
			}
		}()
	}

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	if got := DefaultThreads(); got != 1 {
		t.Errorf("DefaultThreads() = %d under GOMAXPROCS 1, want 1", got)
	}
}

// TestThreadPlanSameLogits checks that the thread plan changes the speed,
// not the result: every combination of threads, concurrent runs,
// spinning and reading ahead gives the logits of one thread reading
// between runs, bit for bit.
func TestThreadPlanSameLogits(t *testing.T) {
	imgs := images(37, 16, 5)
	recs := imageRecords(imgs, 4, 4, 1)
	var want *Result
	for _, opt := range []Options{
		{Threads: 1, Sequential: true},
		{Threads: 1},
		{Threads: 2, Spin: true},
		{Threads: 2, Spin: true, Sequential: true},
		{ForegroundReader: true},
		{Threads: 1, ForegroundReader: true},
		{},
		{Runs: 1},
		{Runs: 2, Threads: 1},
		{Runs: 3, Threads: 2},
		{Runs: 5, Spin: true},
		{Runs: 4, Sequential: true},
	} {
		opt.Batch = 8
		s := openTest(t, "testdata/tiny.onnx", opt)
		res, err := s.Infer(context.Background(), &sliceReader{recs: recs})
		if err != nil {
			t.Fatalf("%+v: %v", opt, err)
		}
		if want == nil {
			want = res
			continue
		}
		if !reflect.DeepEqual(res, want) {
			t.Errorf("%+v: result differs from one sequential thread's", opt)
		}
	}
}

// policyReader is a sliceReader that records the scheduling policy of
// the thread each Next call runs on (-1 where it cannot tell), sleeps
// before returning the records that slow names, and calls promote (when
// not nil) in the Next call of record promoteAt.
type policyReader struct {
	sliceReader
	policy    []int
	slow      map[int]time.Duration
	promote   func()
	promoteAt int
}

func (r *policyReader) Next(rec *data.Record) error {
	time.Sleep(r.slow[r.i])
	if r.promote != nil && r.i == r.promoteAt {
		r.promote()
	}
	p, err := schedPolicy(gettid())
	if err != nil {
		p = -1
	}
	r.policy = append(r.policy, p)
	return r.sliceReader.Next(rec)
}

// requireBackground skips the test where a thread cannot be put at
// background priority (outside Linux, or a sandbox that forbids it).
func requireBackground(t *testing.T) {
	t.Helper()
	errc := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		errc <- setBackground(gettid())
	}()
	if err := <-errc; err != nil {
		t.Skipf("no background priority here: %v", err)
	}
}

// TestReaderPriority checks the reader's part of the thread plan, with
// the quiet-machine checks off (readerPlan.always) so that it holds on
// any machine: the read-ahead reader reads the first batch (while the
// model waits) at normal priority (SCHED_OTHER, 0) and the next ones at
// background priority (SCHED_IDLE) while it is not promoted; promoted
// in the middle of a batch (here by the reader itself, at record 6, so
// that the test does not depend on timing), it reads the rest from the
// next record on at normal priority; promoted because Infer waited
// longer than its patience (a read that sleeps 300 ms against a patience
// of 100 ms), it ends at normal priority. ForegroundReader and
// Sequential read at normal priority throughout. The logits are those of
// one thread reading between runs in every case.
func TestReaderPriority(t *testing.T) {
	requireBackground(t)
	const n, batch = 12, 4
	recs := imageRecords(images(n, 16, 3), 4, 4, 1)
	never := time.Hour
	for _, tc := range []struct {
		name      string
		opt       Options
		floor     time.Duration // readerPlan.floor
		slow      map[int]time.Duration
		promoteAt int // -1: the reader does not promote itself
		want      []int
	}{
		{"background", Options{}, never, nil, -1, []int{0, 0, 0, 0, 5, 5, 5, 5, 5, 5, 5, 5, 5}},
		{"promoted", Options{}, never, nil, 6, []int{0, 0, 0, 0, 5, 5, 5, 0, 0, 0, 0, 0, 0}},
		{"waited", Options{}, 100 * time.Millisecond, map[int]time.Duration{6: 300 * time.Millisecond}, -1, nil},
		{"foreground", Options{ForegroundReader: true}, never, nil, -1, make([]int, n+1)},
		{"sequential", Options{Sequential: true}, never, nil, -1, make([]int, n+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opt.Batch, tc.opt.Threads = batch, 1
			s := openTest(t, "testdata/tiny.onnx", tc.opt)
			rd := &policyReader{sliceReader: sliceReader{recs: recs}, slow: tc.slow, promoteAt: tc.promoteAt}
			s.planHook = func(p *readerPlan) {
				p.always, p.floor = true, tc.floor
				rd.promote = p.promoteNow
			}
			res, err := s.Infer(context.Background(), rd)
			if err != nil {
				t.Fatal(err)
			}
			// Next is called once more, for the io.EOF.
			if tc.want != nil && !slices.Equal(rd.policy, tc.want) {
				t.Errorf("policies of the Next calls %v, want %v", rd.policy, tc.want)
			}
			if tc.want == nil && (len(rd.policy) != n+1 || rd.policy[0] != 0 || rd.policy[n] != 0) {
				t.Errorf("policies of the Next calls %v, want %d calls, the first and the last at 0", rd.policy, n+1)
			}
			ref := openTest(t, "testdata/tiny.onnx", Options{Batch: batch, Threads: 1, Sequential: true})
			want, err := ref.Infer(context.Background(), &sliceReader{recs: recs})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res, want) {
				t.Errorf("result differs from one sequential thread's")
			}
		})
	}
}

// TestPatience checks how long Infer waits before it promotes the reader:
// as long as the model ran, at least minPatience (or the plan's floor),
// and no promotion before the first run.
func TestPatience(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		floor, busy, want time.Duration
	}{
		{0, 0, 0},
		{0, 5 * ms, 5 * ms},
		{0, 10 * time.Microsecond, minPatience},
		{100 * ms, 5 * ms, 100 * ms},
		{100 * ms, 0, 0},
	} {
		p := readerPlan{floor: tc.floor}
		if got := p.patience(tc.busy); got != tc.want {
			t.Errorf("floor %v: patience(%v) = %v, want %v", tc.floor, tc.busy, got, tc.want)
		}
	}
}

// TestSaturated checks the rule by which the reader stays at normal
// priority: its first batch, read while the model waited, took more than
// twice its CPU time and 2 ms besides.
func TestSaturated(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		wall, cpu time.Duration
		want      bool
	}{
		{10 * ms, 10 * ms, false},  // a core of its own
		{22 * ms, 10 * ms, false},  // 2×10 + 2 ms: not more
		{23 * ms, 10 * ms, true},   // waited for a core
		{2 * ms, 0, false},         // a batch too small to tell
		{500 * ms, 100 * ms, true}, // one core in five
	} {
		if got := saturated(tc.wall, tc.cpu); got != tc.want {
			t.Errorf("saturated(%v, %v) = %t, want %t", tc.wall, tc.cpu, got, tc.want)
		}
	}
}

// TestOthersFrom checks the load of other processes: the load average
// less this process's average use of the cores, never negative.
func TestOthersFrom(t *testing.T) {
	for _, tc := range []struct {
		load1, cpu, wall, want float64
	}{
		{0.25, 0, 1, 0.25},    // just started: all of it is others'
		{2.0, 30, 20, 0.5},    // 1.5 cores our own
		{1.0, 40, 20, 0},      // more than the average is ours
		{12.0, 10, 100, 11.9}, // a busy machine
		{0.3, 5, 0, 0.3},      // no wall time: nothing to subtract
	} {
		if got := othersFrom(tc.load1, tc.cpu, tc.wall); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("othersFrom(%v, %v, %v) = %v, want %v", tc.load1, tc.cpu, tc.wall, got, tc.want)
		}
	}
	load, ok := othersLoad()
	t.Logf("othersLoad() = %.2f, %t", load, ok)
	if runtime.GOOS == "linux" && (!ok || load < 0) {
		t.Errorf("othersLoad() = %v, %t: want a load >= 0 on Linux", load, ok)
	}
}

// TestBatchRows checks batchRows' invariants over many sizes: the batches
// of a known total cover it exactly, each between 1 and the most; the
// first runs take at most k+1 times max(most/16, 1); the later ones never grow, so
// each of the last runs batches is at most max(most/16, 1) or a
// 1/(2·runs) share of what was left when it started; an unknown total
// gives most after the first runs.
func TestBatchRows(t *testing.T) {
	for _, runs := range []int{2, 3, 4} {
		for _, most := range []int{1, 2, 16, 256} {
			least := max(most/16, 1)
			if got := batchRows(runs, 1000, -1, runs, most); got != most {
				t.Errorf("unknown total, runs %d, most %d: batch %d takes %d, want %d", runs, most, runs, got, most)
			}
			for _, total := range []int{1, 5, 63, 64, 1000, 10000} {
				var sizes []int
				for read := 0; read < total; {
					n := min(batchRows(len(sizes), read, total, runs, most), total-read)
					if n < 1 || n > most {
						t.Fatalf("total %d, runs %d, most %d: batch %d takes %d", total, runs, most, len(sizes), n)
					}
					sizes = append(sizes, n)
					read += n
				}
				for k, n := range sizes {
					if k < runs && n > min((k+1)*least, most) {
						t.Errorf("total %d, runs %d, most %d: first batch %d takes %d > %d", total, runs, most, k, n, min((k+1)*least, most))
					}
					if k > runs && n > sizes[k-1] {
						t.Errorf("total %d, runs %d, most %d: batch %d grows to %d from %d", total, runs, most, k, n, sizes[k-1])
					}
				}
				if total >= 4*runs*most {
					// Large data: full batches in the middle, and the end
					// in small ones.
					if slices.Max(sizes) != most {
						t.Errorf("total %d, runs %d, most %d: no full batch in %v", total, runs, most, sizes)
					}
					for _, n := range sizes[len(sizes)-runs:] {
						if n > max(least, (most+1)/2) {
							t.Errorf("total %d, runs %d, most %d: the last batches %v are not small", total, runs, most, sizes[len(sizes)-runs:])
						}
					}
				}
			}
		}
	}
}

func TestRunBatch(t *testing.T) {
	for _, tc := range []struct{ batch, recordBytes, want int }{
		{256, 28 * 28 * 4, 83},      // MNIST: ⌊262144 / 3136⌋
		{256, 3 * 224 * 224 * 4, 1}, // ImageNet: more than 256 KiB a record
		{256, 80 * 8, 256},          // 80 int64 tokens: 409 fit
		{256, 1024, 256},            // exactly 256 fit
		{256, 1025, 255},            // one byte more a record
		{10, 1, 10},                 // never more than the batch
		{256, runBatchBytes, 1},     // one record fits
		{256, runBatchBytes + 1, 1}, // a record at least
		{256, 0, 256},               // size unknown: the batch
	} {
		if got := runBatch(tc.batch, tc.recordBytes); got != tc.want {
			t.Errorf("runBatch(%d, %d) = %d, want %d", tc.batch, tc.recordBytes, got, tc.want)
		}
	}
}

// TestInferRunBatchCap checks that concurrent runs take batches of at
// most runBatchBytes of input, and one run at a time batches of
// Options.Batch: the sizes are the steps of the progress reports.
func TestInferRunBatchCap(t *testing.T) {
	const n, batch = 40000, 8192 // records of 4×4 float32s: 64 bytes, so 4096 fit
	recs := imageRecords(images(n, 16, 3), 4, 4, 1)
	for _, tc := range []struct {
		runs, most int
	}{
		{1, batch},
		{2, runBatchBytes / 64},
		{3, runBatchBytes / 64},
	} {
		var done []int
		s := openTest(t, "testdata/tiny.onnx", Options{Batch: batch, Runs: tc.runs, Progress: func(p Progress) { done = append(done, p.Done) }})
		if _, err := s.Infer(context.Background(), &sizedReader{sliceReader{recs: recs}}); err != nil {
			t.Fatal(err)
		}
		most := 0
		for i := 1; i < len(done); i++ {
			most = max(most, done[i]-done[i-1])
		}
		if most != tc.most || done[len(done)-1] != n {
			t.Errorf("runs %d: largest batch %d of %d records, want %d of %d", tc.runs, most, done[len(done)-1], tc.most, n)
		}
	}
}
