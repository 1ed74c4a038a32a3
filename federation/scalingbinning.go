package federation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

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
//  2. Binning: for the rounds r again, the server broadcasts the first
//     stage's T; each participant sends the value histograms
//     (calib.ValueHistograms: count and sum of g_j in each of 2^Mexp fine
//     bins per class) of the scaled probabilities g = softmax(z/T) of
//     its odd rows, 2·C·2^Mexp numbers; the server keeps running sums
//     across rounds (a client sampled twice counts twice, as in FedBin)
//     and forms the Bins equal-mass bins from them
//     (calib.NewScalingBinning).
//
// So a fit over T rounds runs 2T rounds, the second stage's with the
// same seed as the first's (round t of each stage samples the same
// clients). With one client, p = 1 and T = 1 it is the central fit up to
// the rounding of FedAvg's one update of T.
//
// FedScalBin is not a Stepper: its two stages are two protocols, each
// with its own client and server steps (FedAvg's, and valueClient and
// valueServer here), which Fit drives one after the other. A driver over the network (package network) does not run it
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
// second stage's numbered T+1 to 2T. Result.Histograms is nil: the
// second stage sums value histograms, not one-vs-all histograms.
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
	binPop := halves{pop: pop, bin: true}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", protocolScalBin, err)
	}
	c := pop.Classes()
	if err := checkSize(protocolScalBin, c, 1<<mexp); err != nil {
		return nil, fmt.Errorf("%s: %w", protocolScalBin, err)
	}
	s := &valueServer{t: t, bins: bins, round: calib.NewValueHistograms(c, 1<<mexp), cum: calib.NewValueHistograms(c, 1<<mexp)}
	binned, err := drive(ctx, binPop, r, &valueClient{classes: c, bins: 1 << mexp}, s)
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
	}, nil
}

// valueClient is the client step of FedScalBin's binning stage: the
// value histograms of the client's rows scaled by the broadcast T.
type valueClient struct {
	classes, bins int
}

// Update appends the client's counts then sums to dst.
func (c *valueClient) Update(dst []float64, _ int, local *calib.Set, broadcast []float64, _ *rand.Rand) ([]float64, error) {
	if local.Classes != c.classes {
		return nil, fmt.Errorf("has %d classes, the federation %d", local.Classes, c.classes)
	}
	if len(broadcast) != 1 || !(broadcast[0] > 0) || math.IsInf(broadcast[0], 1) {
		return nil, fmt.Errorf("broadcast %v: want one finite temperature T > 0", broadcast)
	}
	n := c.classes * c.bins
	dst = append(dst[:0], make([]float64, 2*n)...)
	h := &calib.ValueHistograms{Classes: c.classes, Bins: c.bins, Count: dst[:n], Sum: dst[n:]}
	if err := h.Accumulate(calib.TemperedSet(local, broadcast[0])); err != nil {
		return nil, err
	}
	return dst, nil
}

// valueServer is the server step of FedScalBin's binning stage.
type valueServer struct {
	t          float64 // the scaling stage's temperature, broadcast
	bins       int     // equal-mass bins per class
	round, cum *calib.ValueHistograms
	closed     int // last round closed by EndRound
}

// Protocol returns the stage's name.
func (s *valueServer) Protocol() string { return protocolScalBin + " (binning stage)" }

// Broadcast returns the temperature T.
func (s *valueServer) Broadcast() []float64 { return []float64{s.t} }

// UpdateLen returns 2·C·B, the counts and the sums.
func (s *valueServer) UpdateLen() int { return len(s.cum.Count) + len(s.cum.Sum) }

// Check refuses updates of the wrong length, with a non-finite or
// negative value, or a sum of probabilities above its count.
func (s *valueServer) Check(u []float64) error {
	if err := checkFinite(u, s.UpdateLen()); err != nil {
		return err
	}
	n := len(s.cum.Count)
	for i, v := range u {
		if v < 0 {
			return fmt.Errorf("%w: value %d is negative (%v)", ErrBadUpdate, i, v)
		}
	}
	for i, c := range u[:n] {
		if sum := u[n+i]; sum > c*(1+normSlack) {
			return fmt.Errorf("%w: bin %d sums probabilities to %v over %v examples", ErrBadUpdate, i, sum, c)
		}
	}
	return nil
}

// Add adds an update to the round's sums.
func (s *valueServer) Add(u []float64) error {
	if len(u) != s.UpdateLen() {
		return fmt.Errorf("%w: %d values, want %d", ErrBadUpdate, len(u), s.UpdateLen())
	}
	n := len(s.round.Count)
	for i, v := range u[:n] {
		s.round.Count[i] += v
	}
	for i, v := range u[n:] {
		s.round.Sum[i] += v
	}
	return nil
}

// EndRound adds the round's sums to the running sums.
func (s *valueServer) EndRound(t, _ int) error {
	if t != s.closed+1 {
		return fmt.Errorf("%s: round %d closed after round %d", s.Protocol(), t, s.closed)
	}
	if err := s.cum.Add(s.round); err != nil {
		return err
	}
	clear(s.round.Count)
	clear(s.round.Sum)
	s.closed = t
	return nil
}

// Result returns the calibrator formed from the running sums.
func (s *valueServer) Result() (*Result, error) {
	c, err := calib.NewScalingBinning(s.t, s.cum, s.bins)
	if err != nil {
		return nil, err
	}
	return &Result{Protocol: protocolScalBin, Calibrator: c}, nil
}

// halves is the population of one stage of FedScalBin: each client's
// even rows (the scaling stage) or its odd rows (the binning stage),
// split by calib.SplitScalingBinning.
type halves struct {
	pop Population
	bin bool
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
	if h.bin {
		return bin, nil
	}
	return scale, nil
}
