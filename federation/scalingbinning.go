package federation

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
)

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
// So a fit over T rounds runs 2T rounds. The second stage samples its
// clients from its own stream (binningSeed of the run's seed), so every
// one of the 2T rounds is an independent Poisson sample, as the RDP
// accounting of amplification by sampling assumes. With one client,
// p = 1 and T = 1 it is the central fit up to the rounding of FedAvg's
// one update of T.
//
// With Privacy, both stages are noised within one budget and one ledger:
// the scaling stage is DP-FedAvg (each update of T clipped to Privacy.Clip
// C, σ = z·C on the sum, divided by p·K), and in the binning stage each
// participant scales each class's count and sum histograms by one factor
// so that the counts have L2 norm at most Privacy.ClipPos C₊ (the sums,
// each at most its count, then have norm at most C₊ too), and the server
// adds N(0, (z·C₊)²) to every count and sum of the round's totals. The
// multiplier z makes the T rounds of one mechanism and the T rounds of
// 2C mechanisms spend (ε, δ) together (PlanNoise, hybridMultiplier).
// Noisy counts and sums are clamped at 0 and every bin's value is kept
// within its range (calib.NewScalingBinning). The privacy record holds
// σ = z·C of the scaling stage, C, C₊ and T (the rounds of each stage).
//
// FedScalBin is a Stepper of 2T rounds: its server step is the scaling
// stage's for rounds 1 to T and the binning stage's for rounds T+1 to
// 2T, and a Scheduler, which tells a driver that the fit runs 2T rounds
// and samples the binning stage from its own stream; its client step
// takes a client's even or odd rows as the round asks. Fit and package
// network drive those same steps.
//
// The zero value fits with calib.ScalingBinningMexp fine bins and
// calib.DefaultScalingBinningBins(Mexp, C) equal-mass bins, η_S = 1 and no
// clipping.
type FedScalBin struct {
	// Mexp is the bin exponent of the fine histograms, in
	// [1, calib.MaxMexp]; zero means calib.ScalingBinningMexp.
	Mexp int
	// Bins is the number of equal-mass bins per class, 1 to 2^Mexp;
	// zero means calib.DefaultScalingBinningBins(Mexp, C), C the
	// federation's classes.
	Bins int
	// ServerLR is the first stage's server learning rate η_S; zero
	// means 1.
	ServerLR float64
	// Clip, if positive, clips the first stage's updates of T without
	// noise (see FedAvg.Clip); it is ignored with Privacy.
	Clip float64
	// Privacy, if not nil, makes the fit differentially private; its
	// ClipNeg and AlphaZ do not apply.
	Privacy *Privacy
}

// newFedScalBin returns the protocol New makes of the Hybrid method m.
func newFedScalBin(m calib.Method, o Options) (*FedScalBin, error) {
	switch {
	case o.Bins != 0:
		return nil, fmt.Errorf("method %q takes the bin exponent Mexp of its fine histograms (2^Mexp bins), not a number of bins", m.Name)
	case o.Weighting != "" && o.Weighting != calib.WeightNone:
		return nil, fmt.Errorf("method %q takes no weighting (have %q): use none", m.Name, o.Weighting)
	}
	return &FedScalBin{Mexp: o.Mexp, ServerLR: o.ServerLR, Clip: o.Clip, Privacy: o.Privacy}, nil
}

// protocolScalBin is FedScalBin's name in results and errors.
const protocolScalBin = "FedScalBin"

// Fit runs both stages over pop, each for r's rounds, and returns the
// calibrator after the second. Result.Rounds holds the 2T rounds, the
// second stage's numbered T+1 to 2T. Result.Histograms is nil: the
// second stage sums value histograms, not one-vs-all histograms.
func (f *FedScalBin) Fit(ctx context.Context, pop Population, r Rounds) (*Result, error) {
	return fitSteps(ctx, f, pop, r)
}

