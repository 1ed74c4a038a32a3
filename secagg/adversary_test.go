package secagg_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fedcalib/fedcalib/secagg"
)

// attempt is one attempt of a round driven by a server that may lie: the
// clients up to their masked inputs, then whatever survivor sets the
// server shows each client. It records what the server can learn.
type attempt struct {
	r       *secagg.Round
	clients map[uint32]*secagg.Client
	shared  map[uint32]bool // clients whose shares were routed
	masked  map[uint32]bool // clients whose masked input the server holds
	// revealed[kind][peer] counts the shares of peer's self-mask seed
	// (kind 0) or mask key (kind 1) the server received.
	revealed [2]map[uint32]int
	refused  []error
}

// newAttempt runs an attempt of r through the masked inputs; the clients
// in skip send none. mem keeps each client's Memory across attempts.
func newAttempt(t *testing.T, r *secagg.Round, skip []uint32, seed uint64, mem map[uint32]*secagg.Memory) *attempt {
	t.Helper()
	s, cl := throughMaskingMem(t, r, skip, seed, mem)
	_ = s
	a := &attempt{r: r, clients: cl, shared: map[uint32]bool{}, masked: map[uint32]bool{}, revealed: [2]map[uint32]int{{}, {}}}
	for _, id := range r.Config().Participants {
		a.shared[id] = true
	}
	for id := range cl {
		a.masked[id] = true
	}
	return a
}

// lie shows each client in show[set] the survivor set sets[set], has it
// sign, then sends each signer its set with every signature of that set,
// and records the shares revealed.
func (a *attempt) lie(sets [][]uint32, show [][]uint32) {
	sigs := make([][]secagg.SurvivorSignature, len(sets))
	signer := map[uint32]int{}
	for i, who := range show {
		for _, id := range who {
			c := a.clients[id]
			if c == nil {
				continue
			}
			m, err := c.SignSurvivors(&secagg.SurvivorSet{Survivors: sets[i]})
			if err != nil {
				a.refused = append(a.refused, err)
				continue
			}
			sigs[i] = append(sigs[i], *m)
			signer[id] = i
		}
	}
	for _, id := range sorted(signer) {
		i := signer[id]
		slices.SortFunc(sigs[i], func(x, y secagg.SurvivorSignature) int { return int(x.Client) - int(y.Client) })
		resp, err := a.clients[id].Unmask(&secagg.UnmaskRequest{Survivors: sets[i], Signatures: sigs[i]})
		if err != nil {
			a.refused = append(a.refused, err)
			continue
		}
		for _, sh := range resp.SelfShares {
			a.revealed[0][sh.Of]++
		}
		for _, sh := range resp.KeyShares {
			a.revealed[1][sh.Of]++
		}
	}
}

// computable returns the nonempty sets of clients whose sum of inputs the
// server can compute from this attempt's view (masks from independent
// keys taken as independent, as the PRG makes them): the unions of the
// parts below. Two survivors whose pairwise mask the server cannot remove
// (it holds neither mask key) are in the same part; a part is computable
// when the server holds the self-mask seed of each member. It returns the
// computable parts.
func (a *attempt) computable() [][]uint32 {
	t := a.r.Config().Threshold
	g := a.r.Graph()
	seed := func(v uint32) bool { return a.revealed[0][v] >= t }
	key := func(v uint32) bool { return a.revealed[1][v] >= t }
	var parts [][]uint32
	seen := map[uint32]bool{}
	for _, u := range sorted(a.masked) {
		if seen[u] {
			continue
		}
		part, stack, ok := []uint32{}, []uint32{u}, true
		seen[u] = true
		for len(stack) > 0 {
			x := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			part = append(part, x)
			ok = ok && seed(x)
			for _, w := range g.Neighbours(x) {
				if !a.shared[w] || key(x) || key(w) {
					continue // no mask, or one the server removes
				}
				if !a.masked[w] {
					ok = false // a mask with a client whose input is not held
					continue
				}
				if !seen[w] {
					seen[w] = true
					stack = append(stack, w)
				}
			}
		}
		if ok {
			slices.Sort(part)
			parts = append(parts, part)
		}
	}
	return parts
}

