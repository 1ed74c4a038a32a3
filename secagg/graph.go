package secagg

import (
	"crypto/sha256"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
)

// graphDomain separates the neighbour graph's key from every other use of
// the round seed.
const graphDomain = "fedcalib/secagg/v1 neighbour graph"

// Graph is the k-regular neighbour graph of a round (SecAgg+, Bell et al.
// 2020): a Harary graph on a ring whose order is a permutation of the
// participants derived from the public round seed. Every participant
// exchanges masks and shares only with its k neighbours.
//
// Construction, so that anyone can recompute it from (seed, participants,
// k): sort the participant IDs ascending (index i is the i-th smallest);
// key a ChaCha8 generator (math/rand/v2, the C2SP chacha8rand stream) with
// SHA-256(graphDomain ‖ seed); shuffle the indices by Fisher–Yates, for
// i = n−1 down to 1 swapping position i with a position j uniform in
// [0, i] drawn by Lemire's multiply-and-reject from the generator's
// Uint64; the result is the ring. Two participants are neighbours when
// their ring positions are at circular distance 1, …, ⌊k/2⌋, or, for
// k = n − 1 odd (n even: the complete graph), exactly n/2. The degree k
// is even, or n − 1 (NewGraph).
//
// A Graph is immutable and safe for concurrent use; the zero value has no
// participants and is not usable.
type Graph struct {
	ids  []uint32   // sorted participants
	nbrs [][]uint32 // sorted neighbours of ids[i]
	k    int
}

// NewGraph returns the neighbour graph of degree k over participants
// (distinct IDs, in any order) for the round seed. It returns an error
// wrapping ErrConfig for fewer than three participants, a repeated ID, or
// a degree that is not an even number in [2, n−1] and not n − 1 (the
// complete graph). An odd degree below n − 1 is refused because its
// Harary graph (the ring plus a diameter chord) can be split into two
// components by dropouts that leave every survivor more than k/2
// surviving neighbours (12 participants, k = 3: four dropouts isolate
// four clients); with an even k it cannot (see ValidSurvivors), for any
// n, odd or even.
func NewGraph(seed [32]byte, participants []uint32, k int) (*Graph, error) {
	n := len(participants)
	ids := slices.Clone(participants)
	slices.Sort(ids)
	switch {
	case n < 3:
		return nil, fmt.Errorf("%w: %d participants; need at least 3 (the sum of two tells each the other's input)", ErrConfig, n)
	case n > math.MaxInt32:
		return nil, fmt.Errorf("%w: %d participants; at most 2^31−1", ErrConfig, n)
	case k < 2 || k > n-1:
		return nil, fmt.Errorf("%w: %d neighbours for %d participants; need 2 to %d", ErrConfig, k, n, n-1)
	case k%2 == 1 && k != n-1:
		return nil, fmt.Errorf("%w: %d neighbours (odd) for %d participants: an odd degree below n − 1 lets dropouts split the survivors; use %d or %d", ErrConfig, k, n, k-1, k+1)
	}
	for i := 1; i < n; i++ {
		if ids[i] == ids[i-1] {
			return nil, fmt.Errorf("%w: participant %d appears twice", ErrConfig, ids[i])
		}
	}
	key := sha256.Sum256(append([]byte(graphDomain), seed[:]...))
	gen := rand.NewChaCha8(key)
	ring := make([]int, n)
	for i := range ring {
		ring[i] = i
	}
	for i := n - 1; i > 0; i-- {
		j := bounded(gen, uint64(i)+1)
		ring[i], ring[j] = ring[j], ring[i]
	}
	g := &Graph{ids: ids, nbrs: make([][]uint32, n), k: k}
	for r, i := range ring {
		nb := make([]uint32, 0, k)
		for d := 1; d <= k/2; d++ {
			nb = append(nb, ids[ring[(r+d)%n]], ids[ring[(r-d+n)%n]])
		}
		if k%2 == 1 {
			nb = append(nb, ids[ring[(r+n/2)%n]])
		}
		slices.Sort(nb)
		g.nbrs[i] = nb
	}
	return g, nil
}

// bounded returns a uniform integer in [0, n) for n > 0 (Lemire 2019).
func bounded(gen *rand.ChaCha8, n uint64) uint64 {
	hi, lo := bits.Mul64(gen.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(gen.Uint64(), n)
		}
	}
	return hi
}

