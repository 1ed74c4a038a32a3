package calib

import (
	"errors"
	"fmt"

	"github.com/fedcalib/fedcalib/dp"
)

// Selection records a private selection (calibrate --select): candidate
// calibrators fitted privately on part of each client's calibration
// rows, evaluated privately with the base model on the held-out rest, the
// one of lowest noisy cwECE kept. Every fit and evaluation is one zCDP
// release, so Rho = FitRho + SelectRho and Epsilon is that ρ at the
// record's δ. The zero value is not a valid record.
type Selection struct {
	// Epsilon is the ε of the whole run, fits and evaluations (the
	// ledger entry), at Privacy.Delta.
	Epsilon float64 `json:"epsilon"`
	// Rho is the run's zCDP ρ: FitRho + SelectRho.
	Rho float64 `json:"rho"`
	// Share is the declared share of the budget's ρ spent on the
	// evaluations.
	Share float64 `json:"share"`
	// FitRho is the ρ of all the fits; SelectRho that of all the
	// evaluations.
	FitRho    float64 `json:"fit_rho"`
	SelectRho float64 `json:"select_rho"`
	// HeldOut is the share of each client's calibration rows held out
	// from the fits and evaluated on.
	HeldOut float64 `json:"held_out"`
	// EvalSigma and EvalClip are the noise σ and clip norm C of each
	// evaluation.
	EvalSigma float64 `json:"eval_sigma"`
	EvalClip  float64 `json:"eval_clip"`
	// Candidates lists the candidates in the order evaluated, the base
	// model first.
	Candidates []Candidate `json:"candidates"`
}

// Candidate is one candidate of a Selection.
type Candidate struct {
	// Name is "base" or the method, with its bin exponent for a binning
	// method ("bin M=6").
	Name string `json:"name"`
	// NoisyCWECE is its cwECE on the held-out rows from the noisy
	// statistics.
	NoisyCWECE float64 `json:"noisy_cwece"`
	// Winner marks the candidate kept.
	Winner bool `json:"winner,omitempty"`
}

// check reports whether s (nil: no selection) is consistent with the
// record p it belongs to: zCDP accounting, ρ the sum of its parts and at
// least the winning fit's, ε that ρ at p's δ, and one winner among at
// least two candidates.
func (s *Selection) check(p *Privacy) error {
	if s == nil {
		return nil
	}
	if p.Accountant != dp.ZCDP.String() {
		return fmt.Errorf("privacy.selection: a selection is accounted in zcdp, not %q", p.Accountant)
	}
	for _, v := range []struct {
		name string
		v    float64
	}{{"rho", s.Rho}, {"fit_rho", s.FitRho}, {"select_rho", s.SelectRho}, {"eval_sigma", s.EvalSigma}, {"eval_clip", s.EvalClip}} {
		if !(v.v > 0) {
			return fmt.Errorf("privacy.selection.%s is %v: want > 0: %w", v.name, v.v, dp.ErrInvalid)
		}
	}
	if !(s.Share > 0 && s.Share < 1) || !(s.HeldOut > 0 && s.HeldOut < 1) {
		return fmt.Errorf("privacy.selection: share %v and held_out %v must be in (0, 1): %w", s.Share, s.HeldOut, dp.ErrInvalid)
	}
	if !near(s.Rho, s.FitRho+s.SelectRho) {
		return fmt.Errorf("privacy.selection.rho is %v, not fit_rho + select_rho = %v", s.Rho, s.FitRho+s.SelectRho)
	}
	if p.Rho > s.FitRho*(1+PrivacyTolerance) {
		return fmt.Errorf("privacy.rho %v of the winning fit exceeds privacy.selection.fit_rho %v", p.Rho, s.FitRho)
	}
	eps, err := dp.ZCDPEpsilon(s.Rho, p.Delta)
	if err != nil {
		return fmt.Errorf("privacy.selection: %w", err)
	}
	if !near(s.Epsilon, eps) {
		return fmt.Errorf("privacy.selection.epsilon is %v, but ρ = %v at δ = %v spends ε = %v", s.Epsilon, s.Rho, p.Delta, eps)
	}
	winners := 0
	for _, c := range s.Candidates {
		if c.Winner {
			winners++
		}
	}
	if len(s.Candidates) < 2 || winners != 1 {
		return errors.New("privacy.selection: want at least 2 candidates, exactly one the winner")
	}
	return nil
}

// Total returns the ε spent to make the calibrator: the selection's
// total when a private selection chose it, else the fit's Epsilon.
func (p *Privacy) Total() float64 {
	if p.Selection != nil {
		return p.Selection.Epsilon
	}
	return p.Epsilon
}
