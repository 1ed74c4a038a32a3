package federation

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/fedcalib/fedcalib/dp"
)

// Private selection (calibrate --select) fits several candidate
// calibrators privately on part of each client's calibration rows,
// evaluates them and the base model privately (Evaluate) on the rest, the
// held-out rows, and keeps the one of lowest noisy cwECE. Its fits and
// evaluations are one zCDP release: under zCDP the ρ of independent
// Gaussian mechanisms adds, whatever their rounds and sampling, so the
// whole run is charged once (SelectionRelease). The budget is split in ρ:
// a declared share goes to the evaluations, the rest to the fits, each
// part evenly over its members (PlanSelection).

// DefaultSelectShare is the default share of a selection's ρ spent on
// evaluating the candidates.
const DefaultSelectShare = 0.2

// DefaultHoldOut is the default share of each client's calibration rows
// held out from the fits to evaluate the candidates on.
const DefaultHoldOut = 0.3

// SelectionPlan is the budget of a private selection, split in zCDP ρ.
// The zero value plans nothing.
type SelectionPlan struct {
	// Epsilon, Delta and Rho are the total budget: ε at δ, and its ρ.
	Epsilon, Delta, Rho float64
	// Share is the share of Rho spent on the evaluations.
	Share float64
	// Fits and Evaluations count the private fits and evaluations.
	Fits, Evaluations int
	// FitEpsilon and FitRho are the budget of each fit; EvalEpsilon and
	// EvalRho that of each evaluation (ε at Delta).
	FitEpsilon, FitRho, EvalEpsilon, EvalRho float64
}

// PlanSelection splits the (epsilon, delta) budget of a selection with
// fits fits and evals evaluations: ρ = dp.ZCDPRho(ε, δ), share·ρ spread
// evenly over the evaluations and (1 − share)·ρ over the fits. It
// returns an error for ε not finite and positive, δ outside (0, 1),
// share outside (0, 1) or fewer than 1 fit or 2 evaluations (the base
// model and a candidate).
func PlanSelection(epsilon, delta, share float64, fits, evals int) (*SelectionPlan, error) {
	switch {
	case !(epsilon > 0) || math.IsInf(epsilon, 1):
		return nil, fmt.Errorf("selection: ε is %v: want a finite ε > 0", epsilon)
	case !(delta > 0 && delta < 1):
		return nil, fmt.Errorf("selection: δ is %v: want δ in (0, 1)", delta)
	case !(share > 0 && share < 1):
		return nil, fmt.Errorf("selection: share is %v: want a share of the budget in (0, 1)", share)
	case fits < 1 || evals < 2:
		return nil, fmt.Errorf("selection: %d fits and %d evaluations: want at least 1 fit and 2 evaluations", fits, evals)
	}
	rho, err := dp.ZCDPRho(epsilon, delta)
	if err != nil {
		return nil, fmt.Errorf("selection: %w", err)
	}
	p := &SelectionPlan{Epsilon: epsilon, Delta: delta, Rho: rho, Share: share, Fits: fits, Evaluations: evals}
	p.FitRho = (1 - share) * rho / float64(fits)
	p.EvalRho = share * rho / float64(evals)
	if p.FitEpsilon, err = dp.ZCDPEpsilon(p.FitRho, delta); err != nil {
		return nil, fmt.Errorf("selection: %w", err)
	}
	if p.EvalEpsilon, err = dp.ZCDPEpsilon(p.EvalRho, delta); err != nil {
		return nil, fmt.Errorf("selection: %w", err)
	}
	return p, nil
}

// SelectionRelease returns the one release that records a selection's
// releases (fits and evaluations) in a zCDP ledger: every Gaussian of
// every round of each, with Count multiplied by its release's rounds, in
// one round at sample rate 1, so its Rho is the sum of theirs. It is a
// zCDP record only: it drops the sampling an RDP accountant would
// credit. It returns an error for no releases or one with Skellam noise.
func SelectionRelease(mechanism string, rs ...dp.Release) (dp.Release, error) {
	if len(rs) == 0 {
		return dp.Release{}, errors.New("selection: no releases to record")
	}
	out := dp.Release{Mechanism: mechanism, SampleRate: 1, Rounds: 1}
	for _, r := range rs {
		if len(r.Skellam) > 0 {
			return dp.Release{}, fmt.Errorf("selection: release %q has Skellam noise, which a selection does not record", r.Mechanism)
		}
		for _, g := range r.Noise {
			c := g.Count
			if c == 0 {
				c = 1
			}
			g.Count = c * r.Rounds
			out.Noise = append(out.Noise, g)
		}
	}
	return out, nil
}

// SelectSeed returns the seed of the k-th private fit or evaluation of a
// selection seeded with seed: each gets a stream of its own, so no two
// releases share noise.
func SelectSeed(seed uint64, k int) uint64 {
	return stream(seed, domainSelect, uint64(k), 0).Uint64()
}

// HoldOut splits the calibration rows of every client of p in two: a
// share of them (rounded to nearest), drawn from seed, held out, and the
// rest to fit on. It returns two copies of p whose clients' Calibration
// lists are those parts (other splits unchanged). It returns an error
// for share outside (0, 1).
func HoldOut(p *Partition, share float64, seed uint64) (fit, held *Partition, err error) {
	if !(share > 0 && share < 1) {
		return nil, nil, fmt.Errorf("hold-out share is %v: want a share of each client's calibration rows in (0, 1)", share)
	}
	fit, held = copyPartition(p), copyPartition(p)
	for k, c := range p.Clients {
		rows := slices.Clone(c.Calibration)
		rng := stream(seed, domainSelect, uint64(k), 1)
		rng.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
		n := int(math.Round(share * float64(len(rows))))
		h, f := rows[:n:n], rows[n:]
		slices.Sort(h)
		slices.Sort(f)
		held.Clients[k].Calibration, fit.Clients[k].Calibration = h, f
	}
	return fit, held, nil
}

// copyPartition returns a copy of p whose Clients slice is its own.
func copyPartition(p *Partition) *Partition {
	q := *p
	q.Clients = slices.Clone(p.Clients)
	return &q
}
