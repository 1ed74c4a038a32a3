package secagg

import (
	"math/rand/v2"
	"testing"
)

func TestFieldArithmetic(t *testing.T) {
	g := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		a, b := g.Uint64N(prime), g.Uint64N(prime)
		// fmul against the schoolbook product reduced by 128-bit division.
		want := mulmodRef(a, b)
		if got := fmul(a, b); got != want {
			t.Fatalf("fmul(%d, %d) = %d, want %d", a, b, got, want)
		}
		if a != 0 {
			if got := fmul(a, finv(a)); got != 1 {
				t.Fatalf("%d·%d⁻¹ = %d", a, a, got)
			}
		}
		if got := fsub(fadd(a, b), b); got != a {
			t.Fatalf("(%d + %d) − %d = %d", a, b, b, got)
		}
	}
	if got := fmul(prime-1, prime-1); got != 1 {
		t.Errorf("(p−1)² = %d, want 1", got)
	}
}

// mulmodRef is a·b mod p by double-and-add.
func mulmodRef(a, b uint64) uint64 {
	var r uint64
	for ; b > 0; b >>= 1 {
		if b&1 == 1 {
			r = (r + a) % prime
		}
		a = (a + a) % prime
	}
	return r
}

func TestShamir(t *testing.T) {
	rnd := rand.NewChaCha8([32]byte{1})
	var secret [32]byte
	rnd.Read(secret[:])
	secret[31] = 0xff // the last chunk's top byte
	xs := []uint64{3, 5, 6, 9, 10, 12, 17}
	const thr = 4
	shares, err := split(&secret, xs, thr, rnd)
	if err != nil {
		t.Fatal(err)
	}
	for _, pick := range [][]int{{0, 1, 2, 3}, {6, 4, 2, 0}, {1, 3, 5, 6}, {0, 1, 2, 3, 4, 5, 6}} {
		var px []uint64
		var py []fieldShare
		for _, i := range pick {
			px, py = append(px, xs[i]), append(py, shares[i])
		}
		got, err := combine(px, py)
		if err != nil {
			t.Fatal(err)
		}
		if got != secret {
			t.Errorf("holders %v recover %x, want %x", pick, got, secret)
		}
	}
	// t − 1 shares give something else (with overwhelming probability an
	// invalid chunk, else a wrong secret).
	got, err := combine(xs[:thr-1], shares[:thr-1])
	if err == nil && got == secret {
		t.Error("t − 1 shares recover the secret")
	}
}
