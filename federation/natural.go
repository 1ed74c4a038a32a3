package federation

import (
	"fmt"
	"maps"
	"slices"
)

// LEAFMinSamples is LEAF's and the paper's minimum number of examples of a
// user kept in FEMNIST and Shakespeare federations.
const LEAFMinSamples = 100

// NaturalOptions controls Natural. The zero value keeps every user and
// splits by the split column when the data has one, else by
// DefaultFractions.
type NaturalOptions struct {
	// Seed seeds every random choice. Each user's choices come from a
	// stream of (Seed, user id), so they do not depend on other users.
	Seed uint64
	// Rule is how each user's examples are split. The zero value means
	// RuleGiven when the data has a split column and RuleFractions when
	// it has not.
	Rule SplitRule
	// Fractions are used by RuleFractions; the zero value means
	// DefaultFractions().
	Fractions Fractions
	// MinSamples drops users with fewer examples (over all splits); their
	// examples go to Partition.Dropped. Zero or negative keeps every user.
	// LEAF federations use LEAFMinSamples.
	MinSamples int
	// ForEvaluation keeps clients without calibration rows: a partition
	// read only to evaluate each client's test (or calibration) rows
	// needs none, and an evaluation skips a client without rows of the
	// split it measures. The zero value refuses such clients, which a
	// fit cannot use.
	ForEvaluation bool
}

type user struct {
	id   int64
	rows []int32
}

// groupByClient returns the rows of each client id, users sorted by id,
// each user's rows in increasing order. It is a counting sort: one pass
// counts the rows of each id, one fills a single backing array with every
// user's rows at its offset, so it holds one int per row and no more
// (growing a slice per user would hold up to twice that, and copy it).
// Ids are counted in a slice indexed by id when they are dense enough
// (the largest below 4 rows per row of data), else in a map.
func groupByClient(client []int32, split []uint8) ([]user, error) {
	maxID := int32(-1)
	for i, c := range client {
		if c < 0 {
			return nil, fmt.Errorf("client column: row %d has id %d; ids must be non-negative", i, c)
		}
		if split != nil && split[i] > uint8(Test) {
			return nil, fmt.Errorf("split column: row %d is %d; want 0 (train), 1 (calibration) or 2 (test)", i, split[i])
		}
		maxID = max(maxID, c)
	}
	// next[id] counts id's rows, then holds the next free position of
	// its rows in backing.
	var next interface {
		at(id int32) *int
		ids() []int32
	}
	if int64(maxID) < 4*int64(len(client))+1024 {
		next = make(denseIDs, int(maxID)+1)
	} else {
		next = sparseIDs{}
	}
	for _, c := range client {
		*next.at(c)++
	}
	ids := next.ids()
	users := make([]user, len(ids))
	backing := make([]int32, len(client))
	off := 0
	for k, id := range ids {
		p := next.at(id)
		n := *p
		users[k] = user{id: int64(id), rows: backing[off : off+n : off+n]}
		*p = off
		off += n
	}
	for i, c := range client {
		p := next.at(c)
		backing[*p] = int32(i)
		*p++
	}
	return users, nil
}

// denseIDs counts client ids in a slice indexed by id; its ids are those
// with a count, in increasing order.
type denseIDs []int

func (d denseIDs) at(id int32) *int { return &d[id] }

func (d denseIDs) ids() []int32 {
	var out []int32
	for id, n := range d {
		if n > 0 {
			out = append(out, int32(id))
		}
	}
	return out
}

// sparseIDs counts client ids in a map; its ids are sorted.
type sparseIDs map[int32]*int

func (m sparseIDs) at(id int32) *int {
	p, ok := m[id]
	if !ok {
		p = new(int)
		m[id] = p
	}
	return p
}

func (m sparseIDs) ids() []int32 { return slices.Sorted(maps.Keys(m)) }

// Natural returns the partition carried in the data: client k is the k-th
// smallest id of the client column (its ID is that id). split is the split
// column, or nil when the data has none. Users with fewer than
// opt.MinSamples examples are dropped. Every kept client must end with at
// least one calibration example; Natural returns an error naming the first
// that does not, and the options that would fix it.
func Natural(labels []int, classes int, client []int32, split []uint8, opt NaturalOptions) (*Partition, error) {
	if err := checkLabels(labels, classes); err != nil {
		return nil, err
	}
	if len(client) != len(labels) {
		return nil, fmt.Errorf("client column has %d rows, labels %d", len(client), len(labels))
	}
	if split != nil && len(split) != len(labels) {
		return nil, fmt.Errorf("split column has %d rows, labels %d", len(split), len(labels))
	}
	rule := opt.Rule
	if rule == "" {
		rule = RuleFractions
		if split != nil {
			rule = RuleGiven
		}
	}
	frac := opt.Fractions.orDefault()
	switch rule {
	case RuleFractions:
		if err := frac.validate(); err != nil {
			return nil, err
		}
	case RuleGiven, RuleLEAFSample:
		if split == nil {
			return nil, fmt.Errorf("split rule %q needs a split column, and the data has none; use rule %q", rule, RuleFractions)
		}
	default:
		return nil, fmt.Errorf("unknown split rule %q: want %q, %q or %q", rule, RuleFractions, RuleGiven, RuleLEAFSample)
	}
	users, err := groupByClient(client, split)
	if err != nil {
		return nil, err
	}
	p := &Partition{
		Format:     PartitionFormatV1,
		Data:       NewFingerprint(labels, classes),
		Scheme:     SchemeNatural,
		Seed:       opt.Seed,
		MinSamples: max(opt.MinSamples, 0),
		Rule:       rule,
	}
	if rule == RuleFractions {
		p.Fractions = &frac
	}
	for _, u := range users {
		if len(u.rows) < opt.MinSamples {
			p.Dropped = append(p.Dropped, u.rows...)
			continue
		}
		rng := stream(opt.Seed, domainSplit, uint64(u.id), 0)
		var c Client
		switch rule {
		case RuleFractions:
			c = splitFractions(u.id, u.rows, frac, rng)
		case RuleGiven:
			c = splitGiven(u.id, u.rows, split)
		case RuleLEAFSample:
			c = splitLEAFSample(u.id, u.rows, split, rng)
		}
		if len(c.Calibration) == 0 && !opt.ForEvaluation {
			return nil, fmt.Errorf("client %d has %d examples and none in its calibration split (split rule %q); drop small clients with a minimum sample count, or split each client's rows by split rule %q or %q (fedcalib partition --scheme natural --rule) and pass the partition file",
				u.id, len(u.rows), rule, RuleLEAFSample, RuleFractions)
		}
		p.Clients = append(p.Clients, c)
	}
	if len(p.Clients) == 0 {
		return nil, fmt.Errorf("no client has at least %d examples: lower the minimum sample count", opt.MinSamples)
	}
	slices.Sort(p.Dropped)
	return p, nil
}

// checkLabels reports labels outside [0, classes), fewer than 2 classes
// and more than MaxExamples labels.
func checkLabels(labels []int, classes int) error {
	if classes < 2 {
		return fmt.Errorf("need at least 2 classes, have %d", classes)
	}
	if int64(len(labels)) > MaxExamples {
		return fmt.Errorf("%d examples: a partition holds at most %d", len(labels), int64(MaxExamples))
	}
	for i, y := range labels {
		if y < 0 || y >= classes {
			return fmt.Errorf("label of example %d is %d, outside [0, %d)", i, y, classes)
		}
	}
	return nil
}
