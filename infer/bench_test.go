package infer

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/fedcalib/fedcalib/infer/data"
)

// The benchmarks run testdata/cnn.onnx (an MNIST-sized CNN) over benchN
// 28×28 images, in batches of DefaultBatch, two ways in the same run:
//
//	session: Session.Run on one batch decoded and normalised beforehand,
//	         run benchN/DefaultBatch times: the bare ONNX Runtime cost, with
//	         the input always in cache;
//	infer:   Session.Infer reading an IDX file through data.Open, so
//	         reading, decoding, preprocessing and collecting are included.
//
// Each reports logits/s (records per second). BenchmarkInferOverhead runs
// both in every iteration, in alternating order, and reports
// infer/session, the fraction of the bare throughput the full path keeps
// (target ≥ 0.9). FEDCALIB_BENCH_THREADS, when set, is Options.Threads.
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

// benchBatch decodes the first DefaultBatch records into a model-ready batch.
func benchBatch(b *testing.B, s *Session, spec string) *Batch {
	b.Helper()
	rd, err := data.Open(spec)
	if err != nil {
		b.Fatal(err)
	}
	defer rd.Close()
	enc := newEncoder(s.pre, s.dtype, s.in.Name, s.in.Dimensions[1:])
	var (
		rec data.Record
		in  []float32
	)
	for i := range DefaultBatch {
		if err := rd.Next(&rec); err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			if err := enc.plan(&rec); err != nil {
				b.Fatal(err)
			}
		}
		row := make([]float32, enc.size)
		if err := enc.encode(&rec, row, nil); err != nil {
			b.Fatal(err)
		}
		in = append(in, row...)
	}
	return &Batch{Shape: append([]int64{DefaultBatch}, enc.sample...), Float: in}
}

func benchSession(b *testing.B) (*Session, string) {
	b.Helper()
	requireRuntime(b)
	threads, _ := strconv.Atoi(os.Getenv("FEDCALIB_BENCH_THREADS"))
	s, err := OpenSession("testdata/cnn.onnx", Options{Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, benchIDX(b)
}

func runBare(b *testing.B, s *Session, bt *Batch, dst []float32) []float32 {
	dst = dst[:0]
	for range benchN / DefaultBatch {
		var err error
		if dst, err = s.Run(dst, bt); err != nil {
			b.Fatal(err)
		}
	}
	return dst
}

func runInfer(b *testing.B, s *Session, spec string) {
	rd, err := data.Open(spec)
	if err != nil {
		b.Fatal(err)
	}
	res, err := s.Infer(context.Background(), rd)
	rd.Close()
	if err != nil {
		b.Fatal(err)
	}
	if res.Len() != benchN {
		b.Fatalf("inferred %d records, want %d", res.Len(), benchN)
	}
}

func BenchmarkInfer(b *testing.B) {
	s, spec := benchSession(b)
	bt := benchBatch(b, s, spec)
	b.Run("session", func(b *testing.B) {
		var dst []float32
		for b.Loop() {
			dst = runBare(b, s, bt, dst)
		}
		b.ReportMetric(float64(benchN*b.N)/b.Elapsed().Seconds(), "logits/s")
	})
	b.Run("infer", func(b *testing.B) {
		for b.Loop() {
			runInfer(b, s, spec)
		}
		b.ReportMetric(float64(benchN*b.N)/b.Elapsed().Seconds(), "logits/s")
	})
}

func BenchmarkInferOverhead(b *testing.B) {
	s, spec := benchSession(b)
	bt := benchBatch(b, s, spec)
	var (
		bare, full time.Duration
		dst        []float32
		i          int
	)
	for b.Loop() {
		// Alternate which goes first, so neither gains from the order.
		for j := range 2 {
			t0 := time.Now()
			if (i+j)%2 == 0 {
				dst = runBare(b, s, bt, dst)
				bare += time.Since(t0)
			} else {
				runInfer(b, s, spec)
				full += time.Since(t0)
			}
		}
		i++
	}
	b.ReportMetric(float64(benchN*b.N)/bare.Seconds(), "session-logits/s")
	b.ReportMetric(float64(benchN*b.N)/full.Seconds(), "infer-logits/s")
	b.ReportMetric(bare.Seconds()/full.Seconds(), "infer/session")
}