// Degree returns k, the number of neighbours of every participant.
func (g *Graph) Degree() int { return g.k }

// Participants returns the participants in increasing order. The caller
// must not modify the slice.
func (g *Graph) Participants() []uint32 { return g.ids }

// index returns the position of id among the sorted participants.
func (g *Graph) index(id uint32) (int, bool) { return slices.BinarySearch(g.ids, id) }

// Neighbours returns the neighbours of participant id in increasing order,
// or nil if id is not a participant. The caller must not modify the slice.
func (g *Graph) Neighbours(id uint32) []uint32 {
	i, ok := g.index(id)
	if !ok {
		return nil
	}
	return g.nbrs[i]
}

// Adjacent reports whether u and v are neighbours.
func (g *Graph) Adjacent(u, v uint32) bool {
	_, ok := slices.BinarySearch(g.Neighbours(u), v)
	return ok
}

// point returns the Shamir evaluation point of participant id: its index
// among the sorted participants plus one (nonzero, distinct, below p).
func (g *Graph) point(id uint32) uint64 {
	i, _ := g.index(id)
	return uint64(i) + 1
}

// DefaultThreshold returns the smallest Shamir threshold for k
// neighbours, ⌊k/2⌋ + 1, the smallest t > k/2. It tolerates
// k − t = ⌈k/2⌉ − 1 neighbours dropping out of any one client's
// neighbourhood and, against a deviating server, 2t − k − 1 colluding
// clients among any client's neighbours (0 for even k: use Parameters to
// tolerate colluders).
func DefaultThreshold(k int) int { return k/2 + 1 }

// Connected reports whether the clients in set (participants, in any
// order, no repeats) induce a connected subgraph: whether no proper,
// nonempty part of set is without neighbours in the rest of set. The sum
// of the masked inputs of such a part would be free of the pairwise masks
// of the rest, so a server holding the part's self-mask seeds could
// compute it: a server can compute only sums over unions of the induced
// components. An empty set is not connected.
func (g *Graph) Connected(set []uint32) bool {
	if len(set) == 0 {
		return false
	}
	in := make(map[uint32]bool, len(set))
	for _, v := range set {
		in[v] = true
	}
	seen := map[uint32]bool{set[0]: true}
	stack := []uint32{set[0]}
	for len(stack) > 0 {
		u := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, v := range g.Neighbours(u) {
			if in[v] && !seen[v] {
				seen[v] = true
				stack = append(stack, v)
			}
		}
	}
	return len(seen) == len(in)
}

// ValidSurvivors returns nil if set, a strictly increasing list of
// participants, is a survivor set a client may unmask for: at least
// minSurvivors clients (and at least t + 1), each with at least t
// neighbours in set (so each self-mask seed has t holders, and no client
// can be in two survivor sets signed by disjoint groups of its
// neighbours, since 2t > k), and connected (Connected: the only sum the
// server can compute is the whole set's). Otherwise it returns an error
// wrapping ErrTooFewClients. With an even k, every set whose members each
// have more than k/2 neighbours in it is connected (a split needs a gap
// of k/2 consecutive non-members on the ring, which leaves the member
// next to it at most k/2 neighbours in the set); the connectivity check
// is kept so that the rule holds by construction.
func (g *Graph) ValidSurvivors(set []uint32, t, minSurvivors int) error {
	if !increasing(set) {
		return fmt.Errorf("%w: survivor list not strictly increasing", ErrBadMessage)
	}
	if len(set) < max(minSurvivors, t+1) {
		return fmt.Errorf("%w: %d survivors; need at least %d", ErrTooFewClients, len(set), max(minSurvivors, t+1))
	}
	in := make(map[uint32]bool, len(set))
	for _, v := range set {
		if _, ok := g.index(v); !ok {
			return fmt.Errorf("%w: survivor %d is not a participant", ErrBadMessage, v)
		}
		in[v] = true
	}
	for _, v := range set {
		d := 0
		for _, w := range g.Neighbours(v) {
			if in[w] {
				d++
			}
		}
		if d < t {
			return fmt.Errorf("%w: survivor %d has %d surviving neighbours; threshold %d", ErrTooFewClients, v, d, t)
		}
	}
	if !g.Connected(set) {
		return fmt.Errorf("%w: the survivors' neighbour graph is split: a part's sum could be computed alone", ErrTooFewClients)
	}
	return nil
}
