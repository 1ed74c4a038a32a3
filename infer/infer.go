package infer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer/data"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// Result holds the logits of a dataset and what the reader said about each
// record.
type Result struct {
	// Logits holds len(Labels) rows of Classes values, row-major.
	Logits []float32
	// Classes is the number of output columns C.
	Classes int
	// Labels holds each record's label, in [0, Classes).
	Labels []int32
	// Client holds each record's client id, an index into ClientNames; nil
	// when the reader gave no client names.
	Client []int32
	// ClientNames lists the reader's client names in order of first
	// appearance; ClientNames[id] is the name of client id.
	ClientNames []string
	// ClassNames holds Options.ClassNames when given, else the model's
	// class names (fedcalib.classes) or, when it has none, the reader's;
	// nil when none has any.
	ClassNames []string
	// Extra holds the outputs Options.Extra named, in that order; nil
	// without Options.Extra.
	Extra []Output
}

// Output is one further model output over a whole dataset (Options.Extra).
// The zero value is an unnamed output of no values.
type Output struct {
	// Name is the output's name in the graph.
	Name string
	// Columns is the number of values per record.
	Columns int
	// Values holds Result.Len() rows of Columns values, row-major.
	Values []float32
}

// Progress says how far Session.Infer is. The zero value is the start of
// a dataset of no records.
type Progress struct {
	// Done counts the records run through the model so far.
	Done int
	// Total is the number of records in the dataset, or -1 when the
	// reader cannot tell (it is not a data.Sized).
	Total int
}

// Len returns the number of records.
func (r *Result) Len() int { return len(r.Labels) }

// File returns r as a logits file (sharing r's slices), with no split,
// and with the class names.
func (r *Result) File() *logits.File {
	return &logits.File{Logits: r.Logits, Labels: r.Labels, Client: r.Client, Classes: r.Classes, ClassNames: r.ClassNames}
}

