package infer

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/fedcalib/fedcalib/infer/data"
)

// The benchmarks run a model over a dataset, in batches of
// Options.Batch: by default testdata/cnn.onnx (an MNIST-sized CNN) over
// benchN pseudo-random 28×28 images in a gzip-compressed IDX pair; with
// FEDCALIB_BENCH_MODEL and FEDCALIB_BENCH_DATA, that model (e.g. one of
// models/*) over that data spec (benchOptions names the other settings).
// BenchmarkInfer times three paths:
//
//	session:    Session.Run over every record, decoded and preprocessed
//	            beforehand into batches (benchBatches): the bare loop over
//	            the same input bytes, with Infer's thread plan;
//	sequential: data.Open + Session.Infer reading each batch between runs;
//	pipelined:  the same, reading the next batch on a second goroutine
//	            while ONNX Runtime runs the current one (the default).
//
// Each reports logits/s (records per second). BenchmarkInferOverhead
// (peer_bench_test.go) compares Infer with the bare loop a user would
// write with onnxruntime_go, paired and interleaved.
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
	model, spec := os.Getenv("FEDCALIB_BENCH_MODEL"), os.Getenv("FEDCALIB_BENCH_DATA")
	if (model == "") != (spec == "") {
		b.Fatal("set both FEDCALIB_BENCH_MODEL and FEDCALIB_BENCH_DATA, or neither")
	}
	if model == "" {
		model, spec = "testdata/cnn.onnx", benchIDX(b)
	}
	s, err := OpenSession(model, benchOptions(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, spec
}

// benchOptions returns the Options the benchmarks open sessions with:
// FEDCALIB_BENCH_THREADS, when set, is Options.Threads, FEDCALIB_BENCH_BATCH
// Options.Batch, and FEDCALIB_BENCH_PREPROCESS names a Preset (e.g.
// imagenet) for models without preprocessing metadata.
func benchOptions(b *testing.B) Options {
	b.Helper()
	var opt Options
	opt.Threads, _ = strconv.Atoi(os.Getenv("FEDCALIB_BENCH_THREADS"))
	opt.Batch, _ = strconv.Atoi(os.Getenv("FEDCALIB_BENCH_BATCH"))
	if p := os.Getenv("FEDCALIB_BENCH_PREPROCESS"); p != "" {
		var err error
		if opt.Preprocess, err = Preset(p); err != nil {
			b.Fatal(err)
		}
	}
	return opt
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
	bt := s.newBatcher(rd, s.opt.Batch)
	var out []*Batch
	for eof := false; !eof; {
		sl := &slot{}
		if eof, _, err = bt.fill(sl, nil); err != nil {
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
	for _, seq := range []bool{false, true} {
		name := "infer-pipelined"
		if seq {
			name = "infer-sequential"
		}
		b.Run(name, func(b *testing.B) {
			s.opt.Sequential = seq
			defer func() { s.opt.Sequential = false }()
			for b.Loop() {
				runInfer(b, s, spec, n)
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "logits/s")
		})
	}
}
