package secagg

import "fmt"

// Config is the public description of one round of secure aggregation,
// known to the server and to every participant. The zero value is not a
// valid round.
type Config struct {
	// Seed is the public round seed: it fixes the neighbour graph (see
	// Graph) and salts every key of the round. It must not be known to
	// clients before the participants are fixed, or colluders could aim
	// for a neighbourhood; derive it, say, from the run's seed and the
	// round number on the coordinator.
	Seed [32]byte
	// Participants lists the distinct IDs of the clients sampled for the
	// round, in any order.
	Participants []uint32
	// Neighbours is the degree k of the neighbour graph; 0 means
	// DefaultNeighbours(len(Participants)).
	Neighbours int
	// Threshold is the Shamir threshold t ∈ (k/2, k]; 0 means
	// DefaultThreshold(k). The round survives up to k − t dropouts in any
	// client's neighbourhood.
	Threshold int
	// Bits is b ∈ [1, 64]: inputs and masks live in Z_{2^b}.
	Bits int
	// Dim is the length of every input vector, ≥ 1.
	Dim int
}

// A Round is a validated Config with its neighbour graph. Create one with
// NewRound; it is immutable and safe for concurrent use, so one Round can
// serve the server and many in-process clients. The zero value is not
// usable.
type Round struct {
	cfg   Config
	graph *Graph
}

// NewRound validates cfg, fills in its defaults and builds the neighbour
// graph. It returns an error wrapping ErrConfig or ErrThreshold.
func NewRound(cfg Config) (*Round, error) {
	n := len(cfg.Participants)
	if cfg.Neighbours == 0 {
		cfg.Neighbours = DefaultNeighbours(n)
	}
	k := cfg.Neighbours
	if cfg.Threshold == 0 {
		cfg.Threshold = DefaultThreshold(k)
	}
	switch {
	case cfg.Bits < 1 || cfg.Bits > 64:
		return nil, fmt.Errorf("%w: %d bits; need 1 to 64", ErrConfig, cfg.Bits)
	case cfg.Dim < 1:
		return nil, fmt.Errorf("%w: vector length %d; need at least 1", ErrConfig, cfg.Dim)
	case cfg.Threshold > k:
		return nil, fmt.Errorf("%w: threshold %d is above the neighbour count %d", ErrThreshold, cfg.Threshold, k)
	case 2*cfg.Threshold <= k:
		return nil, fmt.Errorf("%w: threshold %d is at most half the neighbour count %d; need more than %d so no two disjoint sets of neighbours can both reach it", ErrThreshold, cfg.Threshold, k, k/2)
	}
	g, err := NewGraph(cfg.Seed, cfg.Participants, k)
	if err != nil {
		return nil, err
	}
	cfg.Participants = g.Participants()
	return &Round{cfg: cfg, graph: g}, nil
}

// Config returns the round's configuration with defaults filled in and
// participants sorted. The caller must not modify its Participants.
func (r *Round) Config() Config { return r.cfg }

// Graph returns the round's neighbour graph.
func (r *Round) Graph() *Graph { return r.graph }

func (r *Round) mask() uint64 { return mask(r.cfg.Bits) }
