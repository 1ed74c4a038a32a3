package federation

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// SplitRule says how a client's examples are divided into its train,
// calibration and test splits.
type SplitRule string

// The split rules.
const (
	// RuleFractions shuffles each client's examples (seeded) and cuts them
	// by Fractions: the calibration split gets ⌈f_cal·n⌉ examples, so a
	// client with any data has calibration data; the test split gets
	// f_test·n rounded to nearest (at most what is left); train gets the
	// rest.
	RuleFractions SplitRule = "fractions"
	// RuleGiven keeps the split column of the data as it is.
	RuleGiven SplitRule = "given"
	// RuleLEAFSample is LEAF's "sample" split as the paper uses it: a
	// user's train rows stay train, and half of its test rows (rounded up,
	// chosen at random) become its calibration set.
	RuleLEAFSample SplitRule = "leaf-sample"
)

// Fractions are the shares of a client's examples in its train,
// calibration and test splits. They are non-negative, sum to 1, and the
// calibration share is positive. The zero value means DefaultFractions().
type Fractions struct {
	Train       float64 `json:"train"`
	Calibration float64 `json:"calibration"`
	Test        float64 `json:"test"`
}

// DefaultFractions returns the paper's split: 80% train, 10% calibration,
// 10% test.
func DefaultFractions() Fractions { return Fractions{Train: 0.8, Calibration: 0.1, Test: 0.1} }

func (f Fractions) orDefault() Fractions {
	if f == (Fractions{}) {
		return DefaultFractions()
	}
	return f
}

func (f Fractions) validate() error {
	for _, v := range []float64{f.Train, f.Calibration, f.Test} {
		if !(v >= 0 && v <= 1) {
			return fmt.Errorf("split fractions %v/%v/%v: each must be in [0, 1]", f.Train, f.Calibration, f.Test)
		}
	}
	if math.Abs(f.Train+f.Calibration+f.Test-1) > 1e-9 {
		return fmt.Errorf("split fractions %v/%v/%v sum to %v, not 1", f.Train, f.Calibration, f.Test, f.Train+f.Calibration+f.Test)
	}
	if f.Calibration == 0 {
		return fmt.Errorf("split fractions %v/%v/%v give no calibration data", f.Train, f.Calibration, f.Test)
	}
	return nil
}

// counts returns the sizes of the calibration and test splits of a client
// with n examples under RuleFractions.
func (f Fractions) counts(n int) (cal, test int) {
	const slack = 1e-9 // so that 0.1·30 = 3.0000000000000004 rounds up to 3, not 4
	cal = min(n, int(math.Ceil(f.Calibration*float64(n)-slack)))
	test = min(n-cal, int(math.Round(f.Test*float64(n))))
	return cal, test
}

// The split functions below divide the examples idx of one client in
// place: they reorder idx and return a Client whose splits are disjoint
// subslices of it (each with its capacity cut to its length, so that
// appending to one cannot overwrite another), so a partition holds one
// int per example and no copy. The caller gives up idx.

// splitFractions divides the examples idx of one client by f, shuffling
// with rng, in place.
func splitFractions(id int64, idx []int32, f Fractions, rng *rand.Rand) Client {
	rng.Shuffle(len(idx), func(a, b int) { idx[a], idx[b] = idx[b], idx[a] })
	cal, test := f.counts(len(idx))
	c := Client{
		ID:          id,
		Calibration: idx[:cal:cal],
		Test:        idx[cal : cal+test : cal+test],
		Train:       idx[cal+test:],
	}
	slices.Sort(c.Calibration)
	slices.Sort(c.Test)
	slices.Sort(c.Train)
	return c
}

// splitGiven divides the examples idx of one client, in increasing
// order, by the split column, in place: idx becomes its train, then its
// calibration, then its test examples, each in increasing order.
func splitGiven(id int64, idx []int32, split []uint8) Client {
	var n [3]int
	for _, i := range idx {
		n[split[i]]++
	}
	// Train rows move forward in place; the others wait in rest.
	rest := make([]int32, 0, n[Calibration]+n[Test])
	train := idx[:0]
	for _, i := range idx {
		if Split(split[i]) == Train {
			train = append(train, i)
		} else {
			rest = append(rest, i)
		}
	}
	cal := idx[n[Train]:n[Train]]
	test := idx[n[Train]+n[Calibration] : n[Train]+n[Calibration]]
	for _, i := range rest {
		if Split(split[i]) == Calibration {
			cal = append(cal, i)
		} else {
			test = append(test, i)
		}
	}
	return Client{ID: id, Train: capped(train), Calibration: capped(cal), Test: capped(test)}
}

// splitLEAFSample divides the examples idx of one client, in increasing
// order, by the split column, then moves half of its test examples
// (rounded up, chosen with rng) to calibration; in place.
func splitLEAFSample(id int64, idx []int32, split []uint8, rng *rand.Rand) Client {
	c := splitGiven(id, idx, split)
	// Calibration and test are adjacent in idx: the calibration split
	// grows over the first half of the shuffled test split.
	perm := c.Test // sorted, since idx is
	rng.Shuffle(len(perm), func(a, b int) { perm[a], perm[b] = perm[b], perm[a] })
	half := (len(perm) + 1) / 2
	ncal := len(c.Calibration) + half
	c.Calibration = capped(idx[len(c.Train) : len(c.Train)+ncal])
	c.Test = capped(perm[half:])
	slices.Sort(c.Calibration)
	slices.Sort(c.Test)
	return c
}

// rowIndices returns the example indices s as a partition holds them.
func rowIndices(s []int) []int32 {
	out := make([]int32, len(s))
	for r, i := range s {
		out[r] = int32(i)
	}
	return out
}

// capped returns s with its capacity cut to its length, never nil.
func capped(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s[:len(s):len(s)]
}

// leafSample applies LEAF's "sample" rule to a whole data set: it returns a
// copy of split in which, for each user of the client column, half of its
// test rows (Test; rounded up, chosen at random from a stream seeded by
// (seed, user id)) become Calibration rows. Natural with RuleLEAFSample
// makes the same choice.
func leafSample(client []int32, split []uint8, seed uint64) ([]uint8, error) {
	if len(client) != len(split) {
		return nil, fmt.Errorf("client column has %d rows, split column %d", len(client), len(split))
	}
	users, err := groupByClient(client, split)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(split)
	for _, u := range users {
		c := splitLEAFSample(u.id, u.rows, split, stream(seed, domainSplit, uint64(u.id), 0))
		for _, i := range c.Calibration {
			out[i] = uint8(Calibration)
		}
	}
	return out, nil
}
