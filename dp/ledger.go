package dp

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// budgetSlack is the relative tolerance of a Ledger's budget check. It only
// absorbs rounding: a fit calibrated with Plan.NoiseMultiplier to spend its
// whole budget over T rounds, recorded one round at a time, sums T rounded
// terms and may land an ulp or so above the budget.
const budgetSlack = 1e-9

// Budget is an (ε, δ) differential-privacy budget.
type Budget struct {
	// Epsilon is ε > 0; +Inf means no limit (releases are only recorded).
	Epsilon float64
	// Delta is δ ∈ (0, 1); required, since spent ε is reported at this δ.
	Delta float64
}

// Gaussian describes Count Gaussian mechanisms applied in one round: each
// adds independent N(0, Sigma²) noise to every coordinate of a sum whose L2
// sensitivity (its clip norm) is Sensitivity.
type Gaussian struct {
	// Sigma is the noise standard deviation, > 0.
	Sigma float64
	// Sensitivity is the L2 sensitivity (clip norm) of the sum, > 0.
	Sensitivity float64
	// Count is the number of such sums per round; 0 means 1.
	Count int
}

func (g Gaussian) count() int {
	if g.Count == 0 {
		return 1
	}
	return g.Count
}

// A Release is one private output recorded in a Ledger: Rounds rounds, in
// each of which clients are Poisson-sampled with rate SampleRate and the
// Gaussian mechanisms in Noise are applied to sums over that one sample.
// A scaling fit (DP-FedAvg) has one Gaussian {σ, C, 1}; a binning fit with
// c classes has {σ₊, C₊, c} and {σ₋, C₋, c}. A round under secure
// aggregation with distributed noise has Skellam mechanisms instead (or as
// well); only the RDP accountant takes them, and it takes no credit for
// sampling on them.
type Release struct {
	// Mechanism labels the release, e.g. "FedBBQ" or "FedTemp round 3".
	Mechanism string
	// Noise lists the Gaussian mechanisms of each round. A release has at
	// least one Gaussian or one Skellam mechanism.
	Noise []Gaussian
	// Skellam lists the distributed Skellam mechanisms of each round
	// (see Skellam); nil for central noise.
	Skellam []Skellam
	// SampleRate is the Poisson sampling rate q ∈ (0, 1]; 0 means 1.
	SampleRate float64
	// Rounds is the number of rounds covered, ≥ 1.
	Rounds int
}

func (r Release) sampleRate() float64 {
	if r.SampleRate == 0 {
		return 1
	}
	return r.SampleRate
}

func (r Release) validate() error {
	if len(r.Noise) == 0 && len(r.Skellam) == 0 {
		return invalidf("release %q has no Gaussian or Skellam mechanism", r.Mechanism)
	}
	for _, s := range r.Skellam {
		if err := s.validate(); err != nil {
			return fmt.Errorf("release %q: %w", r.Mechanism, err)
		}
	}
	for _, g := range r.Noise {
		if !(g.Sigma > 0) || math.IsInf(g.Sigma, 1) {
			return invalidf("release %q: noise standard deviation = %v; it must be finite and > 0", r.Mechanism, g.Sigma)
		}
		if err := CheckClip("sensitivity", g.Sensitivity); err != nil {
			return fmt.Errorf("release %q: %w", r.Mechanism, err)
		}
		if g.Count < 0 {
			return invalidf("release %q: count = %d; it must be ≥ 0", r.Mechanism, g.Count)
		}
	}
	if err := checkRate(r.sampleRate()); err != nil {
		return fmt.Errorf("release %q: %w", r.Mechanism, err)
	}
	if err := checkCount("rounds", r.Rounds); err != nil {
		return fmt.Errorf("release %q: %w", r.Mechanism, err)
	}
	return nil
}

// NoiseMultiplier returns the effective noise multiplier of one round of r:
// its Gaussian mechanisms act on one sample as a single Gaussian mechanism
// with multiplier (Σ Count·(Sensitivity/Sigma)²)^(−1/2). Skellam
// mechanisms do not enter it; a release with no Gaussian gives +Inf.
func (r Release) NoiseMultiplier() float64 {
	var s float64
	for _, g := range r.Noise {
		u := g.Sensitivity / g.Sigma
		s += float64(g.count()) * u * u
	}
	return 1 / math.Sqrt(s)
}

// Rho returns the zCDP ρ of r ignoring sampling: Rounds·Σ Count·Δ²/(2σ²).
// A Skellam mechanism contributes its Gaussian-equivalent term
// Count·Δ₂²/(2μ), for reference only: its RDP bound has a further
// discreteness term (SkellamRDP).
func (r Release) Rho() float64 {
	var s float64
	for _, g := range r.Noise {
		u := g.Sensitivity / g.Sigma
		s += float64(g.count()) * u * u / 2
	}
	for _, k := range r.Skellam {
		s += float64(k.count()) * k.L2 * k.L2 / (2 * k.Variance)
	}
	return float64(r.Rounds) * s
}

func (r Release) clone() Release {
	r.Noise = slices.Clone(r.Noise)
	r.Skellam = slices.Clone(r.Skellam)
	return r
}

