package secagg_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/fedcalib/fedcalib/secagg"
)

// benchDim is the update length of the benchmarks: FedBin's 2·C·B
// histogram counts for C = 10 classes and B = 15 bins.
const benchDim = 300

// BenchmarkRound runs whole SecAgg+ rounds in process (every client and
// the server, every message through its encoding) at the default k and t,
// b = 32, no dropouts, and reports the time spent in the server's methods
// (server-ns/op wall, server-cpu-ns/op thread CPU), the mean client time
// (client-cpu-ns/op, thread CPU; it includes verifying every survivor's
// signature) and the mean bytes a client sends and receives (B/client).
// For the cost of the signatures and the consistency check it also
// reports the bytes a client would exchange without them
// (unsigned-B/client: wire version 1's messages at the same k and t) and
// the server's wall time in the consistency stage (server-sign-ns/op; the
// n key-signature checks are in server-ns/op). The round runs on one
// locked OS thread, so thread CPU time is the work done, however loaded
// the machine.
func BenchmarkRound(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var server, serverCPU, totalCPU, sign time.Duration
			var bytes, unsigned float64
			for i := range b.N {
				r, err := secagg.NewRound(withIDs(secagg.Config{Seed: roundSeed(uint64(i)), Participants: ids(n), Bits: 32, Dim: benchDim}))
				if err != nil {
					b.Fatal(err)
				}
				in := randomInputs(r, uint64(i))
				c0 := threadCPU()
				_, _, v := run(b, r, in, drops{}, uint64(i))
				totalCPU += threadCPU() - c0
				server += v.server
				serverCPU += v.serverCPU
				sign += v.serverSign
				for id, c := range v.bytesPerClient {
					bytes += float64(c) / float64(n)
					unsigned += float64(v.unsigned[id]) / float64(n)
				}
				if i == 0 {
					b.Logf("n = %d: k = %d, t = %d", n, r.Config().Neighbours, r.Config().Threshold)
				}
			}
			b.ReportMetric(float64(server.Nanoseconds())/float64(b.N), "server-ns/op")
			b.ReportMetric(float64(serverCPU.Nanoseconds())/float64(b.N), "server-cpu-ns/op")
			b.ReportMetric(float64((totalCPU-serverCPU).Nanoseconds())/float64(b.N*n), "client-cpu-ns/op")
			b.ReportMetric(bytes/float64(b.N), "B/client")
			b.ReportMetric(unsigned/float64(b.N), "unsigned-B/client")
			b.ReportMetric(float64(sign.Nanoseconds())/float64(b.N), "server-sign-ns/op")
		})
	}
}

// BenchmarkPlainSum is the baseline: the server decodes n updates of
// benchDim float64 values (8 bytes each, as federation's drivers send
// them) and sums them in client order. B/client is what a client sends.
func BenchmarkPlainSum(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			msgs := make([][]byte, n)
			for k := range msgs {
				m := make([]byte, 0, 8*benchDim)
				for j := range benchDim {
					m = binary.LittleEndian.AppendUint64(m, math.Float64bits(float64(k*j%17)/3))
				}
				msgs[k] = m
			}
			sum := make([]float64, benchDim)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ResetTimer()
			c0 := threadCPU()
			for range b.N {
				clear(sum)
				for _, m := range msgs {
					for j := range sum {
						sum[j] += math.Float64frombits(binary.LittleEndian.Uint64(m[8*j:]))
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "server-ns/op")
			b.ReportMetric(float64((threadCPU()-c0).Nanoseconds())/float64(b.N), "server-cpu-ns/op")
			b.ReportMetric(8*benchDim, "B/client")
		})
	}
}
