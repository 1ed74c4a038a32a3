package federation

import (
	"fmt"

	"github.com/fedcalib/fedcalib/dp"
)

// SumStep is implemented by the server step of every protocol of this
// package but FedScalBin (whose two stages send updates of different
// lengths), for a driver that never sees a client's update: under secure
// aggregation (package secagg, driven by package network) the server
// learns only the sum of a round's updates. Such a driver calls AddSum
// once per round instead of Add for each participant, and cannot call
// Check on an update it never sees: the clients clip their own updates
// and the server must trust them to (the threat model of
// docs/NETWORK.md).
type SumStep interface {
	// AddSum adds the sum of participants updates of the current round,
	// as Add of each would (up to the order of floating-point additions).
	// It returns an error wrapping ErrBadUpdate for a sum of the wrong
	// length or with a non-finite value.
	AddSum(sum []float64, participants int) error
	// NoisedRound tells the server that the sum of the next EndRound
	// already carries the round's noise (distributed noise added by the
	// clients before secure aggregation): that EndRound adds none and
	// charges rel to the ledger instead of the planned Gaussian releases
	// (nothing when rel has no mechanism, as in a round with no
	// survivor). z is the standard deviation of that noise per
	// coordinate in units of the clip norm (each histogram's for binning,
	// the update's for scaling), which the DP weighting of the binning
	// protocols needs. It returns an error for a server without privacy
	// or a negative z.
	NoisedRound(rel dp.Release, z float64) error
}

// external is the distributed noise of the next round (NoisedRound).
type external struct {
	rel dp.Release
	z   float64
}

func (e *external) set(name string, ledger *dp.Ledger, rel dp.Release, z float64) error {
	if ledger == nil {
		return fmt.Errorf("%s: distributed noise for a fit without privacy", name)
	}
	if !(z >= 0) {
		return fmt.Errorf("%s: noise multiplier %v: want ≥ 0", name, z)
	}
	e.rel, e.z = rel, z
	return nil
}

// spend charges the round's distributed release, if it has a mechanism.
func (e *external) spend(l *dp.Ledger) error {
	if len(e.rel.Noise) == 0 && len(e.rel.Skellam) == 0 {
		return nil
	}
	return l.Spend(e.rel)
}

// AddSum adds the sum of a round's histograms.
func (s *binServer) AddSum(sum []float64, participants int) error {
	if err := checkFinite(sum, s.UpdateLen()); err != nil {
		return err
	}
	if participants < 0 {
		return fmt.Errorf("%w: %d participants", ErrBadUpdate, participants)
	}
	return s.Add(sum)
}

// NoisedRound marks the next round's sum as already noised.
func (s *binServer) NoisedRound(rel dp.Release, z float64) error {
	e := &external{}
	if err := e.set(s.spec.name, s.ledger, rel, z); err != nil {
		return err
	}
	s.ext = e
	return nil
}

// AddSum adds the sum of a round's deltas.
func (s *scaleServer) AddSum(sum []float64, participants int) error {
	if err := checkFinite(sum, s.UpdateLen()); err != nil {
		return err
	}
	if participants < 0 {
		return fmt.Errorf("%w: %d participants", ErrBadUpdate, participants)
	}
	return s.Add(sum)
}

// NoisedRound marks the next round's sum as already noised.
func (s *scaleServer) NoisedRound(rel dp.Release, z float64) error {
	e := &external{}
	if err := e.set(s.name, s.ledger, rel, z); err != nil {
		return err
	}
	s.ext = e
	return nil
}