// Spent is the privacy spent by the releases of a Ledger.
type Spent struct {
	// Epsilon is the ε spent at Delta under the ledger's accountant.
	Epsilon float64
	// Delta is the budget's δ.
	Delta float64
	// Rho is the zCDP ρ of the releases, ignoring sampling. Under ZCDP
	// accounting Epsilon derives from it; under RDP it is for reference.
	Rho float64
}

// A Ledger records every private release of a fit and refuses any release
// that would take the total past its budget. Create one with NewLedger; the
// zero Ledger has no budget at all and refuses every release. A Ledger is
// not safe for concurrent use.
type Ledger struct {
	accountant Accountant
	budget     Budget
	rhoBudget  float64 // the budget as zCDP ρ, under ZCDP
	rho        float64
	rdp        *RDPAccountant
	releases   []Release
}

// NewLedger returns an empty ledger that accounts with acc and holds to
// budget.
func NewLedger(acc Accountant, budget Budget) (*Ledger, error) {
	if err := checkDelta(budget.Delta); err != nil {
		return nil, err
	}
	unlimited := math.IsInf(budget.Epsilon, 1)
	if !unlimited {
		if err := checkEpsilon(budget.Epsilon); err != nil {
			return nil, err
		}
	}
	l := &Ledger{accountant: acc, budget: budget}
	switch acc {
	case ZCDP:
		l.rhoBudget = math.Inf(1)
		if !unlimited {
			rho, err := ZCDPRho(budget.Epsilon, budget.Delta)
			if err != nil {
				return nil, err
			}
			l.rhoBudget = rho
		}
	case RDP:
		l.rdp = new(RDPAccountant)
	default:
		return nil, invalidf("accountant %v; it must be zcdp or rdp", acc)
	}
	return l, nil
}

// Accountant returns the ledger's accounting method.
func (l *Ledger) Accountant() Accountant { return l.accountant }

// Budget returns the ledger's budget.
func (l *Ledger) Budget() Budget { return l.budget }

// Spend records r if the total stays within the budget. Otherwise it
// records nothing and returns an error wrapping ErrBudgetExceeded that says
// what the release would have spent; a malformed release gives an error
// wrapping ErrInvalid. Call Spend before publishing the noisy output.
func (l *Ledger) Spend(r Release) error {
	if err := r.validate(); err != nil {
		return err
	}
	switch l.accountant {
	case ZCDP:
		if len(r.Skellam) > 0 {
			return invalidf("release %q has Skellam noise: its RDP bound holds at integer orders only; account it with the rdp accountant", r.Mechanism)
		}
		rho := l.rho + r.Rho()
		if rho > l.rhoBudget*(1+budgetSlack) {
			return fmt.Errorf("%w: release %q (%s) would bring zCDP rho to %.6g, above the budget's %.6g (epsilon %v, delta %v)",
				ErrBudgetExceeded, r.Mechanism, describe(r), rho, l.rhoBudget, l.budget.Epsilon, l.budget.Delta)
		}
		l.rho = rho
	case RDP:
		acc := l.rdp.clone()
		if len(r.Noise) > 0 {
			if err := acc.ComposePoissonGaussian(r.sampleRate(), r.NoiseMultiplier(), r.Rounds); err != nil {
				return fmt.Errorf("release %q: %w", r.Mechanism, err)
			}
		}
		for _, s := range r.Skellam {
			if err := acc.ComposeSkellam(s, r.Rounds); err != nil {
				return fmt.Errorf("release %q: %w", r.Mechanism, err)
			}
		}
		eps, _, err := acc.Epsilon(l.budget.Delta)
		if err != nil {
			return err
		}
		if eps > l.budget.Epsilon*(1+budgetSlack) {
			return fmt.Errorf("%w: release %q (%s) would bring epsilon to %.6g at delta %v, above the budget's %v",
				ErrBudgetExceeded, r.Mechanism, describe(r), eps, l.budget.Delta, l.budget.Epsilon)
		}
		l.rdp = acc
		l.rho += r.Rho()
	}
	l.releases = append(l.releases, r.clone())
	return nil
}

// describe summarises a release for error messages.
func describe(r Release) string {
	var b strings.Builder
	for i, g := range r.Noise {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d× sigma %.6g for sensitivity %.6g", g.count(), g.Sigma, g.Sensitivity)
	}
	for i, s := range r.Skellam {
		if i > 0 || len(r.Noise) > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d× Skellam variance %.6g for sensitivities L1 %.6g, L2 %.6g", s.count(), s.Variance, s.L1, s.L2)
	}
	fmt.Fprintf(&b, ", sample rate %v, %d round", r.sampleRate(), r.Rounds)
	if r.Rounds != 1 {
		b.WriteString("s")
	}
	return b.String()
}

// Spent returns the privacy spent so far.
func (l *Ledger) Spent() Spent {
	s := Spent{Delta: l.budget.Delta, Rho: l.rho}
	switch l.accountant {
	case ZCDP:
		s.Epsilon, _ = ZCDPEpsilon(l.rho, l.budget.Delta)
	case RDP:
		s.Epsilon, _, _ = l.rdp.Epsilon(l.budget.Delta)
	}
	return s
}

// Releases returns a copy of the releases recorded so far, in order.
func (l *Ledger) Releases() []Release {
	out := make([]Release, len(l.releases))
	for i, r := range l.releases {
		out[i] = r.clone()
	}
	return out
}
