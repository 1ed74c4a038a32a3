package dp

import (
	"fmt"
	"math"
)

// Accountant names a privacy accounting method.
type Accountant int

const (
	// ZCDP is ρ-zero-concentrated DP (Bun and Steinke 2016), the paper's
	// accounting: Gaussian mechanisms compose by adding ρ = 1/(2z²), and the
	// total converts to (ε, δ) by ZCDPEpsilon. It takes no credit for
	// sampling clients (a sampling rate below 1 is allowed and ignored,
	// which is conservative). It is the zero value.
	ZCDP Accountant = iota
	// RDP is Rényi DP of the Poisson-subsampled Gaussian mechanism
	// (RDPAccountant), which does take credit for sampling: with q < 1 the
	// same (ε, δ) needs less noise. This goes beyond the paper.
	RDP
)

// String returns "zcdp" or "rdp".
func (a Accountant) String() string {
	switch a {
	case ZCDP:
		return "zcdp"
	case RDP:
		return "rdp"
	}
	return fmt.Sprintf("Accountant(%d)", int(a))
}

// ParseAccountant returns the Accountant named s ("zcdp" or "rdp").
func ParseAccountant(s string) (Accountant, error) {
	switch s {
	case "zcdp":
		return ZCDP, nil
	case "rdp":
		return RDP, nil
	}
	return 0, invalidf("accountant %q; it must be zcdp or rdp", s)
}

// A Plan describes a private federated fit before it runs, so its noise can
// be calibrated to a target (ε, δ): Rounds rounds, in each of which clients
// are Poisson-sampled with rate SampleRate and the server adds Gaussian
// noise to PerRound clipped sums of the sample, each with the same noise
// multiplier z (noise standard deviation per unit of that sum's clip norm).
//
// For the scaling family (DP-FedAvg: FedTemp, FedVector, FedMatrix,
// FedOPVector, FedCal) PerRound is 1: one clipped update per round. For
// binning (FedBin, FedBBQ) with c classes PerRound is 2c: the positive and
// the negative histogram of every class (SPEC §7).
type Plan struct {
	// Epsilon and Delta are the target (ε, δ); required, ε > 0, 0 < δ < 1.
	Epsilon, Delta float64
	// Rounds is the number of rounds T ≥ 1.
	Rounds int
	// PerRound is the number of Gaussian mechanisms applied per round to
	// one sample; 0 means 1.
	PerRound int
	// SampleRate is the Poisson sampling rate q ∈ (0, 1]; 0 means 1.
	SampleRate float64
	// Accountant is the accounting; the zero value is ZCDP.
	Accountant Accountant
}

func (p Plan) perRound() int {
	if p.PerRound == 0 {
		return 1
	}
	return p.PerRound
}

func (p Plan) sampleRate() float64 {
	if p.SampleRate == 0 {
		return 1
	}
	return p.SampleRate
}

func (p Plan) validate() error {
	if err := checkEpsilon(p.Epsilon); err != nil {
		return err
	}
	if err := checkDelta(p.Delta); err != nil {
		return err
	}
	if err := checkCount("rounds", p.Rounds); err != nil {
		return err
	}
	if err := checkCount("mechanisms per round", p.perRound()); err != nil {
		return err
	}
	if err := checkRate(p.sampleRate()); err != nil {
		return err
	}
	if p.Accountant != ZCDP && p.Accountant != RDP {
		return invalidf("accountant %v; it must be zcdp or rdp", p.Accountant)
	}
	return nil
}

// NoiseMultiplier returns the noise multiplier z of p: the standard
// deviation of the noise on each clipped sum, per unit of its clip norm.
// Multiply by the clip norm C (or C₊, C₋ for binning histograms) to get σ.
//
// Under ZCDP, with ρ = ZCDPRho(ε, δ) and m = PerRound, z = √(m·T/(2ρ)):
// σ = C·√(T/(2ρ)) for scaling and σ = C·√(2cT/(2ρ)) for binning, SPEC §7.
// Under RDP, the m mechanisms of a round act on one sample as a single
// Gaussian mechanism with multiplier z/√m, composed over T steps of Poisson
// sampling with rate q; z is found with RDPNoiseMultiplier over
// DefaultOrders. Both never exceed the target.
func (p Plan) NoiseMultiplier() (float64, error) {
	if err := p.validate(); err != nil {
		return 0, err
	}
	m := float64(p.perRound())
	if p.Accountant == RDP {
		z, err := RDPNoiseMultiplier(p.Epsilon, p.Delta, p.sampleRate(), p.Rounds, nil)
		return z * math.Sqrt(m), err
	}
	rho, err := ZCDPRho(p.Epsilon, p.Delta)
	if err != nil {
		return 0, err
	}
	// One ulp up keeps the rounded result on the safe side of the budget.
	return math.Nextafter(math.Sqrt(m*float64(p.Rounds)/(2*rho)), math.Inf(1)), nil
}

// Spending is the privacy spent by repeated releases of a Gaussian
// mechanism, as SpentBy computes it.
type Spending struct {
	// Epsilon is the ε spent at the given δ.
	Epsilon float64
	// Rho is the zCDP ρ; zero under RDP accounting.
	Rho float64
	// Order is the Rényi order that gives Epsilon; zero under zCDP.
	Order float64
}

// SpentBy returns the privacy spent by steps releases of the Gaussian
// mechanism with noise multiplier z (noise standard deviation over L2
// sensitivity), each on a Poisson sample of rate q ∈ (0, 1], at δ, under
// accountant acc: ZCDP composes ρ = steps·z⁻²/2 and takes no credit for
// sampling; RDP composes the subsampled Gaussian over DefaultOrders. An
// ε that is unbounded at every order is an error.
func SpentBy(acc Accountant, z float64, steps int, q, delta float64) (Spending, error) {
	switch {
	case !(z > 0) || math.IsInf(z, 1):
		return Spending{}, fmt.Errorf("noise multiplier %v: want a finite z > 0", z)
	case steps < 1:
		return Spending{}, fmt.Errorf("%d steps: want at least 1", steps)
	}
	var s Spending
	switch acc {
	case ZCDP:
		s.Rho = float64(steps) * GaussianRho(z)
		eps, err := ZCDPEpsilon(s.Rho, delta)
		if err != nil {
			return Spending{}, err
		}
		s.Epsilon = eps
	case RDP:
		var a RDPAccountant
		if err := a.ComposePoissonGaussian(q, z, steps); err != nil {
			return Spending{}, err
		}
		eps, order, err := a.Epsilon(delta)
		if err != nil {
			return Spending{}, err
		}
		s.Epsilon, s.Order = eps, order
	default:
		return Spending{}, fmt.Errorf("unknown accountant %v", acc)
	}
	if math.IsInf(s.Epsilon, 1) {
		return Spending{}, fmt.Errorf("noise multiplier %v: ε is unbounded at every Rényi order; use a larger noise multiplier", z)
	}
	return s, nil
}