// Infer runs the model over every record of rd, Options.Batch records at a
// time (the last batch may be smaller), and returns the logits with the
// labels and client ids. It does not close rd. Errors name the record
// (counting from 0) that caused them; ctx cancels between batches.
//
// Reading and preprocessing run ahead, on a goroutine of their own
// (unless Options.Sequential), into reused batch buffers: while ONNX
// Runtime runs the batches in flight, the next is read into a free
// buffer, so nothing is copied and at most one batch is read ahead of
// the runs. With several runs in flight (Options.Runs), each runs on a
// goroutine of its own and their logits are joined in the data's order,
// so the result is the same as reading between runs; the first batches
// are smaller, and when rd knows its size so are the last, so that every
// run starts early and the runs end together (batchRows). The package
// documentation ("The thread plan") says how this shares the cores with
// ONNX Runtime.
func (s *Session) Infer(ctx context.Context, rd data.Reader) (*Result, error) {
	progress := Progress{Total: -1}
	if sz, ok := rd.(data.Sized); ok {
		progress.Total = sz.Len()
	}
	if s.opt.Progress != nil {
		s.opt.Progress(progress)
	}
	runs := s.runs
	if s.opt.Sequential {
		runs = 1
	}
	b := s.newBatcher(rd, s.opt.Batch)
	if runs > 1 {
		b.runBytes = true
		b.rows = func(k, read int) int { return batchRows(k, read, progress.Total, runs, b.size) }
	}
	b.planHook = s.planHook
	if s.batchHook != nil {
		s.batchHook(b)
	}
	res := &Result{}
	var extra [][]float32
	acct := accountant{s: s, res: res, progress: progress}
	var stop func()
	if runs > 1 {
		// A reader at background priority would get a core only when the
		// model's threads leave one idle, which a run per core never does.
		stop = func() {}
		if err := s.runInline(ctx, b, runs, &acct, &extra); err != nil {
			return nil, err
		}
	} else {
		slots := 0 // read between runs
		if !s.opt.Sequential {
			slots = 2
		}
		var batches iter.Seq[filled]
		batches, stop = b.batches(ctx, slots, !s.opt.ForegroundReader)
		defer stop()
		for fb := range batches {
			if fb.err != nil {
				return nil, fb.err
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			bt := fb.slot
			base := len(res.Logits)
			var err error
			if res.Logits, extra, err = s.RunExtra(res.Logits, extra, bt.buf.head(bt.rows, b.enc.size)); err != nil {
				return nil, fmt.Errorf("records %d to %d: %w", bt.first, bt.first+bt.rows-1, err)
			}
			if err := acct.add(bt, base); err != nil {
				return nil, err
			}
			fb.release()
		}
	}
	stop() // the reader is done: b's fields are ours
	if b.n == 0 {
		return nil, errors.New("the data holds no records: check the dataset path, its split option, and that the files are not empty")
	}
	if b.anyClient {
		res.ClientNames = b.names
	} else {
		res.Client = nil
	}
	res.Classes = s.classes
	for k, o := range s.extra {
		res.Extra = append(res.Extra, Output{Name: o.Name, Columns: s.cols[k], Values: extra[k]})
	}
	if err := s.checkGivenNames(); err != nil {
		return nil, err
	}
	res.ClassNames = s.ClassNames()
	if s.opt.ClassNames != nil {
		res.ClassNames = slices.Clone(s.opt.ClassNames)
	} else if res.ClassNames == nil {
		names := rd.Classes()
		if err := calib.CheckClassNames(names, len(names)); err != nil {
			s.opt.Logger.Warn("the data's class names are not kept", "reason", err.Error())
			names = nil
		}
		if len(names) == s.classes {
			res.ClassNames = names
		} else if len(names) > 0 {
			s.opt.Logger.Warn("the data names a different number of classes than the model outputs",
				"data_classes", len(names), "model_classes", s.classes)
		}
	}
	return res, nil
}

// An accountant does Infer's bookkeeping of each batch that has run, in
// the data's order.
type accountant struct {
	s        *Session
	res      *Result
	progress Progress
}

// add accounts for batch bt, whose logits are a.res.Logits[base:]: it
// warns once if the first batch's look like probabilities, checks the
// labels against the classes, appends the labels and client ids and
// reports the progress.
func (a *accountant) add(bt *slot, base int) error {
	s, res := a.s, a.res
	if base == 0 && looksLikeProbabilities(res.Logits, s.classes) {
		s.opt.Logger.Warn("model outputs look like probabilities (rows are non-negative and sum to 1), but calibrators want logits: export the model without its final softmax",
			"model", s.path, "output", s.out.Name)
	}
	for i, l := range bt.labels {
		if l < 0 || l >= int64(s.classes) {
			return fmt.Errorf("record %d: label %d is outside [0, %d), the model's classes", bt.first+i, l, s.classes)
		}
	}
	for _, l := range bt.labels {
		res.Labels = append(res.Labels, int32(l)) // in [0, classes), checked above
	}
	res.Client = append(res.Client, bt.client...)
	if s.opt.Progress != nil {
		a.progress.Done = bt.first + bt.rows
		s.opt.Progress(a.progress)
	}
	return nil
}

// runInline runs b's batches on runs goroutines at once, each reading
// its own next batch from b (one at a time, in the data's order) and
// running it, then handing every batch that has run, in the batches'
// order, to acct, their logits (and Options.Extra outputs) appended to
// acct.res.Logits and *extra. With no reading or joining goroutine beside
// them, the runs share the cores with nothing of Infer's: a run that
// reads or hands on does so on its own core, between its model runs, and
// the goroutine that called Infer sleeps until they are done (waking it
// after every batch cost two runs of mnist-tiny ≈ 3 % of their
// records/s). A run reads a batch only while fewer than 2×runs batches
// beyond the last one handed on have been read, so that after a failed
// run the others stop soon. The error it returns is the one of the
// earliest record: a run that fails is reported before a later batch's
// reading error. A model whose output columns are not known before it
// runs (s.classes or an extra output's columns zero) runs its first batch
// alone, which fixes them, so that concurrent runs never write to s.
func (s *Session) runInline(ctx context.Context, b *batcher, runs int, acct *accountant, extra *[][]float32) error {
	// A ran is a batch that has been read and run (or failed to be):
	// what the accountant needs of it, copied out of its run's slot.
	type ran struct {
		seq   int
		bt    *slot // rows, first record, labels and client ids; no buffer
		out   []float32
		extra [][]float32
		err   error // a reading error names its record; a run's does not
		read  bool  // whether err is a reading error
		empty bool  // no records: the data had ended
	}
	var (
		mu      sync.Mutex          // guards b and everything below but stopped
		room    = sync.NewCond(&mu) // broadcast when a batch is handed on, and when Infer is over
		seq     int                 // batches read
		next    int                 // batches handed on
		pending = make(map[int]ran) // batches that have run, waiting for an earlier one
		ended   bool                // no batch is to be read: the data ended, or reading failed or paused
		over    bool                // nothing is to be handed on: the data ended, a batch failed or ctx was cancelled
		result  error               // the error that ended Infer
		stopped atomic.Bool         // over, for a reader to see without mu
	)
	end := func(err error) {
		over, result = true, err
		stopped.Store(true)
		room.Broadcast()
	}
	defer context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !over {
			end(ctx.Err())
		}
	})()
	// handOn hands r and every batch after it that has run to acct, in
	// order, until one ends Infer. It is called with mu held.
	handOn := func(r ran) {
		pending[r.seq] = r
		for !over {
			r, ok := pending[next]
			if !ok {
				return
			}
			delete(pending, next)
			next++
			room.Broadcast()
			switch {
			case r.read:
				end(r.err)
			case r.err != nil:
				end(fmt.Errorf("records %d to %d: %w", r.bt.first, r.bt.first+r.bt.rows-1, r.err))
			case r.empty:
				end(nil)
			default:
				base := len(acct.res.Logits)
				acct.res.Logits = append(acct.res.Logits, r.out...)
				for len(*extra) < len(r.extra) {
					*extra = append(*extra, nil)
				}
				for k, v := range r.extra {
					(*extra)[k] = append((*extra)[k], v...)
				}
				if err := acct.add(r.bt, base); err != nil {
					end(err)
				}
			}
		}
	}
	// A stop or a cancelled context ends the reading before the next
	// record, the batch unfinished and never handed on.
	pause := func() bool { return stopped.Load() || ctx.Err() != nil }
	// step reads the next batch into sl, runs it and hands on what it
	// can, and reports whether its run may go on. It is called with mu
	// held, which it releases while the model runs.
	step := func(sl *slot) bool {
		for !over && !ended && seq >= next+2*runs {
			room.Wait()
		}
		if over || ended {
			return false
		}
		r := ran{seq: seq}
		seq++
		eof, paused, err := b.fill(sl, pause)
		ended = eof || paused || err != nil
		if paused {
			return false
		}
		mu.Unlock()
		switch {
		case err != nil:
			r.err, r.read = err, true
		case sl.rows == 0:
			r.empty = true
		default:
			if s.runHook != nil {
				s.runHook(r.seq)
			}
			r.bt = &slot{rows: sl.rows, first: sl.first, labels: slices.Clone(sl.labels), client: slices.Clone(sl.client)}
			r.out, r.extra, r.err = s.RunExtra(nil, nil, sl.buf.head(sl.rows, b.enc.size))
		}
		mu.Lock()
		handOn(r)
		return true
	}
	mu.Lock()
	if !s.columnsKnown() {
		step(&slot{}) // the first batch alone, on this goroutine
	}
	mu.Unlock()
	var wg sync.WaitGroup
	for range runs {
		wg.Go(func() {
			sl := &slot{}
			mu.Lock()
			defer mu.Unlock()
			for step(sl) {
			}
		})
	}
	wg.Wait()
	mu.Lock() // a cancellation may be ending Infer now
	defer mu.Unlock()
	if over {
		return result
	}
	// The data ended inside a batch, every batch handed on, or a
	// batch's reading paused for a cancelled context.
	return ctx.Err()
}

