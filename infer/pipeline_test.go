package infer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fedcalib/fedcalib/infer/data"
)

// countingReader is a sliceReader that counts its Next calls atomically,
// so a test can see whether Infer still reads after it returned.
type countingReader struct {
	sliceReader
	calls atomic.Int64
}

func (r *countingReader) Next(rec *data.Record) error {
	r.calls.Add(1)
	return r.sliceReader.Next(rec)
}

// TestPipelineEqualsSequential checks that reading one batch ahead gives
// the same result as reading between runs, for batch sizes that divide
// the records or not.
func TestPipelineEqualsSequential(t *testing.T) {
	imgs := images(11, 16, 9)
	recs := imageRecords(imgs, 4, 4, 1)
	for i := range recs {
		recs[i].Client = fmt.Sprintf("c%d", i*7%4)
	}
	for _, batch := range []int{1, 2, 3, 11, 256} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			s := openTest(t, "testdata/tiny.onnx", Options{Batch: batch, Threads: 1})
			var got [2]*Result
			for k, pipe := range []bool{false, true} {
				s.opt.Sequential = !pipe
				func() {
					var done []int
					s.opt.Progress = func(p Progress) { done = append(done, p.Done) }
					res, err := s.Infer(context.Background(), &sliceReader{recs: recs})
					if err != nil {
						t.Fatal(err)
					}
					if want := (len(recs) + batch - 1) / batch; len(done) != want+1 || done[len(done)-1] != len(recs) {
						t.Errorf("pipelined %t: progress %v, want %d calls ending at %d", pipe, done, want+1, len(recs))
					}
					got[k] = res
				}()
			}
			if !reflect.DeepEqual(got[0], got[1]) {
				t.Errorf("pipelined result differs:\n%+v\nsequential:\n%+v", got[1], got[0])
			}
		})
	}
}

// TestPipelineStops checks that when a run fails while the next batch is
// being read, Infer returns the run's error and no longer reads once it
// has returned, as when reading between runs.
func TestPipelineStops(t *testing.T) {
	recs := failingRecords()
	for _, pipe := range []bool{false, true} {
		func() {
			s := openTest(t, "testdata/tiny.onnx", Options{Batch: 2, Threads: 1, Sequential: !pipe})
			rd := &countingReader{sliceReader: sliceReader{recs: recs}}
			_, err := s.Infer(context.Background(), rd)
			if err == nil || !strings.Contains(err.Error(), "records 4 to 5") {
				t.Fatalf("pipelined %t: error %v, want one naming records 4 to 5", pipe, err)
			}
			n := rd.calls.Load()
			time.Sleep(20 * time.Millisecond)
			if rd.calls.Load() != n {
				t.Errorf("pipelined %t: the reader was read after Infer returned", pipe)
			}
			if max := int64(6 + 2*btoi(pipe)); n > max {
				t.Errorf("pipelined %t: %d records read, want at most %d (one batch ahead)", pipe, n, max)
			}
		}()
	}
	fail := errors.New("disk on fire")
	s := openTest(t, "testdata/tiny.onnx", Options{Batch: 2, Threads: 1})
	_, err := s.Infer(context.Background(), &sliceReader{recs: recs[:4], err: fail, failAt: 3})
	if !errors.Is(err, fail) || !strings.Contains(err.Error(), "reading record 3") {
		t.Errorf("reader error: %v", err)
	}
}

