package infer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fedcalib/fedcalib/infer/data"
)

// These tests run real ONNX Runtime; they skip when it is not installed.

func openTest(t *testing.T, model string, opt Options) *Session {
	t.Helper()
	requireRuntime(t)
	s, err := OpenSession(model, opt)
	if err != nil {
		t.Fatalf("OpenSession(%s): %v", model, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func imageRecords(imgs [][]uint8, h, w, c int) []data.Record {
	recs := make([]data.Record, len(imgs))
	for i, img := range imgs {
		recs[i] = data.Record{Image: img, Shape: []int{h, w, c}, Label: i % 3}
	}
	return recs
}

func TestInferTinyMatchesReference(t *testing.T) {
	ref := loadTinyWeights(t)
	imgs := images(10, 16, 1)
	for _, batch := range []int{1, 3, 4, 10, 256} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			s := openTest(t, "testdata/tiny.onnx", Options{Batch: batch, Threads: 1})
			res, err := s.Infer(context.Background(), &sliceReader{recs: imageRecords(imgs, 4, 4, 1)})
			if err != nil {
				t.Fatal(err)
			}
			if res.Classes != 3 || res.Len() != len(imgs) || len(res.Logits) != 3*len(imgs) {
				t.Fatalf("got %d classes, %d labels, %d logits; want 3, %d, %d", res.Classes, res.Len(), len(res.Logits), len(imgs), 3*len(imgs))
			}
			for i, img := range imgs {
				want := ref.tinyLogits(img)
				for c, w := range want {
					if got := res.Logits[i*3+c]; !closeTo(got, w) {
						t.Errorf("record %d class %d: logit %v, want %v", i, c, got, w)
					}
				}
				if res.Labels[i] != int32(i%3) {
					t.Errorf("label %d = %d, want %d", i, res.Labels[i], i%3)
				}
			}
			if res.Client != nil || res.ClientNames != nil {
				t.Errorf("client ids %v %v from a reader without clients, want nil", res.Client, res.ClientNames)
			}
			if !slices.Equal(res.ClassNames, []string{"zero", "one", "two"}) {
				t.Errorf("class names %q, want the model's zero,one,two", res.ClassNames)
			}
		})
	}
}

