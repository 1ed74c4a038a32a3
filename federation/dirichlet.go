package federation

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/stat/distuv"
)

// DefaultMinClientSize is the default minimum number of examples of a
// client of a Dirichlet or IID partition.
const DefaultMinClientSize = 1

// MaxDirichletDraws bounds the number of Dirichlet allocations Dirichlet
// draws, as the paper's procedure does, before it stops redrawing and
// repairs the best of them (see Dirichlet).
const MaxDirichletDraws = 1000

// Dirichlet gives up redrawing early, after hopelessDraws draws, when
// every one of them left at least hopelessShort clients below the minimum
// size: a draw that satisfies every client is then vanishingly unlikely.
// Every configuration that the paper's procedure satisfied within
// MaxDirichletDraws draws in a sweep over N ∈ {300, …, 10⁴}, K ∈ {10, …,
// 300}, β ∈ {0.02, …, 0.2} and 10 seeds had a draw with at most 5 short
// clients among its first 8, so none of them reaches this rule.
const (
	hopelessDraws = 8
	hopelessShort = 32
)

// PartitionOptions controls Dirichlet and IID. The zero value means seed 0, the
// paper's 80/10/10 split and clients of at least one example.
type PartitionOptions struct {
	// Seed seeds every random choice.
	Seed uint64
	// Fractions split each client's examples (RuleFractions); the zero
	// value means DefaultFractions().
	Fractions Fractions
	// MinClientSize is the minimum number of examples of every client;
	// values below 1 mean DefaultMinClientSize. Dirichlet redraws the
	// whole allocation until every client has that many (as Yurochkin et
	// al.'s and NIID-Bench's partitioners do), at most MaxDirichletDraws
	// times; the partition is then conditioned on that event, which
	// weakens the skew of very small β slightly. When no draw succeeds it
	// repairs the draw that left the fewest examples short by moving
	// examples from the largest clients (see Dirichlet). IID deals
	// near-equal shares and only checks N ≥ K·MinClientSize.
	MinClientSize int
}

func (o PartitionOptions) check(labels []int, classes, clients int) (Fractions, int, error) {
	if err := checkLabels(labels, classes); err != nil {
		return Fractions{}, 0, err
	}
	if clients < 1 {
		return Fractions{}, 0, fmt.Errorf("number of clients is %d: need at least 1", clients)
	}
	frac := o.Fractions.orDefault()
	if err := frac.validate(); err != nil {
		return Fractions{}, 0, err
	}
	m := o.MinClientSize
	if m < 1 {
		m = DefaultMinClientSize
	}
	if len(labels) < clients*m {
		return Fractions{}, 0, fmt.Errorf("%d examples cannot give %d clients %d each: lower the number of clients or the minimum client size", len(labels), clients, m)
	}
	return frac, m, nil
}

// Dirichlet returns a label-skewed partition of a data set into clients
// clients (the paper's App. A.2, after Yurochkin et al. 2019): for each
// class j it draws q_j ~ Dirichlet(β·1_K) and deals class j's examples, in
// a random order, to the clients in proportion to q_j (client k gets the
// examples between ⌊n_j·Σ_{i<k} q_ji⌋ and ⌊n_j·Σ_{i≤k} q_ji⌋). Small β
// gives strong skew; large β approaches the class proportions of the
// whole data set. Each client's examples are then split by
// opt.Fractions. labels are in [0, classes).
//
// Like the paper's partitioner, Dirichlet redraws the whole allocation
// until every client has at least opt.MinClientSize examples, trying at
// most MaxDirichletDraws draws (fewer when the first draws all leave many
// clients short, when success is out of reach). If no draw succeeds, as
// with thousands of clients and small β, it takes the draw that left the
// fewest examples short and repairs it: in client order, each short
// client receives examples one at a time from the currently largest
// client (ties: lowest index), of the class that the short client's own
// Dirichlet weight q_jk favours most among the classes the donor holds.
// The repair moves exactly the missing examples, never takes a donor
// below the minimum, and is deterministic for a seed; every other example
// stays where the Dirichlet draw put it.
func Dirichlet(labels []int, classes, clients int, beta float64, opt PartitionOptions) (*Partition, error) {
	if !(beta > 0) || math.IsInf(beta, 1) {
		return nil, fmt.Errorf("β is %v: the Dirichlet concentration must be positive and finite", beta)
	}
	frac, m, err := opt.check(labels, classes, clients)
	if err != nil {
		return nil, err
	}
	byClass := make([][]int, classes)
	for i, y := range labels {
		byClass[y] = append(byClass[y], i)
	}
	shares, _, _ := allocateDirichlet(labels, byClass, clients, beta, m, opt.Seed)
	p := &Partition{
		Format:        PartitionFormatV1,
		Data:          NewFingerprint(labels, classes),
		Scheme:        SchemeDirichlet,
		Beta:          beta,
		Seed:          opt.Seed,
		MinClientSize: m,
		Rule:          RuleFractions,
		Fractions:     &frac,
		Clients:       make([]Client, clients),
	}
	for k, s := range shares {
		p.Clients[k] = splitFractions(int64(k), rowIndices(s), frac, stream(opt.Seed, domainSplit, uint64(k), 0))
	}
	return p, nil
}

