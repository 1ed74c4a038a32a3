package federation

import "math/rand/v2"

// Stream domains keep the random streams of different purposes apart: the
// same (seed, a, b) gives unrelated streams in different domains.
const (
	domainDirichlet uint64 = iota + 1
	domainIID
	domainSplit
	domainSample
	domainClient
	domainNoise
	domainSelect
	domainSubset
)

// mix64 is the SplitMix64 finaliser (Steele, Lea and Flood 2014): a
// bijection on uint64 with full avalanche.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// newPCG returns the PCG source of the stream identified by (seed, domain,
// a, b). Distinct tuples give independent-looking streams; the same tuple
// always gives the same stream.
func newPCG(seed, domain, a, b uint64) *rand.PCG {
	const (
		golden  uint64 = 0x9e3779b97f4a7c15
		golden2 uint64 = 0x3c6ef372fe94f82a // 2·golden mod 2⁶⁴
		golden3 uint64 = 0xdaa66d2c7ddf743f // 3·golden mod 2⁶⁴
	)
	h := mix64(seed + golden)
	h = mix64(h ^ (domain + golden))
	h = mix64(h ^ (a + golden2))
	h = mix64(h ^ (b + golden3))
	return rand.NewPCG(h, mix64(h^golden))
}

// stream returns a generator over newPCG(seed, domain, a, b).
func stream(seed, domain, a, b uint64) *rand.Rand {
	return rand.New(newPCG(seed, domain, a, b))
}
