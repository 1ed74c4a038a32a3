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
	nan := make([]float32, 16)
	nan[0] = float32(math.NaN())
	recs := make([]data.Record, 40)
	for i := range recs {
		recs[i] = data.Record{Float: make([]float32, 16)}
	}
	recs[5].Float = nan // batch 2 of 2-record batches fails in the model
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

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
