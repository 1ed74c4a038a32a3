package federation

import (
	"context"
	"errors"
	"fmt"

	"github.com/fedcalib/fedcalib/calib"
)

// ErrNoPrivateFit is returned (wrapped, with the method) for a private
// fit, or a noise plan, of a method that has no private protocol yet:
// the Hybrid scalbin.
var ErrNoPrivateFit = errors.New("no private federated fit")

// FedScalBin is federated scaling-binning (calib.ScalingBinning), the
// sequential composition of two protocols of this package. Every client
// splits its calibration rows as the central fit does
// (calib.SplitScalingBinning): its even rows take part in the first
// stage, its odd rows in the second.
//
//  1. Scaling: FedTemp (FedAvg over the temperature, from T = 1) for the
//     rounds r, with ServerLR and Clip, on the even rows.
//  2. Binning: the binning protocol (FedBin's Algorithm 1, without
//     weighting) for the rounds r again, on the odd rows scaled by the
//     first stage's T: each participant sends its one-vs-all histograms
//     of softmax(z/T) with 2^Mexp fine bins per class, the server sums
//     them over the rounds and forms the Bins equal-mass bins from the
//     sums (calib.NewScalingBinning).
//
// So a fit over T rounds runs 2T rounds, the second stage's with the
// same seed as the first's (round t of each stage samples the same
// clients). With one client, p = 1 and T = 1 it is the central fit up to
// the rounding of FedAvg's one update of T.
//
// FedScalBin is not a Stepper: its two stages are two protocols, each
// with its own client and server steps, which Fit drives one after the
// other. A driver over the network (package network) does not run it
// yet. It has no private variant yet (ErrNoPrivateFit).
//
// The zero value fits with calib.ScalingBinningMexp fine bins and
// calib.DefaultScalingBinningBins equal-mass bins, η_S = 1 and no
// clipping.
type FedScalBin struct {
	// Mexp is the bin exponent of the fine histograms, in
	// [1, calib.MaxMexp]; zero means calib.ScalingBinningMexp.
	Mexp int
	// Bins is the number of equal-mass bins per class, 1 to 2^Mexp;
	// zero means calib.DefaultScalingBinningBins(Mexp).
	Bins int
	// ServerLR is the first stage's server learning rate η_S; zero
	// means 1.
	ServerLR float64
	// Clip, if positive, clips the first stage's updates of T (see
	// FedAvg.Clip).
	Clip float64
}

// newFedScalBin returns the protocol New makes of the Hybrid method m.
func newFedScalBin(m calib.Method, o Options) (*FedScalBin, error) {
	switch {
	case o.Privacy != nil:
		return nil, fmt.Errorf("method %q: %w yet (it would charge its scaling and its binning stage): fit it without privacy", m.Name, ErrNoPrivateFit)
	case o.Bins != 0:
		return nil, fmt.Errorf("method %q takes the bin exponent Mexp of its fine histograms (2^Mexp bins), not a number of bins", m.Name)
	case o.Weighting != "" && o.Weighting != calib.WeightNone:
		return nil, fmt.Errorf("method %q takes no weighting (have %q): use none", m.Name, o.Weighting)
	}
	return &FedScalBin{Mexp: o.Mexp, ServerLR: o.ServerLR, Clip: o.Clip}, nil
}

// protocolScalBin is FedScalBin's name in results and errors.
const protocolScalBin = "FedScalBin"

// Fit runs both stages over pop, each for r's rounds, and returns the
// calibrator after the second. Result.Rounds holds the 2T rounds, the
// second stage's numbered T+1 to 2T; Result.Histograms the second
// stage's sums.
func (f *FedScalBin) Fit(ctx context.Context, pop Population, r Rounds) (*Result, error) {
	if pop == nil {
		return nil, fmt.Errorf("%s: no population", protocolScalBin)
	}
	mexp := f.Mexp
	if mexp == 0 {
		mexp = calib.ScalingBinningMexp
	}
	if mexp < 1 || mexp > calib.MaxMexp {
		return nil, fmt.Errorf("%s: bin exponent Mexp = %d: want 1 to %d", protocolScalBin, mexp, calib.MaxMexp)
	}
	bins := f.Bins
	if bins == 0 {
		bins = calib.DefaultScalingBinningBins(mexp)
	}
	if bins < 1 || bins > 1<<mexp {
		return nil, fmt.Errorf("%s: %d equal-mass bins: want 1 to %d, the fine bins 2^%d", protocolScalBin, bins, 1<<mexp, mexp)
	}
	temp := FedTemp()
	temp.Name = protocolScalBin + " (scaling stage, FedTemp)"
	temp.ServerLR, temp.Clip = f.ServerLR, f.Clip
	scaled, err := fitSteps(ctx, temp, halves{pop: pop}, r)
	if err != nil {
		return nil, err
	}
	t := scaled.Calibrator.(*calib.Temperature).T
	spec := binSpec{
		name: protocolScalBin + " (binning stage)",
		bins: 1 << mexp,
		build: func(h *calib.Histograms) (calib.Binner, error) {
			return calib.NewScalingBinning(t, h, bins)
		},
	}
	binPop := halves{pop: pop, bin: true, t: t}
	c, s, err := spec.steps(FederationOf(ctx, binPop, r.workers()), r)
	if err != nil {
		return nil, err
	}
	binned, err := drive(ctx, binPop, r, c, s)
	if err != nil {
		return nil, err
	}
	rounds := append(scaled.Rounds, binned.Rounds...)
	for i := len(scaled.Rounds); i < len(rounds); i++ {
		rounds[i].Round += r.T
	}
	return &Result{
		Protocol:   protocolScalBin,
		Calibrator: binned.Calibrator,
		Rounds:     rounds,
		Histograms: binned.Histograms,
	}, nil
}

// halves is the population of one stage of FedScalBin: each client's
// even rows (the scaling stage), or its odd rows scaled by 1/t (the
// binning stage), split by calib.SplitScalingBinning.
type halves struct {
	pop Population
	bin bool
	t   float64 // the binning stage's temperature
}

// Len returns the number of clients.
func (h halves) Len() int { return h.pop.Len() }

// Classes returns the number of classes.
func (h halves) Classes() int { return h.pop.Classes() }

// Client returns client k's rows of the stage.
func (h halves) Client(k int) (*calib.Set, error) {
	set, err := h.pop.Client(k)
	if err != nil {
		return nil, err
	}
	scale, bin := calib.SplitScalingBinning(set)
	if !h.bin {
		return scale, nil
	}
	return calib.TemperedSet(bin, h.t), nil
}
