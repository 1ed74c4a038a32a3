package secagg_test

import (
	"math"
	"math/bits"
	"testing"

	"github.com/fedcalib/fedcalib/secagg"
)

// masks returns each participant's neighbours in g as a bit mask over
// participant indices (n ≤ 64).
func masks(g *secagg.Graph) []uint64 {
	p := g.Participants()
	idx := map[uint32]int{}
	for i, id := range p {
		idx[id] = i
	}
	out := make([]uint64, len(p))
	for i, id := range p {
		for _, w := range g.Neighbours(id) {
			out[i] |= 1 << idx[w]
		}
	}
	return out
}

// split returns a survivor set (bit mask) in which every member has at
// least t neighbours in the set and which is not connected, searching all
// 2^n sets, or 0 if there is none.
func split(nb []uint64, t int) uint64 {
	n := len(nb)
	for s := uint64(1); s < 1<<n; s++ {
		ok := true
		for r := s; r != 0 && ok; r &= r - 1 {
			ok = bits.OnesCount64(nb[bits.TrailingZeros64(r)]&s) >= t
		}
		if !ok {
			continue
		}
		reach := s & -s
		for {
			next := reach
			for r := reach; r != 0; r &= r - 1 {
				next |= nb[bits.TrailingZeros64(r)] & s
			}
			if next == reach {
				break
			}
			reach = next
		}
		if reach != s {
			return s
		}
	}
	return 0
}

// TestNoSplit searches every survivor set of every graph NewGraph builds
// for n ≤ maxN participants, every degree it accepts and the smallest
// threshold t = ⌊k/2⌋ + 1 (a larger t accepts fewer sets): no set whose
// members each keep t neighbours in it is split, so the clients'
// connectivity check (Graph.ValidSurvivors) never refuses a set they
// would otherwise unmask. The odd-degree ring with a diameter chord, which
// NewGraph refuses, is split by the same search (12 participants, k = 3,
// t = 2), so the search can fail. With -short, n ≤ 14.
func TestNoSplit(t *testing.T) {
	maxN := 22
	if testing.Short() {
		maxN = 14
	}
	for n := 3; n <= maxN; n++ {
		for k := 2; k <= n-1; k++ {
			g, err := secagg.NewGraph(roundSeed(uint64(n*100+k)), ids(n), k)
			if k%2 == 1 && k != n-1 {
				if err == nil {
					t.Errorf("n = %d: odd k = %d accepted", n, k)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := split(masks(g), k/2+1); s != 0 {
				t.Errorf("n = %d, k = %d, t = %d: survivors %b are split", n, k, k/2+1, s)
			}
		}
	}
	// The refused construction: ring 0 … 11, distance 1 and the chord 6.
	const n = 12
	nb := make([]uint64, n)
	for i := range n {
		for _, d := range []int{1, n - 1, n / 2} {
			nb[i] |= 1 << ((i + d) % n)
		}
	}
	if split(nb, 2) == 0 {
		t.Error("the odd-degree ring with a chord is not split at n = 12, k = 3: the search cannot fail")
	}
}

// TestValidSurvivors checks the clients' rule on small cases worked by
// hand on a complete graph and on the ring.
func TestValidSurvivors(t *testing.T) {
	p := ids(6)
	ring, err := secagg.NewGraph(roundSeed(1), p, 2)
	if err != nil {
		t.Fatal(err)
	}
	full, err := secagg.NewGraph(roundSeed(1), p, 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := full.ValidSurvivors(p[:4], 3, 4); err != nil {
		t.Errorf("4 of 6 on K6, t = 3: %v", err)
	}
	if err := full.ValidSurvivors(p[:4], 3, 5); err == nil {
		t.Error("4 survivors accepted with s_min = 5")
	}
	if err := full.ValidSurvivors(p[:3], 3, 3); err == nil {
		t.Error("3 survivors accepted with t = 3: each has only 2 surviving neighbours")
	}
	if err := ring.ValidSurvivors(p, 2, 6); err != nil {
		t.Errorf("the whole ring, t = 2: %v", err)
	}
	// Any proper subset of a ring has an end with one neighbour.
	if err := ring.ValidSurvivors(p[1:], 2, 3); err == nil {
		t.Error("5 of a 6-ring accepted with t = 2")
	}
}

// TestParameters checks Bounds against values worked by hand and
// Parameters against its targets.
func TestParameters(t *testing.T) {
	// n = 10, k = 4, t = 3, δ = 0.1: Failure = 10·P(Bin(4, 0.1) ≥ 2) =
	// 10·(1 − 0.9^4 − 4·0.1·0.9^3) = 0.523. Colluders c = 2 of the 9
	// others: Exposure = 10·P(X ≥ 2t − k = 2) = 10·C(2,2)·C(7,2)/C(9,4)
	// = 10·21/126, capped at 1; c = 1: X ≤ 1, so 0.
	for _, c := range []struct {
		n, k, t, c       int
		failure, exposed float64
	}{
		{10, 4, 3, 2, 10 * (1 - 0.6561 - 0.2916), 1},
		{10, 4, 3, 1, 10 * (1 - 0.6561 - 0.2916), 0},
		// t = k = 4: any dropout fails, 10·(1 − 0.9^4) capped at 1;
		// 2t − k = 4 > c = 3 colluders: 0.
		{10, 4, 4, 3, 1, 0},
		// n = 20, k = 6, t = 4: Failure = 20·P(Bin(6, 0.1) ≥ 3).
		{20, 6, 4, 0, 20 * (1 - 0.531441 - 6*0.1*0.59049 - 15*0.01*0.6561), 0},
		// n = 100, k = 6, t = 4, c = 2 of the 99 others: both among the
		// 6 neighbours with probability (6·5)/(99·98).
		{100, 6, 4, 2, 1, 100 * 30.0 / 9702},
	} {
		got := secagg.Bounds(c.n, c.k, c.t, 0.1, c.c)
		if math.Abs(got.Failure-math.Min(1, c.failure)) > 1e-12 || math.Abs(got.Exposure-c.exposed) > 1e-12 {
			t.Errorf("Bounds(%d, %d, %d, 0.1, %d) = %+v, want failure %v exposure %v", c.n, c.k, c.t, c.c, got, c.failure, c.exposed)
		}
	}
	for _, n := range []int{3, 10, 40, 100, 1000} {
		p, err := secagg.Parameters(n, secagg.DefaultDropoutRate, secagg.DefaultColluders(n))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("n = %d: k = %d, t = %d, failure %.3g, exposure %.3g", n, p.Neighbours, p.Threshold, p.Failure, p.Exposure)
		if p.Neighbours < n-1 && (p.Failure > secagg.FailureTarget || p.Exposure > secagg.ExposureTarget) {
			t.Errorf("n = %d: %+v misses the targets below the complete graph", n, p)
		}
		if 2*p.Threshold <= p.Neighbours || p.Threshold > p.Neighbours || (p.Neighbours%2 == 1 && p.Neighbours != n-1) {
			t.Errorf("n = %d: k = %d, t = %d out of range", n, p.Neighbours, p.Threshold)
		}
	}
}
