package secagg

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
)

// clientStage is where a Client is in its round.
type clientStage int

const (
	clientNew clientStage = iota
	clientAdvertised
	clientShared
	clientMasked
	clientSigned
	clientFailed
)

// shareKind is the kind of share a client has revealed for a peer.
type shareKind byte

const (
	revealedNone shareKind = iota
	revealedSelf
	revealedKey
)

// heldShares are the shares a client holds of one neighbour's secrets.
type heldShares struct {
	self, key fieldShare
	revealed  shareKind
}

// A Client is one participant's state machine for one attempt of a
// round. Call, in order, AdvertiseKeys, ShareKeys, MaskedInput,
// SignSurvivors and Unmask (Unmask may be called again, for a repeated
// request). A method called out of order,
// or after an error, returns an error wrapping ErrStage. A Client is not
// safe for concurrent use; the zero value is not usable: create one with
// NewClient.
type Client struct {
	round  *Round
	id     uint32
	key    ed25519.PrivateKey
	mem    *Memory
	rnd    io.Reader
	stage  clientStage
	signed []uint32 // the survivor set it signed

	encKey, maskKey *ecdh.PrivateKey
	peers           map[uint32]*AdvertiseKeys // neighbours that advertised
	encShared       map[uint32][]byte         // c-agreement with each of them
	seed            [32]byte                  // self-mask seed b_u
	held            map[uint32]*heldShares    // neighbours that shared
}

// ClientOptions are what a Client needs besides its round and ID. The
// zero value has no identity and is not usable.
type ClientOptions struct {
	// Key is the client's Ed25519 identity, whose public half is its
	// entry in Config.Identities.
	Key ed25519.PrivateKey
	// Memory is the client's record of the round over its attempts
	// (Memory); nil means a fresh one, which is right only for a round
	// that is never attempted again.
	Memory *Memory
	// Rand is the source of the client's secrets (key pairs, self-mask
	// seed, Shamir coefficients); nil means crypto/rand.Reader, which any
	// real round must use.
	Rand io.Reader
}

// NewClient returns participant id's state machine for an attempt of
// round r. It returns an error wrapping ErrConfig if id is not a
// participant, its key is not its identity, or the attempt's graph
// differs from an earlier attempt's in opts.Memory.
func NewClient(r *Round, id uint32, opts ClientOptions) (*Client, error) {
	if _, ok := r.graph.index(id); !ok {
		return nil, fmt.Errorf("%w: client %d is not a participant of the round", ErrConfig, id)
	}
	pub, ok := opts.Key.Public().(ed25519.PublicKey)
	if len(opts.Key) != ed25519.PrivateKeySize || !ok || !pub.Equal(r.cfg.Identities[id]) {
		return nil, fmt.Errorf("%w: client %d: its key is not its identity in the round", ErrConfig, id)
	}
	if opts.Memory == nil {
		opts.Memory = &Memory{}
	}
	if err := opts.Memory.enter(r); err != nil {
		return nil, err
	}
	if opts.Rand == nil {
		opts.Rand = rand.Reader
	}
	return &Client{round: r, id: id, key: opts.Key, mem: opts.Memory, rnd: opts.Rand}, nil
}

// ID returns the client's ID.
func (c *Client) ID() uint32 { return c.id }

func (c *Client) at(s clientStage, method string) error {
	if c.stage != s {
		return fmt.Errorf("%w: client %d: %s called in stage %d, want %d", ErrStage, c.id, method, c.stage, s)
	}
	return nil
}

// fail moves the client to the failed stage and returns err.
func (c *Client) fail(err error) error {
	c.stage = clientFailed
	return err
}

// newKey returns an X25519 private key from 32 bytes of c.rnd (every 32
// bytes are a valid X25519 scalar). Reading the bytes here, rather than
// through ecdh.Curve.GenerateKey, keeps tests with a seeded reader
// deterministic.
func (c *Client) newKey() (*ecdh.PrivateKey, error) {
	var b [32]byte
	if _, err := io.ReadFull(c.rnd, b[:]); err != nil {
		return nil, fmt.Errorf("secagg: reading randomness: %w", err)
	}
	return ecdh.X25519().NewPrivateKey(b[:])
}

// AdvertiseKeys starts the round: it draws the client's two key pairs and
// returns the message carrying their public halves.
func (c *Client) AdvertiseKeys() (*AdvertiseKeys, error) {
	if err := c.at(clientNew, "AdvertiseKeys"); err != nil {
		return nil, err
	}
	var err error
	if c.encKey, err = c.newKey(); err != nil {
		return nil, c.fail(err)
	}
	if c.maskKey, err = c.newKey(); err != nil {
		return nil, c.fail(err)
	}
	m := &AdvertiseKeys{Client: c.id}
	copy(m.EncryptionKey[:], c.encKey.PublicKey().Bytes())
	copy(m.MaskKey[:], c.maskKey.PublicKey().Bytes())
	copy(m.Signature[:], ed25519.Sign(c.key, c.round.keysMessage(m)))
	c.stage = clientAdvertised
	return m, nil
}

