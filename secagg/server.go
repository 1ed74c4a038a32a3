package secagg

import (
	"crypto/ecdh"
	"crypto/subtle"
	"fmt"
	"slices"
)

// serverStage is where a Server is in its round.
type serverStage int

const (
	serverKeys serverStage = iota
	serverShares
	serverMasked
	serverSign
	serverUnmask
	serverDone
)

// A Server is the aggregator's state machine for one round. It never sees
// an input in the clear: it collects and routes messages and, at the end,
// removes the masks of the sum. Call, in order:
//
//  1. ReceiveKeys for each AdvertiseKeys, then CloseKeys, which returns
//     the NeighbourKeys to send to each client;
//  2. ReceiveShares for each ShareKeys, then CloseShares, which returns
//     the RoutedShares to send to each client;
//  3. ReceiveMasked for each MaskedInput, then CloseMasked, which returns
//     the SurvivorSet to send to every survivor;
//  4. ReceiveSignature for each SurvivorSignature, then CloseSignatures,
//     which returns the UnmaskRequest to send to each signer;
//  5. ReceiveUnmask for each UnmaskResponse, then Sum.
//
// Once CloseSignatures has returned, the survivors' sum can be computed
// (by this server or one that keeps the responses): a driver must count
// it as released, whether or not Sum succeeds.
//
// The driver decides when a stage closes (all expected messages or a
// deadline); clients that miss a stage have dropped out. Receive methods
// return an error wrapping ErrBadMessage for a message that does not fit
// (and ignore it: the round goes on), ErrStage out of order. A Server is
// not safe for concurrent use; the zero value is not usable: create one
// with NewServer.
type Server struct {
	round *Round
	stage serverStage

	keys   map[uint32]*AdvertiseKeys // U1
	shares map[uint32]*ShareKeys     // U2
	sum    []uint64                  // Σ masked inputs of U3
	masked map[uint32]bool           // U3
	resp   map[uint32]*UnmaskResponse
	surv   []uint32                      // S
	sigs   map[uint32]*SurvivorSignature // signers of S
	reqs   map[uint32]*UnmaskRequest     // what each signer should answer
	result []uint64
}

// NewServer returns the aggregator's state machine for round r.
func NewServer(r *Round) *Server {
	return &Server{
		round:  r,
		keys:   make(map[uint32]*AdvertiseKeys),
		shares: make(map[uint32]*ShareKeys),
		masked: make(map[uint32]bool),
		resp:   make(map[uint32]*UnmaskResponse),
		sigs:   make(map[uint32]*SurvivorSignature),
		sum:    make([]uint64, r.cfg.Dim),
	}
}

func (s *Server) at(st serverStage, method string) error {
	if s.stage != st {
		return fmt.Errorf("%w: server: %s called in stage %d, want %d", ErrStage, method, s.stage, st)
	}
	return nil
}

// ReceiveKeys records a client's keys (stage 1).
func (s *Server) ReceiveKeys(m *AdvertiseKeys) error {
	if err := s.at(serverKeys, "ReceiveKeys"); err != nil {
		return err
	}
	if _, ok := s.round.graph.index(m.Client); !ok {
		return fmt.Errorf("%w: keys from %d, not a participant", ErrBadMessage, m.Client)
	}
	if s.keys[m.Client] != nil {
		return fmt.Errorf("%w: keys from %d twice", ErrBadMessage, m.Client)
	}
	if !s.round.verify(m.Client, s.round.keysMessage(m), &m.Signature) {
		return fmt.Errorf("%w: keys from %d not signed by it for this round", ErrBadMessage, m.Client)
	}
	k := *m
	s.keys[m.Client] = &k
	return nil
}

