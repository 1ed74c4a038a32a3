package federation

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
)

// FedBin is federated one-vs-all histogram binning, the paper's
// Algorithm 1 with a single histogram (its naive baseline). Each round,
// every participant sends its class-positive and class-negative histograms
// P_j^k and N_j^k of the softmax probabilities (2C histograms of Bins
// bins); the server adds them to running sums kept across rounds — a
// client sampled twice counts twice — and forms the calibrator
// (calib.Histogram) from the sums.
//
// With Privacy, each client clips each P_j^k to L2 norm C₊ and each N_j^k
// to C₋, and the server adds N(0, σ²) noise to every bin of each round's
// sums, σ = (clip norm)·z, z from dp.Plan with 2C mechanisms per round.
// A round nobody takes part in adds nothing but is still charged.
//
// The zero value is the unweighted, non-private FedBin with
// calib.DefaultBins bins.
type FedBin struct {
	// Bins is the number of equal-width bins per class; zero means
	// calib.DefaultBins.
	Bins int
	// Weighting blends the calibrator with the base model (SPEC §5): the
	// server weights class j by α_j = min(Ñ_j/N_j, 1), or without privacy
	// α̃_j = min(Ñ_j/(√(2/π)·σ_acc·B), 1) with it. The zero value is
	// calib.WeightNone.
	Weighting calib.Weighting
	// Privacy, if not nil, makes the fit differentially private.
	Privacy *Privacy
	// Snapshot, if not nil, is called after every round with the
	// calibrator the server holds then (for curves over rounds).
	Snapshot func(round int, c calib.Calibrator)
}

// FedBBQ is the paper's FedBBQ: Algorithm 1 with one histogram of 2^Mexp
// bins per class and sign, from which the server forms BBQ (calib.BBQ) by
// merging neighbouring bins, so the schemes of 2, 4, …, 2^Mexp bins cost no
// extra data or privacy. Everything else is as for FedBin.
//
// The zero value is the unweighted, non-private FedBBQ with
// calib.DefaultMexp.
type FedBBQ struct {
	// Mexp is the bin exponent in [1, calib.MaxMexp]; zero means
	// calib.DefaultMexp.
	Mexp int
	// Weighting is as for FedBin; the paper's recommended FedBBQ uses
	// calib.WeightAll.
	Weighting calib.Weighting
	// Privacy, if not nil, makes the fit differentially private.
	Privacy *Privacy
	// Snapshot is as for FedBin.
	Snapshot func(round int, c calib.Calibrator)
}

// Fit runs FedBin over pop for r's rounds.
func (f *FedBin) Fit(ctx context.Context, pop Population, r Rounds) (*Result, error) {
	return fitBinning(ctx, pop, r, binSpecOf(calib.MethodBin, binSpec{bins: f.Bins, weighting: f.Weighting, privacy: f.Privacy, snapshot: f.Snapshot}))
}

// Fit runs FedBBQ over pop for r's rounds.
func (f *FedBBQ) Fit(ctx context.Context, pop Population, r Rounds) (*Result, error) {
	return fitBinning(ctx, pop, r, binSpecOf(calib.MethodBBQ, binSpec{mexp: f.Mexp, weighting: f.Weighting, privacy: f.Privacy, snapshot: f.Snapshot}))
}

// fedBinning is the protocol New makes of a binning method.
type fedBinning struct{ spec binSpec }

// Fit runs the protocol over pop for r's rounds.
func (f *fedBinning) Fit(ctx context.Context, pop Population, r Rounds) (*Result, error) {
	return fitBinning(ctx, pop, r, f.spec)
}

// binSpecOf completes s with the name and histogram builder of the
// registry's binning method.
func binSpecOf(method string, s binSpec) binSpec {
	m, err := calib.LookupMethod(method)
	if err != nil {
		panic(err) // the names are the registry's own constants
	}
	s.name, s.build = m.Protocol, m.FromHistograms
	return s
}

// binSpec is a binning protocol: its name, the size of its histograms
// (bins, or 2^mexp for a method of bin exponents; zero means the default)
// and how the server forms the calibrator from them.
type binSpec struct {
	name      string
	bins      int // number of bins; 0: see mexp
	mexp      int // bin exponent of BBQ-like methods; used when bins is 0
	build     func(*calib.Histograms) (calib.Binner, error)
	weighting calib.Weighting
	privacy   *Privacy
	snapshot  func(int, calib.Calibrator)
}