func TestInferCNNMatchesReference(t *testing.T) {
	ref := newCNNRef()
	imgs := images(7, 28*28, 2)
	s := openTest(t, "testdata/cnn.onnx", Options{Batch: 4})
	res, err := s.Infer(context.Background(), &sliceReader{recs: imageRecords(imgs, 28, 28, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Classes != 10 {
		t.Fatalf("classes = %d, want 10", res.Classes)
	}
	spread := 0.0
	for i, img := range imgs {
		want := ref.logits(img)
		for c, w := range want {
			spread = math.Max(spread, math.Abs(w))
			if got := res.Logits[i*10+c]; !closeTo(got, w) {
				t.Errorf("record %d class %d: logit %v, want %v", i, c, got, w)
			}
		}
	}
	if spread < 0.1 {
		t.Errorf("reference logits are all within ±%v: the comparison is too weak", spread)
	}
}

func TestInferTextMatchesReference(t *testing.T) {
	ref := loadTinyWeights(t)
	texts := []string{"hello ", "world ", "abcdef", "zzzzzz", " q r s"}
	recs := make([]data.Record, len(texts))
	for i, s := range texts {
		recs[i] = data.Record{Text: s, Label: 2 - i%3}
	}
	s := openTest(t, "testdata/tiny_text.onnx", Options{Batch: 2})
	if s.Input().Type != "int64" {
		t.Fatalf("input type %q, want int64", s.Input().Type)
	}
	res, err := s.Infer(context.Background(), &sliceReader{recs: recs})
	if err != nil {
		t.Fatal(err)
	}
	for i, text := range texts {
		for c, w := range ref.textLogits(text) {
			if got := res.Logits[i*3+c]; !closeTo(got, w) {
				t.Errorf("%q class %d: logit %v, want %v", text, c, got, w)
			}
		}
	}
}

func TestInferClients(t *testing.T) {
	imgs := images(6, 16, 3)
	recs := imageRecords(imgs, 4, 4, 1)
	for i, c := range []string{"bob", "amy", "bob", "cat", "amy", "bob"} {
		recs[i].Client = c
	}
	s := openTest(t, "testdata/tiny.onnx", Options{Batch: 4})
	res, err := s.Infer(context.Background(), &sliceReader{recs: recs})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int32{0, 1, 0, 2, 1, 0}; !slices.Equal(res.Client, want) {
		t.Errorf("client ids %v, want %v", res.Client, want)
	}
	if want := []string{"bob", "amy", "cat"}; !slices.Equal(res.ClientNames, want) {
		t.Errorf("client names %q, want %q", res.ClientNames, want)
	}
	f := res.File()
	if err := f.Validate(); err != nil {
		t.Errorf("logits file: %v", err)
	}
}

// TestInferOverrides feeds the metadata-free model through the
// overrides, with a flat float record that must be normalised like the
// uint8 image it came from.
func TestInferOverrides(t *testing.T) {
	ref := loadTinyWeights(t)
	img := images(1, 16, 4)[0]
	flt := make([]float32, 16)
	for i, v := range img {
		flt[i] = float32(v)
	}
	opt := Options{Preprocess: map[string]string{
		KeyLayout: "NCHW", KeyScale: "0.00392156862745098", KeyMean: "0.5", KeyStd: "0.25",
	}}
	s := openTest(t, "testdata/tiny_nometa.onnx", opt)
	_, err := s.Infer(context.Background(), &sliceReader{recs: []data.Record{
		{Image: img, Shape: []int{4, 4}},
		{Float: flt},
		{Float: flt, Shape: []int{4, 4, 1}},
	}})
	if err == nil {
		t.Fatal("mixing image and float records: no error")
	}
	res, err := s.Infer(context.Background(), &sliceReader{recs: []data.Record{{Float: flt}, {Float: flt}}})
	if err != nil {
		t.Fatal(err)
	}
	want := ref.tinyLogits(img)
	for r := range 2 {
		for c, w := range want {
			if got := res.Logits[r*3+c]; !closeTo(got, w) {
				t.Errorf("row %d class %d: %v, want %v", r, c, got, w)
			}
		}
	}
	if res.ClassNames != nil {
		t.Errorf("class names %q from a model and reader without any", res.ClassNames)
	}
}

func TestSoftmaxOutputWarns(t *testing.T) {
	imgs := images(5, 16, 5)
	for _, tc := range []struct {
		model string
		warn  bool
	}{
		{"testdata/tiny.onnx", false},
		{"testdata/tiny_softmax.onnx", true},
	} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		s := openTest(t, tc.model, Options{Logger: log})
		res, err := s.Infer(context.Background(), &sliceReader{recs: imageRecords(imgs, 4, 4, 1)})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(buf.String(), "calibrators want logits"); got != tc.warn {
			t.Errorf("%s: warned = %v, want %v (log %q)", tc.model, got, tc.warn, buf.String())
		}
		if got := looksLikeProbabilities(res.Logits, res.Classes); got != tc.warn {
			t.Errorf("%s: looksLikeProbabilities = %v, want %v", tc.model, got, tc.warn)
		}
	}
}

func TestOpenSessionErrors(t *testing.T) {
	requireRuntime(t)
	for _, tc := range []struct {
		model string
		opt   Options
		want  string
	}{
		{"testdata/tiny_nometa.onnx", Options{}, "no preprocessing metadata"},
		{"testdata/tiny_nometa.onnx", Options{}, "--layout"},
		{"testdata/tiny_fixed.onnx", Options{}, "fixed batch dimension of 1"},
		{"testdata/tiny.onnx", Options{Input: "nope"}, `no input "nope" (inputs: "x")`},
		{"testdata/tiny.onnx", Options{Output: "nope"}, `no output "nope" (outputs: "logits")`},
		{"testdata/tiny.onnx", Options{Preprocess: map[string]string{KeyDType: "int64"}}, "fedcalib.input.dtype is int64 but model input \"x\" is float32"},
		{"testdata/tiny.onnx", Options{Preprocess: map[string]string{KeyClasses: "a,b"}}, "names 2 classes but output \"logits\" has 3"},
		{"testdata/tiny.onnx", Options{Preprocess: map[string]string{KeyLayout: "CHW"}}, `fedcalib.input.layout="CHW"`},
		{"testdata/tiny.json", Options{}, "not a model ONNX Runtime can read"},
		{"testdata/missing.onnx", Options{}, "no such file"},
		{"testdata/tiny.onnx", Options{Threads: -1}, "threads = -1"},
	} {
		s, err := OpenSession(tc.model, tc.opt)
		if err == nil {
			s.Close()
			t.Errorf("OpenSession(%s, %+v): no error, want %q", tc.model, tc.opt, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("OpenSession(%s, %+v) = %q, want one line containing %q", tc.model, tc.opt, err, tc.want)
		}
	}
}

func TestInferErrors(t *testing.T) {
	img := images(1, 16, 6)[0]
	nan := make([]float32, 16)
	nan[3] = float32(math.NaN())
	fail := errors.New("disk on fire")
	for _, tc := range []struct {
		name  string
		model string
		rd    *sliceReader
		want  string
	}{
		{"wrong shape", "testdata/tiny.onnx", &sliceReader{recs: []data.Record{{Image: make([]uint8, 28*28), Shape: []int{28, 28, 1}}}},
			`record 0: data does not fit the model: record shape [28 28 1] gives NCHW input [? 1 28 28], but model input "x" is [? 1 4 4]`},
		{"wrong channels", "testdata/tiny.onnx", &sliceReader{recs: []data.Record{{Image: make([]uint8, 48), Shape: []int{4, 4, 3}}}},
			`record shape [4 4 3] gives NCHW input [? 3 4 4]`},
		{"shape changes", "testdata/tiny.onnx", &sliceReader{recs: []data.Record{{Image: img, Shape: []int{4, 4, 1}}, {Image: img, Shape: []int{2, 8, 1}}}},
			"record 1: record is uint8 image of shape [2 8 1], but earlier records were uint8 image of shape [4 4 1]"},
		{"bad shape", "testdata/tiny.onnx", &sliceReader{recs: []data.Record{{Image: img, Shape: []int{4, 5, 1}}}},
			"record shape [4 5 1] holds 20 values but the record has 16"},
		{"empty record", "testdata/tiny.onnx", &sliceReader{recs: []data.Record{{}}}, "record 0: record has no image"},
		{"no records", "testdata/tiny.onnx", &sliceReader{}, "no records"},
		{"reader error", "testdata/tiny.onnx", &sliceReader{recs: imageRecords([][]uint8{img, img}, 4, 4, 1), err: fail, failAt: 1}, "reading record 1: disk on fire"},
		{"NaN", "testdata/tiny.onnx", &sliceReader{recs: []data.Record{{Float: nan}}}, "non-finite logits"},
		{"label", "testdata/tiny.onnx", &sliceReader{recs: []data.Record{{Image: img, Shape: []int{4, 4, 1}, Label: 3}}}, "record 0: label 3 is outside [0, 3)"},
		{"text to image model", "testdata/tiny.onnx", &sliceReader{recs: []data.Record{{Text: "abc"}}}, "records are text but model input \"x\" is float32"},
		{"unknown char", "testdata/tiny_text.onnx", &sliceReader{recs: []data.Record{{Text: "abcdeF"}}}, "record 0: text character 'F' is not in the model vocabulary"},
		{"text length", "testdata/tiny_text.onnx", &sliceReader{recs: []data.Record{{Text: "abc"}}}, "text of 3 characters gives NC input [? 3], but model input \"tokens\" is [? 6]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t, tc.model, Options{Batch: 4})
			_, err := s.Infer(context.Background(), tc.rd)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("Infer = %v, want one line containing %q", err, tc.want)
			}
			if tc.name == "reader error" && !errors.Is(err, fail) {
				t.Errorf("Infer error %v does not wrap the reader's", err)
			}
		})
	}
}

func TestInferCancel(t *testing.T) {
	s := openTest(t, "testdata/tiny.onnx", Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Infer(ctx, &sliceReader{recs: imageRecords(images(3, 16, 7), 4, 4, 1)})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Infer on a cancelled context = %v, want context.Canceled", err)
	}
}

// cancellingReader cancels its context when record at is asked for and
// counts the records read.
type cancellingReader struct {
	sliceReader
	at     int
	cancel context.CancelFunc
	calls  atomic.Int64
}

func (r *cancellingReader) Next(rec *data.Record) error {
	if int(r.calls.Add(1)) == r.at+1 {
		r.cancel()
	}
	return r.sliceReader.Next(rec)
}

// TestInferCancelMidBatch: a context cancelled while a batch is being
// read ends the reading before the next record, whatever the plan (one
// run reading ahead, concurrent runs, reading between runs), and Infer
// reports the cancellation.
func TestInferCancelMidBatch(t *testing.T) {
	recs := imageRecords(images(400, 16, 7), 4, 4, 1)
	for _, opt := range []Options{{Runs: 1}, {Runs: 2}, {Runs: 3}, {Sequential: true}} {
		opt.Batch, opt.Threads = 100, 1
		runs := fmt.Sprintf("%+v", opt)
		s := openTest(t, "testdata/tiny.onnx", opt)
		ctx, cancel := context.WithCancel(context.Background())
		// Record 150 is inside a batch of 100 whatever the plan: the
		// third batch of one run (100 to 199), or one of several runs'
		// (6, 12 or 18 records first, then shares of at most 100).
		rd := &cancellingReader{sliceReader: sliceReader{recs: recs}, at: 150, cancel: cancel}
		_, err := s.Infer(ctx, rd)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: Infer = %v, want context.Canceled", runs, err)
		}
		// The record that cancelled, and at most one more: one run at a
		// time reads the next batch on a goroutine that sees the
		// cancellation before its next record.
		if n := rd.calls.Load(); n > 152 {
			t.Errorf("%s: %d records read after a cancellation at record 150", runs, n)
		}
	}
}