// TestRetryView replays point 1 of the review: s_min = n, and one client
// skips its masked input in the first attempt. Nobody signs the short
// set, even when a deviating server sends it anyway, so the first attempt
// yields no sum; the second yields the sum of all, the one sum to charge.
// Every sum computable from the server's whole view is in the ledger.
func TestRetryView(t *testing.T) {
	const n = 8
	cfg := withIDs(secagg.Config{Seed: roundSeed(3), Participants: ids(n), Neighbours: 4, Threshold: 3, MinSurvivors: n, Bits: 16, Dim: 4})
	mem := map[uint32]*secagg.Memory{}
	var ledger [][]uint32
	var views [][][]uint32
	p := cfg.Participants
	for i, skip := range [][]uint32{p[2:3], nil} {
		cfg.Context = []byte{byte(i + 1)}
		r, err := secagg.NewRound(cfg)
		if err != nil {
			t.Fatal(err)
		}
		a := newAttempt(t, r, skip, uint64(10+i), mem)
		s := sorted(a.masked)
		// The server shows every survivor its true survivor set.
		a.lie([][]uint32{s}, [][]uint32{s})
		if len(s) >= n {
			ledger = append(ledger, s) // what the coordinator charges
		} else if len(a.refused) != len(s) {
			t.Errorf("attempt %d: %d of %d clients signed a set of %d < s_min", i+1, len(s)-len(a.refused), len(s), len(s))
		}
		views = append(views, a.computable())
	}
	for i, parts := range views {
		for _, part := range parts {
			if !slices.ContainsFunc(ledger, func(l []uint32) bool { return slices.Equal(l, part) }) {
				t.Errorf("attempt %d: the server can compute the sum of %v, which is not charged", i+1, part)
			}
		}
	}
	if len(views[1]) != 1 || !slices.Equal(views[1][0], p) {
		t.Errorf("the second attempt's computable sums are %v, want the sum of all", views[1])
	}
}