// resolveBins fills in s.bins from its defaults, or reports bins out of
// range.
func (s *binSpec) resolveBins() error {
	if s.bins != 0 {
		if s.bins < 1 || s.bins > calib.MaxBins {
			return fmt.Errorf("%d bins: want 1 to %d", s.bins, calib.MaxBins)
		}
		return nil
	}
	if s.mexp == 0 {
		s.mexp = calib.DefaultMexp
	}
	if s.mexp < 1 || s.mexp > calib.MaxMexp {
		return fmt.Errorf("bin exponent Mexp = %d: want 1 to %d", s.mexp, calib.MaxMexp)
	}
	s.bins = 1 << s.mexp
	return nil
}

// binServer is the server (and client code) of FedBin and FedBBQ.
type binServer struct {
	spec    binSpec
	pop     Population
	classes int
	rounds  Rounds
	priv    *resolved // nil without privacy
	plan    *NoisePlan
	ledger  *dp.Ledger
	sigPos  float64 // σ₊ per round
	sigNeg  float64 // σ₋ per round
	totals  []float64
	round   *calib.Histograms // this round's sum
	cum     *calib.Histograms // sums over rounds
	noisy   int               // rounds that added noise
	pool    sync.Pool
}

func fitBinning(ctx context.Context, pop Population, r Rounds, spec binSpec) (*Result, error) {
	if err := spec.resolveBins(); err != nil {
		return nil, fmt.Errorf("%s: %w", spec.name, err)
	}
	switch spec.weighting {
	case "", calib.WeightNone, calib.WeightAll, calib.WeightChanged:
	default:
		return nil, fmt.Errorf("%s: unknown weighting %q: want none, all or changed", spec.name, spec.weighting)
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", spec.name, err)
	}
	c, err := checkPopulation(pop)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", spec.name, err)
	}
	s := &binServer{
		spec:    spec,
		pop:     pop,
		classes: c,
		rounds:  r,
		round:   calib.NewHistograms(c, spec.bins),
		cum:     calib.NewHistograms(c, spec.bins),
	}
	s.pool.New = func() any { return calib.NewHistograms(c, spec.bins) }
	if spec.privacy != nil {
		if s.priv, err = spec.privacy.resolve(true); err != nil {
			return nil, fmt.Errorf("%s: %w", spec.name, err)
		}
		if s.plan, err = s.priv.plan(calib.Binning, c, r.T, r.SampleRate); err != nil {
			return nil, fmt.Errorf("%s: %w", spec.name, err)
		}
		s.sigPos, s.sigNeg = s.plan.Mechanisms[0].Sigma, s.plan.Mechanisms[1].Sigma
		if s.ledger, err = s.priv.ledger(); err != nil {
			return nil, fmt.Errorf("%s: %w", spec.name, err)
		}
	} else if weighted(spec.weighting) {
		if s.totals, err = classCounts(ctx, pop, r.workers()); err != nil {
			return nil, fmt.Errorf("%s: counting classes: %w", spec.name, err)
		}
	}
	stats, err := Run[*calib.Histograms](ctx, r, pop.Len(), s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", spec.name, err)
	}
	cal, err := s.calibrator()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", spec.name, err)
	}
	return &Result{
		Protocol:   spec.name,
		Calibrator: cal,
		Rounds:     stats,
		Histograms: s.cum.Clone(),
		Privacy:    record(s.ledger, s.sigPos, s.priv, true, r),
		Ledger:     s.ledger,
	}, nil
}

func weighted(w calib.Weighting) bool { return w == calib.WeightAll || w == calib.WeightChanged }

// Local computes client k's histograms, clipped under privacy.
func (s *binServer) Local(t, k int, _ *rand.Rand) (*calib.Histograms, error) {
	set, err := s.pop.Client(k)
	if err != nil {
		return nil, err
	}
	if set.Classes != s.classes {
		return nil, fmt.Errorf("has %d classes, the federation %d", set.Classes, s.classes)
	}
	h := s.pool.Get().(*calib.Histograms)
	h.Reset()
	if err := h.Accumulate(set); err != nil {
		s.pool.Put(h)
		return nil, err
	}
	if s.priv != nil {
		b := s.spec.bins
		for j := range s.classes {
			clip(h.Pos[j*b:(j+1)*b], s.priv.ClipPos)
			clip(h.Neg[j*b:(j+1)*b], s.priv.ClipNeg)
		}
	}
	return h, nil
}

