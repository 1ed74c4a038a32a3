package network

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/fedcalib/fedcalib/federation"
)

// FuzzDecodeUpdate: an update message from a client, whatever its bytes,
// is decoded or refused with ErrBadUpdate, never more values than a
// sparse message may declare; what decodes is encoded back, in either
// encoding, to the same values bit for bit.
func FuzzDecodeUpdate(f *testing.F) {
	f.Add([]byte{encDense}, 4)
	f.Add(encodeUpdate([]float64{1, 0, 0, 2.5}, false), 4)
	f.Add(encodeUpdate([]float64{1, 0, 0, 2.5}, true), 4)
	f.Add(encodeUpdate(append(make([]float64, 30), math.NaN(), math.Copysign(0, -1)), true), 32)
	f.Add([]byte{encSparse, 3, 0x08}, 3)
	f.Fuzz(func(t *testing.T, b []byte, maxLen int) {
		maxLen = max(0, maxLen%5000)
		u, err := decodeUpdate(b, maxLen)
		if err != nil {
			if !errors.Is(err, federation.ErrBadUpdate) {
				t.Fatalf("error %v does not wrap ErrBadUpdate", err)
			}
			return
		}
		if len(b) > 0 && b[0] == encSparse && len(u) > maxLen {
			t.Fatalf("a sparse message declared %d values, above %d", len(u), maxLen)
		}
		for _, sparse := range []bool{false, true} {
			v, err := decodeUpdate(encodeUpdate(u, sparse), len(u))
			if err != nil || !sameBits(u, v) {
				t.Fatalf("sparse=%v: %v re-encoded decodes to %v, %v", sparse, u, v, err)
			}
		}
	})
}

// FuzzParseAllowList: an allow-list is parsed into distinct valid user
// keys, in the file's order, or refused with ErrAllowList; the keys it
// returns parse back to themselves.
func FuzzParseAllowList(f *testing.F) {
	_, pub, err := NewKey()
	if err != nil {
		f.Fatal(err)
	}
	_, pub2, err := NewKey()
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(pub + "\n"))
	f.Add([]byte("# clients\n" + pub + " site A\n\n" + pub2 + "\n"))
	f.Add([]byte(pub + "\n" + pub + "\n"))
	f.Add([]byte("not a key\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := ParseAllowList(b)
		if err != nil {
			if !errors.Is(err, ErrAllowList) {
				t.Fatalf("error %v does not wrap ErrAllowList", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, k := range keys {
			if !nkeys.IsValidPublicUserKey(k) || seen[k] {
				t.Fatalf("key %q is not a valid user key, or repeated", k)
			}
			seen[k] = true
		}
		again, err := ParseAllowList([]byte(strings.Join(keys, "\n")))
		if err != nil || strings.Join(again, " ") != strings.Join(keys, " ") {
			t.Fatalf("the keys %v parse back to %v, %v", keys, again, err)
		}
	})
}