// Steps returns FedScalBin's client and server steps for the 2T rounds
// of both stages.
func (f *FedScalBin) Steps(fed Federation, r Rounds) (ClientStep, ServerStep, error) {
	mexp := f.Mexp
	if mexp == 0 {
		mexp = calib.ScalingBinningMexp
	}
	if mexp < 1 || mexp > calib.MaxMexp {
		return nil, nil, fmt.Errorf("%s: bin exponent Mexp = %d: want 1 to %d", protocolScalBin, mexp, calib.MaxMexp)
	}
	bins := f.Bins
	if bins == 0 {
		bins = calib.DefaultScalingBinningBins(mexp, fed.Classes)
	}
	if bins < 1 || bins > 1<<mexp {
		return nil, nil, fmt.Errorf("%s: %d equal-mass bins: want 1 to %d, the fine bins 2^%d", protocolScalBin, bins, 1<<mexp, mexp)
	}
	if err := r.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", protocolScalBin, err)
	}
	if err := fed.check(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", protocolScalBin, err)
	}
	c := fed.Classes
	if err := checkSize(protocolScalBin, c, 1<<mexp); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", protocolScalBin, err)
	}
	temp := FedTemp()
	temp.Name = protocolScalBin + " (scaling stage, FedTemp)"
	temp.ServerLR, temp.Clip = f.ServerLR, f.Clip
	s := &valueServer{bins: bins, rounds: r, round: calib.NewValueHistograms(c, 1<<mexp), cum: calib.NewValueHistograms(c, 1<<mexp)}
	vc := &valueClient{classes: c, bins: 1 << mexp}
	if f.Privacy != nil {
		var err error
		if s.priv, err = f.Privacy.resolveHybrid(); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", protocolScalBin, err)
		}
		if s.plan, err = s.priv.plan(calib.Hybrid, c, r.T, r.SampleRate); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", protocolScalBin, err)
		}
		if s.ledger, err = s.priv.ledger(); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", protocolScalBin, err)
		}
		temp.Privacy = f.Privacy
		temp.shared = &sharedNoise{
			plan:   &NoisePlan{Family: calib.Scaling, Multiplier: s.plan.Multiplier, Mechanisms: s.plan.Mechanisms[:1]},
			ledger: s.ledger,
		}
		if !math.IsInf(s.priv.ClipPos, 1) {
			vc.clip = s.priv.ClipPos
		}
	}
	tc, ts, err := temp.Steps(fed, r)
	if err != nil {
		return nil, nil, err
	}
	r2 := r
	r2.Seed = binningSeed(r.Seed)
	return &scalBinClient{scale: tc, value: vc, t: r.T},
		&scalBinServer{scale: ts.(*scaleServer), value: s, binning: r2}, nil
}

// binningSeed returns the seed of FedScalBin's binning stage, which
// samples its clients independently of the scaling stage: a bijection of
// the run's seed (SplitMix64's finaliser), so distinct runs keep distinct
// streams.
func binningSeed(seed uint64) uint64 { return mix64(seed ^ 0x7363616c62696e) } // "scalbin"

// valueClient is the client step of FedScalBin's binning stage: the
// value histograms of the client's rows scaled by the broadcast T, each
// class's counts and sums scaled by one factor so that the counts have
// L2 norm at most clip under privacy.
type valueClient struct {
	classes, bins int
	clip          float64 // 0: no clipping (no privacy)
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
	if c.clip > 0 {
		b := c.bins
		for j := range c.classes {
			count, sum := h.Count[j*b:(j+1)*b], h.Sum[j*b:(j+1)*b]
			if nrm := dp.Norm(count); nrm > c.clip {
				f := c.clip / nrm
				for m := range count {
					count[m] *= f
					sum[m] *= f
				}
			}
		}
	}
	return dst, nil
}