// failingRecords returns 40 records for tiny.onnx of which record 5, in
// batch 2 of 2-record batches, makes the model output NaN.
func failingRecords() []data.Record {
	nan := make([]float32, 16)
	nan[0] = float32(math.NaN())
	recs := make([]data.Record, 40)
	for i := range recs {
		recs[i] = data.Record{Float: make([]float32, 16)}
	}
	recs[5].Float = nan
	return recs
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestConcurrentRunsInOrder checks that batches run at once are joined in
// the data's order however they finish: the first batch of every three
// that has two after it runs last (its run waits until they have
// finished), and the result is still that of one run at a time, for
// batch sizes that divide the records or not.
func TestConcurrentRunsInOrder(t *testing.T) {
	imgs := images(23, 16, 4)
	recs := imageRecords(imgs, 4, 4, 1)
	for i := range recs {
		recs[i].Client = fmt.Sprintf("c%d", i*5%3)
	}
	for _, batch := range []int{1, 2, 5} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			want, err := openTest(t, "testdata/tiny.onnx", Options{Batch: batch, Threads: 1, Runs: 1}).
				Infer(context.Background(), &sliceReader{recs: recs})
			if err != nil {
				t.Fatal(err)
			}
			s := openTest(t, "testdata/tiny.onnx", Options{Batch: batch, Threads: 1, Runs: 3})
			var finished atomic.Int64
			var late atomic.Int64 // batches that ran after a later one
			batches := (len(recs) + batch - 1) / batch
			s.runHook = func(seq int) {
				if seq%3 == 0 && seq+2 < batches {
					for deadline := time.Now().Add(10 * time.Second); finished.Load() < int64(seq)+2 && time.Now().Before(deadline); {
						time.Sleep(time.Millisecond)
					}
					if finished.Load() >= int64(seq)+2 {
						late.Add(1)
					}
				}
				finished.Add(1)
			}
			got, err := s.Infer(context.Background(), &sliceReader{recs: recs})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("three runs at once:\n%+v\none at a time:\n%+v", got, want)
			}
			if late.Load() == 0 {
				t.Errorf("no batch finished after a later one: the test did not reorder the runs")
			}
		})
	}
}

// TestConcurrentRunsStop checks the errors of concurrent runs: a run that
// fails is reported, naming its records, before a later batch's reading
// error and before later runs' results; runs stop soon after it, and
// reading stops once Infer has returned, having read no batch that did
// not run.
func TestConcurrentRunsStop(t *testing.T) {
	recs := failingRecords()
	for _, runs := range []int{2, 3} {
		s := openTest(t, "testdata/tiny.onnx", Options{Batch: 2, Threads: 1, Runs: runs})
		rd := &countingReader{sliceReader: sliceReader{recs: recs}}
		var started atomic.Int64 // the batches whose run started
		s.runHook = func(int) { started.Add(1) }
		_, err := s.Infer(context.Background(), rd)
		// Record 5 is NaN. The first batch takes one record (batchRows:
		// 2/16 → 1) and the later ones 2 (k+1 sixteenths capped at the
		// batch; the reader does not tell its length): records 5 to 6,
		// batch 3.
		const nan = "records 5 to 6"
		if err == nil || !strings.Contains(err.Error(), nan) {
			t.Fatalf("runs %d: error %v, want one naming %s", runs, err, nan)
		}
		n := rd.calls.Load()
		time.Sleep(20 * time.Millisecond)
		if rd.calls.Load() != n {
			t.Errorf("runs %d: the reader was read after Infer returned", runs)
		}
		// Runs read at most 2×runs batches beyond the last one handed
		// on (the one before the failing batch 3), and every batch read
		// is run: records are read only for runs started, two a batch,
		// and a call that found the end.
		if max := int64(3 + 2*runs); started.Load() > max {
			t.Errorf("runs %d: %d runs started, want at most %d", runs, started.Load(), max)
		}
		if max := 2*started.Load() + 1; n > max {
			t.Errorf("runs %d: %d records read with %d runs started, want at most %d", runs, n, started.Load(), max)
		}
		// The reader fails at record 7, in the batch after the one
		// whose run fails: the run's error names the earlier records.
		s = openTest(t, "testdata/tiny.onnx", Options{Batch: 2, Threads: 1, Runs: runs})
		fail := errors.New("disk on fire")
		_, err = s.Infer(context.Background(), &sliceReader{recs: recs[:10], err: fail, failAt: 7})
		if err == nil || !strings.Contains(err.Error(), nan) || errors.Is(err, fail) {
			t.Errorf("runs %d: run and reading errors: %v, want the run's, naming %s", runs, err, nan)
		}
		_, err = s.Infer(context.Background(), &sliceReader{recs: recs[:4], err: fail, failAt: 3})
		if !errors.Is(err, fail) || !strings.Contains(err.Error(), "reading record 3") {
			t.Errorf("runs %d: reader error: %v", runs, err)
		}
	}
}
