package secagg

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// Key derivation labels. Every key of a round is HKDF-SHA256 of a secret
// with the round's session (Round.Session) as salt and one of these labels (plus the sender and
// the recipient, for share encryption) as info.
const (
	labelPairwise = "fedcalib/secagg/v1 pairwise mask"
	labelSelf     = "fedcalib/secagg/v1 self mask"
	labelShare    = "fedcalib/secagg/v1 share encryption"
)

// derive returns the 32-byte key HKDF-SHA256(secret, salt = session, info =
// label ‖ from ‖ to) (from and to big-endian, present when nonzero-length
// ids is given).
func derive(secret []byte, seed *[32]byte, label string, ids ...uint32) [32]byte {
	info := []byte(label)
	for _, id := range ids {
		info = binary.BigEndian.AppendUint32(info, id)
	}
	k, err := hkdf.Key(sha256.New, secret, seed[:], string(info), 32)
	if err != nil {
		panic(fmt.Sprintf("secagg: HKDF: %v", err)) // only for an impossible key length
	}
	var out [32]byte
	copy(out[:], k)
	return out
}

// prgBlock is the number of keystream bytes generated at a time.
const prgBlock = 4096

// addMask adds (neg: subtracts) to every y[i] the i-th element of the mask
// expanded from key, modulo 2^b (mask = 2^b − 1): element i is the i-th
// little-endian 64-bit word of the AES-256-CTR keystream (zero IV) under
// key, reduced mod 2^b. Since 2^b divides 2^64 the elements are uniform
// on Z_{2^b} if the keystream is.
func addMask(y []uint64, key *[32]byte, neg bool, mask uint64) {
	block, err := aes.NewCipher(key[:])
	if err != nil {
		panic(fmt.Sprintf("secagg: AES: %v", err)) // only for a bad key length
	}
	var iv [aes.BlockSize]byte
	ctr := cipher.NewCTR(block, iv[:])
	var buf [prgBlock]byte
	for len(y) > 0 {
		n := min(len(y), prgBlock/8)
		b := buf[:8*n]
		clear(b)
		ctr.XORKeyStream(b, b)
		for i := range n {
			m := binary.LittleEndian.Uint64(b[8*i:])
			if neg {
				y[i] = (y[i] - m) & mask
			} else {
				y[i] = (y[i] + m) & mask
			}
		}
		y = y[n:]
	}
}

// newAEAD returns AES-256-GCM under key.
func newAEAD(key *[32]byte) cipher.AEAD {
	block, err := aes.NewCipher(key[:])
	if err != nil {
		panic(fmt.Sprintf("secagg: AES: %v", err))
	}
	a, err := cipher.NewGCM(block)
	if err != nil {
		panic(fmt.Sprintf("secagg: GCM: %v", err))
	}
	return a
}