// agree returns the X25519 agreement of priv with the public key pub, or
// an error wrapping ErrBadMessage for a low-order public key.
func agree(priv *ecdh.PrivateKey, pub *[32]byte, who uint32) ([]byte, error) {
	pk, err := ecdh.X25519().NewPublicKey(pub[:])
	if err != nil {
		return nil, fmt.Errorf("%w: public key of %d: %v", ErrBadMessage, who, err)
	}
	s, err := priv.ECDH(pk)
	if err != nil {
		return nil, fmt.Errorf("%w: key agreement with %d: %v", ErrBadMessage, who, err)
	}
	return s, nil
}

// ShareKeys takes the keys of the client's neighbours that advertised,
// draws the self-mask seed, Shamir-shares it and the mask private key
// t-of-m among those m neighbours, and returns each neighbour's shares
// sealed to it. It returns an error wrapping ErrBadMessage for a key from
// a non-neighbour, a repeat, a low-order key or a key whose signature
// does not verify against the neighbour's identity and the round's
// session (a substituted key, or one of another round or attempt), and
// ErrTooFewNeighbours if fewer than t neighbours advertised.
func (c *Client) ShareKeys(m *NeighbourKeys) (*ShareKeys, error) {
	if err := c.at(clientAdvertised, "ShareKeys"); err != nil {
		return nil, err
	}
	cfg := &c.round.cfg
	g := c.round.graph
	c.peers = make(map[uint32]*AdvertiseKeys, len(m.Keys))
	for i := range m.Keys {
		k := m.Keys[i]
		switch {
		case !g.Adjacent(c.id, k.Client):
			return nil, c.fail(fmt.Errorf("%w: client %d got keys of %d, not a neighbour", ErrBadMessage, c.id, k.Client))
		case c.peers[k.Client] != nil:
			return nil, c.fail(fmt.Errorf("%w: client %d got keys of %d twice", ErrBadMessage, c.id, k.Client))
		case !c.round.verify(k.Client, c.round.keysMessage(&k), &k.Signature):
			return nil, c.fail(fmt.Errorf("%w: client %d: the keys of %d are not signed by %d for this round", ErrBadMessage, c.id, k.Client, k.Client))
		}
		c.peers[k.Client] = &k
	}
	c.encShared = make(map[uint32][]byte, len(c.peers))
	for v, k := range c.peers {
		s, err := agree(c.encKey, &k.EncryptionKey, v)
		if err != nil {
			return nil, c.fail(err)
		}
		c.encShared[v] = s
	}
	if len(c.peers) < cfg.Threshold {
		return nil, c.fail(fmt.Errorf("%w: client %d: %d neighbours advertised keys, threshold %d", ErrTooFewNeighbours, c.id, len(c.peers), cfg.Threshold))
	}
	if _, err := io.ReadFull(c.rnd, c.seed[:]); err != nil {
		return nil, c.fail(fmt.Errorf("secagg: reading randomness: %w", err))
	}
	// Share to the advertised neighbours, in increasing ID order.
	to := make([]uint32, 0, len(c.peers))
	xs := make([]uint64, 0, len(c.peers))
	for _, v := range g.Neighbours(c.id) {
		if c.peers[v] != nil {
			to = append(to, v)
			xs = append(xs, g.point(v))
		}
	}
	selfShares, err := split(&c.seed, xs, cfg.Threshold, c.rnd)
	if err != nil {
		return nil, c.fail(err)
	}
	var sk [32]byte
	copy(sk[:], c.maskKey.Bytes())
	keyShares, err := split(&sk, xs, cfg.Threshold, c.rnd)
	clear(sk[:])
	if err != nil {
		return nil, c.fail(err)
	}
	out := &ShareKeys{Client: c.id, Shares: make([]EncryptedShare, len(to))}
	for i, v := range to {
		key := c.sealKey(v, c.id, v)
		es := &out.Shares[i]
		es.From, es.To = c.id, v
		plain := sharePlaintext(c.id, v, &selfShares[i], &keyShares[i])
		newAEAD(key).Seal(es.Sealed[:0], nonce[:], plain, aad(c.id, v))
	}
	c.stage = clientShared
	return out, nil
}

// nonce is the AEAD nonce: every key seals one message only (it is
// derived per round, sender and recipient), so a fixed nonce is safe.
var nonce [12]byte

// aad binds a sealed share to its sender and recipient.
func aad(from, to uint32) []byte {
	b := binary.BigEndian.AppendUint32(nil, from)
	return binary.BigEndian.AppendUint32(b, to)
}