// sortedKeys returns the keys of a map in increasing order.
func sortedKeys[V any](m map[uint32]V) []uint32 {
	ids := make([]uint32, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// CloseKeys ends stage 1 and returns, for every client that advertised,
// the keys of its neighbours that advertised. It returns an error
// wrapping ErrTooFewClients if fewer than t + 1 clients advertised.
func (s *Server) CloseKeys() (map[uint32]*NeighbourKeys, error) {
	if err := s.at(serverKeys, "CloseKeys"); err != nil {
		return nil, err
	}
	t := s.round.cfg.Threshold
	if len(s.keys) < t+1 {
		return nil, fmt.Errorf("%w: %d clients advertised keys; need at least %d", ErrTooFewClients, len(s.keys), t+1)
	}
	out := make(map[uint32]*NeighbourKeys, len(s.keys))
	for u := range s.keys {
		nk := &NeighbourKeys{}
		for _, v := range s.round.graph.Neighbours(u) {
			if k := s.keys[v]; k != nil {
				nk.Keys = append(nk.Keys, *k)
			}
		}
		out[u] = nk
	}
	s.stage = serverShares
	return out, nil
}

// ReceiveShares records a client's encrypted shares (stage 2): exactly
// one for each of its neighbours that advertised, in increasing order.
func (s *Server) ReceiveShares(m *ShareKeys) error {
	if err := s.at(serverShares, "ReceiveShares"); err != nil {
		return err
	}
	u := m.Client
	if s.keys[u] == nil {
		return fmt.Errorf("%w: shares from %d, which advertised no keys", ErrBadMessage, u)
	}
	if s.shares[u] != nil {
		return fmt.Errorf("%w: shares from %d twice", ErrBadMessage, u)
	}
	i := 0
	for _, v := range s.round.graph.Neighbours(u) {
		if s.keys[v] == nil {
			continue
		}
		if i >= len(m.Shares) || m.Shares[i].To != v || m.Shares[i].From != u {
			return fmt.Errorf("%w: shares from %d do not match its neighbours that advertised (at %d)", ErrBadMessage, u, v)
		}
		i++
	}
	if i != len(m.Shares) {
		return fmt.Errorf("%w: %d shares from %d; want %d", ErrBadMessage, len(m.Shares), u, i)
	}
	c := *m
	c.Shares = slices.Clone(m.Shares)
	s.shares[u] = &c
	return nil
}

// CloseShares ends stage 2 and returns, for every client that shared, the
// shares addressed to it by neighbours that shared. It returns an error
// wrapping ErrTooFewClients if fewer than t + 1 clients shared.
func (s *Server) CloseShares() (map[uint32]*RoutedShares, error) {
	if err := s.at(serverShares, "CloseShares"); err != nil {
		return nil, err
	}
	t := s.round.cfg.Threshold
	if len(s.shares) < t+1 {
		return nil, fmt.Errorf("%w: %d clients shared keys; need at least %d", ErrTooFewClients, len(s.shares), t+1)
	}
	out := make(map[uint32]*RoutedShares, len(s.shares))
	for v := range s.shares {
		out[v] = &RoutedShares{}
	}
	for _, u := range sortedKeys(s.shares) {
		for _, es := range s.shares[u].Shares {
			if r := out[es.To]; r != nil {
				r.Shares = append(r.Shares, es)
			}
		}
	}
	s.stage = serverMasked
	return out, nil
}

// ReceiveMasked adds a client's masked input to the sum (stage 3).
func (s *Server) ReceiveMasked(m *MaskedInput) error {
	if err := s.at(serverMasked, "ReceiveMasked"); err != nil {
		return err
	}
	cfg := &s.round.cfg
	switch {
	case s.shares[m.Client] == nil:
		return fmt.Errorf("%w: masked input from %d, which did not share keys", ErrBadMessage, m.Client)
	case s.masked[m.Client]:
		return fmt.Errorf("%w: masked input from %d twice", ErrBadMessage, m.Client)
	case m.Bits != cfg.Bits || len(m.Masked) != cfg.Dim:
		return fmt.Errorf("%w: masked input from %d has %d elements of %d bits; want %d of %d", ErrBadMessage, m.Client, len(m.Masked), m.Bits, cfg.Dim, cfg.Bits)
	}
	lim := s.round.mask()
	for i, v := range m.Masked {
		if v > lim {
			return fmt.Errorf("%w: masked input from %d: element %d above 2^%d", ErrBadMessage, m.Client, i, cfg.Bits)
		}
	}
	for i, v := range m.Masked {
		s.sum[i] = (s.sum[i] + v) & lim
	}
	s.masked[m.Client] = true
	return nil
}

// CloseMasked ends stage 3 and returns the survivor set S (the clients
// whose masked input it received), to send to each of them for signing.
// It returns an error wrapping ErrTooFewClients if S is not a set the
// clients unmask for (Graph.ValidSurvivors) or some dropped client's mask
// key, needed to remove its masks, has fewer than t surviving holders:
// the attempt ends there and nothing about the inputs can be computed.
func (s *Server) CloseMasked() (*SurvivorSet, error) {
	if err := s.at(serverMasked, "CloseMasked"); err != nil {
		return nil, err
	}
	g := s.round.graph
	cfg := &s.round.cfg
	surv := sortedKeys(s.masked)
	if err := g.ValidSurvivors(surv, cfg.Threshold, cfg.MinSurvivors); err != nil {
		return nil, err
	}
	for _, v := range sortedKeys(s.shares) {
		if s.masked[v] {
			continue
		}
		need, holders := false, 0
		for _, w := range g.Neighbours(v) {
			if s.masked[w] {
				holders++
				need = true // a survivor masked with v
			}
		}
		if need && holders < cfg.Threshold {
			return nil, fmt.Errorf("%w: dropped client %d has %d surviving neighbours to hold its shares; threshold %d", ErrTooFewClients, v, holders, cfg.Threshold)
		}
	}
	s.surv = surv
	s.stage = serverSign
	return &SurvivorSet{Survivors: slices.Clone(surv)}, nil
}

// ReceiveSignature records a survivor's signature of S (stage 4).
func (s *Server) ReceiveSignature(m *SurvivorSignature) error {
	if err := s.at(serverSign, "ReceiveSignature"); err != nil {
		return err
	}
	switch {
	case !s.masked[m.Client]:
		return fmt.Errorf("%w: signature from %d, not a survivor", ErrBadMessage, m.Client)
	case s.sigs[m.Client] != nil:
		return fmt.Errorf("%w: signature from %d twice", ErrBadMessage, m.Client)
	case !s.round.verify(m.Client, s.round.survivorsMessage(m.Client, s.surv), &m.Signature):
		return fmt.Errorf("%w: signature from %d does not verify", ErrBadMessage, m.Client)
	}
	c := *m
	s.sigs[m.Client] = &c
	return nil
}

// CloseSignatures ends stage 4 and returns, for every survivor that
// signed, its unmask request: S with every signature. It returns an error
// wrapping ErrTooFewClients if some survivor has fewer than t neighbours
// among the signers (the clients would refuse), or some dropped client's
// mask key, needed for the sum, fewer than t holders among them. From
// here on the sum is computable: see Server.
func (s *Server) CloseSignatures() (map[uint32]*UnmaskRequest, error) {
	if err := s.at(serverSign, "CloseSignatures"); err != nil {
		return nil, err
	}
	g := s.round.graph
	t := s.round.cfg.Threshold
	for _, v := range s.surv {
		d := 0
		for _, w := range g.Neighbours(v) {
			if s.sigs[w] != nil {
				d++
			}
		}
		if d < t {
			return nil, fmt.Errorf("%w: survivor %d has %d neighbours that signed the survivor set; threshold %d", ErrTooFewClients, v, d, t)
		}
	}
	// A dropped client's mask key, if a survivor masked with it, needs t
	// holders among the signers (the only clients asked to unmask):
	// failing here keeps the sum uncomputable rather than computable and
	// not computed.
	for _, v := range sortedKeys(s.shares) {
		if s.masked[v] {
			continue
		}
		need, d := false, 0
		for _, w := range g.Neighbours(v) {
			need = need || s.masked[w]
			if s.sigs[w] != nil {
				d++
			}
		}
		if need && d < t {
			return nil, fmt.Errorf("%w: dropped client %d has %d neighbours that signed to hold its shares; threshold %d", ErrTooFewClients, v, d, t)
		}
	}
	sigs := make([]SurvivorSignature, 0, len(s.sigs))
	for _, id := range sortedKeys(s.sigs) {
		sigs = append(sigs, *s.sigs[id])
	}
	s.reqs = make(map[uint32]*UnmaskRequest, len(s.sigs))
	out := make(map[uint32]*UnmaskRequest, len(s.sigs))
	for u := range s.sigs {
		s.reqs[u] = &UnmaskRequest{}
		out[u] = &UnmaskRequest{Survivors: slices.Clone(s.surv), Signatures: slices.Clone(sigs)}
	}
	s.stage = serverUnmask
	return out, nil
}

// expected returns what signer u reveals: the neighbours that shared,
// survivors (self-mask seed shares) and not (mask-key shares).
func (s *Server) expected(u uint32) (survived, dropped []uint32) {
	for _, v := range s.round.graph.Neighbours(u) {
		switch {
		case s.masked[v]:
			survived = append(survived, v)
		case s.shares[v] != nil:
			dropped = append(dropped, v)
		}
	}
	return survived, dropped
}

// ReceiveUnmask records a client's shares (stage 4): exactly those its
// request asked for.
func (s *Server) ReceiveUnmask(m *UnmaskResponse) error {
	if err := s.at(serverUnmask, "ReceiveUnmask"); err != nil {
		return err
	}
	r := s.reqs[m.Client]
	switch {
	case r == nil:
		return fmt.Errorf("%w: unmask response from %d, which was not asked", ErrBadMessage, m.Client)
	case s.resp[m.Client] != nil:
		return fmt.Errorf("%w: unmask response from %d twice", ErrBadMessage, m.Client)
	}
	match := func(sh []Share, ids []uint32) bool {
		if len(sh) != len(ids) {
			return false
		}
		for i := range sh {
			if sh[i].Of != ids[i] {
				return false
			}
			for _, v := range sh[i].Value {
				if v >= prime {
					return false
				}
			}
		}
		return true
	}
	survived, dropped := s.expected(m.Client)
	if !match(m.SelfShares, survived) || !match(m.KeyShares, dropped) {
		return fmt.Errorf("%w: unmask response from %d does not answer its request", ErrBadMessage, m.Client)
	}
	c := *m
	c.SelfShares, c.KeyShares = slices.Clone(m.SelfShares), slices.Clone(m.KeyShares)
	s.resp[m.Client] = &c
	return nil
}

// reconstruct recovers peer v's secret from the first t responders (in
// ID order) that sent a share of it; self selects the self-mask seed or
// the mask key.
func (s *Server) reconstruct(v uint32, self bool) ([32]byte, error) {
	g := s.round.graph
	t := s.round.cfg.Threshold
	xs := make([]uint64, 0, t)
	ys := make([]fieldShare, 0, t)
	for _, w := range g.Neighbours(v) {
		r := s.resp[w]
		if r == nil {
			continue
		}
		list := r.KeyShares
		if self {
			list = r.SelfShares
		}
		i, ok := slices.BinarySearchFunc(list, v, func(a Share, b uint32) int { return cmpU32(a.Of, b) })
		if !ok {
			continue
		}
		xs = append(xs, g.point(w))
		ys = append(ys, list[i].Value)
		if len(xs) == t {
			return combine(xs, ys)
		}
	}
	kind := "mask-key"
	if self {
		kind = "self-mask seed"
	}
	return [32]byte{}, fmt.Errorf("%w: %d shares of the %s of %d; threshold %d", ErrTooFewClients, len(xs), kind, v, t)
}

func cmpU32(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Sum ends the round: it removes from the sum of the masked inputs every
// survivor's self mask (from its reconstructed seed) and every pairwise
// mask a survivor shared with a dropped client (from the dropped client's
// reconstructed mask key), and returns Σ_{u ∈ Survivors} input_u modulo
// 2^b. It returns an error wrapping ErrTooFewClients if some secret has
// fewer than t shares, and ErrBadMessage if a reconstructed mask key does
// not match its advertised public key (a corrupt share). Sum may be called
// again and returns a copy of the same result.
func (s *Server) Sum() ([]uint64, error) {
	if s.stage == serverDone {
		return slices.Clone(s.result), nil
	}
	if err := s.at(serverUnmask, "Sum"); err != nil {
		return nil, err
	}
	g := s.round.graph
	lim := s.round.mask()
	y := slices.Clone(s.sum)
	for _, v := range sortedKeys(s.masked) {
		seed, err := s.reconstruct(v, true)
		if err != nil {
			return nil, err
		}
		k := derive(seed[:], &s.round.session, labelSelf)
		addMask(y, &k, true, lim)
	}
	for _, v := range sortedKeys(s.shares) {
		if s.masked[v] {
			continue
		}
		var survivors []uint32
		for _, w := range g.Neighbours(v) {
			if s.masked[w] {
				survivors = append(survivors, w)
			}
		}
		if len(survivors) == 0 {
			continue
		}
		sk, err := s.reconstruct(v, false)
		if err != nil {
			return nil, err
		}
		priv, err := ecdh.X25519().NewPrivateKey(sk[:])
		if err != nil {
			return nil, fmt.Errorf("%w: reconstructed mask key of %d: %v", ErrBadMessage, v, err)
		}
		if subtle.ConstantTimeCompare(priv.PublicKey().Bytes(), s.keys[v].MaskKey[:]) != 1 {
			return nil, fmt.Errorf("%w: reconstructed mask key of %d does not match its public key: a share is corrupt", ErrBadMessage, v)
		}
		for _, w := range survivors {
			sh, err := agree(priv, &s.keys[w].MaskKey, w)
			if err != nil {
				return nil, err
			}
			k := derive(sh, &s.round.session, labelPairwise)
			// w added its mask with v with sign + if w < v: take it off.
			addMask(y, &k, w < v, lim)
		}
	}
	s.result = y
	s.stage = serverDone
	return slices.Clone(y), nil
}

// Survivors returns, in increasing order, the clients whose masked input
// is in the sum (those ReceiveMasked accepted, S): the clients whose noise
// reached the sum, to record in the privacy ledger.
func (s *Server) Survivors() []uint32 { return sortedKeys(s.masked) }
