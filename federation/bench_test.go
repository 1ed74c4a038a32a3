package federation

import (
	"bufio"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

// The paper's overhead setting: 100 clients over 7 000 calibration
// examples of 10 classes (Dirichlet β = 0.1), FedBBQ (Mexp = 7, "all"
// weighting), T = 12. The baseline is central BBQ on the same examples.

func benchFederation(b *testing.B) (*SetPopulation, *calib.Set) {
	b.Helper()
	data := synthSet(7000, 10, 1)
	p, err := Dirichlet(data.Labels, 10, 100, 0.1, PartitionOptions{Seed: 1, Fractions: Fractions{Calibration: 1}})
	if err != nil {
		b.Fatal(err)
	}
	pop, err := NewPopulation(data, p, Calibration)
	if err != nil {
		b.Fatal(err)
	}
	return pop, data
}

func BenchmarkCentralBBQ7000(b *testing.B) {
	_, data := benchFederation(b)
	for b.Loop() {
		if err := (&calib.BBQ{}).Fit(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFedBBQ100Clients(b *testing.B) {
	pop, _ := benchFederation(b)
	for _, rate := range []float64{0.1, 1} {
		b.Run("p="+strconv.FormatFloat(rate, 'g', -1, 64), func(b *testing.B) {
			for b.Loop() {
				if _, err := (&FedBBQ{Weighting: calib.WeightAll}).Fit(ctx, pop, Rounds{T: 12, SampleRate: rate, Seed: 1}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// streamPopulation generates each client's examples when asked, from the
// client's own seed, so no client state lives between calls: client k
// holds perClient examples whose labels favour class k mod C (label skew)
// and whose logits are those of synthSet's overconfident model.
type streamPopulation struct {
	clients, perClient, classes int
}

func (s streamPopulation) Len() int     { return s.clients }
func (s streamPopulation) Classes() int { return s.classes }

func (s streamPopulation) Client(k int) (*calib.Set, error) {
	rng := rand.New(rand.NewPCG(uint64(k), 77))
	c := s.classes
	set := &calib.Set{Logits: make([]float64, s.perClient*c), Labels: make([]int, s.perClient), Classes: c}
	for i := range s.perClient {
		y := k % c
		if rng.IntN(2) == 0 {
			y = rng.IntN(c)
		}
		set.Labels[i] = y
		for j := range c {
			v := rng.NormFloat64()
			if j == y {
				v += 1.8
			}
			set.Logits[i*c+j] = 3 * v
		}
	}
	return set, nil
}

// peakRSS returns the process's peak resident set size in bytes (Linux
// VmHWM), or 0 where it is not available.
func peakRSS() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}

// The streaming run: 10⁵ clients of 100 examples (10⁷ in all), every
// client in one round (p = 1, T = 1), FedBBQ with "all" weighting (which
// needs the class totals: one more pass over the clients). Baseline: the
// same 10⁷ generated examples accumulated into one histogram in a loop,
// then BBQ, with no federation.
var stream1e7 = streamPopulation{clients: 100_000, perClient: 100, classes: 10}

func BenchmarkStreamCentral1e7(b *testing.B) {
	for b.Loop() {
		h := calib.NewHistograms(10, 128)
		for k := range stream1e7.clients {
			s, _ := stream1e7.Client(k)
			if err := h.Accumulate(s); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := calib.NewBBQ(h); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(peakRSS()/(1<<20), "peak-RSS-MiB")
}

func BenchmarkStreamFedBBQ1e7(b *testing.B) {
	for b.Loop() {
		res, err := (&FedBBQ{Weighting: calib.WeightAll}).Fit(ctx, stream1e7, Rounds{T: 1, SampleRate: 1, Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		if n := res.Rounds[0].Participants; n != stream1e7.clients {
			b.Fatalf("%d participants", n)
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(peakRSS()/(1<<20), "peak-RSS-MiB")
}