// allocateDirichlet returns each client's examples: the first of
// MaxDirichletDraws draws that gives every client at least m examples,
// else the repaired draw that left the fewest examples short. It also
// returns the number of the draw and how many examples the repair moved.
// The caller has checked that len(labels) ≥ clients·m.
func allocateDirichlet(labels []int, byClass [][]int, clients int, beta float64, m int, seed uint64) (shares [][]int, draw, moved int) {
	best, bestShort := 0, math.MaxInt
	hopeless := true
	for d := range MaxDirichletDraws {
		s, _ := dealDirichlet(byClass, clients, beta, seed, d, false)
		short, missing := shortfall(s, m)
		if short == 0 {
			return s, d, 0
		}
		if missing < bestShort {
			best, bestShort = d, missing
		}
		if d < hopelessDraws && short < hopelessShort {
			hopeless = false
		}
		if d == hopelessDraws-1 && hopeless {
			break
		}
	}
	shares, q := dealDirichlet(byClass, clients, beta, seed, best, true)
	return shares, best, repairShortfall(shares, q, labels, m)
}

// IID returns a partition that deals the examples, in a random order, to
// clients clients in near-equal shares (sizes differ by at most one), each
// then split by opt.Fractions.
func IID(labels []int, classes, clients int, opt PartitionOptions) (*Partition, error) {
	frac, m, err := opt.check(labels, classes, clients)
	if err != nil {
		return nil, err
	}
	perm := stream(opt.Seed, domainIID, 0, 0).Perm(len(labels))
	p := &Partition{
		Format:        PartitionFormatV1,
		Data:          NewFingerprint(labels, classes),
		Scheme:        SchemeIID,
		Seed:          opt.Seed,
		MinClientSize: m,
		Rule:          RuleFractions,
		Fractions:     &frac,
		Clients:       make([]Client, clients),
	}
	n := len(labels)
	for k := range clients {
		share := perm[k*n/clients : (k+1)*n/clients]
		p.Clients[k] = splitFractions(int64(k), rowIndices(share), frac, stream(opt.Seed, domainSplit, uint64(k), 0))
	}
	return p, nil
}

// drawDirichlet fills q with a draw from Dirichlet(β·1), using src. It
// draws the Gamma(β, 1) variates in log space — for β < 1 as
// log G(β+1) + log(U)/β (Marsaglia and Tsang 2000) — so that very small β,
// whose Gamma variates underflow to 0, still gives a valid distribution.
func drawDirichlet(q []float64, beta float64, src rand.Source) {
	rng := rand.New(src)
	g := distuv.Gamma{Alpha: beta, Beta: 1, Src: src}
	if beta < 1 {
		g.Alpha = beta + 1
	}
	hi := math.Inf(-1)
	for k := range q {
		lx := math.Log(g.Rand())
		if beta < 1 {
			lx += math.Log(1-rng.Float64()) / beta // 1-U is in (0, 1]
		}
		q[k] = lx
		hi = max(hi, lx)
	}
	var sum float64
	for k, lx := range q {
		q[k] = math.Exp(lx - hi)
		sum += q[k]
	}
	for k := range q {
		q[k] /= sum
	}
}

