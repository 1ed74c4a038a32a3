package secagg_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/secagg"
)

func TestGraph(t *testing.T) {
	for _, c := range []struct{ n, k int }{{16, 8}, {17, 6}, {100, 22}, {5, 4}, {4, 3}, {3, 2}, {12, 11}} {
		g, err := secagg.NewGraph(roundSeed(1), ids(c.n), c.k)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range g.Participants() {
			nb := g.Neighbours(u)
			if len(nb) != c.k || slices.Contains(nb, u) || !slices.IsSorted(nb) || len(slices.Compact(slices.Clone(nb))) != c.k {
				t.Fatalf("n = %d, k = %d: neighbours of %d = %v", c.n, c.k, u, nb)
			}
			for _, v := range nb {
				if !g.Adjacent(v, u) {
					t.Fatalf("n = %d, k = %d: %d ~ %d but not %d ~ %d", c.n, c.k, u, v, v, u)
				}
			}
		}
		// The same seed gives the same graph whatever the order of the
		// participants; another seed another graph.
		rev := slices.Clone(ids(c.n))
		slices.Reverse(rev)
		h, _ := secagg.NewGraph(roundSeed(1), rev, c.k)
		o, _ := secagg.NewGraph(roundSeed(2), ids(c.n), c.k)
		differ := false
		for _, u := range g.Participants() {
			if !slices.Equal(g.Neighbours(u), h.Neighbours(u)) {
				t.Fatalf("n = %d: graph depends on the order of the participants", c.n)
			}
			differ = differ || !slices.Equal(g.Neighbours(u), o.Neighbours(u))
		}
		if c.k < c.n-1 && !differ {
			t.Errorf("n = %d, k = %d: seeds 1 and 2 give the same graph", c.n, c.k)
		}
	}
	if got := secagg.DefaultThreshold(22); got != 12 {
		t.Errorf("DefaultThreshold(22) = %d, want 12", got)
	}
}

func TestCheckFederation(t *testing.T) {
	q := secagg.Quantizer{Bits: 32, Range: 1, Scale: 1 << 16}
	// 2^31 / 2^16 = 32768 clients reach 2^31 exactly: 32767 fit.
	if err := q.CheckFederation(32767, 10, 0); err != nil {
		t.Errorf("32767 clients × 2^16 < 2^31: %v", err)
	}
	err := q.CheckFederation(32768, 10, 0)
	if !errors.Is(err, secagg.ErrBitsTooSmall) || !strings.Contains(err.Error(), "need b ≥ 33") {
		t.Errorf("32768 clients × 2^16 = 2^31: error %v, want ErrBitsTooSmall asking for 33 bits", err)
	}
	// Noise takes room: the tail of variance σ² on d coordinates.
	v := 1e8
	tail := secagg.NoiseTail(v, 10)
	l := math.Log(20) + 40*math.Ln2
	if want := l/3 + math.Sqrt(l*l/9+2*l*v); math.Abs(tail-want) > 1e-9*want {
		t.Errorf("NoiseTail = %v, want %v", tail, want)
	}
	fit := int((math.Ldexp(1, 31) - tail) / (1 << 16))
	if err := q.CheckFederation(fit, 10, v); err != nil {
		t.Errorf("%d clients with noise tail %v: %v", fit, tail, err)
	}
	if err := q.CheckFederation(fit+1, 10, v); !errors.Is(err, secagg.ErrBitsTooSmall) {
		t.Errorf("%d clients with noise tail %v: error %v, want ErrBitsTooSmall", fit+1, tail, err)
	}
	if err := (&secagg.Quantizer{Bits: 32, Range: 1}).CheckFederation(1, 1, 0); !errors.Is(err, secagg.ErrQuantizer) {
		t.Errorf("zero scale: error %v, want ErrQuantizer", err)
	}
}

func TestQuantize(t *testing.T) {
	q := secagg.Quantizer{Bits: 16, Range: 2, Scale: 10}
	x := []float64{0.123, -0.123, 5, -5, 1.95, 0}
	// Stochastic rounding is unbiased and lands on a neighbour.
	const n = 20000
	r := dp.NewSeeded(1)
	means := make([]float64, len(x))
	for range n {
		v, err := q.Quantize(nil, x, r)
		if err != nil {
			t.Fatal(err)
		}
		for i, u := range v {
			s := float64(q.Signed(u))
			y := math.Max(-2, math.Min(2, x[i])) * 10
			if s != math.Floor(y) && s != math.Ceil(y) {
				t.Fatalf("x = %v rounds to %v, not next to %v", x[i], s, y)
			}
			means[i] += s / n
		}
	}
	for i, want := range []float64{1.23, -1.23, 20, -20, 19.5, 0} {
		if math.Abs(means[i]-want) > 0.02 {
			t.Errorf("E[q(%v)] ≈ %v, want %v", x[i], means[i], want)
		}
	}
	if got := q.Dequantize(nil, []uint64{65535, 32767, 32768}); !slices.Equal(got, []float64{-0.1, 3276.7, -3276.8}) {
		t.Errorf("Dequantize = %v", got)
	}
	if _, err := q.Quantize(nil, []float64{math.NaN()}, r); !errors.Is(err, secagg.ErrQuantizer) {
		t.Errorf("NaN input: error %v, want ErrQuantizer", err)
	}
	// Conditional rounding: the rounded norm never exceeds the bound,
	// which unconditional rounding does exceed now and then. The input
	// puts every coordinate half-way between two integers (y = 0.5), the
	// worst case: ‖q‖² ~ Binomial(64, 1/2) against a bound² of 44.4.
	c := secagg.Quantizer{Bits: 16, Range: 1, Scale: 4, Norm: 1, Beta: 0.3}
	const d = 64
	bound := dp.RoundedL2Bound(4, d, 0.3)
	u := c
	u.Beta = 0
	x = make([]float64, d)
	for i := range x {
		x[i] = 0.125
	}
	over := map[*secagg.Quantizer]int{}
	for range 20000 {
		for _, qq := range []*secagg.Quantizer{&c, &u} {
			v, err := qq.Quantize(nil, x, r)
			if err != nil {
				t.Fatal(err)
			}
			var s float64
			for _, e := range v {
				f := float64(qq.Signed(e))
				s += f * f
			}
			if math.Sqrt(s) > bound {
				over[qq]++
			}
		}
	}
	t.Logf("rounded norm above the β = 0.3 bound %.3f: %d of 20000 unconditional, %d conditional", bound, over[&u], over[&c])
	if over[&c] != 0 {
		t.Errorf("conditional rounding exceeded the bound %d times", over[&c])
	}
	if over[&u] == 0 {
		t.Error("unconditional rounding never exceeded the bound: the check has no power")
	}
	if _, err := c.Quantize(nil, []float64{1, 1}, r); !errors.Is(err, secagg.ErrQuantizer) {
		t.Errorf("input of norm √2 above Norm 1: error %v, want ErrQuantizer", err)
	}
	l1, l2, err := c.Sensitivity(d)
	if err != nil || l2 != bound || l1 != dp.RoundedL1Bound(bound, d) {
		t.Errorf("Sensitivity = %v, %v, %v; want %v, %v", l1, l2, err, dp.RoundedL1Bound(bound, d), bound)
	}
}