// sealKey returns the AEAD key of shares from → to, derived from the
// agreement with peer's encryption key.
func (c *Client) sealKey(peer, from, to uint32) *[32]byte {
	k := derive(c.encShared[peer], &c.round.session, labelShare, from, to)
	return &k
}

func sharePlaintext(from, to uint32, self, key *fieldShare) []byte {
	b := make([]byte, 0, SealedShareSize)
	b = binary.BigEndian.AppendUint32(b, from)
	b = binary.BigEndian.AppendUint32(b, to)
	for _, f := range []*fieldShare{self, key} {
		for _, v := range f {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
	}
	return b
}

// MaskedInput takes the shares the client's neighbours sent it, and
// returns its input masked: input + self mask + Σ ± pairwise masks with
// every neighbour that shared, modulo 2^b (plus for a neighbour with a
// larger ID, minus for a smaller one, so each pair cancels in the sum).
// input is the quantised, noised vector (Quantizer.Quantize, then
// Quantizer.AddNoise), of length Dim with elements below 2^b; it is not
// modified. It returns an error wrapping ErrBadMessage for a share that is
// not from an advertised neighbour, not to this client, repeated or
// failing authentication, and ErrTooFewNeighbours if fewer than t
// neighbours shared.
func (c *Client) MaskedInput(m *RoutedShares, input []uint64) (*MaskedInput, error) {
	if err := c.at(clientShared, "MaskedInput"); err != nil {
		return nil, err
	}
	cfg := &c.round.cfg
	if len(input) != cfg.Dim {
		return nil, c.fail(fmt.Errorf("%w: client %d: input of length %d, want %d", ErrBadMessage, c.id, len(input), cfg.Dim))
	}
	lim := c.round.mask()
	for i, v := range input {
		if v > lim {
			return nil, c.fail(fmt.Errorf("%w: client %d: input element %d is %d, not below 2^%d", ErrBadMessage, c.id, i, v, cfg.Bits))
		}
	}
	c.held = make(map[uint32]*heldShares, len(m.Shares))
	for i := range m.Shares {
		es := &m.Shares[i]
		switch {
		case es.To != c.id:
			return nil, c.fail(fmt.Errorf("%w: client %d got a share addressed to %d", ErrBadMessage, c.id, es.To))
		case c.peers[es.From] == nil:
			return nil, c.fail(fmt.Errorf("%w: client %d got a share from %d, not a neighbour that advertised", ErrBadMessage, c.id, es.From))
		case c.held[es.From] != nil:
			return nil, c.fail(fmt.Errorf("%w: client %d got two shares from %d", ErrBadMessage, c.id, es.From))
		}
		key := c.sealKey(es.From, es.From, c.id)
		plain, err := newAEAD(key).Open(nil, nonce[:], es.Sealed[:], aad(es.From, c.id))
		if err != nil {
			return nil, c.fail(fmt.Errorf("%w: client %d: share from %d fails authentication", ErrBadMessage, c.id, es.From))
		}
		h := &heldShares{}
		for j := range secretChunks {
			h.self[j] = binary.LittleEndian.Uint64(plain[8+8*j:])
			h.key[j] = binary.LittleEndian.Uint64(plain[8+8*secretChunks+8*j:])
		}
		c.held[es.From] = h
	}
	if len(c.held) < cfg.Threshold {
		return nil, c.fail(fmt.Errorf("%w: client %d: %d neighbours shared, threshold %d", ErrTooFewNeighbours, c.id, len(c.held), cfg.Threshold))
	}
	y := make([]uint64, cfg.Dim)
	copy(y, input)
	self := derive(c.seed[:], &c.round.session, labelSelf)
	addMask(y, &self, false, lim)
	for _, v := range c.round.graph.Neighbours(c.id) {
		if c.held[v] == nil {
			continue
		}
		s, err := agree(c.maskKey, &c.peers[v].MaskKey, v)
		if err != nil {
			return nil, c.fail(err)
		}
		k := derive(s, &c.round.session, labelPairwise)
		addMask(y, &k, c.id > v, lim)
	}
	c.stage = clientMasked
	return &MaskedInput{Client: c.id, Bits: cfg.Bits, Masked: y}, nil
}

// SignSurvivors is the consistency check: it signs the survivor set the
// server names, after checking that the client is in it, that it is a
// set whose sum may be unmasked (Graph.ValidSurvivors: at least s_min
// survivors, each with t surviving neighbours, connected), and that the
// client has signed no other survivor set in the round (its Memory): an
// error wrapping ErrBadMessage, ErrTooFewClients or ErrRefused
// otherwise, after which the client only fails.
func (c *Client) SignSurvivors(m *SurvivorSet) (*SurvivorSignature, error) {
	if err := c.at(clientMasked, "SignSurvivors"); err != nil {
		return nil, err
	}
	cfg := &c.round.cfg
	if _, in := slices.BinarySearch(m.Survivors, c.id); !in || !increasing(m.Survivors) {
		return nil, c.fail(fmt.Errorf("%w: client %d: survivor set without it, or not increasing", ErrBadMessage, c.id))
	}
	if err := c.round.graph.ValidSurvivors(m.Survivors, cfg.Threshold, cfg.MinSurvivors); err != nil {
		return nil, c.fail(fmt.Errorf("client %d refuses the survivor set: %w", c.id, err))
	}
	if c.mem.signed {
		return nil, c.fail(fmt.Errorf("%w: client %d has signed a survivor set in an earlier attempt of the round", ErrRefused, c.id))
	}
	c.mem.signed = true
	c.signed = slices.Clone(m.Survivors)
	out := &SurvivorSignature{Client: c.id}
	copy(out.Signature[:], ed25519.Sign(c.key, c.round.survivorsMessage(c.id, c.signed)))
	c.stage = clientSigned
	return out, nil
}

// Unmask answers the server's request after the consistency check. It
// checks that the request's survivor set is the one the client signed,
// that every signature verifies (signers in the set, each against its
// identity and the round's session) and that every survivor has at least
// t neighbours among the signers; then it reveals the self-mask seed
// share of each neighbour in the set and the mask-key share of each other
// neighbour it holds shares of. Otherwise it returns an error wrapping
// ErrRefused and reveals nothing; the client stays able to answer a
// proper request. It never reveals both kinds of share of one peer
// (ErrBothShares).
//
// Why this is enough against a server that lies (Bonawitz et al. 2017
// §6, Bell et al. 2020): an honest client signs one set per round, so two
// different sets are signed by disjoint groups of honest clients. A
// survivor v of a set S has t neighbours signing S; to learn v's input
// the server needs, besides v's self-mask seed, the mask key of v or of
// each neighbour w that v masked with, and some such w is in S with t
// neighbours signing S. Its mask key's shares come only from t of its
// neighbours who signed a set without it; with 2t > k, one neighbour
// would have signed both. A colluding client can sign both: the guarantee
// needs fewer than 2t − k colluders among any client's neighbours
// (Params.Exposure).
func (c *Client) Unmask(m *UnmaskRequest) (*UnmaskResponse, error) {
	if err := c.at(clientSigned, "Unmask"); err != nil {
		return nil, err
	}
	r := c.round
	if !slices.Equal(m.Survivors, c.signed) {
		return nil, fmt.Errorf("%w: client %d: the unmask request's survivors are not the set it signed", ErrRefused, c.id)
	}
	in := make(map[uint32]bool, len(c.signed))
	for _, v := range c.signed {
		in[v] = true
	}
	signers := make(map[uint32]bool, len(m.Signatures))
	for i := range m.Signatures {
		s := &m.Signatures[i]
		switch {
		case !in[s.Client] || signers[s.Client]:
			return nil, fmt.Errorf("%w: client %d: a signature by %d, not a survivor or repeated", ErrRefused, c.id, s.Client)
		case !r.verify(s.Client, r.survivorsMessage(s.Client, c.signed), &s.Signature):
			return nil, fmt.Errorf("%w: client %d: the signature of %d does not verify", ErrRefused, c.id, s.Client)
		}
		signers[s.Client] = true
	}
	t := r.cfg.Threshold
	for _, v := range c.signed {
		d := 0
		for _, w := range r.graph.Neighbours(v) {
			if signers[w] {
				d++
			}
		}
		if d < t {
			return nil, fmt.Errorf("%w: client %d: survivor %d has %d neighbours that signed the survivor set; threshold %d", ErrRefused, c.id, v, d, t)
		}
	}
	out := &UnmaskResponse{Client: c.id}
	for _, v := range r.graph.Neighbours(c.id) {
		h := c.held[v]
		if h == nil {
			continue
		}
		kind := revealedKey
		if in[v] {
			kind = revealedSelf
		}
		if h.revealed != revealedNone && h.revealed != kind {
			return nil, fmt.Errorf("%w: client %d already revealed the other share of peer %d", ErrBothShares, c.id, v)
		}
	}
	for _, v := range r.graph.Neighbours(c.id) {
		h := c.held[v]
		switch {
		case h == nil:
		case in[v]:
			h.revealed = revealedSelf
			out.SelfShares = append(out.SelfShares, Share{Of: v, Value: h.self})
		default:
			h.revealed = revealedKey
			out.KeyShares = append(out.KeyShares, Share{Of: v, Value: h.key})
		}
	}
	return out, nil
}
