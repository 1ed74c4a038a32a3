package secagg

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
)

// Shamir secret sharing over the prime field GF(p), p = 2^61 − 1 (a
// Mersenne prime: reduction is a shift and an add). A 32-byte secret is
// cut into five chunks of at most 7 bytes (56 bits < 61), each shared with
// its own random polynomial of degree t − 1 at the same points; a share is
// the five polynomial values.

// prime is the Mersenne prime 2^61 − 1.
const prime = 1<<61 - 1

// secretChunks is the number of field elements that hold a 32-byte secret.
const secretChunks = 5

// chunkBytes is the number of secret bytes per field element.
const chunkBytes = 7

// fieldShare is one holder's share of a 32-byte secret: one field element
// per chunk.
type fieldShare [secretChunks]uint64

// fmul returns a·b mod p for a, b < p.
func fmul(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	// a·b = hi·2^64 + lo, and 2^61 ≡ 1 (mod p).
	r := (lo & prime) + (lo>>61 | hi<<3)
	r = (r & prime) + r>>61
	if r >= prime {
		r -= prime
	}
	return r
}

func fadd(a, b uint64) uint64 {
	r := a + b
	if r >= prime {
		r -= prime
	}
	return r
}

func fsub(a, b uint64) uint64 {
	if a >= b {
		return a - b
	}
	return a + prime - b
}

// finv returns a⁻¹ mod p for 0 < a < p, by Fermat: a^(p−2).
func finv(a uint64) uint64 {
	r, e := uint64(1), uint64(prime-2)
	for ; e > 0; e >>= 1 {
		if e&1 == 1 {
			r = fmul(r, a)
		}
		a = fmul(a, a)
	}
	return r
}

// randomElement returns a uniform element of GF(p) read from rnd.
func randomElement(rnd io.Reader) (uint64, error) {
	var b [8]byte
	for {
		if _, err := io.ReadFull(rnd, b[:]); err != nil {
			return 0, fmt.Errorf("secagg: reading randomness: %w", err)
		}
		if v := binary.LittleEndian.Uint64(b[:]) & prime; v != prime {
			return v, nil
		}
	}
}

// chunk returns the field elements of a 32-byte secret.
func chunk(secret *[32]byte) fieldShare {
	var c fieldShare
	for i := range c {
		var b [8]byte
		copy(b[:chunkBytes], secret[i*chunkBytes:min(len(secret), (i+1)*chunkBytes)])
		c[i] = binary.LittleEndian.Uint64(b[:])
	}
	return c
}

// unchunk inverts chunk; it fails if an element is not a chunk of a
// 32-byte secret.
func unchunk(c fieldShare) ([32]byte, error) {
	var s [32]byte
	for i, v := range c {
		n := min(len(s), (i+1)*chunkBytes) - i*chunkBytes
		if v>>(8*n) != 0 {
			return s, fmt.Errorf("%w: reconstructed chunk %d has %d bits set above its %d bytes", ErrBadMessage, i, bits.Len64(v), n)
		}
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], v)
		copy(s[i*chunkBytes:], b[:n])
	}
	return s, nil
}

// split shares secret among the holders at the distinct nonzero points
// xs so that any t of them recover it and fewer learn nothing.
func split(secret *[32]byte, xs []uint64, t int, rnd io.Reader) ([]fieldShare, error) {
	c := chunk(secret)
	// coef[j][i] is the coefficient of x^(i+1) for chunk j.
	coef := make([][]uint64, secretChunks)
	for j := range coef {
		coef[j] = make([]uint64, t-1)
		for i := range coef[j] {
			v, err := randomElement(rnd)
			if err != nil {
				return nil, err
			}
			coef[j][i] = v
		}
	}
	out := make([]fieldShare, len(xs))
	for h, x := range xs {
		for j := range c {
			// Horner: c + x·(a1 + x·(a2 + …)).
			var y uint64
			for i := t - 2; i >= 0; i-- {
				y = fmul(fadd(y, coef[j][i]), x)
			}
			out[h][j] = fadd(y, c[j])
		}
	}
	return out, nil
}

// combine recovers the secret from shares ys at the distinct nonzero
// points xs by Lagrange interpolation at 0.
func combine(xs []uint64, ys []fieldShare) ([32]byte, error) {
	var acc fieldShare
	for i, xi := range xs {
		num, den := uint64(1), uint64(1)
		for j, xj := range xs {
			if j != i {
				num = fmul(num, xj)
				den = fmul(den, fsub(xj, xi))
			}
		}
		l := fmul(num, finv(den))
		for k := range acc {
			acc[k] = fadd(acc[k], fmul(l, ys[i][k]))
		}
	}
	return unchunk(acc)
}
