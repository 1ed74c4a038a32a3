package secagg_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/secagg"
)

func newRound(t testing.TB, n, k, thr, bits, dim int, seed uint64) *secagg.Round {
	t.Helper()
	r, err := secagg.NewRound(withIDs(secagg.Config{Seed: roundSeed(seed), Participants: ids(n), Neighbours: k, Threshold: thr, Bits: bits, Dim: dim}))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func randomInputs(r *secagg.Round, seed uint64) map[uint32][]uint64 {
	cfg := r.Config()
	g := rand.New(rand.NewPCG(seed, 1))
	m := uint64(math.MaxUint64)
	if cfg.Bits < 64 {
		m = 1<<cfg.Bits - 1
	}
	in := map[uint32][]uint64{}
	for _, id := range cfg.Participants {
		x := make([]uint64, cfg.Dim)
		for i := range x {
			x[i] = g.Uint64() & m
		}
		in[id] = x
	}
	return in
}

func plainSum(r *secagg.Round, in map[uint32][]uint64, who []uint32) []uint64 {
	cfg := r.Config()
	m := uint64(math.MaxUint64)
	if cfg.Bits < 64 {
		m = 1<<cfg.Bits - 1
	}
	s := make([]uint64, cfg.Dim)
	for _, id := range who {
		for i, v := range in[id] {
			s[i] = (s[i] + v) & m
		}
	}
	return s
}

func without(all, gone []uint32) []uint32 {
	return slices.DeleteFunc(slices.Clone(all), func(id uint32) bool { return slices.Contains(gone, id) })
}

// spread returns count participants whose dropping leaves a survivor set
// the clients accept (every survivor keeps t surviving neighbours), found
// by a seeded search, or fails the test.
func spread(t *testing.T, r *secagg.Round, count int) []uint32 {
	t.Helper()
	cfg := r.Config()
	g := rand.New(rand.NewPCG(uint64(count), 7))
	for range 10000 {
		p := slices.Clone(cfg.Participants)
		g.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
		gone := slices.Sorted(slices.Values(p[:count]))
		if r.Graph().ValidSurvivors(without(cfg.Participants, gone), cfg.Threshold, cfg.MinSurvivors) == nil {
			return gone
		}
	}
	t.Fatalf("no %d dropouts leave a valid survivor set", count)
	return nil
}

func TestSumExact(t *testing.T) {
	// n = 16, k = 8, t = 5: 0, 1 and t − 1 = 4 dropouts (spread so that
	// every survivor keeps t surviving neighbours) at each stage; and the
	// complete graph, k = 15, t = 8, with t − 1 = 7 dropouts.
	p := ids(16)
	sparse := newRound(t, 16, 8, 5, 32, 50, 1)
	four := spread(t, sparse, 4)
	complete := newRound(t, 16, 15, 8, 20, 50, 1)
	seven := p[2:9]
	for _, c := range []struct {
		name string
		r    *secagg.Round
		d    drops
	}{
		{"no dropout", sparse, drops{}},
		{"1 dropout before masking", sparse, drops{beforeMask: p[3:4]}},
		{"t−1 dropouts before masking", sparse, drops{beforeMask: four}},
		{"t−1 dropouts before sharing", sparse, drops{beforeShare: four}},
		{"1 dropout before signing", sparse, drops{beforeSign: p[5:6]}},
		{"1 dropout before unmasking", sparse, drops{beforeUnmask: p[5:6]}},
		{"t−1 dropouts before unmasking", sparse, drops{beforeUnmask: four}},
		{"mixed dropouts", sparse, drops{beforeShare: four[:1], beforeMask: four[1:2], beforeSign: four[2:3], beforeUnmask: four[3:]}},
		{"complete graph, t−1 dropouts before masking", complete, drops{beforeMask: seven}},
		{"complete graph, t−1 dropouts before unmasking", complete, drops{beforeUnmask: seven}},
		{"b = 1", newRound(t, 16, 8, 5, 1, 70, 1), drops{beforeMask: p[2:3]}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := randomInputs(c.r, 2)
			got, s, _ := run(t, c.r, in, c.d, 3)
			// Survivors: everybody who sent a masked input.
			want := without(p, slices.Concat(c.d.beforeShare, c.d.beforeMask))
			if !slices.Equal(s.Survivors(), want) {
				t.Fatalf("survivors %v, want %v", s.Survivors(), want)
			}
			if ws := plainSum(c.r, in, want); !slices.Equal(got, ws) {
				t.Errorf("secure sum differs from the plain sum of the survivors' inputs:\n got %v\nwant %v", got[:5], ws[:5])
			}
		})
	}
}

