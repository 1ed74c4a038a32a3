package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// The data path of eval and calibrate: the float32 logits of a file stay
// one block, read in place; rows are converted to float64 a chunk at a
// time (eachChunk), their metric statistics accumulated exactly and
// merged (measure), so memory beyond the file is a few chunks per
// goroutine, whatever the number of rows.

// boundHeap lowers the garbage collector's heap target while the large
// file f is held, unless GOGC is set. With the default GOGC = 100 the
// heap may grow to twice what is live before a collection: garbage as
// large as the file itself. The file's arrays hold no pointers, so the
// collector does not scan them, and collecting once every 16 MiB of
// allocation costs little (a few milliseconds a cycle at 10^7 rows).
func boundHeap(f *logits.File) {
	boundHeapHeld(int64(4*len(f.Logits) + 4*len(f.Labels) + 4*len(f.Client) + len(f.Split)))
}

// boundHeapHeld lowers the garbage collector's heap target, as boundHeap
// does, while held bytes without pointers are live: eval's records for
// the equal-mass errors too.
func boundHeapHeld(held int64) {
	if _, set := os.LookupEnv("GOGC"); set {
		return
	}
	const garbage = 16 << 20
	if held > garbage {
		debug.SetGCPercent(int(max(1, 100*garbage/held)))
	}
}

// evalChunk is the most rows that measure converts to float64 at a
// time: 4096 rows of 10 classes take 320 KiB, plus as much for their
// probabilities. With many classes a chunk holds fewer rows
// (chunkRows), so that its buffers stay near chunkBytes whatever C is.
const evalChunk = 4096

// chunkBytes bounds the float64 logits of one chunk, and so each buffer
// of a goroutine of eachChunk, once a row is wider than
// chunkBytes/evalChunk.
const chunkBytes = 2 << 20

// accumulatorBytes bounds the memory of the per-goroutine metric
// accumulators of measureChunks: with many classes (an accumulator takes
// 32 bytes a class and bin) it runs fewer goroutines, so that memory
// follows the classes once, not once per CPU.
const accumulatorBytes = 64 << 20

// cappedSource is a chunkSource run on at most n goroutines.
type cappedSource struct {
	chunkSource
	n int
}

func (cs cappedSource) workers() int { return max(1, min(cs.chunkSource.workers(), cs.n)) }

// chunkRows returns the rows of a chunk of rows of c classes: evalChunk,
// or fewer (at least 1) when c is large.
func chunkRows(c int) int {
	return max(1, min(evalChunk, chunkBytes/(8*max(c, 1))))
}

// rowSel selects rows of a logits file: the rows of list, or, when list
// is nil, every row whose split is split (every row for logits.AllRows or
// when the file has no split column). The zero value selects the
// training rows (split 0), or every row of a file without a split column.
type rowSel struct {
	list  []int
	split int
}

// selectSplit returns the selection of split's rows.
func selectSplit(split int) rowSel { return rowSel{split: split} }

// selectRows returns the selection of the given rows.
func selectRows(rows []int) rowSel {
	if rows == nil {
		rows = []int{}
	}
	return rowSel{list: rows}
}

// chunks returns the number of chunks of sel over f's rows.
func (sel rowSel) chunks(f *logits.File) int {
	n := f.Len()
	if sel.list != nil {
		n = len(sel.list)
	}
	size := chunkRows(f.Classes)
	return (n + size - 1) / size
}

// chunk appends the selected rows of chunk k to dst: rows
// sel.list[k·size:…], or those of the file rows [k·size, …) of the
// selected split, where size is chunkRows(f.Classes).
func (sel rowSel) chunk(f *logits.File, k int, dst []int) []int {
	size := chunkRows(f.Classes)
	lo := k * size
	if sel.list != nil {
		return append(dst, sel.list[lo:min(lo+size, len(sel.list))]...)
	}
	for i := lo; i < min(lo+size, f.Len()); i++ {
		if sel.split == logits.AllRows || f.Split == nil || int(f.Split[i]) == sel.split {
			dst = append(dst, i)
		}
	}
	return dst
}

// indices returns the rows sel selects, in order, or nil when it selects
// every row of f.
func (sel rowSel) indices(f *logits.File) []int {
	if sel.list == nil && sel.count(f) == f.Len() {
		return nil
	}
	rows := make([]int, 0, sel.count(f))
	for k := range sel.chunks(f) {
		rows = sel.chunk(f, k, rows)
	}
	return rows
}

// count returns the number of rows sel selects.
func (sel rowSel) count(f *logits.File) int {
	if sel.list != nil {
		return len(sel.list)
	}
	if sel.split == logits.AllRows || f.Split == nil {
		return f.Len()
	}
	n := 0
	for _, s := range f.Split {
		if int(s) == sel.split {
			n++
		}
	}
	return n
}

