package secagg_test

import (
	"bytes"
	"encoding"
	"testing"

	"github.com/fedcalib/fedcalib/secagg"
)

// seedView returns the encoded messages of a small round with one
// dropout before masking, as fuzz seeds.
func seedView(f *testing.F) *view {
	r := newRound(f, 10, 4, 3, 12, 5, 1)
	p := r.Config().Participants
	_, _, v := run(f, r, randomInputs(r, 1), drops{beforeMask: p[4:5]}, 2)
	return v
}

// fuzzCanonical checks that a decoder never panics and accepts only
// canonical encodings: whatever it accepts re-encodes to the same bytes.
func fuzzCanonical[M any, P interface {
	*M
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
}](f *testing.F, seeds [][]byte) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m M
		if err := P(&m).UnmarshalBinary(b); err != nil {
			return
		}
		out, err := P(&m).MarshalBinary()
		if err != nil {
			t.Fatalf("decoded %x but cannot encode it: %v", b, err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("decoded %x, re-encoded %x", b, out)
		}
	})
}

func values(m map[uint32][]byte) [][]byte {
	var out [][]byte
	for _, id := range sorted(m) {
		out = append(out, m[id])
	}
	return out
}

func FuzzAdvertiseKeys(f *testing.F) {
	fuzzCanonical[secagg.AdvertiseKeys](f, values(seedView(f).keys))
}

func FuzzShareKeys(f *testing.F) {
	fuzzCanonical[secagg.ShareKeys](f, values(seedView(f).shares))
}

func FuzzMaskedInput(f *testing.F) {
	fuzzCanonical[secagg.MaskedInput](f, values(seedView(f).masked))
}

func FuzzSurvivorSignature(f *testing.F) {
	fuzzCanonical[secagg.SurvivorSignature](f, values(seedView(f).signed))
}

func FuzzSurvivorSet(f *testing.F) {
	b, err := (&secagg.SurvivorSet{Survivors: []uint32{1, 5, 9}}).MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	fuzzCanonical[secagg.SurvivorSet](f, [][]byte{b})
}

func FuzzUnmaskResponse(f *testing.F) {
	fuzzCanonical[secagg.UnmaskResponse](f, values(seedView(f).unmask))
}

// serverMessages returns encoded server-to-client messages of a small
// round: what CloseKeys, CloseShares and CloseMasked produce.
func serverMessages(f *testing.F) (keys, shares, reqs [][]byte) {
	r := newRound(f, 10, 4, 3, 12, 5, 1)
	s := secagg.NewServer(r)
	cl := map[uint32]*secagg.Client{}
	for _, id := range r.Config().Participants {
		c, err := secagg.NewClient(r, id, opts(1, id))
		if err != nil {
			f.Fatal(err)
		}
		cl[id] = c
		m, err := c.AdvertiseKeys()
		if err != nil {
			f.Fatal(err)
		}
		if err := s.ReceiveKeys(m); err != nil {
			f.Fatal(err)
		}
	}
	enc := func(m encoding.BinaryMarshaler) []byte {
		b, err := m.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	nk, err := s.CloseKeys()
	if err != nil {
		f.Fatal(err)
	}
	for _, id := range sorted(cl) {
		keys = append(keys, enc(nk[id]))
		m, err := cl[id].ShareKeys(nk[id])
		if err != nil {
			f.Fatal(err)
		}
		if err := s.ReceiveShares(m); err != nil {
			f.Fatal(err)
		}
	}
	rs, err := s.CloseShares()
	if err != nil {
		f.Fatal(err)
	}
	drop := r.Config().Participants[3]
	for _, id := range sorted(cl) {
		shares = append(shares, enc(rs[id]))
		if id == drop {
			continue
		}
		m, err := cl[id].MaskedInput(rs[id], make([]uint64, 5))
		if err != nil {
			f.Fatal(err)
		}
		if err := s.ReceiveMasked(m); err != nil {
			f.Fatal(err)
		}
	}
	set, err := s.CloseMasked()
	if err != nil {
		f.Fatal(err)
	}
	for _, id := range set.Survivors {
		m, err := cl[id].SignSurvivors(set)
		if err != nil {
			f.Fatal(err)
		}
		if err := s.ReceiveSignature(m); err != nil {
			f.Fatal(err)
		}
	}
	rq, err := s.CloseSignatures()
	if err != nil {
		f.Fatal(err)
	}
	for _, id := range sorted(rq) {
		reqs = append(reqs, enc(rq[id]))
	}
	return keys, shares, reqs
}

func FuzzNeighbourKeys(f *testing.F) {
	k, _, _ := serverMessages(f)
	fuzzCanonical[secagg.NeighbourKeys](f, k)
}

func FuzzRoutedShares(f *testing.F) {
	_, s, _ := serverMessages(f)
	fuzzCanonical[secagg.RoutedShares](f, s)
}

func FuzzUnmaskRequest(f *testing.F) {
	_, _, r := serverMessages(f)
	fuzzCanonical[secagg.UnmaskRequest](f, r)
}