func TestSumDefaults(t *testing.T) {
	// n = 60 with the defaults of Parameters(60, 0.1, 3); k − t dropouts
	// among one client's neighbours still unmask.
	r, err := secagg.NewRound(withIDs(secagg.Config{Seed: roundSeed(9), Participants: ids(60), Bits: 24, Dim: 10}))
	if err != nil {
		t.Fatal(err)
	}
	cfg := r.Config()
	p, err := secagg.Parameters(60, secagg.DefaultDropoutRate, 3)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Neighbours != p.Neighbours || cfg.Threshold != p.Threshold {
		t.Fatalf("defaults k = %d, t = %d; want %d, %d", cfg.Neighbours, cfg.Threshold, p.Neighbours, p.Threshold)
	}
	victim := cfg.Participants[17]
	gone := slices.Clone(r.Graph().Neighbours(victim)[:cfg.Neighbours-cfg.Threshold])
	if err := r.Graph().ValidSurvivors(without(cfg.Participants, gone), cfg.Threshold, cfg.MinSurvivors); err != nil {
		t.Skipf("this graph puts the dropouts too close together: %v", err)
	}
	in := randomInputs(r, 4)
	got, _, _ := run(t, r, in, drops{beforeMask: gone}, 5)
	if want := plainSum(r, in, without(cfg.Participants, gone)); !slices.Equal(got, want) {
		t.Errorf("secure sum with %d dropouts around client %d differs from the plain sum", len(gone), victim)
	}
}

func TestTooManyDropouts(t *testing.T) {
	// k − t + 1 = 4 dropouts among one client's 8 neighbours: it has
	// t − 1 surviving neighbours and the server must say so before any
	// signature.
	r := newRound(t, 16, 8, 5, 32, 8, 1)
	victim := r.Config().Participants[6]
	gone := r.Graph().Neighbours(victim)[:4]
	s, _ := throughMasking(t, r, gone, 3)
	if _, err := s.CloseMasked(); !errors.Is(err, secagg.ErrTooFewClients) {
		t.Errorf("CloseMasked with 4 of 8 neighbours gone: error %v, want ErrTooFewClients", err)
	}
}

// throughMasking runs a round up to and including the masked inputs,
// with the clients in gone dropping before masking, and returns the
// server and the live clients.
func throughMasking(t *testing.T, r *secagg.Round, gone []uint32, seed uint64) (*secagg.Server, map[uint32]*secagg.Client) {
	t.Helper()
	return throughMaskingMem(t, r, gone, seed, nil)
}

