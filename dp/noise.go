package dp

import (
	crand "crypto/rand"
	"fmt"
	"math"
	"math/rand/v2"
)

// Noise is a source of independent standard normal variates N(0, 1).
// *rand.Rand from math/rand/v2 implements it; so do the sources returned by
// NewSeeded (simulation) and NewSecure (real releases).
//
// A Noise need not be safe for concurrent use: give each goroutine its own.
type Noise interface {
	NormFloat64() float64
}

// seedStream is the fixed PCG stream selector of NewSeeded; changing it
// changes every simulated result.
const seedStream = 0x6665_6463_616c_6962 // "fedcalib"

// NewSeeded returns a reproducible noise source for simulation: a PCG
// generator seeded explicitly with seed, so the same seed gives the same
// noise on every run and machine (for a given Go release). Use it for
// experiments and tests, never for a release of real data, whose noise must
// not be predictable: use NewSecure there.
func NewSeeded(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seedStream))
}

// NewSecure returns a noise source for real (non-simulated) releases: a
// ChaCha8 generator keyed with 32 bytes from crypto/rand, so its noise is
// unpredictable to anyone, including whoever chose the seed of a simulation.
func NewSecure() *rand.Rand {
	var key [32]byte
	crand.Read(key[:]) // never fails: the program crashes if the OS cannot supply randomness
	return rand.New(rand.NewChaCha8(key))
}

// AddGaussian is the Gaussian mechanism's noise step: it adds independent
// N(0, sigma²) noise from noise to every element of x, in place. With sigma
// = z·Δ, where Δ bounds the L2 sensitivity of x (the clip norm), one call
// is 1/(2z²)-zCDP. It panics if sigma is negative, NaN or infinite.
func AddGaussian(x []float64, sigma float64, noise Noise) {
	if !(sigma >= 0) || math.IsInf(sigma, 1) {
		panic(fmt.Sprintf("dp: noise standard deviation %v is not finite and ≥ 0", sigma))
	}
	if sigma == 0 {
		return
	}
	for i := range x {
		x[i] += sigma * noise.NormFloat64()
	}
}
