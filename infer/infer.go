package infer

import (
	"context"
	"errors"
	"fmt"
	"io"

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
	Labels []int64
	// Client holds each record's client id, an index into ClientNames; nil
	// when the reader gave no client names.
	Client []int32
	// ClientNames lists the reader's client names in order of first
	// appearance; ClientNames[id] is the name of client id.
	ClientNames []string
	// ClassNames holds the model's class names (fedcalib.classes) or, when
	// it has none, the reader's; nil when neither has any.
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

// File returns r as a logits file (sharing r's slices), with no split.
func (r *Result) File() *logits.File {
	return &logits.File{Logits: r.Logits, Labels: r.Labels, Client: r.Client, Classes: r.Classes}
}

// Infer runs the model over every record of rd, Options.Batch records at a
// time (the last batch may be smaller), and returns the logits with the
// labels and client ids. It does not close rd. Errors name the record
// (counting from 0) that caused them; ctx cancels between batches.
//
// Reading and preprocessing happen between model runs, on the calling
// goroutine: ONNX Runtime's thread pool is busy on every core during a
// run, and work running beside it slows the run down more than it saves.
func (s *Session) Infer(ctx context.Context, rd data.Reader) (*Result, error) {
	progress := Progress{Total: -1}
	if sz, ok := rd.(data.Sized); ok {
		progress.Total = sz.Len()
	}
	if s.opt.Progress != nil {
		s.opt.Progress(progress)
	}

	b := &batcher{
		rd:      rd,
		enc:     newEncoder(s.pre, s.dtype, s.in.Name, s.in.Dimensions[1:]),
		dtype:   s.dtype,
		size:    s.opt.Batch,
		clients: make(map[string]int32),
	}
	res := &Result{}
	var extra [][]float32
	for eof := false; !eof; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		first := b.n
		var err error
		if eof, err = b.fill(); err != nil {
			return nil, err
		}
		if b.rows == 0 {
			break
		}
		base := len(res.Logits)
		if res.Logits, extra, err = s.RunExtra(res.Logits, extra, b.buf.head(b.rows, b.enc.size)); err != nil {
			return nil, fmt.Errorf("records %d to %d: %w", first, b.n-1, err)
		}
		if base == 0 && looksLikeProbabilities(res.Logits, s.classes) {
			s.opt.Logger.Warn("model outputs look like probabilities (rows are non-negative and sum to 1), but calibrators want logits: export the model without its final softmax",
				"model", s.path, "output", s.out.Name)
		}
		for i, l := range b.labels {
			if l < 0 || l >= int64(s.classes) {
				return nil, fmt.Errorf("record %d: label %d is outside [0, %d), the model's classes", first+i, l, s.classes)
			}
		}
		res.Labels = append(res.Labels, b.labels...)
		res.Client = append(res.Client, b.client...)
		if s.opt.Progress != nil {
			progress.Done = b.n
			s.opt.Progress(progress)
		}
	}
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
	res.ClassNames = s.ClassNames()
	if res.ClassNames == nil {
		if names := rd.Classes(); len(names) == s.classes {
			res.ClassNames = names
		} else if len(names) > 0 {
			s.opt.Logger.Warn("the data names a different number of classes than the model outputs",
				"data_classes", len(names), "model_classes", s.classes)
		}
	}
	return res, nil
}

// A batcher reads records into one reused batch.
type batcher struct {
	rd    data.Reader
	enc   *encoder
	dtype DType
	size  int // rows per batch

	buf    *Batch // size rows; nil until the first record fixes the row shape
	rows   int    // rows of buf filled by the last fill
	labels []int64
	client []int32 // client ids of the rows

	rec       data.Record
	n         int // records read so far
	clients   map[string]int32
	names     []string
	anyClient bool // whether any record has had a client name
}

// fill reads up to b.size records into b.buf and reports whether the data
// ended.
func (b *batcher) fill() (eof bool, err error) {
	b.rows, b.labels, b.client = 0, b.labels[:0], b.client[:0]
	for b.rows < b.size {
		err := b.rd.Next(&b.rec)
		if errors.Is(err, io.EOF) {
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("reading record %d: %w", b.n, err)
		}
		if b.buf == nil {
			if err := b.enc.plan(&b.rec); err != nil {
				return false, fmt.Errorf("record %d: %w", b.n, err)
			}
			b.buf = newBatch(b.dtype, b.size, b.enc.sample)
		}
		f, i := b.buf.row(b.rows, b.enc.size)
		if err := b.enc.encode(&b.rec, f, i); err != nil {
			return false, fmt.Errorf("record %d: %w", b.n, err)
		}
		b.labels = append(b.labels, int64(b.rec.Label))
		b.anyClient = b.anyClient || b.rec.Client != ""
		b.client = append(b.client, clientID(b.clients, &b.names, b.rec.Client))
		b.rows++
		b.n++
	}
	return false, nil
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
