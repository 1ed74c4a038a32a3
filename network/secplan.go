package network

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/secagg"
)

// Noise modes of secure aggregation (SecureConfig.Noise).
const (
	// NoiseCentral: the coordinator adds the Gaussian noise of the
	// protocol's plan to the unmasked sum, as without secure aggregation.
	NoiseCentral = "central"
	// NoiseDistributed: each client adds its share of Skellam noise to its
	// quantised update before masking, and the coordinator adds none.
	NoiseDistributed = "distributed"
)

// DefaultBits is the default modulus exponent b of secure aggregation:
// inputs and masks live in Z_{2^32}, 4 bytes per coordinate on the wire.
const DefaultBits = 32

// MinScaleBits is the fewest bits of precision the quantisation keeps:
// the scale γ of a normalised update (each block divided by its clip norm,
// so every coordinate is in [−1, 1]) is at least 2^MinScaleBits, so one
// client's rounding moves a coordinate by less than 2^−8 of its clip
// norm. A modulus too small for that is refused (secagg.ErrBitsTooSmall).
const MinScaleBits = 8

// CountRange is the largest count per bin one client may hold under secure
// aggregation of a binning method without privacy, whose histograms are
// summed exactly as integers (scale 1): the modulus must hold the
// allow-list's clients × CountRange.
const CountRange = 1 << 16

// maxClientVariance is the largest Skellam variance a client can draw
// (dp.SampleSkellam draws two Poisson variates of mean variance/2 ≤ 2^52).
const maxClientVariance = 1 << 53

// SecureConfig turns on secure aggregation (SecAgg+, package secagg) in
// every round of a Coordinator. The zero value is SecAgg+ with k and t
// derived for each round by secagg.Parameters from its participants,
// secagg.DefaultDropoutRate and secagg.DefaultColluders, DefaultBits and
// central noise.
type SecureConfig struct {
	// Neighbours is the degree k of each round's neighbour graph, an
	// even number ≥ 2 (an odd degree lets dropouts split the survivors,
	// secagg.NewGraph) or the allow-list's K − 1 (the complete graph); 0
	// means secagg.Parameters of the round's
	// participants. A round with n ≤ k participants uses the complete
	// graph, k = n − 1.
	Neighbours int `json:"neighbours"`
	// Threshold is the Shamir threshold t ∈ (k/2, k]; 0 means the
	// Parameters' t, or secagg.DefaultThreshold(k) with Neighbours set.
	// A round whose k is reduced to t or below uses
	// secagg.DefaultThreshold of its k.
	Threshold int `json:"threshold"`
	// DropoutRate is the fraction δ ∈ [0, 1) of a round's participants
	// assumed to drop out when k and t are derived (Neighbours 0); 0
	// means secagg.DefaultDropoutRate.
	DropoutRate float64 `json:"dropout_rate,omitempty"`
	// Colluders is the fraction of the clients assumed to collude (with
	// each other or a deviating coordinator) when k and t are derived, in
	// [0, 1); 0 means secagg.DefaultColluders (5%).
	Colluders float64 `json:"colluders,omitempty"`
	// Bits is the modulus exponent b ∈ [2, 64]; 0 means DefaultBits.
	Bits int `json:"bits"`
	// Noise is NoiseCentral or NoiseDistributed; empty means
	// NoiseCentral. Distributed noise needs a private spec with the RDP
	// accountant.
	Noise string `json:"noise"`
	// StageTimeout is how long the coordinator waits for the messages
	// of each of the five stages of a round; zero means a fifth of
	// Config.RoundTimeout.
	StageTimeout time.Duration `json:"-"`
}