// valueServer is the server step of FedScalBin's binning stage. Under
// privacy it also holds the whole fit's plan and ledger.
type valueServer struct {
	t          float64 // the scaling stage's temperature, broadcast
	bins       int     // equal-mass bins per class
	rounds     Rounds
	round, cum *calib.ValueHistograms
	closed     int        // last round closed by EndRound
	open       bool       // an update was added to a round not yet closed
	priv       *resolved  // nil without privacy
	plan       *NoisePlan // the hybrid plan: Mechanisms[1] is this stage's
	ledger     *dp.Ledger // nil without privacy or with an infinite ε
}

// Protocol returns the stage's name.
func (s *valueServer) Protocol() string { return protocolScalBin + " (binning stage)" }

// Broadcast returns the temperature T.
func (s *valueServer) Broadcast() []float64 { return []float64{s.t} }

// UpdateLen returns 2·C·B, the counts and the sums.
func (s *valueServer) UpdateLen() int { return len(s.cum.Count) + len(s.cum.Sum) }

// Check refuses updates of the wrong length, with a non-finite or
// negative value, a sum of probabilities above its count, or, under
// privacy, a class's counts above the clip norm C₊.
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
	if s.priv == nil || math.IsInf(s.priv.ClipPos, 1) {
		return nil
	}
	b := s.cum.Bins
	for j := range s.cum.Classes {
		if nrm := dp.Norm(u[j*b : (j+1)*b]); nrm > s.priv.ClipPos*(1+normSlack) {
			return fmt.Errorf("%w: the counts of class %d have norm %v, above the clip norm %v", ErrBadUpdate, j, nrm, s.priv.ClipPos)
		}
	}
	return nil
}

// Add adds an update to the round's sums.
func (s *valueServer) Add(u []float64) error {
	if len(u) != s.UpdateLen() {
		return fmt.Errorf("%w: %d values, want %d", ErrBadUpdate, len(u), s.UpdateLen())
	}
	s.open = true
	n := len(s.round.Count)
	for i, v := range u[:n] {
		s.round.Count[i] += v
	}
	for i, v := range u[n:] {
		s.round.Sum[i] += v
	}
	return nil
}

// EndRound charges the round to the ledger and adds its (noisy) sums to
// the running sums; the round is round T+t of the whole fit, and its
// noise comes from that round's stream.
func (s *valueServer) EndRound(t, participants int) error {
	if t != s.closed+1 {
		return fmt.Errorf("%s: round %d closed after round %d", s.Protocol(), t, s.closed)
	}
	whole := s.rounds.T + t
	if s.ledger != nil {
		if err := chargeRound(s.ledger, s.Protocol(), whole, s.plan.Mechanisms[1:], s.rounds.SampleRate); err != nil {
			return err
		}
	}
	if participants > 0 && s.priv != nil {
		sigma := s.plan.Mechanisms[1].Sigma
		noise := s.priv.noise(s.rounds.Seed, whole)
		dp.AddGaussian(s.round.Count, sigma, noise)
		dp.AddGaussian(s.round.Sum, sigma, noise)
	}
	if err := s.cum.Add(s.round); err != nil {
		return err
	}
	clear(s.round.Count)
	clear(s.round.Sum)
	s.closed, s.open = t, false
	return nil
}

// epsilonSpent returns the ε the whole fit has spent so far, 0 without
// privacy.
func (s *valueServer) epsilonSpent() float64 {
	if s.ledger == nil {
		return 0
	}
	return s.ledger.Spent().Epsilon
}

// Result returns the calibrator formed from the running sums.
func (s *valueServer) Result() (*Result, error) {
	c, err := calib.NewScalingBinning(s.t, s.cum, s.bins)
	if err != nil {
		return nil, err
	}
	return &Result{Protocol: protocolScalBin, Calibrator: c}, nil
}

// scalBinClient is FedScalBin's client step: the scaling stage's on the
// client's even rows in rounds 1 to T, the binning stage's on its odd
// rows in rounds T+1 to 2T (calib.SplitScalingBinning).
type scalBinClient struct {
	scale ClientStep
	value *valueClient
	t     int // rounds of each stage
}

