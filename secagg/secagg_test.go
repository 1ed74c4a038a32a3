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
	r, err := secagg.NewRound(secagg.Config{Seed: roundSeed(seed), Participants: ids(n), Neighbours: k, Threshold: thr, Bits: bits, Dim: dim})
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

func TestSumExact(t *testing.T) {
	// n = 16, k = 7, t = 4: any 3 = t − 1 = k − t dropouts leave every
	// neighbourhood with t survivors.
	p := ids(16)
	for _, c := range []struct {
		name      string
		bits, dim int
		d         drops
	}{
		{"no dropout", 32, 50, drops{}},
		{"1 dropout before masking", 32, 50, drops{beforeMask: p[3:4]}},
		{"t−1 dropouts before masking", 32, 50, drops{beforeMask: []uint32{p[0], p[7], p[15]}}},
		{"1 dropout before unmasking", 20, 50, drops{beforeUnmask: p[5:6]}},
		{"t−1 dropouts before unmasking", 20, 50, drops{beforeUnmask: []uint32{p[1], p[2], p[3]}}},
		{"mixed t−1 dropouts", 64, 33, drops{beforeShare: p[9:10], beforeMask: p[4:5], beforeUnmask: p[12:13]}},
		{"b = 1", 1, 70, drops{beforeMask: p[2:3]}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRound(t, 16, 7, 4, c.bits, c.dim, 1)
			in := randomInputs(r, 2)
			got, s, _ := run(t, r, in, c.d, 3)
			// Survivors: everybody who sent a masked input.
			want := without(p, slices.Concat(c.d.beforeShare, c.d.beforeMask))
			if !slices.Equal(s.Survivors(), want) {
				t.Fatalf("survivors %v, want %v", s.Survivors(), want)
			}
			if ws := plainSum(r, in, want); !slices.Equal(got, ws) {
				t.Errorf("secure sum differs from the plain sum of the survivors' inputs:\n got %v\nwant %v", got[:5], ws[:5])
			}
		})
	}
}

func TestSumDefaults(t *testing.T) {
	// n = 60 with the default k = 18 and t = 10; 8 = k − t dropouts among
	// one client's neighbours still unmask.
	r, err := secagg.NewRound(secagg.Config{Seed: roundSeed(9), Participants: ids(60), Bits: 24, Dim: 10})
	if err != nil {
		t.Fatal(err)
	}
	cfg := r.Config()
	if cfg.Neighbours != 18 || cfg.Threshold != 10 {
		t.Fatalf("defaults k = %d, t = %d; want 18, 10", cfg.Neighbours, cfg.Threshold)
	}
	victim := cfg.Participants[17]
	gone := slices.Clone(r.Graph().Neighbours(victim)[:8])
	in := randomInputs(r, 4)
	got, _, _ := run(t, r, in, drops{beforeMask: gone}, 5)
	if want := plainSum(r, in, without(cfg.Participants, gone)); !slices.Equal(got, want) {
		t.Errorf("secure sum with %d dropouts around client %d differs from the plain sum", len(gone), victim)
	}
}

func TestTooManyDropouts(t *testing.T) {
	// k − t + 1 = 4 dropouts among one client's 7 neighbours: its self
	// mask has t − 1 holders left and the server must say so.
	r := newRound(t, 16, 7, 4, 32, 8, 1)
	victim := r.Config().Participants[6]
	gone := r.Graph().Neighbours(victim)[:4]
	s, clients := throughMasking(t, r, gone, 3)
	_ = clients
	if _, err := s.CloseMasked(); !errors.Is(err, secagg.ErrTooFewClients) {
		t.Errorf("CloseMasked with 4 of 7 neighbours gone: error %v, want ErrTooFewClients", err)
	}
}

