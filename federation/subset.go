package federation

import (
	"errors"
	"fmt"
	"slices"
)

// SampleClients returns k distinct client indices of [0, n), drawn
// uniformly without replacement from the stream of seed, in increasing
// order: the clients of a fixed subset of a federation (Partition.Subset).
// The same (n, k, seed) always gives the same clients.
func SampleClients(n, k int, seed uint64) ([]int, error) {
	if k < 1 || k > n {
		return nil, fmt.Errorf("sample %d of %d clients: want 1 ≤ k ≤ n", k, n)
	}
	rng := stream(seed, domainSubset, uint64(n), uint64(k))
	out := rng.Perm(n)[:k]
	slices.Sort(out)
	return out, nil
}

// Subset returns the partition of a smaller data set made of the rows, in
// the given splits, of the clients keep (indices into p.Clients, in
// increasing order), and rows, where rows[i] is the index in p's data of
// the subset's example i. The subset's rows are client-major: the kept
// clients in order, each one's rows of the kept splits in increasing
// order, as a per-client format (LEAF JSON) writes them; client k of the
// subset is keep[k] with ID k (the client column of that data, numbered
// in order of first appearance) and its name. Rows of other clients and of
// other splits are not in the subset's data at all, so it drops nothing;
// a split not kept is empty. The scheme, seed, rule and fractions say how
// p, and so each kept client's split, was made. labels are p's data's
// labels, which p must have been made for (Check); the subset's
// fingerprint is computed from them.
func (p *Partition) Subset(keep []int, splits []Split, labels []int) (*Partition, []int, error) {
	if err := p.Check(labels, p.Data.Classes); err != nil {
		return nil, nil, err
	}
	if len(keep) == 0 {
		return nil, nil, errors.New("subset: no clients to keep")
	}
	for i, k := range keep {
		if k < 0 || k >= len(p.Clients) {
			return nil, nil, fmt.Errorf("subset: client %d is outside [0, %d)", k, len(p.Clients))
		}
		if i > 0 && k <= keep[i-1] {
			return nil, nil, fmt.Errorf("subset: clients must be in increasing order (%d after %d)", k, keep[i-1])
		}
	}
	var want [Test + 1]bool
	for _, s := range splits {
		if s > Test {
			return nil, nil, fmt.Errorf("subset: unknown split %d", s)
		}
		want[s] = true
	}
	if !slices.Contains(want[:], true) {
		return nil, nil, errors.New("subset: no splits to keep")
	}
	sub := &Partition{
		Format: PartitionFormatV1, Scheme: p.Scheme, Beta: p.Beta, Seed: p.Seed,
		MinClientSize: p.MinClientSize, MinSamples: p.MinSamples,
		Rule: p.Rule, Fractions: p.Fractions,
		Clients: make([]Client, len(keep)),
	}
	var rows []int
	for n, k := range keep {
		c := &p.Clients[k]
		// Merge the kept splits' rows into increasing order, then number
		// them in the subset.
		var own []int
		for _, s := range []Split{Train, Calibration, Test} {
			if want[s] {
				for _, i := range c.Rows(s) {
					own = append(own, int(i))
				}
			}
		}
		slices.Sort(own)
		at := make(map[int]int32, len(own))
		for j, i := range own {
			at[i] = int32(len(rows) + j)
		}
		rows = append(rows, own...)
		nc := Client{ID: int64(n), Name: c.Name, Train: []int32{}, Calibration: []int32{}, Test: []int32{}}
		for _, s := range []Split{Train, Calibration, Test} {
			if !want[s] {
				continue
			}
			dst := make([]int32, len(c.Rows(s)))
			for j, i := range c.Rows(s) {
				dst[j] = at[int(i)]
			}
			switch s {
			case Train:
				nc.Train = dst
			case Calibration:
				nc.Calibration = dst
			case Test:
				nc.Test = dst
			}
		}
		sub.Clients[n] = nc
	}
	subLabels := make([]int, len(rows))
	for j, i := range rows {
		subLabels[j] = labels[i]
	}
	sub.Data = NewFingerprint(subLabels, p.Data.Classes)
	if err := sub.Validate(); err != nil {
		return nil, nil, fmt.Errorf("subset: %w", err)
	}
	return sub, rows, nil
}
