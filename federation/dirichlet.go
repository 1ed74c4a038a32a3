package federation

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/stat/distuv"
)

// DefaultMinClientSize is the default minimum number of examples of a
// client of a Dirichlet or IID partition.
const DefaultMinClientSize = 1

// MaxDirichletDraws bounds the number of Dirichlet allocations Dirichlet
// tries before it gives up on the minimum client size.
const MaxDirichletDraws = 1000

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
	// times, then returns an error; the partition is then conditioned on
	// that event, which weakens the skew of very small β slightly. IID
	// deals near-equal shares and only checks N ≥ K·MinClientSize.
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
	q := make([]float64, clients)
	var shares [][]int
	for draw := 0; ; draw++ {
		if draw == MaxDirichletDraws {
			return nil, fmt.Errorf("after %d Dirichlet draws with β = %v some of the %d clients still had fewer than %d examples: raise β, or lower the number of clients or the minimum client size", MaxDirichletDraws, beta, clients, m)
		}
		shares = make([][]int, clients)
		for j, idx := range byClass {
			pcg := newPCG(opt.Seed, domainDirichlet, uint64(draw), uint64(j))
			rng := rand.New(pcg)
			perm := make([]int, len(idx))
			copy(perm, idx)
			rng.Shuffle(len(perm), func(a, b int) { perm[a], perm[b] = perm[b], perm[a] })
			drawDirichlet(q, beta, pcg)
			var cum float64
			start := 0
			for k := range clients {
				end := len(perm)
				if k < clients-1 {
					cum += q[k]
					end = min(max(int(cum*float64(len(perm))), start), len(perm))
				}
				shares[k] = append(shares[k], perm[start:end]...)
				start = end
			}
		}
		ok := true
		for _, s := range shares {
			if len(s) < m {
				ok = false
				break
			}
		}
		if ok {
			break
		}
	}
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
		p.Clients[k] = splitFractions(int64(k), s, frac, stream(opt.Seed, domainSplit, uint64(k), 0))
	}
	return p, nil
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
		p.Clients[k] = splitFractions(int64(k), share, frac, stream(opt.Seed, domainSplit, uint64(k), 0))
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