// Aggregate adds client k's histograms to the round's sums.
func (s *binServer) Aggregate(t, k int, h *calib.Histograms) error {
	err := s.round.Add(h)
	s.pool.Put(h)
	return err
}

// EndRound adds the round's (noisy) sums to the running sums.
func (s *binServer) EndRound(t, participants int) error {
	if s.ledger != nil {
		if err := s.ledger.Spend(dp.Release{
			Mechanism:  fmt.Sprintf("%s round %d", s.spec.name, t),
			Noise:      s.plan.Mechanisms,
			SampleRate: s.rounds.SampleRate,
			Rounds:     1,
		}); err != nil {
			return err
		}
	}
	if participants > 0 {
		if s.priv != nil {
			noise := s.priv.noise(s.rounds.Seed, t)
			dp.AddGaussian(s.round.Pos, s.sigPos, noise)
			dp.AddGaussian(s.round.Neg, s.sigNeg, noise)
			s.noisy++
		}
		if err := s.cum.Add(s.round); err != nil {
			return err
		}
		s.round.Reset()
	}
	if s.spec.snapshot != nil {
		c, err := s.calibrator()
		if err != nil {
			return err
		}
		s.spec.snapshot(t, c)
	}
	return nil
}

// Traffic: a participant sends 2·C·B counts and receives nothing.
func (s *binServer) Traffic() (int, int) { return 8 * 2 * s.classes * s.spec.bins, 0 }

// calibrator forms the (weighted) calibrator from the running sums.
func (s *binServer) calibrator() (calib.Calibrator, error) {
	b, err := s.spec.build(s.cum)
	if err != nil {
		return nil, err
	}
	if !weighted(s.spec.weighting) {
		return b, nil
	}
	var alpha []float64
	switch {
	case s.priv == nil:
		alpha = calib.Alpha(s.cum.Positives(), s.totals)
	case s.noisy == 0:
		alpha = make([]float64, s.classes) // nothing aggregated: trust the base model
	default:
		sigmaAcc := s.sigPos * math.Sqrt(float64(s.noisy))
		if z := s.priv.AlphaZ; z > 0 {
			alpha = calib.DPAlphaLower(s.cum, sigmaAcc, z)
		} else {
			alpha = calib.DPAlpha(s.cum, sigmaAcc)
		}
	}
	if err := b.SetWeighting(s.spec.weighting, alpha); err != nil {
		return nil, err
	}
	return b, nil
}

// checkPopulation returns the number of classes of a usable population.
func checkPopulation(pop Population) (int, error) {
	if pop.Len() < 1 {
		return 0, fmt.Errorf("the population has %d clients: need at least 1", pop.Len())
	}
	c := pop.Classes()
	if c < 2 {
		return 0, fmt.Errorf("the population has %d classes: need at least 2", c)
	}
	return c, nil
}

// classCounts returns the number of examples of each class over all
// clients of pop: from pop itself when it is a ClassCounter, else by a
// pass over the clients on workers goroutines.
func classCounts(ctx context.Context, pop Population, workers int) ([]float64, error) {
	if cc, ok := pop.(ClassCounter); ok {
		return cc.ClassCounts(), nil
	}
	c := pop.Classes()
	k := pop.Len()
	workers = max(1, min(workers, k))
	partial := make([][]float64, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		partial[w] = make([]float64, c)
		wg.Go(func() {
			for i := w; i < k; i += workers {
				if ctx.Err() != nil {
					errs[w] = ctx.Err()
					return
				}
				set, err := pop.Client(i)
				if err != nil {
					errs[w] = fmt.Errorf("client %d: %w", i, err)
					return
				}
				for _, y := range set.Labels {
					if y < 0 || y >= c {
						errs[w] = fmt.Errorf("client %d: label %d outside [0, %d)", i, y, c)
						return
					}
					partial[w][y]++
				}
			}
		})
	}
	wg.Wait()
	out := make([]float64, c)
	for w := range workers {
		if errs[w] != nil {
			return nil, errs[w]
		}
		for j, v := range partial[w] { // integer counts: exact in any order
			out[j] += v
		}
	}
	return out, nil
}

// epsilonSpent returns the ε spent so far, 0 without privacy.
func (s *binServer) epsilonSpent() float64 {
	if s.ledger == nil {
		return 0
	}
	return s.ledger.Spent().Epsilon
}
