package secagg

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

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
	// Neighbours is the degree k of the neighbour graph, even or n − 1
	// (NewGraph); 0 means the Parameters of len(Participants) with
	// DefaultDropoutRate and DefaultColluders.
	Neighbours int
	// Threshold is the Shamir threshold t ∈ (k/2, k]; 0 means the
	// Parameters' t when Neighbours is 0, DefaultThreshold(k) otherwise.
	// The round survives up to k − t dropouts in any client's
	// neighbourhood.
	Threshold int
	// MinSurvivors is s_min, the fewest survivors whose sum a client
	// helps unmask (ValidSurvivors): the count the noise was planned for.
	// Below t + 1 (0 included) it means t + 1.
	MinSurvivors int
	// Context binds the round to its transport: the federation, the round
	// and the attempt, say. With everything else in Config it makes the
	// round's session (Round.Session), which every signature, key and
	// sealed share is bound to, so no message of another round or attempt
	// is accepted.
	Context []byte
	// Identities holds each participant's Ed25519 public key (in package
	// network, its NKey from the allow-list), with which it signs its
	// keys and the survivor set.
	Identities map[uint32]ed25519.PublicKey
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
	cfg     Config
	graph   *Graph
	session [32]byte
}

// NewRound validates cfg, fills in its defaults and builds the neighbour
// graph. It returns an error wrapping ErrConfig or ErrThreshold.
func NewRound(cfg Config) (*Round, error) {
	n := len(cfg.Participants)
	if cfg.Neighbours == 0 && n >= 3 {
		p, err := Parameters(n, DefaultDropoutRate, DefaultColluders(n))
		if err != nil {
			return nil, err
		}
		cfg.Neighbours = p.Neighbours
		if cfg.Threshold == 0 {
			cfg.Threshold = p.Threshold
		}
	}
	k := cfg.Neighbours
	if cfg.Threshold == 0 {
		cfg.Threshold = DefaultThreshold(k)
	}
	cfg.MinSurvivors = max(cfg.MinSurvivors, cfg.Threshold+1)
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
	if cfg.MinSurvivors > n {
		return nil, fmt.Errorf("%w: %d survivors wanted of %d participants", ErrConfig, cfg.MinSurvivors, n)
	}
	for _, id := range cfg.Participants {
		if len(cfg.Identities[id]) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: no Ed25519 identity for participant %d", ErrConfig, id)
		}
	}
	r := &Round{cfg: cfg, graph: g}
	r.session = r.digest()
	return r, nil
}

// sessionDomain separates the session digest from other hashes.
const sessionDomain = "fedcalib/secagg/v2 session"

// digest returns SHA-256 of the domain and every field of the validated
// config, lengths and integers big-endian, participants in increasing
// order each with its identity.
func (r *Round) digest() [32]byte {
	c := &r.cfg
	h := sha256.New()
	var b []byte
	b = append(b, sessionDomain...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.Context)))
	b = append(b, c.Context...)
	b = append(b, c.Seed[:]...)
	for _, v := range []int{c.Neighbours, c.Threshold, c.MinSurvivors, c.Bits, c.Dim, len(c.Participants)} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	h.Write(b)
	for _, id := range c.Participants {
		h.Write(binary.BigEndian.AppendUint32(nil, id))
		h.Write(c.Identities[id])
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// Session returns the round's session: SHA-256 of Context, Seed, k, t,
// MinSurvivors, Bits, Dim and the participants with their identities.
// Keys are derived with it as salt and signatures sign it, so two
// clients with different views of any of these fail each other's checks.
func (r *Round) Session() [32]byte { return r.session }

// What a client signs, after the session digest.
const (
	signKeys      = "fedcalib/secagg/v2 keys"
	signSurvivors = "fedcalib/secagg/v2 survivors"
)

// keysMessage returns the bytes a client signs to advertise its keys.
func (r *Round) keysMessage(m *AdvertiseKeys) []byte {
	b := append([]byte(signKeys), r.session[:]...)
	b = binary.BigEndian.AppendUint32(b, m.Client)
	b = append(b, m.EncryptionKey[:]...)
	return append(b, m.MaskKey[:]...)
}

// survivorsMessage returns the bytes client id signs for survivor set s.
func (r *Round) survivorsMessage(id uint32, s []uint32) []byte {
	b := append([]byte(signSurvivors), r.session[:]...)
	b = binary.BigEndian.AppendUint32(b, id)
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	for _, v := range s {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}

// verify reports whether sig is id's signature of msg.
func (r *Round) verify(id uint32, msg []byte, sig *[SignatureSize]byte) bool {
	pub := r.cfg.Identities[id]
	return len(pub) == ed25519.PublicKeySize && ed25519.Verify(pub, msg, sig[:])
}

// graphKey identifies what a client must see unchanged over a round's
// attempts: the graph (seed, participants, k) with t and s_min.
type graphKey [32]byte

func (r *Round) graphKey() graphKey {
	c := &r.cfg
	h := sha256.New()
	h.Write(c.Seed[:])
	var b []byte
	for _, v := range []int{c.Neighbours, c.Threshold, c.MinSurvivors, len(c.Participants)} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	for _, id := range c.Participants {
		b = binary.BigEndian.AppendUint32(b, id)
	}
	h.Write(b)
	var out graphKey
	h.Sum(out[:0])
	return out
}

// Memory is one client's record of one round over all its attempts
// (the round's invitations again after a failure): the neighbour graph
// of its first attempt and whether it has signed a survivor set. A
// client refuses an attempt whose graph, threshold or s_min differ from
// the first (ErrConfig) and signs at most one survivor set per round
// (ErrRefused). With the graph fixed, an honest client is in at most one
// unmaskable sum per round: each needs t of its neighbours to sign it,
// and 2t > k. The zero value is a round with no attempt yet; a Memory is
// not safe for concurrent use.
type Memory struct {
	graph  graphKey
	seen   bool
	signed bool
}

// enter records r as an attempt of the memory's round.
func (m *Memory) enter(r *Round) error {
	g := r.graphKey()
	switch {
	case !m.seen:
		m.graph, m.seen = g, true
	case m.graph != g:
		return fmt.Errorf("%w: the round's neighbour graph, threshold or minimum of survivors changed between attempts", ErrConfig)
	}
	return nil
}

// Config returns the round's configuration with defaults filled in and
// participants sorted. The caller must not modify its Participants.
func (r *Round) Config() Config { return r.cfg }

// Graph returns the round's neighbour graph.
func (r *Round) Graph() *Graph { return r.graph }

func (r *Round) mask() uint64 { return mask(r.cfg.Bits) }