// columnsKnown reports whether the columns of the model's output and of
// every extra output are known, as they are before the first run for a
// model whose output shapes fix them.
func (s *Session) columnsKnown() bool {
	return s.classes > 0 && !slices.Contains(s.cols, 0)
}

// newBatcher returns a batcher of rd's records into batches of size rows
// of s's input, encoded as s's preprocessing says.
func (s *Session) newBatcher(rd data.Reader, size int) *batcher {
	return &batcher{
		rd:      rd,
		enc:     newEncoder(s.pre, s.dtype, s.in.Name, s.in.Dimensions[1:]),
		dtype:   s.dtype,
		size:    size,
		clients: make(map[string]int32),
	}
}

// A batcher reads records into batch slots, reused.
type batcher struct {
	rd    data.Reader
	enc   *encoder
	dtype DType
	size  int // the most rows a batch takes
	// runBytes, for concurrent runs, caps size once the first record
	// fixes the row shape: at most runBatchBytes of input (runBatch).
	runBytes bool

	// rows, when set, gives the rows of batch k (from 0), which starts
	// after read records, at most size; nil: every batch takes size.
	rows func(k, read int) int
	k    int // batches started

	rec       data.Record
	geo       geometry // resizes and crops rec before it is encoded
	planned   bool     // whether the first record fixed the row shape
	n         int      // records read so far
	clients   map[string]int32
	names     []string
	anyClient bool // whether any record has had a client name

	planHook func(*readerPlan) // called on the reader's plan before it starts (tests)
}