// TestRunMatchesInfer checks the bare path the benchmark compares against.
func TestRunMatchesInfer(t *testing.T) {
	imgs := images(5, 16, 8)
	s := openTest(t, "testdata/tiny.onnx", Options{})
	res, err := s.Infer(context.Background(), &sliceReader{recs: imageRecords(imgs, 4, 4, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ref := loadTinyWeights(t)
	b := &Batch{Shape: []int64{5, 1, 4, 4}}
	for _, img := range imgs {
		for _, v := range img {
			b.Float = append(b.Float, float32((float64(v)*ref.Tiny.Scale-ref.Tiny.Mean)/ref.Tiny.Std))
		}
	}
	prefix := []float32{42}
	got, err := s.Run(prefix, b)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 42 || !slices.Equal(got[1:], res.Logits) {
		t.Errorf("Run appended %v, want 42 then Infer's %v", got, res.Logits)
	}
	if _, err := s.Run(nil, &Batch{Shape: []int64{2, 1, 4, 4}, Float: b.Float[:16]}); err == nil {
		t.Error("Run with too little data: no error")
	}
}

func TestInferProgress(t *testing.T) {
	// One run at a time reads batches of Batch records. With several
	// runs, batch k of the first Runs takes (k+1)·Batch/16 records (a
	// sixteenth at least 1) or its share, ⌈left / (2·Runs)⌉, if smaller;
	// later ones their share between Batch/16 and Batch (batchRows),
	// worked by hand below.
	p := func(total int, done ...int) []Progress {
		ps := []Progress{{0, total}}
		for _, d := range done {
			ps = append(ps, Progress{d, total})
		}
		return ps
	}
	for _, tc := range []struct {
		n, batch, runs int
		want           []Progress
	}{
		{5, 2, 1, p(5, 2, 4, 5)},
		{5, 5, 1, p(5, 5)},
		{5, 256, 1, p(5, 5)},
		// Shares ⌈5/4⌉ = 2, then 1 from 4 records left: batches of 1.
		{5, 2, 2, p(5, 1, 2, 3, 4, 5)},
		// Three runs of at most 256: 1, 1, 1 (shares ⌈5/6⌉, ⌈4/6⌉, ⌈3/6⌉),
		// then at least 256/16 = 16: the 2 left.
		{5, 256, 3, p(5, 1, 2, 3, 5)},
		{5, 256, 5, p(5, 1, 2, 3, 4, 5)},
		// 40 records, at most 8, two runs: 1 and 2 (the first two), then
		// the shares ⌈37/4⌉ = 10 → 8, ⌈29/4⌉ = 8, ⌈21/4⌉ = 6, 4, 3, 2, 2,
		// 1, 1, 1, 1.
		{40, 8, 2, p(40, 1, 3, 11, 19, 25, 29, 32, 34, 36, 37, 38, 39, 40)},
		// 64 records, at most 32, three runs: 2, 4, 6 (k+1 times 32/16),
		// then ⌈52/6⌉ = 9, ⌈43/6⌉ = 8, 6, 5, 4, 4, 3, 3, 2, then 2 (at
		// least 32/16) from 8 left.
		{64, 32, 3, p(64, 2, 6, 12, 21, 29, 35, 40, 44, 48, 51, 54, 56, 58, 60, 62, 64)},
	} {
		var got []Progress
		s := openTest(t, "testdata/tiny.onnx", Options{Progress: func(p Progress) { got = append(got, p) }, Batch: tc.batch, Runs: tc.runs})
		rd := &sizedReader{sliceReader{recs: imageRecords(images(tc.n, 16, 9), 4, 4, 1)}}
		if _, err := s.Infer(context.Background(), rd); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%d records, batch %d, runs %d: progress %v, want %v", tc.n, tc.batch, tc.runs, got, tc.want)
		}
	}
	// A reader that cannot tell its length reports a total of -1.
	var got []Progress
	s := openTest(t, "testdata/tiny.onnx", Options{Progress: func(p Progress) { got = append(got, p) }, Batch: 3, Runs: 2})
	if _, err := s.Infer(context.Background(), &sliceReader{recs: imageRecords(images(5, 16, 9), 4, 4, 1)}); err != nil {
		t.Fatal(err)
	}
	// Batches of 1 and 2 (k+1 times 3/16 → 1) for the two runs, then 3.
	if want := []Progress{{0, -1}, {1, -1}, {3, -1}, {5, -1}}; !slices.Equal(got, want) {
		t.Errorf("unsized reader: progress %v, want %v", got, want)
	}
}

// sizedReader is a sliceReader that tells its length (data.Sized).
type sizedReader struct{ sliceReader }

func (r *sizedReader) Len() int { return len(r.recs) }

// TestEncode checks Session.Encode: the first n records as one batch of
// the model input, which run through the session give the logits the
// hand-written reference network gives those records, with their labels;
// fewer records than n give a shorter batch, and no records or n < 1 an
// error.
func TestEncode(t *testing.T) {
	ref := loadTinyWeights(t)
	imgs := images(6, 16, 1)
	s := openTest(t, "testdata/tiny.onnx", Options{Batch: 4, Threads: 1})
	for _, tc := range []struct{ n, rows int }{{4, 4}, {1, 1}, {10, 6}} {
		b, labels, err := s.Encode(context.Background(), &sliceReader{recs: imageRecords(imgs, 4, 4, 1)}, tc.n)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(b.Shape, []int64{int64(tc.rows), 1, 4, 4}) || len(labels) != tc.rows {
			t.Fatalf("n %d: shape %v, %d labels; want %d rows", tc.n, b.Shape, len(labels), tc.rows)
		}
		got, err := s.Run(nil, b)
		if err != nil {
			t.Fatal(err)
		}
		for i := range tc.rows {
			for c, w := range ref.tinyLogits(imgs[i]) {
				if !closeTo(got[i*3+c], w) {
					t.Errorf("n %d, record %d class %d: %v, want %v", tc.n, i, c, got[i*3+c], w)
				}
			}
			if labels[i] != int64(i%3) {
				t.Errorf("label %d = %d", i, labels[i])
			}
		}
	}
	if _, _, err := s.Encode(context.Background(), &sliceReader{}, 4); err == nil {
		t.Error("no records: no error")
	}
	if _, _, err := s.Encode(context.Background(), &sliceReader{recs: imageRecords(imgs, 4, 4, 1)}, 0); err == nil {
		t.Error("n = 0: no error")
	}
}
