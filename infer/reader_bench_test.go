package infer

import (
	"testing"

	"github.com/fedcalib/fedcalib/infer/data"
)

// BenchmarkReader times what Infer does per record besides running the
// model (issue #32): data.Open, reading and decompressing each record,
// geometry and encoding into a batch row, over the benchmark's dataset
// (benchSession: FEDCALIB_BENCH_MODEL and FEDCALIB_BENCH_DATA, else
// benchN generated gzip IDX images), on one goroutine and into one reused
// batch. The model only fixes the encoding; it is not run. It reports the
// process CPU time per 10,000 records ("cpu-ms/10k-rec", the figure of
// docs/BENCHMARKS.md's "Reader cost per record") and records/s.
// bench/reader.sh compares it before and after, paired and interleaved.
func BenchmarkReader(b *testing.B) {
	s, spec := benchSession(b)
	n := 0
	read := func() {
		rd, err := data.Open(spec)
		if err != nil {
			b.Fatal(err)
		}
		defer rd.Close()
		bt := &batcher{
			rd:      rd,
			enc:     newEncoder(s.pre, s.dtype, s.in.Name, s.in.Dimensions[1:]),
			dtype:   s.dtype,
			size:    s.opt.Batch,
			clients: make(map[string]int32),
		}
		sl := &slot{}
		for eof := false; !eof; {
			if eof, _, err = bt.fill(sl, nil); err != nil {
				b.Fatal(err)
			}
		}
		n = bt.n
	}
	read() // warm: loads the libraries, fixes n
	c0 := cpuTime(b)
	for b.Loop() {
		read()
	}
	cpu := cpuTime(b) - c0
	b.ReportMetric(cpu.Seconds()*1e3/float64(n*b.N)*1e4, "cpu-ms/10k-rec")
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rec/s")
}