// securePlan is how a federation quantises, masks and noises its updates.
type securePlan struct {
	cfg       SecureConfig
	q         secagg.Quantizer
	clips     []float64 // divisor of each block of an update
	dim       int
	clientVar float64          // Skellam variance per client and coordinate (quantised units); 0: none
	skellam   dp.SkellamPlan   // distributed noise only
	survivors int              // the fewest survivors of a round that releases (distributed noise)
	sigmaUnit float64          // clip norm whose noise the privacy record's σ is (C₊ or C)
	shrink    float64          // factor of each normalised block before quantising (central noise with privacy); 0: 1
	binning   bool             // a binning method
	priv      *federation.Spec // nil without privacy
}

// distributed reports whether clients add the noise.
func (p *securePlan) distributed() bool { return p.cfg.Noise == NoiseDistributed }

// checkSecure checks sc against the spec and the allow-list's K clients
// and returns it with its defaults filled in.
func checkSecure(sc SecureConfig, spec federation.Spec, clients int) (SecureConfig, error) {
	if sc.Bits == 0 {
		sc.Bits = DefaultBits
	}
	if sc.Noise == "" {
		sc.Noise = NoiseCentral
	}
	switch {
	case sc.Bits < 2 || sc.Bits > 64:
		return sc, fmt.Errorf("%w: secure aggregation modulus of %d bits: want 2 to 64", ErrConfig, sc.Bits)
	case sc.Neighbours < 0 || sc.Threshold < 0:
		return sc, fmt.Errorf("%w: %d neighbours, threshold %d: want ≥ 1 (0: the default)", ErrConfig, sc.Neighbours, sc.Threshold)
	case sc.Neighbours == 1:
		return sc, fmt.Errorf("%w: 1 neighbour: each pair's sum would leak and each neighbour would hold the other's secrets in the clear (t = 1); want an even k ≥ 2 (0: the default)", ErrConfig)
	case sc.Neighbours%2 == 1 && sc.Neighbours != clients-1:
		return sc, fmt.Errorf("%w: %d neighbours (odd): dropouts could split the survivors of a graph of odd degree into parts the coordinator can sum alone; want an even k, such as %d, or %d (every client a neighbour of every other)", ErrConfig, sc.Neighbours, sc.Neighbours+1, clients-1)
	case !(sc.DropoutRate >= 0 && sc.DropoutRate < 1):
		return sc, fmt.Errorf("%w: dropout rate %v: want [0, 1)", ErrConfig, sc.DropoutRate)
	case !(sc.Colluders >= 0 && sc.Colluders < 1):
		return sc, fmt.Errorf("%w: colluding fraction %v: want [0, 1)", ErrConfig, sc.Colluders)
	case sc.StageTimeout < 0:
		return sc, fmt.Errorf("%w: negative stage timeout", ErrConfig)
	case sc.Noise != NoiseCentral && sc.Noise != NoiseDistributed:
		return sc, fmt.Errorf("%w: noise %q: want %s or %s", ErrConfig, sc.Noise, NoiseCentral, NoiseDistributed)
	case sc.Noise == NoiseDistributed && !spec.Private():
		return sc, fmt.Errorf("%w: distributed noise needs a private fit: give ε (--epsilon)", ErrConfig)
	case sc.Noise == NoiseDistributed && spec.Accountant != dp.RDP.String():
		return sc, fmt.Errorf("%w: distributed (Skellam) noise is accounted only by the RDP accountant, whose bound holds at integer orders: pass --accountant rdp", ErrConfig)
	case clients < 3:
		return sc, fmt.Errorf("%w: secure aggregation needs at least 3 clients on the allow-list, not %d (the sum of two tells each the other's input)", ErrConfig, clients)
	}
	k := sc.Neighbours
	if k == 0 {
		k, _ = (&securePlan{cfg: sc}).graph(clients) // the default of a round of everyone
	} else if k > clients-1 {
		return sc, fmt.Errorf("%w: %d neighbours but only %d clients: want at most %d", ErrConfig, k, clients, clients-1)
	}
	if t := sc.Threshold; t > 0 {
		if t > k {
			return sc, fmt.Errorf("%w: %w: threshold %d is above the neighbour count %d: no secret could ever be recovered", ErrConfig, secagg.ErrThreshold, t, k)
		}
		if 2*t <= k {
			return sc, fmt.Errorf("%w: %w: threshold %d is at most half the neighbour count %d: want more than %d", ErrConfig, secagg.ErrThreshold, t, k, k/2)
		}
	}
	return sc, nil
}