// dealDirichlet deals each class's examples to the clients by one draw of
// the Dirichlet proportions, numbered draw, and returns each client's
// examples in class order. With keepQ it also returns the proportions,
// q[j][k] for class j and client k.
func dealDirichlet(byClass [][]int, clients int, beta float64, seed uint64, draw int, keepQ bool) (shares [][]int, q [][]float64) {
	shares = make([][]int, clients)
	if keepQ {
		q = make([][]float64, len(byClass))
	}
	qj := make([]float64, clients)
	for j, idx := range byClass {
		pcg := newPCG(seed, domainDirichlet, uint64(draw), uint64(j))
		rng := rand.New(pcg)
		perm := slices.Clone(idx)
		rng.Shuffle(len(perm), func(a, b int) { perm[a], perm[b] = perm[b], perm[a] })
		drawDirichlet(qj, beta, pcg)
		if keepQ {
			q[j] = slices.Clone(qj)
		}
		var cum float64
		start := 0
		for k := range clients {
			end := len(perm)
			if k < clients-1 {
				cum += qj[k]
				end = min(max(int(cum*float64(len(perm))), start), len(perm))
			}
			shares[k] = append(shares[k], perm[start:end]...)
			start = end
		}
	}
	return shares, q
}

// shortfall returns the number of clients with fewer than m examples and
// the number of examples they lack together.
func shortfall(shares [][]int, m int) (clients, examples int) {
	for _, s := range shares {
		if len(s) < m {
			clients++
			examples += m - len(s)
		}
	}
	return clients, examples
}

// repairShortfall gives every client of shares at least m examples by
// moving examples from the largest clients, as Dirichlet describes. q
// holds the Dirichlet proportions of the draw, q[j][k] for class j and
// client k. Donors' lists stay in class order, since only clients below
// m receive examples and a donor never falls below m+1 before it gives.
// It returns the number of examples moved.
func repairShortfall(shares [][]int, q [][]float64, labels []int, m int) int {
	classes := len(q)
	counts := make([][]int, len(shares)) // counts[k][j]: client k's examples of class j
	donors := &donorHeap{shares: shares}
	for k, s := range shares {
		counts[k] = make([]int, classes)
		for _, i := range s {
			counts[k][labels[i]]++
		}
		if len(s) > m {
			donors.ids = append(donors.ids, k)
		}
	}
	heap.Init(donors)
	moved := 0
	for k := range shares {
		for len(shares[k]) < m {
			// len(labels) ≥ K·m guarantees a donor above m while any
			// client is below it.
			d := donors.ids[0]
			j := -1
			for c, n := range counts[d] {
				if n > 0 && (j < 0 || q[c][k] > q[j][k]) {
					j = c
				}
			}
			s := shares[d]
			at := len(s) - 1
			for labels[s[at]] != j {
				at--
			}
			shares[k] = append(shares[k], s[at])
			shares[d] = slices.Delete(s, at, at+1)
			counts[d][j]--
			counts[k][j]++
			moved++
			if len(shares[d]) > m {
				heap.Fix(donors, 0)
			} else {
				heap.Pop(donors)
			}
		}
	}
	return moved
}

// donorHeap orders client ids by decreasing number of examples, ties by
// increasing id.
type donorHeap struct {
	ids    []int
	shares [][]int
}

func (h *donorHeap) Len() int { return len(h.ids) }

func (h *donorHeap) Less(a, b int) bool {
	na, nb := len(h.shares[h.ids[a]]), len(h.shares[h.ids[b]])
	return na > nb || na == nb && h.ids[a] < h.ids[b]
}

func (h *donorHeap) Swap(a, b int) { h.ids[a], h.ids[b] = h.ids[b], h.ids[a] }

func (h *donorHeap) Push(x any) { h.ids = append(h.ids, x.(int)) }

func (h *donorHeap) Pop() any {
	x := h.ids[len(h.ids)-1]
	h.ids = h.ids[:len(h.ids)-1]
	return x
}
