package secagg

import (
	"encoding/binary"
	"fmt"
)

// Messages of a round, in order. The transport carries each as the bytes
// of its MarshalBinary and rebuilds it with UnmarshalBinary; it must also
// tell the receiver which round a message belongs to (a message of another
// round fails: keys are fresh every round and ciphertexts are bound to the
// round seed).
//
//	client → server   AdvertiseKeys     stage 1
//	server → client   NeighbourKeys
//	client → server   ShareKeys         stage 2
//	server → client   RoutedShares
//	client → server   MaskedInput       stage 3
//	server → client   SurvivorSet
//	client → server   SurvivorSignature stage 4 (consistency check)
//	server → client   UnmaskRequest
//	client → server   UnmaskResponse    stage 5
//
// Version 2 added the signatures (AdvertiseKeys.Signature, the
// consistency check's SurvivorSet and SurvivorSignature) and made the
// UnmaskRequest carry the signed survivor set rather than two lists.
//
// Encoding: a version byte (2), a type byte, then the fields in order,
// integers little-endian, lists prefixed by a uint32 count. Decoding
// accepts only the canonical encoding (no trailing bytes, no unused bits
// set, every field in range), so Unmarshal then Marshal gives back the
// same bytes.

const (
	wireVersion = 2

	typeAdvertiseKeys  = 1
	typeNeighbourKeys  = 2
	typeShareKeys      = 3
	typeRoutedShares   = 4
	typeMaskedInput    = 5
	typeUnmaskRequest  = 6
	typeUnmaskResponse = 7
	typeSurvivorSet    = 8
	typeSurvivorSig    = 9
)

// SignatureSize is the length of an Ed25519 signature.
const SignatureSize = 64

// SealedShareSize is the length of an encrypted share: sender and
// recipient (4 bytes each) and the two shares (5 field elements of 8
// bytes each), sealed with AES-256-GCM (16-byte tag).
const SealedShareSize = 8 + 2*secretChunks*8 + 16

// AdvertiseKeys is a client's first message: its two X25519 public keys
// of the round. The zero value holds client 0 and all-zero keys (which
// ECDH rejects).
type AdvertiseKeys struct {
	// Client is the sender's ID.
	Client uint32
	// EncryptionKey is the public key of the pair that encrypts shares.
	EncryptionKey [32]byte
	// MaskKey is the public key of the pair that agrees pairwise masks.
	MaskKey [32]byte
	// Signature is the client's Ed25519 signature of the two keys, bound
	// to the round's session (Round.Session): a key signed for another
	// round, attempt or participant set does not verify.
	Signature [SignatureSize]byte
}

// NeighbourKeys is what the server sends a client after stage 1: the
// AdvertiseKeys of its neighbours that advertised, in increasing ID
// order. The zero value holds no keys.
type NeighbourKeys struct {
	// Keys lists the neighbours' keys.
	Keys []AdvertiseKeys
}

// EncryptedShare is one client's Shamir shares for one neighbour, sealed
// to that neighbour. The zero value is not a valid share.
type EncryptedShare struct {
	// From is the client whose secrets are shared; To the holder.
	From, To uint32
	// Sealed is the AES-256-GCM ciphertext of (From, To, self-mask seed
	// share, mask-key share) under a key agreed by From's and To's
	// encryption keys.
	Sealed [SealedShareSize]byte
}

// ShareKeys is a client's stage-2 message: one EncryptedShare per
// neighbour that advertised keys, in increasing order of To. The zero
// value holds client 0 and no shares.
type ShareKeys struct {
	// Client is the sender's ID (every share's From).
	Client uint32
	// Shares lists the encrypted shares.
	Shares []EncryptedShare
}

// RoutedShares is what the server sends a client after stage 2: the
// shares addressed to it by neighbours that completed stage 2, in
// increasing order of From. The zero value holds no shares.
type RoutedShares struct {
	// Shares lists the encrypted shares (every To is the recipient).
	Shares []EncryptedShare
}

