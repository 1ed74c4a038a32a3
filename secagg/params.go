package secagg

import (
	"fmt"
	"math"
)

// Targets of Parameters: the largest probability, per round, that some
// client's secrets lack t surviving holders (the round fails and is run
// again) and that some client has too many colluding neighbours (its
// input is exposed). These are this package's choices; they play the
// roles of Bell et al.'s correctness and statistical security parameters.
const (
	// FailureTarget is 2^−20.
	FailureTarget = 0x1p-20
	// ExposureTarget is 2^−40.
	ExposureTarget = 0x1p-40
)

// DefaultDropoutRate is the fraction of a round's participants assumed to
// drop out, each independently, when Parameters derives the defaults.
const DefaultDropoutRate = 0.1

// DefaultColluders returns the number of colluding clients Parameters
// assumes by default among n participants: ⌈n/20⌉ (5%).
func DefaultColluders(n int) int { return (n + 19) / 20 }

// Params are a round's graph degree and threshold with the probabilities
// that justify them. The zero value is not valid.
type Params struct {
	// Neighbours is the degree k: even, or n − 1 (the complete graph).
	Neighbours int
	// Threshold is the Shamir threshold t ∈ (k/2, k].
	Threshold int
	// Failure bounds the probability that a round fails because some
	// client has more than k − t neighbours dropped (its secrets lack t
	// holders): the union over the n clients of the binomial tail
	// P(Bin(k, δ) > k − t), dropouts independent with rate δ.
	Failure float64
	// Exposure bounds the probability that some honest client has 2t − k
	// or more colluding neighbours, the count at which colluders who
	// sign two survivor sets could let a deviating server unmask it (t
	// or more expose it even to an honest server): the union over the
	// clients of the hypergeometric tail of k neighbours drawn among the
	// n − 1 others, c of them colluding. Each client's neighbours are a
	// uniform k-subset of the others, as the ring is a uniform random
	// permutation fixed after the participants.
	Exposure float64
}

// Parameters derives k and t for n ≥ 3 participants, a dropout rate
// δ ∈ [0, 1) and c ≥ 0 colluding clients, as Bell et al. (2020, §3 and
// Theorem 3.6) size the graph from the tolerated fractions of dropouts and
// corrupt clients: the smallest even k (then the smallest t > k/2) with
// Exposure ≤ ExposureTarget and Failure ≤ FailureTarget. When no k below
// n − 1 meets both targets it returns the complete graph k = n − 1 with
// the smallest t meeting ExposureTarget (or t = k), and the Failure and
// Exposure it has: small federations pay in retries, never in exposure,
// unless c ≥ 2t − k is certain. It returns an error wrapping ErrConfig
// for arguments out of their domain.
func Parameters(n int, dropout float64, colluders int) (Params, error) {
	switch {
	case n < 3:
		return Params{}, fmt.Errorf("%w: %d participants; need at least 3", ErrConfig, n)
	case !(dropout >= 0 && dropout < 1):
		return Params{}, fmt.Errorf("%w: dropout rate %v; want [0, 1)", ErrConfig, dropout)
	case colluders < 0 || colluders > n-1:
		return Params{}, fmt.Errorf("%w: %d colluders among %d participants; want 0 to %d", ErrConfig, colluders, n, n-1)
	}
	var last Params
	for k := 2; k <= n-1; k++ {
		if k%2 == 1 && k != n-1 {
			continue
		}
		p := choose(n, k, dropout, colluders)
		if p.Failure <= FailureTarget && p.Exposure <= ExposureTarget {
			return p, nil
		}
		last = p
	}
	return last, nil
}

// Bounds returns Params{k, t} for n participants with its Failure and
// Exposure under dropout rate δ and c colluders (see Params), for
// arguments already in their domains (Parameters checks them).
func Bounds(n, k, t int, dropout float64, colluders int) Params {
	hyp := hypergeometricTail(n-1, colluders, k)
	bin := binomialTail(k, dropout)
	return Params{Neighbours: k, Threshold: t,
		Failure:  math.Min(1, float64(n)*bin[k-t+1]),
		Exposure: math.Min(1, float64(n)*hyp[2*t-k]),
	}
}

// choose returns, for degree k, the smallest t > k/2 whose Exposure meets
// ExposureTarget (or t = k), with its probabilities.
func choose(n, k int, dropout float64, colluders int) Params {
	for t := k/2 + 1; t <= k; t++ {
		p := Bounds(n, k, t, dropout, colluders)
		if p.Exposure <= ExposureTarget || t == k {
			return p
		}
	}
	panic("unreachable")
}

// binomialTail returns P(Bin(k, p) ≥ j) for j = 0 … k+1.
func binomialTail(k int, p float64) []float64 {
	out := make([]float64, k+2)
	for j := k; j >= 0; j-- {
		out[j] = out[j+1] + math.Exp(logChoose(k, j)+logPow(p, j)+logPow(1-p, k-j))
	}
	return out
}

// hypergeometricTail returns P(X ≥ j), j = 0 … k+1, for X the number of
// marked items among k drawn without replacement from N of which K are
// marked.
func hypergeometricTail(N, K, k int) []float64 {
	out := make([]float64, k+2)
	for j := k; j >= 0; j-- {
		pj := 0.0
		if j <= K && k-j <= N-K {
			pj = math.Exp(logChoose(K, j) + logChoose(N-K, k-j) - logChoose(N, k))
		}
		out[j] = out[j+1] + pj
	}
	return out
}

func logChoose(n, k int) float64 {
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(k + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return a - b - c
}

// logPow returns log(p^j), with 0^0 = 1.
func logPow(p float64, j int) float64 {
	if j == 0 {
		return 0
	}
	return float64(j) * math.Log(p)
}