// chunkSource hands out the chunks of rows that eachChunk converts: the
// selected rows of a file held in memory (fileChunks), or of a file read
// a block at a time (streamChunks).
type chunkSource interface {
	// numClasses returns the number of classes C.
	numClasses() int
	// chunkRows returns the most rows of a chunk: chunkRows(C), or the
	// rows of the source when it has fewer.
	chunkRows() int
	// workers returns the number of goroutines worth running.
	workers() int
	// fill writes the rows of the next chunk, converted to float64, into
	// s, whose slices have room for chunkRows() rows, using sc's memory, and
	// returns the file index of its first and last row; done is true
	// when no chunk is left. It is safe for concurrent use.
	fill(s *calib.Set, sc *chunkScratch) (first, last int, done bool, err error)
}

// chunkScratch is the memory of one goroutine of eachChunk.
type chunkScratch struct {
	rows  []int
	block logits.Block
}

// fileChunks is the chunkSource of the rows sel of f, taken in no fixed
// order.
type fileChunks struct {
	f      *logits.File
	sel    rowSel
	chunks int
	next   atomic.Int64
}

func newFileChunks(f *logits.File, sel rowSel) *fileChunks {
	return &fileChunks{f: f, sel: sel, chunks: sel.chunks(f)}
}

func (fc *fileChunks) numClasses() int { return fc.f.Classes }

func (fc *fileChunks) chunkRows() int { return max(1, min(chunkRows(fc.f.Classes), fc.f.Len())) }

// workers returns GOMAXPROCS, or fewer when there are fewer chunks.
func (fc *fileChunks) workers() int { return max(1, min(runtime.GOMAXPROCS(0), fc.chunks)) }

func (fc *fileChunks) fill(s *calib.Set, sc *chunkScratch) (int, int, bool, error) {
	k := int(fc.next.Add(1) - 1)
	if k >= fc.chunks {
		return 0, 0, true, nil
	}
	f, c := fc.f, fc.f.Classes
	sc.rows = fc.sel.chunk(f, k, sc.rows[:0])
	s.Logits, s.Labels = s.Logits[:len(sc.rows)*c], s.Labels[:len(sc.rows)]
	for r, i := range sc.rows {
		f.Row(s.Logits[r*c:], i)
		s.Labels[r] = f.Label(i)
	}
	if len(sc.rows) == 0 {
		return 0, 0, false, nil
	}
	return sc.rows[0], sc.rows[len(sc.rows)-1], false, nil
}

// streamChunks is the chunkSource of the rows of one split of a file
// read a block at a time, in order: memory does not grow with the file.
type streamChunks struct {
	mu      sync.Mutex
	blocks  *logits.Blocks
	classes int
	split   int // the split whose rows are taken, or logits.AllRows
	input   inputKind
	rows    int // the rows of the file
}

func (st *streamChunks) numClasses() int { return st.classes }

func (st *streamChunks) chunkRows() int { return max(1, min(chunkRows(st.classes), st.rows)) }

// workers returns GOMAXPROCS: reading is sequential, conversion and
// what the caller does with a chunk are not.
func (st *streamChunks) workers() int { return runtime.GOMAXPROCS(0) }

func (st *streamChunks) fill(s *calib.Set, sc *chunkScratch) (int, int, bool, error) {
	st.mu.Lock()
	err := st.blocks.Next(&sc.block, st.chunkRows())
	st.mu.Unlock()
	if err == io.EOF {
		return 0, 0, true, nil
	}
	if err != nil {
		return 0, 0, false, namedFile{err} // logits.Blocks names the file
	}
	b := &sc.block
	if err := b.ConvertInput(st.input.String()); err != nil {
		return 0, 0, false, fmt.Errorf("--input %s: %w", st.input.String(), err)
	}
	c := st.classes
	s.Logits, s.Labels = s.Logits[:0], s.Labels[:0]
	for r := range b.Len() {
		if st.split == logits.AllRows || b.Split == nil || int(b.Split[r]) == st.split {
			for _, v := range b.Logits[r*c : (r+1)*c] {
				s.Logits = append(s.Logits, float64(v))
			}
			s.Labels = append(s.Labels, int(b.Labels[r]))
		}
	}
	return b.First, b.First + b.Len() - 1, false, nil
}

// namedFile marks an error that already names the logits file, so that
// a caller that names the file does not name it again.
type namedFile struct{ error }

func (e namedFile) Unwrap() error { return e.error }

