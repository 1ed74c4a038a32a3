package calib

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestZZProbe(t *testing.T) {
	z, y := evalBenchRows()
	p := make([]float64, 10)
	for _, cls := range []int{-1, 0} {
		keys := make([]uint64, len(y))
		for i, label := range y {
			Softmax(p, z[i*10:(i+1)*10])
			if cls < 0 {
				arg := 0
				for j := range p {
					if p[j] > p[arg] {
						arg = j
					}
				}
				keys[i] = packTop(p[arg], arg == label)
			} else {
				keys[i] = packTop(p[cls], label == cls)
			}
		}
		lo, hi := slices.Min(keys), slices.Max(keys)
		shift := uint(max(0, bits.Len64(lo^hi)-12))
		cnt := make([]int, 4096)
		for _, u := range keys {
			cnt[int(u>>shift)&4095]++
		}
		used := 0
		for _, c := range cnt {
			if c > 0 {
				used++
			}
		}
		s := slices.Clone(cnt)
		slices.Sort(s)
		fmt.Println(cls, "shift", shift, "used", used, "max", s[4095], "p99", s[4095-40], "median-used", s[4096-used/2])
	}
}

func benchKeys(n, cls int) []uint64 {
	rng := rand.New(rand.NewPCG(1, 1))
	keys := make([]uint64, n)
	z := make([]float64, 10)
	p := make([]float64, 10)
	for i := range keys {
		y := rng.IntN(10)
		for j := range 10 {
			v := rng.NormFloat64()
			if j == y {
				v += 4 + 1.5*rng.NormFloat64()
			}
			z[j] = float64(float32(1.5 * v))
		}
		Softmax(p, z)
		if cls < 0 {
			arg := 0
			for j := range p {
				if p[j] > p[arg] {
					arg = j
				}
			}
			keys[i] = packTop(p[arg], arg == y)
		} else {
			keys[i] = packTop(p[cls], y == cls)
		}
	}
	return keys
}

func BenchmarkZZSort(b *testing.B) {
	for _, n := range []int{1 << 16, 1 << 20} {
		for _, cls := range []int{-1, 0} {
			keys := benchKeys(n, cls)
			buf := make([]uint64, n)
			b.Run(fmt.Sprint("old/", n, "/", cls), func(b *testing.B) {
				for b.Loop() {
					buf = oldSortPackedInto(buf, keys)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
			})
			b.Run(fmt.Sprint("new/", n, "/", cls), func(b *testing.B) {
				for b.Loop() {
					buf = sortPackedInto(buf, keys)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
			})
		}
	}
}
