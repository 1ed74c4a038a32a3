package secagg_test

import (
	"crypto/ed25519"
	"encoding"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fedcalib/fedcalib/secagg"
)

// clientRand returns the deterministic randomness of client id in run seed.
func clientRand(seed uint64, id uint32) *rand.ChaCha8 {
	var k [32]byte
	binary.LittleEndian.PutUint64(k[:], seed)
	binary.LittleEndian.PutUint32(k[8:], id)
	k[12] = 0xc1
	return rand.NewChaCha8(k)
}

func roundSeed(seed uint64) [32]byte {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	s[31] = 0x5e
	return s
}

// identity returns client id's deterministic Ed25519 key in tests.
func identity(id uint32) ed25519.PrivateKey {
	var seed [32]byte
	binary.LittleEndian.PutUint32(seed[:], id)
	seed[31] = 0x1d
	return ed25519.NewKeyFromSeed(seed[:])
}

// identities returns the public keys of participants.
func identities(participants []uint32) map[uint32]ed25519.PublicKey {
	m := make(map[uint32]ed25519.PublicKey, len(participants))
	for _, id := range participants {
		m[id] = identity(id).Public().(ed25519.PublicKey)
	}
	return m
}

// withIDs returns cfg with the test identities of its participants.
func withIDs(cfg secagg.Config) secagg.Config {
	cfg.Identities = identities(cfg.Participants)
	return cfg
}

// opts returns the options of client id with randomness from run seed.
func opts(seed uint64, id uint32) secagg.ClientOptions {
	return secagg.ClientOptions{Key: identity(id), Rand: clientRand(seed, id)}
}

// drops says which clients vanish before which stage.
type drops struct {
	beforeShare, beforeMask, beforeSign, beforeUnmask []uint32
}

// view is everything the server received in a round, as bytes.
type view struct {
	keys, shares, masked, signed, unmask map[uint32][]byte
	bytesPerClient                       map[uint32]int // sent and received
	// unsigned counts what bytesPerClient would be without the
	// signatures and the consistency check (wire version 1): keys
	// without their signatures, no survivor set or signature, and an
	// unmask request of two ID lists over the client's neighbours.
	unsigned   map[uint32]int
	serverSign time.Duration // wall time in ReceiveSignature and CloseSignatures
	server     time.Duration // wall time spent in Server methods
	serverCPU  time.Duration // thread CPU time spent in them
}

// timed runs f and adds its wall and thread CPU durations to *d and
// *cpu.
func timed(d, cpu *time.Duration, f func() error) error {
	t0, c0 := time.Now(), threadCPU()
	err := f()
	*d += time.Since(t0)
	*cpu += threadCPU() - c0
	return err
}