// MaskedInput is a client's stage-3 message: its quantised, noised input
// plus its self mask and pairwise masks, modulo 2^Bits. On the wire each
// element takes ⌈Bits/8⌉ bytes. The zero value holds client 0 and no
// input.
type MaskedInput struct {
	// Client is the sender's ID.
	Client uint32
	// Bits is the modulus exponent b.
	Bits int
	// Masked holds the masked input, each element below 2^Bits.
	Masked []uint64
}

// SurvivorSet is what the server sends every surviving client after
// stage 3: the clients whose masked input it received, in increasing
// order, for each to sign (the consistency check). The zero value names
// nobody.
type SurvivorSet struct {
	// Survivors lists the survivors S.
	Survivors []uint32
}

// SurvivorSignature is a client's stage-4 message: its Ed25519
// signature of the survivor set, bound to the round's session. A client
// signs at most one survivor set per round, over all its attempts
// (Memory). The zero value holds client 0 and an invalid signature.
type SurvivorSignature struct {
	// Client is the signer.
	Client uint32
	// Signature signs (session, Client, S).
	Signature [SignatureSize]byte
}

// UnmaskRequest is what the server sends each client that signed, after
// stage 4: the survivor set and every signature of it it received, in
// increasing order of signer. From them the client reveals the self-mask
// seed share of each neighbour in Survivors and the mask-key share of
// each other neighbour it holds shares of. The zero value asks for
// nothing.
type UnmaskRequest struct {
	// Survivors is S, as signed.
	Survivors []uint32
	// Signatures are the signatures of S, in increasing Client order.
	Signatures []SurvivorSignature
}

// Share is one Shamir share of a peer's secret as a holder reveals it.
// The zero value is the share of peer 0 with value 0.
type Share struct {
	// Of is the peer whose secret this is a share of.
	Of uint32
	// Value is the share: one element of GF(2^61 − 1) per 7-byte chunk.
	Value [secretChunks]uint64
}

// UnmaskResponse is a client's stage-4 message: the shares its
// UnmaskRequest asked for, each list in increasing order of Of. The zero
// value holds client 0 and no shares.
type UnmaskResponse struct {
	// Client is the sender (the holder of the shares).
	Client uint32
	// SelfShares are shares of survivors' self-mask seeds.
	SelfShares []Share
	// KeyShares are shares of dropped clients' mask private keys.
	KeyShares []Share
}

// encoder appends fields.
type encoder []byte

func header(typ byte, size int) encoder {
	e := make(encoder, 0, 2+size)
	return append(e, wireVersion, typ)
}

func (e *encoder) u32(v uint32) { *e = binary.LittleEndian.AppendUint32(*e, v) }
func (e *encoder) u64(v uint64) { *e = binary.LittleEndian.AppendUint64(*e, v) }
func (e *encoder) bytes(b []byte) {
	*e = append(*e, b...)
}
func (e *encoder) count(n int) { e.u32(uint32(n)) }

// decoder reads fields; the first failure sticks.
type decoder struct {
	b   []byte
	err error
}

func newDecoder(b []byte, typ byte, name string) *decoder {
	d := &decoder{b: b}
	switch {
	case len(b) < 2:
		d.fail("%s: %d bytes, shorter than the header", name, len(b))
	case b[0] != wireVersion:
		d.fail("%s: version %d, want %d", name, b[0], wireVersion)
	case b[1] != typ:
		d.fail("%s: message type %d, want %d", name, b[1], typ)
	default:
		d.b = b[2:]
	}
	return d
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrDecode, fmt.Sprintf(format, args...))
	}
	d.b = nil
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.fail("truncated: %d bytes left, need %d", len(d.b), n)
		return nil
	}
	b := d.b[:n]
	d.b = d.b[n:]
	return b
}

