package federation

import (
	"fmt"

	"github.com/fedcalib/fedcalib/calib"
)

// Population is the set of K clients a federated fit samples from. It
// hands out each client's calibration data on demand, so a population can
// generate or read clients one at a time instead of holding them all.
type Population interface {
	// Len returns the number of clients K ≥ 1.
	Len() int
	// Classes returns the number of classes C ≥ 2.
	Classes() int
	// Client returns the calibration data of client k ∈ [0, K). It is
	// called concurrently for distinct clients, and again for a client
	// each time it is sampled; callers do not modify the set.
	Client(k int) (*calib.Set, error)
}

// ClassCounter is implemented by populations that know how many
// calibration examples of each class the whole federation holds (the N_j
// of the non-private weighting, SPEC §5). For other populations the
// binning protocols count them with one extra pass over the clients.
type ClassCounter interface {
	// ClassCounts returns N_j for each class j.
	ClassCounts() []float64
}

// SetPopulation is a Population held in memory: client k's data is split
// Split of client k of a Partition of a labelled data set. For data that
// is not already a float64 calib.Set, such as the float32 block of a
// logits file, a RowPopulation reads the clients in place instead. The
// zero value is not usable: create one with NewPopulation.
type SetPopulation struct {
	data   *calib.Set
	part   *Partition
	split  Split
	counts []float64
}

// NewPopulation returns the population whose client k holds the examples
// of data in split s of client k of p. It returns an error wrapping
// ErrMismatch when p was not made for data.
func NewPopulation(data *calib.Set, p *Partition, s Split) (*SetPopulation, error) {
	if err := data.Validate(); err != nil {
		return nil, err
	}
	if err := p.Check(data.Labels, data.Classes); err != nil {
		return nil, err
	}
	if s > Test {
		return nil, fmt.Errorf("unknown split %d", s)
	}
	counts := make([]float64, data.Classes)
	for k := range p.Clients {
		for _, i := range p.Clients[k].Rows(s) {
			counts[data.Labels[i]]++
		}
	}
	return &SetPopulation{data: data, part: p, split: s, counts: counts}, nil
}

// Len returns the number of clients of the partition.
func (sp *SetPopulation) Len() int { return sp.part.Len() }

// Classes returns the number of classes of the data.
func (sp *SetPopulation) Classes() int { return sp.data.Classes }

// Client returns a copy of client k's examples.
func (sp *SetPopulation) Client(k int) (*calib.Set, error) {
	rows := sp.part.Clients[k].Rows(sp.split)
	idx := make([]int, len(rows))
	for r, i := range rows {
		idx[r] = int(i)
	}
	return sp.data.Subset(idx), nil
}

// ClassCounts returns the number of examples of each class over all
// clients.
func (sp *SetPopulation) ClassCounts() []float64 { return append([]float64(nil), sp.counts...) }

// Slices is a Population given as one Set per client, for tests and
// small simulations.
type Slices []*calib.Set

// Len returns len(s).
func (s Slices) Len() int { return len(s) }

// Classes returns the number of classes of the first client.
func (s Slices) Classes() int { return s[0].Classes }

// Client returns s[k].
func (s Slices) Client(k int) (*calib.Set, error) { return s[k], nil }