// A slot holds one batch of records: their model input and what the
// reader said about them.
type slot struct {
	buf    *Batch // size rows; nil until the first record fixes the row shape
	rows   int    // rows of buf filled
	want   int    // rows the batch takes unless the data ends first
	first  int    // the index of the first record
	labels []int64
	client []int32 // client ids of the rows
	paused bool    // whether a fill stopped before the batch was full
}

// A filled is a batch ready to run, or the error that ended the reading.
type filled struct {
	slot    *slot
	err     error
	release func() // hands slot back for reuse once the caller is done with it
}

// batches returns the batches of b's records in order, ending after the
// last one or with the first error, and a function that stops the
// reading and waits until the reader is no longer used; it is safe to
// call more than once. With slots (at least 2), a second goroutine fills
// the next of that many reused slots while the caller runs the batches
// it holds: each batch's slot goes back to the reader when the caller
// releases it, so the reader is at most one batch ahead of a caller that
// holds slots-1 batches, and nothing is copied; with background too,
// that goroutine reads every batch after the first at background
// priority until it is promoted (threads.go, readerPlan). With slots 0,
// each batch is read when the caller asks for it, on the caller's
// goroutine, and its slot must be released before the next is received.
func (b *batcher) batches(ctx context.Context, slots int, background bool) (iter.Seq[filled], func()) {
	if slots == 0 {
		sl := &slot{}
		seq := func(yield func(filled) bool) {
			for {
				if err := ctx.Err(); err != nil {
					yield(filled{err: err})
					return
				}
				eof, paused, err := b.fill(sl, func() bool { return ctx.Err() != nil })
				if paused {
					err = ctx.Err()
				}
				if err != nil {
					yield(filled{err: err})
					return
				}
				if sl.rows > 0 && !yield(filled{slot: sl, release: func() {}}) {
					return
				}
				if eof {
					return
				}
			}
		}
		return seq, func() {}
	}
	out, plan, stop := b.readAhead(ctx, slots, background)
	seq := func(yield func(filled) bool) {
		var busy time.Duration // how long the caller took over the last batch
		var timer *time.Timer
		defer func() {
			if timer != nil {
				timer.Stop()
			}
		}()
		for {
			var f filled
			var ok bool
			select {
			case f, ok = <-out:
			default:
				// Wait, and promote the reader once the wait is longer
				// than its patience (readerPlan.patience).
				if d := plan.patience(busy); plan.background && d > 0 && !plan.promoted() {
					if timer == nil {
						timer = time.NewTimer(d)
					} else {
						timer.Reset(d)
					}
					select {
					case f, ok = <-out:
						timer.Stop()
					case <-timer.C:
						plan.promoteNow()
						f, ok = <-out
					}
				} else {
					f, ok = <-out
				}
			}
			if !ok {
				return
			}
			t0 := time.Now()
			if !yield(f) {
				return
			}
			busy = time.Since(t0)
		}
	}
	return seq, stop
}

