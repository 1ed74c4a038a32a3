package infer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"sync"
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
// Reading and preprocessing run one batch ahead, on a second goroutine
// (unless Options.Sequential): while ONNX Runtime runs batch i, batch i+1
// is read into the other of two reused batch buffers, so nothing is
// copied and at most one batch is read ahead. Batches run in order, so
// the result is the same as reading between runs. The package
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

	b := &batcher{
		rd:       rd,
		enc:      newEncoder(s.pre, s.dtype, s.in.Name, s.in.Dimensions[1:]),
		dtype:    s.dtype,
		size:     s.opt.Batch,
		clients:  make(map[string]int32),
		planHook: s.planHook,
	}
	res := &Result{}
	var extra [][]float32
	batches, stop := b.batches(ctx, !s.opt.Sequential, !s.opt.ForegroundReader)
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
		if base == 0 && looksLikeProbabilities(res.Logits, s.classes) {
			s.opt.Logger.Warn("model outputs look like probabilities (rows are non-negative and sum to 1), but calibrators want logits: export the model without its final softmax",
				"model", s.path, "output", s.out.Name)
		}
		for i, l := range bt.labels {
			if l < 0 || l >= int64(s.classes) {
				return nil, fmt.Errorf("record %d: label %d is outside [0, %d), the model's classes", bt.first+i, l, s.classes)
			}
		}
		for _, l := range bt.labels {
			res.Labels = append(res.Labels, int32(l)) // in [0, classes), checked above
		}
		res.Client = append(res.Client, bt.client...)
		fb.release()
		if s.opt.Progress != nil {
			progress.Done = bt.first + bt.rows
			s.opt.Progress(progress)
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

// A batcher reads records into batch slots, reused.
type batcher struct {
	rd    data.Reader
	enc   *encoder
	dtype DType
	size  int // rows per batch

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
// call more than once. Each batch's slot must be released before the next
// is received. With ahead, a second goroutine fills the next slot while
// the caller runs the current one: two slots, so at most one batch is
// read ahead, and no copies; with background too, that goroutine reads
// every batch after the first at background priority until it is
// promoted (threads.go, readerPlan). Without ahead, each batch is read
// when the caller asks for it, on the caller's goroutine.
func (b *batcher) batches(ctx context.Context, ahead, background bool) (iter.Seq[filled], func()) {
	if !ahead {
		sl := &slot{}
		seq := func(yield func(filled) bool) {
			for {
				if err := ctx.Err(); err != nil {
					yield(filled{err: err})
					return
				}
				eof, _, err := b.fill(sl, nil)
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
	free := make(chan *slot, 2)
	free <- &slot{}
	free <- &slot{}
	out := make(chan filled) // unbuffered: the free slots bound the reading ahead
	done := make(chan struct{})
	var wg sync.WaitGroup
	var plan readerPlan
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
				if d := plan.patience(busy); background && d > 0 && !plan.promoted() {
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

// fill reads records into sl until it holds b.size or the data ends, and
// reports whether the data ended. It starts a new batch unless the last
// fill of sl paused: when pause is not nil and returns true before a
// record, fill returns paused with the rows read so far, and the next
// fill of sl continues the batch (on whichever goroutine).
func (b *batcher) fill(sl *slot, pause func() bool) (eof, paused bool, err error) {
	if !sl.paused {
		sl.rows, sl.first, sl.labels, sl.client = 0, b.n, sl.labels[:0], sl.client[:0]
	}
	sl.paused = false
	for sl.rows < b.size {
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
	b := &batcher{
		rd:      rd,
		enc:     newEncoder(s.pre, s.dtype, s.in.Name, s.in.Dimensions[1:]),
		dtype:   s.dtype,
		size:    n,
		clients: make(map[string]int32),
	}
	batches, stop := b.batches(ctx, false, false)
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
