package federation

import (
	"fmt"
	"math"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
)

// Privacy asks a federated fit for user-level (ε, δ) differential privacy
// (SPEC §7): each client clips its contribution and the server adds
// Gaussian noise to every round's sum, calibrated with dp.Plan so that
// the T rounds together spend (ε, δ).
type Privacy struct {
	// Epsilon is the total ε > 0 of the fit. +Inf runs the private code
	// path with no noise (and, with infinite clip norms, no clipping): a
	// check that the private protocol reduces to the non-private one. Such
	// a fit is not private and records no privacy.
	Epsilon float64
	// Delta is δ ∈ (0, 1).
	Delta float64
	// Clip is the L2 clip norm C of a scaling update Δ_k; zero means
	// dp.DefaultClip. +Inf (no clipping) is allowed only with an infinite
	// Epsilon.
	Clip float64
	// ClipPos and ClipNeg are the L2 clip norms C₊ and C₋ of each class's
	// positive and negative histogram of a client; zero means
	// dp.DefaultClipPos and dp.DefaultClipNeg. +Inf as for Clip.
	ClipPos, ClipNeg float64
	// Accountant is the privacy accounting; the zero value is dp.ZCDP,
	// the paper's.
	Accountant dp.Accountant
	// AlphaZ, when positive, makes the weighting of the private binning
	// protocols use calib.DPAlphaLower with this z (a lower confidence
	// bound of each class's noisy count, beyond the paper) instead of the
	// paper's calib.DPAlpha. Zero means the paper's rule.
	AlphaZ float64
	// Secure draws the noise from crypto/rand (dp.NewSecure) instead of
	// the seeded stream: use it for any release of real data. Results are
	// then not reproducible.
	Secure bool
}

// resolved is a validated Privacy with defaults filled in.
type resolved struct {
	Privacy
	infinite bool // ε = +Inf: no noise
}

func (p *Privacy) resolve(binning bool) (*resolved, error) {
	r := &resolved{Privacy: *p, infinite: math.IsInf(p.Epsilon, 1)}
	if r.Clip == 0 {
		r.Clip = dp.DefaultClip
	}
	if r.ClipPos == 0 {
		r.ClipPos = dp.DefaultClipPos
	}
	if r.ClipNeg == 0 {
		r.ClipNeg = dp.DefaultClipNeg
	}
	if !(p.Epsilon > 0) {
		return nil, fmt.Errorf("privacy: ε is %v: it must be > 0", p.Epsilon)
	}
	if !(p.Delta > 0 && p.Delta < 1) {
		return nil, fmt.Errorf("privacy: δ is %v: it must be in (0, 1)", p.Delta)
	}
	if !(p.AlphaZ >= 0) || math.IsInf(p.AlphaZ, 1) {
		return nil, fmt.Errorf("privacy: the weighting's z is %v: it must be finite and ≥ 0 (0 for the paper's rule)", p.AlphaZ)
	}
	clips := []struct {
		name string
		v    float64
	}{{"clip norm C", r.Clip}}
	if binning {
		clips = []struct {
			name string
			v    float64
		}{{"clip norm C₊", r.ClipPos}, {"clip norm C₋", r.ClipNeg}}
	}
	for _, c := range clips {
		if r.infinite && math.IsInf(c.v, 1) {
			continue
		}
		if err := dp.CheckClip(c.name, c.v); err != nil {
			return nil, fmt.Errorf("privacy: %w", err)
		}
	}
	if _, err := dp.ParseAccountant(p.Accountant.String()); err != nil {
		return nil, fmt.Errorf("privacy: %w", err)
	}
	return r, nil
}

// NoisePlan is the Gaussian noise of every round of a private federated
// fit (SPEC §7): the mechanisms one round releases, with their
// sensitivities (clip norms) and standard deviations. The protocols add
// exactly this noise and charge exactly these releases to their ledger,
// and "fedcalib privacy" prints the same plan, so the two cannot
// disagree.
type NoisePlan struct {
	// Family is the family of the method the plan is for.
	Family calib.Family
	// Multiplier is the noise multiplier z: each mechanism's σ is z
	// times its sensitivity. Zero for an infinite ε (no noise).
	Multiplier float64
	// Mechanisms lists the Gaussian mechanisms of one round as the
	// ledger records them: for a scaling method one clipped update of
	// sensitivity C; for a binning method, the c class-positive
	// histograms (sensitivity C₊) then the c class-negative ones (C₋);
	// for the hybrid scalbin, the clipped update of T of a scaling-stage
	// round (C) then the 2c value histograms (counts and sums, C₊) of a
	// binning-stage round — the fit runs T rounds of each.
	Mechanisms []dp.Gaussian
}