// eachChunk takes the chunks of src, src.chunkRows() rows at a time converted
// to a float64 calib.Set, and calls fn(w, s) with each that has rows, on
// src.workers() goroutines; w names the goroutine, whose calls are
// sequential, and s is reused once fn returns. The chunks are taken in no
// fixed order, so fn's results must not depend on it. It returns the
// first error of src or fn, or ctx's error when it is cancelled.
func eachChunk(ctx context.Context, src chunkSource, fn func(w int, s *calib.Set) error) error {
	c := src.numClasses()
	workers := src.workers()
	errs := make([]error, workers)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			size := src.chunkRows()
			sc := &chunkScratch{rows: make([]int, 0, size)}
			s := &calib.Set{Logits: make([]float64, 0, size*c), Labels: make([]int, 0, size), Classes: c}
			for !stop.Load() {
				err := ctx.Err()
				if err == nil {
					var first, last int
					var done bool
					first, last, done, err = src.fill(s, sc)
					if done {
						return
					}
					if err == nil && len(s.Labels) > 0 {
						if err = fn(w, s); err != nil {
							err = fmt.Errorf("rows %d to %d: %w", first, last, err)
						}
					}
				}
				if err != nil {
					errs[w] = err
					stop.Store(true) // the others stop after their chunk
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// measure accumulates, for each of cals, the metric statistics of the
// rows sel of f: of the softmax probabilities for a nil calibrator, of
// the calibrated ones otherwise. It reads the logits in chunks
// (eachChunk), each goroutine into accumulators of its own, merged at the
// end; as calib.Accumulator sums exactly, the result does not depend on
// the chunks or their order: it equals calib.Evaluate of the whole
// selection. It returns an error for a calibrator of another number of
// classes or bins outside [0, calib.MaxMetricBins], and ctx's error when
// it is cancelled.
func measure(ctx context.Context, f *logits.File, sel rowSel, cals []calib.Calibrator, bins int) ([]*calib.Accumulator, error) {
	return measureChunks(ctx, newFileChunks(f, sel), cals, bins)
}

// measureChunks is measure of the rows of src.
func measureChunks(ctx context.Context, src chunkSource, cals []calib.Calibrator, bins int) ([]*calib.Accumulator, error) {
	return measureChunksKeep(ctx, src, cals, bins, keepSpec{})
}

// keepSpec is what the accumulators of measureChunksKeep record beyond
// their statistics, 8 bytes a row and calibrator for each: each row's top
// confidence (calib.Accumulator.KeepTopConfidences) when tops is set, for
// the adaptive ECE and the KS error, and its probabilities of the classes
// [lo, hi) (KeepClassConfidences), for the classwise equal-mass errors.
//
// rows, when not 0, is the number of rows the source holds, so that each
// goroutine's records reserve their share at once.
type keepSpec struct {
	tops   bool
	lo, hi int
	rows   int
}

// measureChunksKeep is measureChunks whose accumulators also keep what
// keep says.
func measureChunksKeep(ctx context.Context, src chunkSource, cals []calib.Calibrator, bins int, keep keepSpec) ([]*calib.Accumulator, error) {
	c := src.numClasses()
	for _, cal := range cals {
		if cal != nil && cal.Classes() != c {
			return nil, fmt.Errorf("%s calibrator is for %d classes but the data has %d", cal.Method(), cal.Classes(), c)
		}
	}
	b := bins
	if b == 0 {
		b = calib.DefaultMetricBins
	}
	if per := int64(len(cals)) * int64(c) * int64(max(b, 1)) * 32; per > 0 {
		src = cappedSource{src, int(max(1, accumulatorBytes/per))}
	}
	workers := src.workers()
	// Each goroutine's accumulators; the first goroutine's become the
	// total, into which the others merge (exact sums: the same bits as
	// merging every one into empty accumulators, one set of statistics
	// less).
	accs := make([][]*calib.Accumulator, workers)
	for w := range accs {
		accs[w] = make([]*calib.Accumulator, len(cals))
		for a := range cals {
			var err error
			if accs[w][a], err = calib.NewAccumulator(c, bins); err != nil {
				return nil, err
			}
			if keep.tops {
				accs[w][a].KeepTopConfidences()
			}
			if keep.hi > keep.lo {
				expect := 0
				if keep.rows > 0 {
					expect = keep.rows/workers + src.chunkRows()
				}
				accs[w][a].KeepClassConfidences(keep.lo, keep.hi, expect)
			}
		}
	}
	probs := make([][]float64, workers)
	err := eachChunk(ctx, src, func(w int, s *calib.Set) error {
		for a, cal := range cals {
			var err error
			if cal == nil {
				// The softmax a row at a time, as the statistics are taken.
				err = accs[w][a].AddSoftmax(s.Logits, s.Labels)
			} else {
				if probs[w] == nil {
					probs[w] = make([]float64, src.chunkRows()*c)
				}
				p := probs[w][:len(s.Logits)]
				cal.Predict(p, s.Logits)
				err = accs[w][a].Add(p, s.Labels)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	total := accs[0]
	for w := 1; w < workers; w++ {
		for a := range total {
			if err := total[a].Merge(accs[w][a]); err != nil {
				return nil, err
			}
		}
	}
	return total, nil
}

// setOf returns the rows sel of f as a new float64 calib.Set.
func setOf(f *logits.File, sel rowSel) *calib.Set {
	n, c := sel.count(f), f.Classes
	s := &calib.Set{Logits: make([]float64, n*c), Labels: make([]int, n), Classes: c}
	r := 0
	rows := make([]int, 0, chunkRows(c))
	for k := range sel.chunks(f) {
		rows = sel.chunk(f, k, rows[:0])
		for _, i := range rows {
			f.Row(s.Logits[r*c:], i)
			s.Labels[r] = f.Label(i)
			r++
		}
	}
	return s
}

// metricsOf returns the metrics of each accumulator.
func metricsOf(accs []*calib.Accumulator) ([]calib.Metrics, error) {
	out := make([]calib.Metrics, len(accs))
	for i, a := range accs {
		var err error
		if out[i], err = a.Metrics(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