// throughMaskingMem is throughMasking with each client's Memory of the
// round taken from (and kept in) mem when not nil.
func throughMaskingMem(t *testing.T, r *secagg.Round, gone []uint32, seed uint64, mem map[uint32]*secagg.Memory) (*secagg.Server, map[uint32]*secagg.Client) {
	t.Helper()
	cfg := r.Config()
	s := secagg.NewServer(r)
	cl := map[uint32]*secagg.Client{}
	for _, id := range cfg.Participants {
		o := opts(seed, id)
		if mem != nil {
			if mem[id] == nil {
				mem[id] = &secagg.Memory{}
			}
			o.Memory = mem[id]
		}
		c, err := secagg.NewClient(r, id, o)
		if err != nil {
			t.Fatal(err)
		}
		cl[id] = c
		m, err := c.AdvertiseKeys()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ReceiveKeys(m); err != nil {
			t.Fatal(err)
		}
	}
	nk, err := s.CloseKeys()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range cfg.Participants {
		m, err := cl[id].ShareKeys(nk[id])
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ReceiveShares(m); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := s.CloseShares()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range gone {
		delete(cl, id)
	}
	for _, id := range sorted(cl) {
		m, err := cl[id].MaskedInput(rs[id], make([]uint64, cfg.Dim))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ReceiveMasked(m); err != nil {
			t.Fatal(err)
		}
	}
	return s, cl
}

func TestRoundConfigErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  secagg.Config
		want error
	}{
		{"threshold above k", secagg.Config{Participants: ids(10), Neighbours: 4, Threshold: 5, Bits: 16, Dim: 1}, secagg.ErrThreshold},
		{"threshold at k/2", secagg.Config{Participants: ids(10), Neighbours: 4, Threshold: 2, Bits: 16, Dim: 1}, secagg.ErrThreshold},
		{"odd k, odd n", secagg.Config{Participants: ids(9), Neighbours: 3, Threshold: 2, Bits: 16, Dim: 1}, secagg.ErrConfig},
		{"odd k below n − 1, even n", secagg.Config{Participants: ids(12), Neighbours: 3, Threshold: 2, Bits: 16, Dim: 1}, secagg.ErrConfig},
		{"k = 1", secagg.Config{Participants: ids(12), Neighbours: 1, Threshold: 1, Bits: 16, Dim: 1}, secagg.ErrConfig},
		{"two participants", secagg.Config{Participants: ids(2), Neighbours: 1, Threshold: 1, Bits: 16, Dim: 1}, secagg.ErrConfig},
		{"s_min above n", secagg.Config{Participants: ids(6), Neighbours: 2, Threshold: 2, MinSurvivors: 7, Bits: 16, Dim: 1}, secagg.ErrConfig},
		{"k ≥ n", secagg.Config{Participants: ids(5), Neighbours: 5, Threshold: 3, Bits: 16, Dim: 1}, secagg.ErrConfig},
		{"one participant", secagg.Config{Participants: ids(1), Neighbours: 1, Threshold: 1, Bits: 16, Dim: 1}, secagg.ErrConfig},
		{"repeated participant", secagg.Config{Participants: []uint32{1, 2, 2, 3}, Neighbours: 2, Threshold: 2, Bits: 16, Dim: 1}, secagg.ErrConfig},
		{"65 bits", secagg.Config{Participants: ids(4), Bits: 65, Dim: 1}, secagg.ErrConfig},
		{"no dimension", secagg.Config{Participants: ids(4), Bits: 8}, secagg.ErrConfig},
	} {
		if _, err := secagg.NewRound(withIDs(c.cfg)); !errors.Is(err, c.want) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.want)
		}
	}
	r := newRound(t, 6, 2, 2, 8, 1, 1)
	if _, err := secagg.NewClient(r, 5, opts(1, 5)); !errors.Is(err, secagg.ErrConfig) {
		t.Errorf("client outside the round: error %v, want ErrConfig", err)
	}
	p := r.Config().Participants
	if _, err := secagg.NewClient(r, p[0], opts(1, p[1])); !errors.Is(err, secagg.ErrConfig) {
		t.Errorf("client with another's key: error %v, want ErrConfig", err)
	}
	if _, err := secagg.NewRound(secagg.Config{Participants: ids(6), Neighbours: 2, Bits: 8, Dim: 1}); !errors.Is(err, secagg.ErrConfig) {
		t.Errorf("round without identities: error %v, want ErrConfig", err)
	}
}