// readAhead starts the goroutine that fills slots reused slots with b's
// batches, in order, as batches describes, and returns the channel it
// sends them on (closed after the last batch or the first error), its
// reader plan and the function that stops it and waits until it is no
// longer used; a caller that receives from the channel directly must
// release each slot it is done with.
func (b *batcher) readAhead(ctx context.Context, slots int, background bool) (<-chan filled, *readerPlan, func()) {
	if slots < 2 {
		panic(fmt.Sprintf("infer: reading ahead into %d slots", slots))
	}
	free := make(chan *slot, slots)
	for range slots {
		free <- &slot{}
	}
	out := make(chan filled) // unbuffered: the free slots bound the reading ahead
	done := make(chan struct{})
	var wg sync.WaitGroup
	plan := readerPlan{background: background}
	if b.planHook != nil {
		b.planHook(&plan)
	}
	var read func(background bool, resume *slot)
	read = func(background bool, resume *slot) {
		handed := false
		defer func() {
			if !handed {
				close(out)
			}
		}()
		lowered := false
		if background {
			plan.start()
		}
		send := func(f filled) bool {
			select {
			case out <- f:
				return true
			case <-done:
				return false
			}
		}
		for {
			sl := resume
			resume = nil
			if sl == nil {
				select {
				case sl = <-free:
				case <-done:
					return
				}
			}
			if background && !lowered && b.n > 0 {
				// The first batch is read while the model waits for
				// it, at normal priority; the rest while it runs.
				lowered = true
				background = plan.enter()
			}
			if err := ctx.Err(); err != nil {
				send(filled{err: err})
				return
			}
			eof, paused, err := b.fill(sl, func() bool {
				select {
				case <-done: // stop was called: end before the next record
					return true
				case <-ctx.Done(): // likewise when the context is cancelled
					return true
				default:
					return background && plan.promoted()
				}
			})
			if err != nil {
				send(filled{err: err})
				return
			}
			if paused {
				select {
				case <-done:
					return
				default:
				}
				if err := ctx.Err(); err != nil {
					send(filled{err: err})
					return
				}
				// Promoted: a goroutine of normal priority finishes
				// this batch and reads the rest; this one's thread
				// ends with it (readerPlan.enter).
				handed = true
				wg.Go(func() { read(false, sl) })
				return
			}
			if sl.rows > 0 && !send(filled{slot: sl, release: func() { free <- sl }}) {
				return
			}
			if eof {
				return
			}
		}
	}
	wg.Go(func() { read(background, nil) })
	var once sync.Once
	stop := func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
	return out, &plan, stop
}