// graph returns k and t of a round of n ≥ 3 participants: the
// configured ones (k capped at n − 1, the complete graph), or those
// secagg.Parameters derives from n, the dropout rate and the colluders.
func (p *securePlan) graph(n int) (k, t int) {
	k, t = p.cfg.Neighbours, p.cfg.Threshold
	if k == 0 {
		c := p.cfg.Colluders
		colluders := secagg.DefaultColluders(n)
		if c > 0 {
			colluders = min(int(math.Ceil(c*float64(n))), n-1)
		}
		par, err := secagg.Parameters(n, orF(p.cfg.DropoutRate, secagg.DefaultDropoutRate), colluders)
		if err == nil { // checkSecure and n ≥ 3 keep the arguments in range
			k = par.Neighbours
			if t == 0 {
				t = par.Threshold
			}
		}
	}
	k = min(k, n-1)
	if t == 0 || t > k || 2*t <= k {
		t = secagg.DefaultThreshold(k)
	}
	return k, t
}

// planSecure makes the plan of a federation of clients clients (the
// allow-list) over T rounds whose updates have dim coordinates, with at
// least minClients survivors in a round that releases. Errors wrap
// ErrConfig, and secagg.ErrBitsTooSmall when the modulus cannot hold the
// federation's sum.
func planSecure(sc SecureConfig, spec federation.Spec, clients, minClients, T, classes, dim int) (*securePlan, error) {
	m, err := calib.LookupMethod(spec.Method)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	p := &securePlan{cfg: sc, dim: dim, binning: m.Family == calib.Binning, survivors: max(minClients, 2)}
	if spec.Private() {
		p.priv = &spec
	}
	p.q = secagg.Quantizer{Bits: sc.Bits, Range: 1}
	switch {
	case p.binning && p.priv == nil:
		p.clips = []float64{1}
		p.q.Range, p.q.Scale = CountRange, 1
		if err := p.q.CheckFederation(clients, dim, 0); err != nil {
			return nil, fmt.Errorf("%w: secure aggregation of exact counts (up to %d per bin and client): %w", ErrConfig, CountRange, err)
		}
		return p, nil
	case p.binning:
		cp, cn := orF(spec.ClipPos, dp.DefaultClipPos), orF(spec.ClipNeg, dp.DefaultClipNeg)
		if dim%(2*classes) != 0 {
			return nil, fmt.Errorf("%w: update of %d values for %d classes", ErrConfig, dim, classes)
		}
		p.clips = make([]float64, 2*classes)
		for j := range classes {
			p.clips[j], p.clips[classes+j] = cp, cn
		}
		p.sigmaUnit = cp
	default:
		c := spec.Clip
		if p.priv != nil {
			c = orF(c, dp.DefaultClip)
		}
		if !(c > 0) || math.IsInf(c, 1) {
			return nil, fmt.Errorf("%w: secure aggregation of %s updates needs a finite bound: give a clip norm (--clip) or ε", ErrConfig, spec.Method)
		}
		p.clips = []float64{c}
		p.sigmaUnit = c
	}
	for _, c := range p.clips {
		if !(c > 0) || math.IsInf(c, 1) {
			return nil, fmt.Errorf("%w: secure aggregation needs finite clip norms, not %v", ErrConfig, c)
		}
	}
	// Each block is divided by its clip norm: L2 norm ≤ 1, every
	// coordinate in [−1, 1]; the whole update has norm ≤ √blocks.
	p.q.Norm = math.Sqrt(float64(len(p.clips)))
	// The largest g whose scale γ = 2^g fits: fits is monotone (a larger
	// γ means larger quantised values, sensitivities and noise), so
	// bisect on g ∈ [MinScaleBits, min(61, b − 2)].
	fits := func(g int) error {
		p.q.Scale = math.Ldexp(1, g)
		noiseVar := 0.0
		if p.distributed() {
			l1, l2, err := p.q.Sensitivity(dim)
			if err != nil {
				return err
			}
			delta := orF(spec.Delta, dp.DefaultDelta)
			p.skellam = dp.SkellamPlan{Epsilon: spec.Epsilon, Delta: delta, Rounds: T, L1: l1, L2: l2, Survivors: p.survivors}
			if p.clientVar, err = p.skellam.ClientVariance(); err != nil {
				return fmt.Errorf("distributed noise: %w", err)
			}
			if p.clientVar > maxClientVariance { // beyond the Skellam sampler; a coarser scale loses nothing to the noise
				return fmt.Errorf("%w: the noise variance %v per client is beyond the Skellam sampler", secagg.ErrBitsTooSmall, p.clientVar)
			}
			noiseVar = p.clientVar * float64(clients)
		}
		return p.q.CheckFederation(clients, dim, noiseVar)
	}
	lo, hi := MinScaleBits, min(61, sc.Bits-2)
	if hi < lo {
		return nil, fmt.Errorf("%w: %w: %d bits leave no room for the scale 2^%d", ErrConfig, secagg.ErrBitsTooSmall, sc.Bits, MinScaleBits)
	}
	if err := fits(lo); err != nil {
		if errors.Is(err, secagg.ErrBitsTooSmall) {
			return nil, fmt.Errorf("%w: at the least precision (scale 2^%d): %w", ErrConfig, MinScaleBits, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	for lo < hi { // fits(lo) holds
		mid := (lo + hi + 1) / 2
		if fits(mid) == nil {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if err := fits(lo); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if p.priv != nil && !p.distributed() {
		// Central noise is calibrated to the clip norm, but stochastic
		// rounding can lengthen a block of d coordinates by up to √d
		// quantised units: each block is shrunk by s = 1 − √d/γ first,
		// so its rounded norm is at most s·γ + √d = γ, the clip norm.
		d := float64(dim / len(p.clips))
		p.shrink = 1 - math.Sqrt(d)/p.q.Scale
		if !(p.shrink > 0) {
			return nil, fmt.Errorf("%w: %w: a block of %v coordinates at scale %v: rounding could exceed the clip norm by more than it", ErrConfig, secagg.ErrBitsTooSmall, d, p.q.Scale)
		}
	}
	return p, nil
}

// round returns the announced description of a round of n participants
// whose sum must have at least sMin survivors.
func (p *securePlan) round(seed [32]byte, n, sMin int) *SecureRound {
	k, t := p.graph(n)
	return &SecureRound{
		Seed: seed, Neighbours: k, Threshold: t, MinSurvivors: sMin,
		Bits: p.q.Bits, Range: p.q.Range, Scale: p.q.Scale, Norm: p.q.Norm,
		Clips: p.clips, ClientVariance: p.clientVar, Shrink: p.shrink,
	}
}

// quantizer returns the quantiser of an announced round.
func (s *SecureRound) quantizer() secagg.Quantizer {
	return secagg.Quantizer{Bits: s.Bits, Range: s.Range, Scale: s.Scale, Norm: s.Norm}
}

// normalise divides each block of u by its clip norm, in place.
func normalise(u, clips []float64, inverse bool) error {
	if len(clips) == 0 || len(u)%len(clips) != 0 {
		return fmt.Errorf("%w: %d values in %d blocks", federation.ErrBadUpdate, len(u), len(clips))
	}
	b := len(u) / len(clips)
	for i := range u {
		if inverse {
			u[i] *= clips[i/b]
		} else {
			u[i] /= clips[i/b]
		}
	}
	return nil
}

// orF returns v, or def when v is zero.
func orF(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}