// Update appends the update of round t, of the stage t belongs to.
func (c *scalBinClient) Update(dst []float64, t int, local *calib.Set, broadcast []float64, rng *rand.Rand) ([]float64, error) {
	scale, bin := calib.SplitScalingBinning(local)
	if t <= c.t {
		return c.scale.Update(dst, t, scale, broadcast, rng)
	}
	return c.value.Update(dst, t-c.t, bin, broadcast, rng)
}

// scalBinServer is FedScalBin's server step: the scaling stage's server
// while fewer than T rounds are closed, then the binning stage's, which
// broadcasts the temperature the first stage ended with.
type scalBinServer struct {
	scale   *scaleServer
	value   *valueServer
	binning Rounds // the binning stage's rounds: its own sampling seed
}

// stage returns the server step of the next round.
func (s *scalBinServer) stage() ServerStep {
	if s.scale.closed < s.binning.T {
		return s.scale
	}
	return s.value
}

// Protocol returns "FedScalBin".
func (s *scalBinServer) Protocol() string { return protocolScalBin }

// Broadcast returns the next round's broadcast: w^t of the scaling
// stage, then the temperature T.
func (s *scalBinServer) Broadcast() []float64 { return s.stage().Broadcast() }

// UpdateLen returns the length of a valid update of the next round: 1,
// then 2·C·2^Mexp.
func (s *scalBinServer) UpdateLen() int { return s.stage().UpdateLen() }

// Check checks u as an update of the next round.
func (s *scalBinServer) Check(u []float64) error { return s.stage().Check(u) }

// Add folds u into the open round.
func (s *scalBinServer) Add(u []float64) error { return s.stage().Add(u) }

// EndRound closes round t of 2T; closing round T fixes the temperature
// that the binning stage broadcasts.
func (s *scalBinServer) EndRound(t, participants int) error {
	T := s.binning.T
	if t <= T {
		if err := s.scale.EndRound(t, participants); err != nil {
			return err
		}
		if t == T {
			s.value.t = s.scale.w[0]
		}
		return nil
	}
	if s.scale.closed < T {
		return fmt.Errorf("%s: round %d closed after round %d", protocolScalBin, t, s.scale.closed)
	}
	return s.value.EndRound(t-T, participants)
}

// Rounds returns 2T.
func (s *scalBinServer) Rounds() int { return 2 * s.binning.T }

// Participants returns the clients of round t: sampled from the run's
// seed in the scaling stage, from binningSeed's in the binning stage.
func (s *scalBinServer) Participants(t, clients int) []int {
	if t <= s.binning.T {
		return s.scale.rounds.Participants(t, clients)
	}
	return s.binning.Participants(t-s.binning.T, clients)
}

// Result returns the fit after the rounds closed so far: the scaling
// stage's temperature until the binning stage closed a round, then the
// scaling-binning calibrator. Its privacy record is the whole fit's.
func (s *scalBinServer) Result() (*Result, error) {
	var res *Result
	if s.value.closed == 0 {
		r, err := s.scale.Result()
		if err != nil {
			return nil, err
		}
		res = &Result{Protocol: protocolScalBin, Calibrator: r.Calibrator}
	} else {
		var err error
		if res, err = s.value.Result(); err != nil {
			return nil, err
		}
	}
	if l := s.value.ledger; l != nil {
		spent := l.Spent()
		res.Ledger = l
		res.Privacy = &calib.Privacy{
			Epsilon: spent.Epsilon, Delta: spent.Delta, Rho: spent.Rho,
			Sigma: s.value.plan.Sigma(), Clip: s.value.priv.Clip, ClipPos: s.value.priv.ClipPos,
			Accountant: l.Accountant().String(), Rounds: s.binning.T, SampleRate: s.binning.SampleRate,
		}
	}
	return res, nil
}

// epsilonSpent returns the ε the whole fit has spent so far.
func (s *scalBinServer) epsilonSpent() float64 { return s.value.epsilonSpent() }