// fill reads records into sl until it holds the batch's rows (b.rows,
// else b.size) or the data ends, and
// reports whether the data ended. It starts a new batch unless the last
// fill of sl paused: when pause is not nil and returns true before a
// record, fill returns paused with the rows read so far, and the next
// fill of sl continues the batch (on whichever goroutine).
func (b *batcher) fill(sl *slot, pause func() bool) (eof, paused bool, err error) {
	if !sl.paused {
		sl.rows, sl.first, sl.labels, sl.client = 0, b.n, sl.labels[:0], sl.client[:0]
		sl.want = b.size
		if b.rows != nil {
			sl.want = min(max(b.rows(b.k, b.n), 1), b.size)
		}
		b.k++
	}
	sl.paused = false
	for sl.rows < sl.want {
		if pause != nil && pause() {
			sl.paused = true
			return false, true, nil
		}
		err := b.rd.Next(&b.rec)
		if errors.Is(err, io.EOF) {
			return true, false, nil
		}
		if err != nil {
			return false, false, fmt.Errorf("reading record %d: %w", b.n, err)
		}
		b.geo.pre = &b.enc.pre
		rec, err := b.geo.apply(&b.rec)
		if err != nil {
			return false, false, fmt.Errorf("record %d: %w", b.n, err)
		}
		if !b.planned {
			if err := b.enc.plan(rec); err != nil {
				return false, false, fmt.Errorf("record %d: %w", b.n, err)
			}
			b.planned = true
			if b.runBytes {
				b.size = runBatch(b.size, b.enc.size*b.dtype.bytes())
				sl.want = min(sl.want, b.size)
			}
		}
		if sl.buf == nil {
			sl.buf = newBatch(b.dtype, b.size, b.enc.sample)
		}
		f, i := sl.buf.row(sl.rows, b.enc.size)
		if err := b.enc.encode(rec, f, i); err != nil {
			return false, false, fmt.Errorf("record %d: %w", b.n, err)
		}
		sl.labels = append(sl.labels, int64(rec.Label))
		b.anyClient = b.anyClient || rec.Client != ""
		sl.client = append(sl.client, clientID(b.clients, &b.names, rec.Client))
		sl.rows++
		b.n++
	}
	return false, false, nil
}

// newBatch allocates a batch of rows records of the given sample shape.
func newBatch(dtype DType, rows int, sample []int64) *Batch {
	b := &Batch{Shape: append([]int64{int64(rows)}, sample...)}
	size := int(prod64(sample)) * rows
	if dtype == Int64 {
		b.Int = make([]int64, size)
	} else {
		b.Float = make([]float32, size)
	}
	return b
}

// row returns the storage of row i of a batch of rows of size values.
func (b *Batch) row(i, size int) ([]float32, []int64) {
	if b.Int != nil {
		return nil, b.Int[i*size : (i+1)*size]
	}
	return b.Float[i*size : (i+1)*size], nil
}

// head returns the first rows rows of b, sharing its storage.
func (b *Batch) head(rows, size int) *Batch {
	h := &Batch{Shape: append([]int64{int64(rows)}, b.Shape[1:]...)}
	if b.Int != nil {
		h.Int = b.Int[:rows*size]
	} else {
		h.Float = b.Float[:rows*size]
	}
	return h
}

func clientID(ids map[string]int32, names *[]string, name string) int32 {
	id, ok := ids[name]
	if !ok {
		id = int32(len(*names))
		ids[name] = id
		*names = append(*names, name)
	}
	return id
}

// Encode reads up to n records of rd and returns them as one batch of
// the model input, preprocessed exactly as Infer feeds them, with their
// labels: real inputs for test vectors. It runs nothing. It fails on a
// reader without records and on n < 1.
func (s *Session) Encode(ctx context.Context, rd data.Reader, n int) (*Batch, []int64, error) {
	if n < 1 {
		return nil, nil, fmt.Errorf("encode %d records: want at least 1", n)
	}
	b := s.newBatcher(rd, n)
	batches, stop := b.batches(ctx, 0, false)
	defer stop()
	for fb := range batches {
		if fb.err != nil {
			return nil, nil, fb.err
		}
		bt := fb.slot
		h := bt.buf.head(bt.rows, b.enc.size)
		out := &Batch{Shape: slices.Clone(h.Shape), Float: slices.Clone(h.Float), Int: slices.Clone(h.Int)}
		return out, slices.Clone(bt.labels), nil
	}
	return nil, nil, errors.New("the data holds no records: check the dataset path, its split option, and that the files are not empty")
}