// TestLyingServer rebuilds point 4 of the review: the server tells the
// victim's neighbours that the victim survived and tells other clients
// that the victim's neighbours dropped, so as to collect the victim's
// self-mask seed and its neighbours' mask keys. Every strategy ends with
// the honest clients refusing, and the server able to compute no sum
// but, at most, one over a valid survivor set that contains no victim
// alone. With -short, n = 40 only.
func TestLyingServer(t *testing.T) {
	sizes := []int{40, 100}
	if testing.Short() {
		sizes = sizes[:1]
	}
	for _, n := range sizes {
		cfg := withIDs(secagg.Config{Seed: roundSeed(uint64(n)), Participants: ids(n), Bits: 16, Dim: 2})
		r, err := secagg.NewRound(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c := r.Config()
		g := r.Graph()
		v := c.Participants[n/2]
		nv := g.Neighbours(v)
		closed := append(slices.Clone(nv), v)
		all := c.Participants
		others := without(all, closed)
		// Holders of each neighbour's shares outside v's closed
		// neighbourhood, t of them each where there are enough.
		// Each client is shown one set (it signs one per round).
		var holders [][]uint32
		var sets [][]uint32
		used := map[uint32]bool{}
		for _, w := range nv {
			h := slices.DeleteFunc(without(g.Neighbours(w), closed), func(x uint32) bool { return used[x] })
			h = h[:min(len(h), c.Threshold)]
			for _, x := range h {
				used[x] = true
			}
			holders = append(holders, h)
			sets = append(sets, without(all, []uint32{w}))
		}
		for _, st := range []struct {
			name string
			sets [][]uint32
			show [][]uint32
		}{
			{"v's neighbours dropped, for everyone else", [][]uint32{all, without(all, nv)}, [][]uint32{closed, others}},
			{"v and its neighbours dropped, for everyone else", [][]uint32{all, others}, [][]uint32{closed, others}},
			{"each neighbour dropped, for t of its holders", append([][]uint32{all}, sets...), append([][]uint32{closed}, holders...)},
		} {
			t.Run(st.name, func(t *testing.T) {
				a := newAttempt(t, r, nil, 1, nil)
				a.lie(st.sets, st.show)
				for _, part := range a.computable() {
					if !slices.Equal(part, all) {
						t.Errorf("n = %d: the server can compute the sum of %d clients %v", n, len(part), part)
					}
				}
				if len(a.refused) == 0 {
					t.Errorf("n = %d: no client refused", n)
				}
				for _, err := range a.refused {
					if !errors.Is(err, secagg.ErrRefused) && !errors.Is(err, secagg.ErrTooFewClients) {
						t.Errorf("refusal %v, want ErrRefused or ErrTooFewClients", err)
					}
				}
			})
		}
	}
}

// TestSignOncePerRound: a client signs one survivor set per round over
// its attempts, and refuses an attempt whose graph differs.
func TestSignOncePerRound(t *testing.T) {
	cfg := withIDs(secagg.Config{Seed: roundSeed(5), Participants: ids(8), Neighbours: 4, Threshold: 3, Bits: 16, Dim: 2})
	mem := map[uint32]*secagg.Memory{}
	for i := range 2 {
		cfg.Context = []byte{byte(i)}
		r, err := secagg.NewRound(cfg)
		if err != nil {
			t.Fatal(err)
		}
		a := newAttempt(t, r, nil, uint64(i), mem)
		u := cfg.Participants[0]
		_, err = a.clients[u].SignSurvivors(&secagg.SurvivorSet{Survivors: r.Config().Participants})
		if i == 0 && err != nil {
			t.Fatalf("first signature refused: %v", err)
		}
		if i == 1 && !errors.Is(err, secagg.ErrRefused) {
			t.Errorf("second signature in the round: error %v, want ErrRefused", err)
		}
	}
	cfg.Seed = roundSeed(6)
	r, err := secagg.NewRound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u := cfg.Participants[0]
	o := opts(1, u)
	o.Memory = mem[u]
	if _, err := secagg.NewClient(r, u, o); !errors.Is(err, secagg.ErrConfig) {
		t.Errorf("an attempt with another graph seed: error %v, want ErrConfig", err)
	}
}

// TestReplayedAndSubstitutedKeys: keys signed for another attempt, and
// keys a relay substitutes, are refused by the server and by the clients.
func TestReplayedAndSubstitutedKeys(t *testing.T) {
	cfg := withIDs(secagg.Config{Seed: roundSeed(5), Participants: ids(6), Neighbours: 2, Threshold: 2, Bits: 16, Dim: 2, Context: []byte("attempt 1")})
	r1, err := secagg.NewRound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Context = []byte("attempt 2")
	r2, err := secagg.NewRound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Participants
	old, err := secagg.NewClient(r1, p[1], opts(1, p[1]))
	if err != nil {
		t.Fatal(err)
	}
	replayed, err := old.AdvertiseKeys()
	if err != nil {
		t.Fatal(err)
	}
	if err := secagg.NewServer(r2).ReceiveKeys(replayed); !errors.Is(err, secagg.ErrBadMessage) {
		t.Errorf("server given keys of another attempt: error %v, want ErrBadMessage", err)
	}
	fresh, err := secagg.NewClient(r2, p[1], opts(2, p[1]))
	if err != nil {
		t.Fatal(err)
	}
	good, err := fresh.AdvertiseKeys()
	if err != nil {
		t.Fatal(err)
	}
	swapped := *good
	swapped.MaskKey[0] ^= 1
	for name, k := range map[string]*secagg.AdvertiseKeys{"replayed": replayed, "substituted": &swapped} {
		u := r2.Graph().Neighbours(p[1])[0]
		c, err := secagg.NewClient(r2, u, opts(3, u))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.AdvertiseKeys(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ShareKeys(&secagg.NeighbourKeys{Keys: []secagg.AdvertiseKeys{*k}}); !errors.Is(err, secagg.ErrBadMessage) {
			t.Errorf("%s keys: client error %v, want ErrBadMessage", name, err)
		}
	}
}

// TestComputableFindsLeaks checks the analysis the tests above rely on:
// with the victim's self-mask seed and every neighbour's mask key, it
// finds the victim's input alone; with the victim's mask key instead of
// its neighbours', too; with one neighbour's key missing, not.
func TestComputableFindsLeaks(t *testing.T) {
	cfg := withIDs(secagg.Config{Seed: roundSeed(5), Participants: ids(10), Neighbours: 4, Threshold: 3, Bits: 16, Dim: 2})
	r, err := secagg.NewRound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := cfg.Participants[4]
	nv := r.Graph().Neighbours(v)
	for _, c := range []struct {
		name string
		keys []uint32
		want bool
	}{
		{"neighbours' keys", nv, true},
		{"own key", []uint32{v}, true},
		{"one neighbour's key missing", nv[1:], false},
	} {
		a := newAttempt(t, r, nil, 1, nil)
		a.revealed[0][v] = 3
		for _, w := range c.keys {
			a.revealed[1][w] = 3
		}
		got := slices.ContainsFunc(a.computable(), func(p []uint32) bool { return slices.Equal(p, []uint32{v}) })
		if got != c.want {
			t.Errorf("%s: input of %d alone computable = %v, want %v", c.name, v, got, c.want)
		}
	}
}

// TestRandomLies: a server that shows random survivor sets (the true set
// less a few random clients, one to three different sets per attempt) to
// random groups of clients, most to the first. In every trial every sum
// the server can compute is the sum of one of the sets it showed, a valid
// one (ValidSurvivors); never a part of one, a union, or a single input;
// and some trials do compute a sum. With -short, 20 trials.
func TestRandomLies(t *testing.T) {
	cfg := withIDs(secagg.Config{Seed: roundSeed(11), Participants: ids(24), Neighbours: 6, Threshold: 4, MinSurvivors: 8, Bits: 16, Dim: 2})
	r, err := secagg.NewRound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := r.Config()
	g := rand.New(rand.NewPCG(5, 6))
	computed := 0
	trials := 60
	if testing.Short() {
		trials = 20
	}
	for trial := range trials {
		a := newAttempt(t, r, nil, uint64(trial), nil)
		m := 1 + g.IntN(3)
		sets := make([][]uint32, m)
		show := make([][]uint32, m)
		for i := range sets {
			p := slices.Clone(c.Participants)
			g.Shuffle(len(p), func(x, y int) { p[x], p[y] = p[y], p[x] })
			sets[i] = without(c.Participants, p[:g.IntN(4)])
		}
		for _, id := range c.Participants {
			i := 0
			if g.Float64() < 0.1 {
				i = g.IntN(m)
			}
			show[i] = append(show[i], id)
		}
		a.lie(sets, show)
		for _, part := range a.computable() {
			computed++
			ok := slices.ContainsFunc(sets, func(s []uint32) bool { return slices.Equal(s, part) })
			if !ok || r.Graph().ValidSurvivors(part, c.Threshold, c.MinSurvivors) != nil {
				t.Fatalf("trial %d: the server can compute the sum of %v, not a valid set it showed", trial, part)
			}
		}
	}
	if computed == 0 {
		t.Error("no trial computed a sum: the test shows nothing")
	}
	t.Logf("%d sums computable over %d trials", computed, trials)
}