func (d *decoder) u8() byte {
	if b := d.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if b := d.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if b := d.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// count reads a list length whose items take at least size bytes each.
func (d *decoder) count(size int) int {
	n := d.u32()
	if d.err == nil && uint64(n)*uint64(size) > uint64(len(d.b)) {
		d.fail("list of %d items of %d bytes in %d bytes", n, size, len(d.b))
		return 0
	}
	return int(n)
}

func (d *decoder) done() error {
	if d.err == nil && len(d.b) > 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	return d.err
}

// ids reads an increasing list of IDs.
func (d *decoder) ids(what string) []uint32 {
	n := d.count(4)
	out := make([]uint32, 0, n)
	for i := range n {
		v := d.u32()
		if i > 0 && v <= out[i-1] {
			d.fail("%s not strictly increasing at %d", what, i)
		}
		out = append(out, v)
	}
	return out
}

func (m *AdvertiseKeys) append(e *encoder) {
	e.u32(m.Client)
	e.bytes(m.EncryptionKey[:])
	e.bytes(m.MaskKey[:])
	e.bytes(m.Signature[:])
}

func (m *AdvertiseKeys) read(d *decoder) {
	m.Client = d.u32()
	copy(m.EncryptionKey[:], d.take(32))
	copy(m.MaskKey[:], d.take(32))
	copy(m.Signature[:], d.take(SignatureSize))
}

const advertiseSize = 4 + 64 + SignatureSize

// MarshalBinary returns the wire encoding of m.
func (m *AdvertiseKeys) MarshalBinary() ([]byte, error) {
	e := header(typeAdvertiseKeys, advertiseSize)
	m.append(&e)
	return e, nil
}

// UnmarshalBinary sets m from its wire encoding, or returns an error
// wrapping ErrDecode.
func (m *AdvertiseKeys) UnmarshalBinary(b []byte) error {
	d := newDecoder(b, typeAdvertiseKeys, "AdvertiseKeys")
	var v AdvertiseKeys
	v.read(d)
	if err := d.done(); err != nil {
		return err
	}
	*m = v
	return nil
}

// MarshalBinary returns the wire encoding of m.
func (m *NeighbourKeys) MarshalBinary() ([]byte, error) {
	e := header(typeNeighbourKeys, 4+len(m.Keys)*advertiseSize)
	e.count(len(m.Keys))
	for i := range m.Keys {
		m.Keys[i].append(&e)
	}
	return e, nil
}

// UnmarshalBinary sets m from its wire encoding (keys in strictly
// increasing client order), or returns an error wrapping ErrDecode.
func (m *NeighbourKeys) UnmarshalBinary(b []byte) error {
	d := newDecoder(b, typeNeighbourKeys, "NeighbourKeys")
	n := d.count(advertiseSize)
	keys := make([]AdvertiseKeys, n)
	for i := range keys {
		keys[i].read(d)
		if i > 0 && keys[i].Client <= keys[i-1].Client {
			d.fail("NeighbourKeys: clients not strictly increasing at %d", i)
		}
	}
	if err := d.done(); err != nil {
		return err
	}
	m.Keys = keys
	return nil
}

const sharedSize = 8 + SealedShareSize

func appendShares(e *encoder, s []EncryptedShare) {
	e.count(len(s))
	for i := range s {
		e.u32(s[i].From)
		e.u32(s[i].To)
		e.bytes(s[i].Sealed[:])
	}
}

func readShares(d *decoder) []EncryptedShare {
	n := d.count(sharedSize)
	out := make([]EncryptedShare, n)
	for i := range out {
		out[i].From = d.u32()
		out[i].To = d.u32()
		copy(out[i].Sealed[:], d.take(SealedShareSize))
	}
	return out
}

// MarshalBinary returns the wire encoding of m.
func (m *ShareKeys) MarshalBinary() ([]byte, error) {
	e := header(typeShareKeys, 8+len(m.Shares)*sharedSize)
	e.u32(m.Client)
	appendShares(&e, m.Shares)
	return e, nil
}

// UnmarshalBinary sets m from its wire encoding (every share from
// Client, recipients strictly increasing), or returns an error wrapping
// ErrDecode.
func (m *ShareKeys) UnmarshalBinary(b []byte) error {
	d := newDecoder(b, typeShareKeys, "ShareKeys")
	c := d.u32()
	s := readShares(d)
	for i := range s {
		if s[i].From != c {
			d.fail("ShareKeys: share %d is from %d, not the sender %d", i, s[i].From, c)
		}
		if i > 0 && s[i].To <= s[i-1].To {
			d.fail("ShareKeys: recipients not strictly increasing at %d", i)
		}
	}
	if err := d.done(); err != nil {
		return err
	}
	m.Client, m.Shares = c, s
	return nil
}

// MarshalBinary returns the wire encoding of m.
func (m *RoutedShares) MarshalBinary() ([]byte, error) {
	e := header(typeRoutedShares, 4+len(m.Shares)*sharedSize)
	appendShares(&e, m.Shares)
	return e, nil
}

// UnmarshalBinary sets m from its wire encoding (one recipient, senders
// strictly increasing), or returns an error wrapping ErrDecode.
func (m *RoutedShares) UnmarshalBinary(b []byte) error {
	d := newDecoder(b, typeRoutedShares, "RoutedShares")
	s := readShares(d)
	for i := range s {
		if i > 0 && (s[i].From <= s[i-1].From || s[i].To != s[0].To) {
			d.fail("RoutedShares: share %d breaks one recipient, increasing senders", i)
		}
	}
	if err := d.done(); err != nil {
		return err
	}
	m.Shares = s
	return nil
}

// MarshalBinary returns the wire encoding of m: client, bits (one
// byte), length, then each element in ⌈Bits/8⌉ little-endian bytes. It
// returns an error wrapping ErrBadMessage for Bits outside [1, 64] or an
// element at or above 2^Bits.
func (m *MaskedInput) MarshalBinary() ([]byte, error) {
	if m.Bits < 1 || m.Bits > 64 {
		return nil, fmt.Errorf("%w: MaskedInput with %d bits", ErrBadMessage, m.Bits)
	}
	w := (m.Bits + 7) / 8
	e := header(typeMaskedInput, 9+w*len(m.Masked))
	e.u32(m.Client)
	e = append(e, byte(m.Bits))
	e.count(len(m.Masked))
	lim := mask(m.Bits)
	var buf [8]byte
	for i, v := range m.Masked {
		if v > lim {
			return nil, fmt.Errorf("%w: MaskedInput element %d is %d, not below 2^%d", ErrBadMessage, i, v, m.Bits)
		}
		binary.LittleEndian.PutUint64(buf[:], v)
		e = append(e, buf[:w]...)
	}
	return e, nil
}

// UnmarshalBinary sets m from its wire encoding, or returns an error
// wrapping ErrDecode.
func (m *MaskedInput) UnmarshalBinary(b []byte) error {
	d := newDecoder(b, typeMaskedInput, "MaskedInput")
	c := d.u32()
	bits := int(d.u8())
	if d.err == nil && (bits < 1 || bits > 64) {
		d.fail("MaskedInput: %d bits", bits)
	}
	w := (bits + 7) / 8
	n := d.count(max(w, 1))
	out := make([]uint64, n)
	lim := mask(max(bits, 1))
	for i := range out {
		var buf [8]byte
		copy(buf[:], d.take(w))
		out[i] = binary.LittleEndian.Uint64(buf[:])
		if out[i] > lim {
			d.fail("MaskedInput: element %d has bits above 2^%d", i, bits)
		}
	}
	if err := d.done(); err != nil {
		return err
	}
	m.Client, m.Bits, m.Masked = c, bits, out
	return nil
}

// MarshalBinary returns the wire encoding of m.
func (m *SurvivorSet) MarshalBinary() ([]byte, error) {
	e := header(typeSurvivorSet, 4+4*len(m.Survivors))
	appendIDs(&e, m.Survivors)
	return e, nil
}

// UnmarshalBinary sets m from its wire encoding (a strictly increasing
// list), or returns an error wrapping ErrDecode.
func (m *SurvivorSet) UnmarshalBinary(b []byte) error {
	d := newDecoder(b, typeSurvivorSet, "SurvivorSet")
	s := d.ids("SurvivorSet: survivors")
	if err := d.done(); err != nil {
		return err
	}
	m.Survivors = s
	return nil
}

func appendIDs(e *encoder, ids []uint32) {
	e.count(len(ids))
	for _, v := range ids {
		e.u32(v)
	}
}

const sigSize = 4 + SignatureSize

// MarshalBinary returns the wire encoding of m.
func (m *SurvivorSignature) MarshalBinary() ([]byte, error) {
	e := header(typeSurvivorSig, sigSize)
	e.u32(m.Client)
	e.bytes(m.Signature[:])
	return e, nil
}

// UnmarshalBinary sets m from its wire encoding, or returns an error
// wrapping ErrDecode.
func (m *SurvivorSignature) UnmarshalBinary(b []byte) error {
	d := newDecoder(b, typeSurvivorSig, "SurvivorSignature")
	var v SurvivorSignature
	v.Client = d.u32()
	copy(v.Signature[:], d.take(SignatureSize))
	if err := d.done(); err != nil {
		return err
	}
	*m = v
	return nil
}

// MarshalBinary returns the wire encoding of m.
func (m *UnmaskRequest) MarshalBinary() ([]byte, error) {
	e := header(typeUnmaskRequest, 8+4*len(m.Survivors)+sigSize*len(m.Signatures))
	appendIDs(&e, m.Survivors)
	e.count(len(m.Signatures))
	for _, s := range m.Signatures {
		e.u32(s.Client)
		e.bytes(s.Signature[:])
	}
	return e, nil
}

// UnmarshalBinary sets m from its wire encoding (survivors and signers
// each strictly increasing), or returns an error wrapping ErrDecode.
func (m *UnmaskRequest) UnmarshalBinary(b []byte) error {
	d := newDecoder(b, typeUnmaskRequest, "UnmaskRequest")
	s := d.ids("UnmaskRequest: survivors")
	n := d.count(sigSize)
	sigs := make([]SurvivorSignature, n)
	for i := range sigs {
		sigs[i].Client = d.u32()
		copy(sigs[i].Signature[:], d.take(SignatureSize))
		if i > 0 && sigs[i].Client <= sigs[i-1].Client {
			d.fail("UnmaskRequest: signers not strictly increasing at %d", i)
		}
	}
	if err := d.done(); err != nil {
		return err
	}
	m.Survivors, m.Signatures = s, sigs
	return nil
}

const shareSize = 4 + 8*secretChunks

// MarshalBinary returns the wire encoding of m.
func (m *UnmaskResponse) MarshalBinary() ([]byte, error) {
	e := header(typeUnmaskResponse, 12+shareSize*(len(m.SelfShares)+len(m.KeyShares)))
	e.u32(m.Client)
	for _, l := range [][]Share{m.SelfShares, m.KeyShares} {
		e.count(len(l))
		for _, s := range l {
			e.u32(s.Of)
			for _, v := range s.Value {
				e.u64(v)
			}
		}
	}
	return e, nil
}

// UnmarshalBinary sets m from its wire encoding (each list strictly
// increasing in Of, every value below 2^61 − 1), or returns an error
// wrapping ErrDecode.
func (m *UnmaskResponse) UnmarshalBinary(b []byte) error {
	d := newDecoder(b, typeUnmaskResponse, "UnmaskResponse")
	c := d.u32()
	var lists [2][]Share
	for l := range lists {
		n := d.count(shareSize)
		lists[l] = make([]Share, n)
		for i := range lists[l] {
			s := &lists[l][i]
			s.Of = d.u32()
			for j := range s.Value {
				s.Value[j] = d.u64()
				if s.Value[j] >= prime {
					d.fail("UnmaskResponse: share value not in GF(2^61 − 1)")
				}
			}
			if i > 0 && s.Of <= lists[l][i-1].Of {
				d.fail("UnmaskResponse: shares not strictly increasing at %d", i)
			}
		}
	}
	if err := d.done(); err != nil {
		return err
	}
	m.Client, m.SelfShares, m.KeyShares = c, lists[0], lists[1]
	return nil
}

// increasing reports whether ids is strictly increasing.
func increasing(ids []uint32) bool {
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			return false
		}
	}
	return true
}
