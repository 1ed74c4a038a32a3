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
	// histograms (sensitivity C₊) then the c class-negative ones (C₋).
	Mechanisms []dp.Gaussian
}

// PerRound returns the number of Gaussian mechanisms of one round: 1 for
// scaling, 2c for binning.
func (p *NoisePlan) PerRound() int {
	n := 0
	for _, g := range p.Mechanisms {
		n += max(g.Count, 1)
	}
	return n
}

// Sigma returns the σ that a calibrator file records: that of the update
// for scaling, of the class-positive histograms for binning.
func (p *NoisePlan) Sigma() float64 { return p.Mechanisms[0].Sigma }

// PlanNoise returns the noise plan of a private fit of the registry's
// method (calib.Methods) over classes classes, rounds rounds and Poisson
// sample rate sampleRate, with p's budget, clip norms and accountant
// (zero fields take their defaults, as in a fit). It returns an error
// for an unknown method, a method without a private fit
// (ErrNoPrivateFit), invalid privacy settings, rounds outside
// [1, MaxRounds], or more classes than any binning fit can hold
// (calib.MaxSize).
func PlanNoise(method string, classes int, p *Privacy, rounds int, sampleRate float64) (*NoisePlan, error) {
	m, err := calib.LookupMethod(method)
	if err != nil {
		return nil, err
	}
	if m.Family == calib.Hybrid {
		return nil, fmt.Errorf("method %q: %w yet (it would charge its scaling and its binning stage)", method, ErrNoPrivateFit)
	}
	binning := m.Family == calib.Binning
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
	r, err := p.resolve(binning)
	if err != nil {
		return nil, err
	}
	return r.plan(m.Family, classes, rounds, sampleRate)
}

// plan returns the noise plan of a fit of family fam.
func (r *resolved) plan(fam calib.Family, classes, rounds int, q float64) (*NoisePlan, error) {
	p := &NoisePlan{Family: fam}
	if fam == calib.Binning {
		p.Mechanisms = []dp.Gaussian{{Sensitivity: r.ClipPos, Count: classes}, {Sensitivity: r.ClipNeg, Count: classes}}
	} else {
		p.Mechanisms = []dp.Gaussian{{Sensitivity: r.Clip}}
	}
	if r.infinite {
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