// throughMasking runs a round up to and including the masked inputs,
// with the clients in gone dropping before masking, and returns the
// server and the live clients.
func throughMasking(t *testing.T, r *secagg.Round, gone []uint32, seed uint64) (*secagg.Server, map[uint32]*secagg.Client) {
	t.Helper()
	cfg := r.Config()
	s := secagg.NewServer(r)
	cl := map[uint32]*secagg.Client{}
	for _, id := range cfg.Participants {
		c, err := secagg.NewClient(r, id, clientRand(seed, id))
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

func TestClientRefusesBothShares(t *testing.T) {
	r := newRound(t, 16, 7, 4, 32, 8, 1)
	g := r.Graph()
	dropped := r.Config().Participants[3]
	s, cl := throughMasking(t, r, []uint32{dropped}, 3)
	reqs, err := s.CloseMasked()
	if err != nil {
		t.Fatal(err)
	}
	// u neighbours the dropped client; peer is one of u's survivors.
	u := g.Neighbours(dropped)[0]
	nb := g.Neighbours(u)
	survivors := without(nb, []uint32{dropped})
	peer := survivors[0]
	if want := (secagg.UnmaskRequest{Survived: survivors, Dropped: []uint32{dropped}}); !slices.Equal(reqs[u].Survived, want.Survived) || !slices.Equal(reqs[u].Dropped, want.Dropped) {
		t.Fatalf("server's request to %d = %+v, want %+v", u, reqs[u], want)
	}
	// One request naming a surviving peer both ways.
	both := &secagg.UnmaskRequest{Survived: survivors, Dropped: []uint32{peer}}
	if _, err := cl[u].Unmask(both); !errors.Is(err, secagg.ErrBothShares) {
		t.Errorf("both shares of %d in one request: error %v, want ErrBothShares", peer, err)
	}
	// Two requests: first the self-mask shares of every neighbour (the
	// server pretends the dropped one survived), then its key share.
	if _, err := cl[u].Unmask(&secagg.UnmaskRequest{Survived: slices.Clone(nb)}); err != nil {
		t.Fatalf("a request naming %d survivors was refused: %v", len(nb), err)
	}
	if _, err := cl[u].Unmask(reqs[u]); !errors.Is(err, secagg.ErrBothShares) {
		t.Errorf("key share of %d after its self-mask share: error %v, want ErrBothShares", dropped, err)
	}
	// Fewer than t surviving neighbours named.
	v := survivors[1]
	if _, err := cl[v].Unmask(&secagg.UnmaskRequest{Survived: without(g.Neighbours(v), []uint32{dropped})[:3]}); !errors.Is(err, secagg.ErrTooFewNeighbours) {
		t.Errorf("3 survivors named with t = 4: error %v, want ErrTooFewNeighbours", err)
	}
	// The server's own requests never ask for both and are answered.
	for _, id := range sorted(cl) {
		q := reqs[id]
		for _, x := range q.Survived {
			if slices.Contains(q.Dropped, x) {
				t.Errorf("server asked %d for both shares of %d", id, x)
			}
		}
		if id == u {
			continue
		}
		if _, err := cl[id].Unmask(q); err != nil {
			t.Errorf("client %d refused the server's request: %v", id, err)
		}
	}
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
		{"k ≥ n", secagg.Config{Participants: ids(5), Neighbours: 5, Threshold: 3, Bits: 16, Dim: 1}, secagg.ErrConfig},
		{"one participant", secagg.Config{Participants: ids(1), Neighbours: 1, Threshold: 1, Bits: 16, Dim: 1}, secagg.ErrConfig},
		{"repeated participant", secagg.Config{Participants: []uint32{1, 2, 2, 3}, Neighbours: 2, Threshold: 2, Bits: 16, Dim: 1}, secagg.ErrConfig},
		{"65 bits", secagg.Config{Participants: ids(4), Bits: 65, Dim: 1}, secagg.ErrConfig},
		{"no dimension", secagg.Config{Participants: ids(4), Bits: 8}, secagg.ErrConfig},
	} {
		if _, err := secagg.NewRound(c.cfg); !errors.Is(err, c.want) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.want)
		}
	}
	r := newRound(t, 6, 2, 2, 8, 1, 1)
	if _, err := secagg.NewClient(r, 5, nil); !errors.Is(err, secagg.ErrConfig) {
		t.Errorf("client outside the round: error %v, want ErrConfig", err)
	}
}

func TestStageOrder(t *testing.T) {
	r := newRound(t, 6, 2, 2, 8, 1, 1)
	c, err := secagg.NewClient(r, r.Config().Participants[0], clientRand(1, 0))
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
	r := newRound(t, 16, 7, 4, 32, 20, 1)
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
	r := newRound(t, n, 7, 4, q.Bits, dim, 7)
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
