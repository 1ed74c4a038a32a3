package infer

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/fedcalib/fedcalib/infer/data"
)

// The benchmarks run a model over a dataset, in batches of DefaultBatch:
// by default testdata/cnn.onnx (an MNIST-sized CNN) over benchN
// pseudo-random 28×28 images in a gzip-compressed IDX pair; with
// FEDCALIB_BENCH_MODEL and FEDCALIB_BENCH_DATA, that model (e.g. one of
// models/*) over that data spec. Three paths:
//
//	session:    Session.Run over every record, decoded and preprocessed
//	            beforehand into batches (benchBatches): the bare ONNX
//	            Runtime loop over the same input bytes;
//	sequential: data.Open + Session.Infer reading each batch between runs;
//	pipelined:  the same, reading the next batch on a second goroutine
//	            while ONNX Runtime runs the current one.
//
// Each reports logits/s (records per second). BenchmarkInferOverhead runs
// all three in every iteration, rotating their order, and reports
// seq/session and pipe/session, the fraction of the bare throughput each
// full path keeps (target ≥ 0.9 on mnist-tiny, ≥ 0.97 on the largest zoo
// model). FEDCALIB_BENCH_THREADS, when set, is Options.Threads.
const benchN = 4096

// benchIDX writes benchN pseudo-random 28×28 images and their labels as
// a gzip-compressed IDX pair, as MNIST is distributed, and returns the
// data spec.
func benchIDX(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	var img, lab bytes.Buffer
	binary.Write(&img, binary.BigEndian, []uint32{0x803, benchN, 28, 28})
	binary.Write(&lab, binary.BigEndian, []uint32{0x801, benchN})
	for i, p := range images(benchN, 28*28, 11) {
		img.Write(p)
		lab.WriteByte(byte(i % 10))
	}
	path := filepath.Join(dir, "bench-images-idx3-ubyte.gz")
	writeGzip(b, path, img.Bytes())
	writeGzip(b, filepath.Join(dir, "bench-labels-idx1-ubyte.gz"), lab.Bytes())
	return "idx:" + path
}

func writeGzip(b *testing.B, path string, content []byte) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(content)
	if err := zw.Close(); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
}

func benchSession(b *testing.B) (*Session, string) {
	b.Helper()
	requireRuntime(b)
	threads, _ := strconv.Atoi(os.Getenv("FEDCALIB_BENCH_THREADS"))
	model, spec := os.Getenv("FEDCALIB_BENCH_MODEL"), os.Getenv("FEDCALIB_BENCH_DATA")
	if (model == "") != (spec == "") {
		b.Fatal("set both FEDCALIB_BENCH_MODEL and FEDCALIB_BENCH_DATA, or neither")
	}
	if model == "" {
		model, spec = "testdata/cnn.onnx", benchIDX(b)
	}
	s, err := OpenSession(model, Options{Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, spec
}

// benchBatches decodes every record of spec, as Infer would, into
// model-ready batches of DefaultBatch records: the pre-decoded input of
// the bare loop. It returns them and the number of records.
func benchBatches(b *testing.B, s *Session, spec string) ([]*Batch, int) {
	b.Helper()
	rd, err := data.Open(spec)
	if err != nil {
		b.Fatal(err)
	}
	defer rd.Close()
	bt := &batcher{
		rd:      rd,
		enc:     newEncoder(s.pre, s.dtype, s.in.Name, s.in.Dimensions[1:]),
		dtype:   s.dtype,
		size:    DefaultBatch,
		clients: make(map[string]int32),
	}
	var out []*Batch
	for eof := false; !eof; {
		sl := &slot{}
		if eof, err = bt.fill(sl); err != nil {
			b.Fatal(err)
		}
		if sl.rows > 0 {
			out = append(out, sl.buf.head(sl.rows, bt.enc.size))
		}
	}
	return out, bt.n
}

func runBare(b *testing.B, s *Session, batches []*Batch, dst []float32) []float32 {
	dst = dst[:0]
	for _, bt := range batches {
		var err error
		if dst, err = s.Run(dst, bt); err != nil {
			b.Fatal(err)
		}
	}
	return dst
}

func runInfer(b *testing.B, s *Session, spec string, n int) {
	rd, err := data.Open(spec)
	if err != nil {
		b.Fatal(err)
	}
	res, err := s.Infer(context.Background(), rd)
	rd.Close()
	if err != nil {
		b.Fatal(err)
	}
	if res.Len() != n {
		b.Fatalf("inferred %d records, want %d", res.Len(), n)
	}
}

// withPipeline runs f with Infer reading ahead (pipelined) or not.
func withPipeline(on bool, f func()) {
	defer func(old bool) { pipelined = old }(pipelined)
	pipelined = on
	f()
}

func BenchmarkInfer(b *testing.B) {
	s, spec := benchSession(b)
	batches, n := benchBatches(b, s, spec)
	b.Run("session", func(b *testing.B) {
		var dst []float32
		for b.Loop() {
			dst = runBare(b, s, batches, dst)
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "logits/s")
	})
	for _, pipe := range []bool{false, true} {
		name := "infer-sequential"
		if pipe {
			name = "infer-pipelined"
		}
		b.Run(name, func(b *testing.B) {
			withPipeline(pipe, func() {
				for b.Loop() {
					runInfer(b, s, spec, n)
				}
			})
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "logits/s")
		})
	}
}

// BenchmarkInferOverhead runs, in every iteration, the bare loop over the
// pre-decoded batches (session), Infer reading between runs (sequential)
// and Infer reading one batch ahead (pipelined), rotating their order so
// that none gains from it. It reports each path's throughput over all
// iterations and, for each full path, the median over iterations of its
// throughput relative to the session run of the same iteration: on a
// shared machine, whose load changes from second to second, the paired
// ratio is the figure to read.
func BenchmarkInferOverhead(b *testing.B) {
	s, spec := benchSession(b)
	batches, n := benchBatches(b, s, spec)
	var (
		took   [3][]time.Duration // session, sequential, pipelined
		dst    []float32
		rotate int
	)
	for b.Loop() {
		for j := range 3 {
			k := (rotate + j) % 3
			t0 := time.Now()
			switch k {
			case 0:
				dst = runBare(b, s, batches, dst)
			default:
				withPipeline(k == 2, func() { runInfer(b, s, spec, n) })
			}
			took[k] = append(took[k], time.Since(t0))
		}
		rotate++
	}
	for k, unit := range []string{"session-logits/s", "seq-logits/s", "pipe-logits/s"} {
		var sum time.Duration
		for _, d := range took[k] {
			sum += d
		}
		b.ReportMetric(float64(n*len(took[k]))/sum.Seconds(), unit)
	}
	for k, unit := range map[int]string{1: "seq/session", 2: "pipe/session"} {
		r := make([]float64, len(took[k]))
		for i := range r {
			r[i] = took[0][i].Seconds() / took[k][i].Seconds()
		}
		slices.Sort(r)
		b.ReportMetric(r[len(r)/2], unit)
	}
}
