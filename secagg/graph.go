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
// their ring positions are at circular distance 1, …, ⌊k/2⌋, or, for odd
// k (which needs an even n), exactly n/2.
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
// wrapping ErrConfig for fewer than two participants, a repeated ID, or a
// degree outside [1, n−1] or odd with an odd n.
func NewGraph(seed [32]byte, participants []uint32, k int) (*Graph, error) {
	n := len(participants)
	ids := slices.Clone(participants)
	slices.Sort(ids)
	switch {
	case n < 2:
		return nil, fmt.Errorf("%w: %d participants; need at least 2", ErrConfig, n)
	case n > math.MaxInt32:
		return nil, fmt.Errorf("%w: %d participants; at most 2^31−1", ErrConfig, n)
	case k < 1 || k > n-1:
		return nil, fmt.Errorf("%w: %d neighbours for %d participants; need 1 to %d", ErrConfig, k, n, n-1)
	case k%2 == 1 && n%2 == 1:
		return nil, fmt.Errorf("%w: %d neighbours (odd) for %d participants (odd): no %d-regular graph exists", ErrConfig, k, n, k)
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

// DefaultNeighbours returns the default degree k of the neighbour graph
// for n participants: the even number at or above 3·⌈log₂ n⌉, capped at
// n − 1 (made even-compatible with n). This is the O(log n) of Bell et
// al. with a constant chosen, not derived: their Theorem 3.6 ties the
// constant to the tolerated fractions of dropouts and corrupt clients,
// which this package does not compute. For n = 100 it gives 22, for
// n = 1000 it gives 30.
func DefaultNeighbours(n int) int {
	if n < 2 {
		return 0
	}
	k := 3 * bits.Len(uint(n-1)) // 3·⌈log₂ n⌉
	k += k % 2
	if k > n-1 {
		k = n - 1
		if k%2 == 1 && n%2 == 1 {
			k--
		}
	}
	return k
}

// DefaultThreshold returns the default Shamir threshold for k neighbours:
// ⌊k/2⌋ + 1, the smallest t > k/2. It tolerates k − t = ⌈k/2⌉ − 1
// neighbours dropping out of any one client's neighbourhood.
func DefaultThreshold(k int) int { return k/2 + 1 }