// PerRound returns the number of Gaussian mechanisms of one round: 1 for
// scaling, 2c for binning, 1 + 2c for a pair of rounds (one of each
// stage) of the hybrid scalbin.
func (p *NoisePlan) PerRound() int {
	n := 0
	for _, g := range p.Mechanisms {
		n += max(g.Count, 1)
	}
	return n
}

// Sigma returns the σ that a calibrator file records: that of the update
// for scaling and hybrid, of the class-positive histograms for binning.
func (p *NoisePlan) Sigma() float64 { return p.Mechanisms[0].Sigma }

// PlanNoise returns the noise plan of a private fit of the registry's
// method (calib.Methods) over classes classes, rounds rounds and Poisson
// sample rate sampleRate, with p's budget, clip norms and accountant
// (zero fields take their defaults, as in a fit). It returns an error
// for an unknown method, invalid privacy settings, rounds outside
// [1, MaxRounds], or more classes than any binning fit can hold
// (calib.MaxSize).
func PlanNoise(method string, classes int, p *Privacy, rounds int, sampleRate float64) (*NoisePlan, error) {
	m, err := calib.LookupMethod(method)
	if err != nil {
		return nil, err
	}
	binning := m.HasBins() // binning and the hybrid scalbin: one histogram per class
	if binning && classes < 2 {
		return nil, fmt.Errorf("%d classes: a binning method needs at least 2", classes)
	}
	if rounds < 1 || rounds > MaxRounds {
		return nil, fmt.Errorf("rounds T is %d: want 1 to %d", rounds, MaxRounds)
	}
	if binning {
		// No fit of this many classes can be made, even with one bin.
		if err := m.CheckSize(classes, 1); err != nil {
			return nil, err
		}
	}
	var r *resolved
	if m.Family == calib.Hybrid {
		r, err = p.resolveHybrid()
	} else {
		r, err = p.resolve(binning)
	}
	if err != nil {
		return nil, err
	}
	return r.plan(m.Family, classes, rounds, sampleRate)
}

// resolveHybrid resolves the privacy of FedScalBin, which clips its
// scaling updates to C and its value histograms to C₊.
func (p *Privacy) resolveHybrid() (*resolved, error) {
	r, err := p.resolve(false)
	if err != nil {
		return nil, err
	}
	if !(r.infinite && math.IsInf(r.ClipPos, 1)) {
		if err := dp.CheckClip("clip norm C₊", r.ClipPos); err != nil {
			return nil, fmt.Errorf("privacy: %w", err)
		}
	}
	return r, nil
}

// plan returns the noise plan of a fit of family fam.
func (r *resolved) plan(fam calib.Family, classes, rounds int, q float64) (*NoisePlan, error) {
	p := &NoisePlan{Family: fam}
	switch fam {
	case calib.Binning:
		p.Mechanisms = []dp.Gaussian{{Sensitivity: r.ClipPos, Count: classes}, {Sensitivity: r.ClipNeg, Count: classes}}
	case calib.Hybrid:
		p.Mechanisms = []dp.Gaussian{{Sensitivity: r.Clip}, {Sensitivity: r.ClipPos, Count: 2 * classes}}
	default:
		p.Mechanisms = []dp.Gaussian{{Sensitivity: r.Clip}}
	}
	if r.infinite {
		return p, nil
	}
	if fam == calib.Hybrid {
		z, err := hybridMultiplier(r, 2*classes, rounds, q)
		if err != nil {
			return nil, fmt.Errorf("privacy: %w", err)
		}
		p.Multiplier = z
		for i := range p.Mechanisms {
			p.Mechanisms[i].Sigma = z * p.Mechanisms[i].Sensitivity
		}
		return p, nil
	}
	z, err := dp.Plan{
		Epsilon:    r.Epsilon,
		Delta:      r.Delta,
		Rounds:     rounds,
		PerRound:   p.PerRound(),
		SampleRate: q,
		Accountant: r.Accountant,
	}.NoiseMultiplier()
	if err != nil {
		return nil, fmt.Errorf("privacy: %w", err)
	}
	p.Multiplier = z
	for i := range p.Mechanisms {
		p.Mechanisms[i].Sigma = z * p.Mechanisms[i].Sensitivity
	}
	return p, nil
}