func TestStageOrder(t *testing.T) {
	r := newRound(t, 6, 2, 2, 8, 1, 1)
	c, err := secagg.NewClient(r, r.Config().Participants[0], opts(1, r.Config().Participants[0]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ShareKeys(&secagg.NeighbourKeys{}); !errors.Is(err, secagg.ErrStage) {
		t.Errorf("ShareKeys before AdvertiseKeys: error %v, want ErrStage", err)
	}
	s := secagg.NewServer(r)
	if _, err := s.Sum(); !errors.Is(err, secagg.ErrStage) {
		t.Errorf("Sum before the round: error %v, want ErrStage", err)
	}
	if _, err := s.CloseKeys(); !errors.Is(err, secagg.ErrTooFewClients) {
		t.Errorf("CloseKeys with no keys: error %v, want ErrTooFewClients", err)
	}
}

func TestDeterministic(t *testing.T) {
	r := newRound(t, 16, 8, 5, 32, 20, 1)
	in := randomInputs(r, 2)
	d := drops{beforeMask: r.Config().Participants[2:3]}
	s1, _, v1 := run(t, r, in, d, 3)
	s2, _, v2 := run(t, r, in, d, 3)
	if !slices.Equal(s1, s2) {
		t.Error("two runs with the same seeds give different sums")
	}
	for id, b := range v1.masked {
		if !slices.Equal(b, v2.masked[id]) {
			t.Errorf("client %d: masked input differs between runs with the same seed", id)
		}
	}
	_, _, v3 := run(t, r, in, d, 4)
	for id, b := range v1.masked {
		if slices.Equal(b, v3.masked[id]) {
			t.Errorf("client %d: the same masked input under different client seeds", id)
		}
	}
}

// TestMaskedInputUniform records what the server receives from one client
// over many rounds and checks, with a chi-square test at significance
// 0.001, that its masked vector is uniform on Z_{2^8} although its input
// is a fixed, far-from-uniform vector. The same test applied to the input
// itself must fail (the test has power).
func TestMaskedInputUniform(t *testing.T) {
	const (
		bits   = 8
		dim    = 256
		rounds = 50 // 12800 values, 50 expected per cell
	)
	counts := make([]float64, 1<<bits)
	plain := make([]float64, 1<<bits)
	for run := range rounds {
		r := newRound(t, 8, 4, 3, bits, dim, uint64(100+run))
		in := map[uint32][]uint64{}
		for i, id := range r.Config().Participants {
			x := make([]uint64, dim)
			for j := range x {
				x[j] = uint64((i + j%3)) // small values: far from uniform
			}
			in[id] = x
		}
		_, _, v := run_(t, r, in, uint64(run))
		target := r.Config().Participants[0]
		var m secagg.MaskedInput
		if err := m.UnmarshalBinary(v.masked[target]); err != nil {
			t.Fatal(err)
		}
		for j, y := range m.Masked {
			counts[y]++
			plain[in[target][j]]++
		}
	}
	chi2 := func(c []float64) float64 {
		var n float64
		for _, x := range c {
			n += x
		}
		e := n / float64(len(c))
		var s float64
		for _, x := range c {
			s += (x - e) * (x - e) / e
		}
		return s
	}
	crit := distuv.ChiSquared{K: 1<<bits - 1}.Quantile(0.999)
	stat := chi2(counts)
	t.Logf("masked input of one client: chi-square %.1f on %d df, critical value at 0.001: %.1f", stat, 1<<bits-1, crit)
	if stat > crit {
		t.Errorf("masked input is not uniform: chi-square %.1f > %.1f", stat, crit)
	}
	if p := chi2(plain); p <= crit {
		t.Errorf("the unmasked input passes as uniform (chi-square %.1f ≤ %.1f): the test has no power", p, crit)
	}
}

// run_ runs a round without dropouts.
func run_(t *testing.T, r *secagg.Round, in map[uint32][]uint64, seed uint64) ([]uint64, *secagg.Server, *view) {
	return run(t, r, in, drops{}, seed)
}

// TestDistributedNoiseThroughSum checks that the noise each client adds
// before masking reaches the unmasked sum exactly, and that the
// dequantised sum is within the rounding bound of the float sum.
func TestDistributedNoiseThroughSum(t *testing.T) {
	const (
		n, dim = 16, 40
		norm   = 0.5
	)
	q := secagg.Quantizer{Bits: 32, Range: norm, Scale: 1 << 12, Norm: norm, Beta: math.Exp(-10)}
	variance := 100.0
	if err := q.CheckFederation(n, dim, n*variance); err != nil {
		t.Fatal(err)
	}
	r := newRound(t, n, 8, 5, q.Bits, dim, 7)
	p := r.Config().Participants
	gone := p[4:6]
	xs := map[uint32][]float64{}
	clean := map[uint32][]uint64{}
	noisy := map[uint32][]uint64{}
	noiseSum := make([]int64, dim)
	for i, id := range p {
		g := rand.New(rand.NewPCG(uint64(i), 2))
		x := make([]float64, dim)
		for j := range x {
			x[j] = g.NormFloat64()
		}
		dp.ClipL2(x, norm)
		xs[id] = x
		qx, err := q.Quantize(nil, x, dp.NewSeeded(uint64(i)))
		if err != nil {
			t.Fatal(err)
		}
		clean[id] = slices.Clone(qx)
		q.AddNoise(qx, variance, dp.NewSeeded(uint64(1000+i)))
		noisy[id] = qx
		if !slices.Contains(gone, id) {
			for j := range qx {
				noiseSum[j] += q.Signed(qx[j] - clean[id][j])
			}
		}
	}
	sum, _, _ := run(t, r, noisy, drops{beforeMask: gone}, 8)
	cleanSum := plainSum(r, clean, without(p, gone))
	var nonzero int
	for j := range sum {
		if got := q.Signed(sum[j] - cleanSum[j]); got != noiseSum[j] {
			t.Errorf("coordinate %d: secure sum − clean sum = %d, the clients' noise sums to %d", j, got, noiseSum[j])
		}
		if noiseSum[j] != 0 {
			nonzero++
		}
	}
	if nonzero < dim/2 {
		t.Errorf("noise is zero on %d of %d coordinates at variance 14·100", dim-nonzero, dim)
	}
	// Without noise, the dequantised sum is within 14/γ of the float sum.
	deq := q.Dequantize(nil, cleanSum)
	bound := float64(n-len(gone)) / q.Scale
	for j := range deq {
		var f float64
		for _, id := range without(p, gone) {
			f += xs[id][j]
		}
		if e := math.Abs(deq[j] - f); e >= bound {
			t.Errorf("coordinate %d: dequantised %v, float sum %v: error %v ≥ bound %v", j, deq[j], f, e, bound)
		}
	}
}