// wire encodes m and decodes it into out, as a transport would, and
// returns the encoding.
func wire[M encoding.BinaryMarshaler](t testing.TB, m M, out encoding.BinaryUnmarshaler) []byte {
	t.Helper()
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := out.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// run drives one round in process, every message through its encoding,
// and returns the server's sum and view. inputs maps every participant to
// its (already quantised) input.
func run(t testing.TB, r *secagg.Round, inputs map[uint32][]uint64, d drops, seed uint64) ([]uint64, *secagg.Server, *view) {
	t.Helper()
	cfg := r.Config()
	v := &view{keys: map[uint32][]byte{}, shares: map[uint32][]byte{}, masked: map[uint32][]byte{}, signed: map[uint32][]byte{}, unmask: map[uint32][]byte{}, bytesPerClient: map[uint32]int{}, unsigned: map[uint32]int{}}
	clients := map[uint32]*secagg.Client{}
	for _, id := range cfg.Participants {
		c, err := secagg.NewClient(r, id, opts(seed, id))
		if err != nil {
			t.Fatal(err)
		}
		clients[id] = c
	}
	s := secagg.NewServer(r)
	for _, id := range cfg.Participants {
		m, err := clients[id].AdvertiseKeys()
		if err != nil {
			t.Fatal(err)
		}
		var got secagg.AdvertiseKeys
		v.keys[id] = wire(t, m, &got)
		v.bytesPerClient[id] += len(v.keys[id])
		v.unsigned[id] += len(v.keys[id]) - secagg.SignatureSize
		if err := timed(&v.server, &v.serverCPU, func() error { return s.ReceiveKeys(&got) }); err != nil {
			t.Fatal(err)
		}
	}
	var nk map[uint32]*secagg.NeighbourKeys
	if err := timed(&v.server, &v.serverCPU, func() (err error) { nk, err = s.CloseKeys(); return }); err != nil {
		t.Fatal(err)
	}
	for _, id := range d.beforeShare {
		delete(clients, id)
	}
	for _, id := range sorted(clients) {
		var got secagg.NeighbourKeys
		nb := len(wire(t, nk[id], &got))
		v.bytesPerClient[id] += nb
		v.unsigned[id] += nb - secagg.SignatureSize*len(got.Keys)
		m, err := clients[id].ShareKeys(&got)
		if err != nil {
			t.Fatal(err)
		}
		var sk secagg.ShareKeys
		v.shares[id] = wire(t, m, &sk)
		v.bytesPerClient[id] += len(v.shares[id])
		v.unsigned[id] += len(v.shares[id])
		if err := timed(&v.server, &v.serverCPU, func() error { return s.ReceiveShares(&sk) }); err != nil {
			t.Fatal(err)
		}
	}
	var rs map[uint32]*secagg.RoutedShares
	if err := timed(&v.server, &v.serverCPU, func() (err error) { rs, err = s.CloseShares(); return }); err != nil {
		t.Fatal(err)
	}
	for _, id := range d.beforeMask {
		delete(clients, id)
	}
	for _, id := range sorted(clients) {
		var got secagg.RoutedShares
		nb := len(wire(t, rs[id], &got))
		v.bytesPerClient[id] += nb
		v.unsigned[id] += nb
		m, err := clients[id].MaskedInput(&got, inputs[id])
		if err != nil {
			t.Fatal(err)
		}
		var mi secagg.MaskedInput
		v.masked[id] = wire(t, m, &mi)
		v.bytesPerClient[id] += len(v.masked[id])
		v.unsigned[id] += len(v.masked[id])
		if err := timed(&v.server, &v.serverCPU, func() error { return s.ReceiveMasked(&mi) }); err != nil {
			t.Fatal(err)
		}
	}
	var set *secagg.SurvivorSet
	if err := timed(&v.server, &v.serverCPU, func() (err error) { set, err = s.CloseMasked(); return }); err != nil {
		t.Fatal(err)
	}
	for _, id := range d.beforeSign {
		delete(clients, id)
	}
	for _, id := range sorted(clients) {
		var got secagg.SurvivorSet
		v.bytesPerClient[id] += len(wire(t, set, &got))
		m, err := clients[id].SignSurvivors(&got)
		if err != nil {
			t.Fatal(err)
		}
		var sig secagg.SurvivorSignature
		v.signed[id] = wire(t, m, &sig)
		v.bytesPerClient[id] += len(v.signed[id])
		t0 := time.Now()
		err = timed(&v.server, &v.serverCPU, func() error { return s.ReceiveSignature(&sig) })
		v.serverSign += time.Since(t0)
		if err != nil {
			t.Fatal(err)
		}
	}
	var reqs map[uint32]*secagg.UnmaskRequest
	t0 := time.Now()
	err := timed(&v.server, &v.serverCPU, func() (err error) { reqs, err = s.CloseSignatures(); return })
	v.serverSign += time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range d.beforeUnmask {
		delete(clients, id)
	}
	for _, id := range sorted(clients) {
		var got secagg.UnmaskRequest
		v.bytesPerClient[id] += len(wire(t, reqs[id], &got))
		m, err := clients[id].Unmask(&got)
		if err != nil {
			t.Fatal(err)
		}
		var ur secagg.UnmaskResponse
		v.unmask[id] = wire(t, m, &ur)
		v.bytesPerClient[id] += len(v.unmask[id])
		// Version 1's request: a header and two ID lists naming the
		// neighbours whose shares the client reveals.
		v.unsigned[id] += len(v.unmask[id]) + 2 + 8 + 4*(len(ur.SelfShares)+len(ur.KeyShares))
		if err := timed(&v.server, &v.serverCPU, func() error { return s.ReceiveUnmask(&ur) }); err != nil {
			t.Fatal(err)
		}
	}
	var sum []uint64
	if err := timed(&v.server, &v.serverCPU, func() (err error) { sum, err = s.Sum(); return }); err != nil {
		t.Fatal(err)
	}
	return sum, s, v
}

func sorted[V any](m map[uint32]V) []uint32 {
	ids := make([]uint32, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// ids returns n participant IDs, not contiguous, so that IDs and indices
// differ.
func ids(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(1000 + 7*i)
	}
	return out
}