// hybridMultiplier returns the noise multiplier z of a private
// FedScalBin: rounds rounds of one Gaussian mechanism (the clipped update
// of T) then rounds rounds of m mechanisms (the clipped value histograms),
// each of noise z times its sensitivity, Poisson-sampled at q, that
// together spend r's (ε, δ). Under zCDP ρ adds up to rounds·(1+m)/(2z²),
// so z is that of dp.Plan with 1+m mechanisms a round; under RDP z is
// found by bisection on the composed accountant (the smallest z found
// within 1e-12 relative whose ε is within budget).
func hybridMultiplier(r *resolved, m, rounds int, q float64) (float64, error) {
	if r.Accountant != dp.RDP {
		return dp.Plan{Epsilon: r.Epsilon, Delta: r.Delta, Rounds: rounds, PerRound: 1 + m, SampleRate: q}.NoiseMultiplier()
	}
	if q == 0 {
		q = 1
	}
	// Check the inputs as dp.Plan does, through the single-stage plan.
	if _, err := (dp.Plan{Epsilon: r.Epsilon, Delta: r.Delta, Rounds: rounds, SampleRate: q, Accountant: dp.RDP}).NoiseMultiplier(); err != nil {
		return 0, err
	}
	ok := func(z float64) bool {
		acc, err := dp.NewRDPAccountant(nil)
		if err != nil {
			return false
		}
		if acc.ComposePoissonGaussian(q, z, rounds) != nil || acc.ComposePoissonGaussian(q, z/math.Sqrt(float64(m)), rounds) != nil {
			return false
		}
		e, _, err := acc.Epsilon(r.Delta)
		return err == nil && e <= r.Epsilon
	}
	hi := 1.0
	for !ok(hi) {
		if hi *= 2; hi > 1e12 {
			return 0, fmt.Errorf("no noise multiplier reaches epsilon %v at delta %v: %w", r.Epsilon, r.Delta, dp.ErrInvalid)
		}
	}
	lo := hi / 2
	for ok(lo) && lo > 1e-12 {
		hi, lo = lo, lo/2
	}
	for hi-lo > 1e-12*hi {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}

// ledger returns the ledger that records the fit's releases, nil for an
// infinite ε.
func (r *resolved) ledger() (*dp.Ledger, error) {
	if r.infinite {
		return nil, nil
	}
	l, err := dp.NewLedger(r.Accountant, dp.Budget{Epsilon: r.Epsilon, Delta: r.Delta})
	if err != nil {
		return nil, fmt.Errorf("privacy: %w", err)
	}
	return l, nil
}

// noise returns the noise source of round t.
func (r *resolved) noise(seed uint64, t int) dp.Noise {
	if r.Secure {
		return dp.NewSecure()
	}
	return stream(seed, domainNoise, uint64(t), 0)
}

// clip clips x to L2 norm c in place unless c is infinite.
func clip(x []float64, c float64) {
	if !math.IsInf(c, 1) {
		dp.ClipL2(x, c)
	}
}

// record returns the privacy record of a finished fit, nil when nothing
// private was released.
func record(l *dp.Ledger, sigma float64, r *resolved, binning bool, rounds Rounds) *calib.Privacy {
	if l == nil {
		return nil
	}
	spent := l.Spent()
	p := &calib.Privacy{
		Epsilon:    spent.Epsilon,
		Delta:      spent.Delta,
		Rho:        spent.Rho,
		Sigma:      sigma,
		Accountant: l.Accountant().String(),
		Rounds:     rounds.T,
		SampleRate: rounds.SampleRate,
	}
	if binning {
		p.ClipPos, p.ClipNeg = r.ClipPos, r.ClipNeg
	} else {
		p.Clip = r.Clip
	}
	return p
}

// chargeRound charges round t of the protocol name to l: one release of
// the Gaussian mechanisms noise at sampling rate rate.
func chargeRound(l *dp.Ledger, name string, t int, noise []dp.Gaussian, rate float64) error {
	return l.Spend(dp.Release{Mechanism: fmt.Sprintf("%s round %d", name, t), Noise: noise, SampleRate: rate, Rounds: 1})
}
