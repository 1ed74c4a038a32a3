package federation

import (
	"cmp"
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
	return fitSteps(ctx, f, pop, r)
}

// Steps returns FedBin's client and server steps.
func (f *FedBin) Steps(fed Federation, r Rounds) (ClientStep, ServerStep, error) {
	return binSpecOf(calib.MethodBin, binSpec{bins: f.Bins, weighting: f.Weighting, privacy: f.Privacy, snapshot: f.Snapshot}).steps(fed, r)
}

// Fit runs FedBBQ over pop for r's rounds.
func (f *FedBBQ) Fit(ctx context.Context, pop Population, r Rounds) (*Result, error) {
	return fitSteps(ctx, f, pop, r)
}

// Steps returns FedBBQ's client and server steps.
func (f *FedBBQ) Steps(fed Federation, r Rounds) (ClientStep, ServerStep, error) {
	return binSpecOf(calib.MethodBBQ, binSpec{mexp: f.Mexp, weighting: f.Weighting, privacy: f.Privacy, snapshot: f.Snapshot}).steps(fed, r)
}

// fedBinning is the protocol New makes of a binning method.
type fedBinning struct{ spec binSpec }

// Fit runs the protocol over pop for r's rounds.
func (f *fedBinning) Fit(ctx context.Context, pop Population, r Rounds) (*Result, error) {
	return fitSteps(ctx, f, pop, r)
}

// Steps returns the protocol's client and server steps.
func (f *fedBinning) Steps(fed Federation, r Rounds) (ClientStep, ServerStep, error) {
	return f.spec.steps(fed, r)
}

// fitSteps runs the steps of p over pop in process.
func fitSteps(ctx context.Context, p Stepper, pop Population, r Rounds) (*Result, error) {
	if pop == nil {
		return nil, fmt.Errorf("no population")
	}
	c, s, err := p.Steps(FederationOf(ctx, pop, r.workers()), r)
	if err != nil {
		return nil, err
	}
	return drive(ctx, pop, r, c, s)
}

// binSpecOf completes s with the name and histogram builder of the
// registry's binning method.
func binSpecOf(method string, s binSpec) binSpec {
	m, err := calib.LookupMethod(method)
	if err != nil {
		panic(err) // the names are the registry's own constants
	}
	s.name, s.build, s.defaultMexp = m.Protocol, m.FromHistograms, m.DefaultMexp()
	return s
}

// binSpec is a binning protocol: its name, the size of its histograms
// (bins, or 2^mexp for a method of bin exponents; zero means the method's
// default, 2^defaultMexp) and how the server forms the calibrator from
// them.
type binSpec struct {
	name      string
	bins      int // number of bins; 0: see mexp
	mexp      int // bin exponent of BBQ-like methods; used when bins is 0
	build     func(*calib.Histograms) (calib.Binner, error)
	weighting calib.Weighting
	privacy   *Privacy
	snapshot  func(int, calib.Calibrator)

	// defaultMexp is the method's calib.Method.DefaultMexp, used when
	// bins and mexp are 0; zero means calib.DefaultMexp.
	defaultMexp int
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
		s.mexp = cmp.Or(s.defaultMexp, calib.DefaultMexp)
	}
	if s.mexp < 1 || s.mexp > calib.MaxMexp {
		return fmt.Errorf("bin exponent Mexp = %d: want 1 to %d", s.mexp, calib.MaxMexp)
	}
	s.bins = 1 << s.mexp
	return nil
}

// binClient is the client step of FedBin and FedBBQ: the client's
// class-positive and class-negative histograms, each class's clipped to
// its L2 norm under privacy.
type binClient struct {
	classes, bins    int
	clipPos, clipNeg float64 // 0: no clipping (no privacy)
}

// Update appends the client's histograms P then N to dst.
func (c *binClient) Update(dst []float64, t int, local *calib.Set, _ []float64, _ *rand.Rand) ([]float64, error) {
	if local.Classes != c.classes {
		return nil, fmt.Errorf("has %d classes, the federation %d", local.Classes, c.classes)
	}
	n := c.classes * c.bins
	dst = append(dst[:0], make([]float64, 2*n)...)
	h := &calib.Histograms{Classes: c.classes, Bins: c.bins, Pos: dst[:n], Neg: dst[n:]}
	if err := h.Accumulate(local); err != nil {
		return nil, err
	}
	if c.clipPos > 0 {
		b := c.bins
		for j := range c.classes {
			clip(h.Pos[j*b:(j+1)*b], c.clipPos)
			clip(h.Neg[j*b:(j+1)*b], c.clipNeg)
		}
	}
	return dst, nil
}

// binServer is the server step of FedBin and FedBBQ.
type binServer struct {
	spec    binSpec
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
	extVar  float64           // binning: noise variance (units of C₊²) of distributed rounds
	ext     *external         // the next round's distributed noise (NoisedRound), nil: central
	closed  int               // last round closed by EndRound
	open    bool              // an Add since the last EndRound
}

// steps returns the client and server steps of the binning protocol.
func (spec binSpec) steps(fed Federation, r Rounds) (ClientStep, ServerStep, error) {
	if err := spec.resolveBins(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", spec.name, err)
	}
	switch spec.weighting {
	case "", calib.WeightNone, calib.WeightAll, calib.WeightChanged:
	default:
		return nil, nil, fmt.Errorf("%s: unknown weighting %q: want none, all or changed", spec.name, spec.weighting)
	}
	if err := r.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", spec.name, err)
	}
	if err := fed.check(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", spec.name, err)
	}
	c := fed.Classes
	if err := checkSize(spec.name, c, spec.bins); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", spec.name, err)
	}
	s := &binServer{
		spec:    spec,
		classes: c,
		rounds:  r,
		round:   calib.NewHistograms(c, spec.bins),
		cum:     calib.NewHistograms(c, spec.bins),
	}
	cl := &binClient{classes: c, bins: spec.bins}
	var err error
	if spec.privacy != nil {
		if s.priv, err = spec.privacy.resolve(true); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", spec.name, err)
		}
		if s.plan, err = s.priv.plan(calib.Binning, c, r.T, r.SampleRate); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", spec.name, err)
		}
		s.sigPos, s.sigNeg = s.plan.Mechanisms[0].Sigma, s.plan.Mechanisms[1].Sigma
		if s.ledger, err = s.priv.ledger(); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", spec.name, err)
		}
		if !math.IsInf(s.priv.ClipPos, 1) || !math.IsInf(s.priv.ClipNeg, 1) {
			cl.clipPos, cl.clipNeg = s.priv.ClipPos, s.priv.ClipNeg
		}
	} else if weighted(spec.weighting) {
		if fed.ClassCounts == nil {
			return nil, nil, fmt.Errorf("%s: the weighting needs the federation's class counts", spec.name)
		}
		if s.totals, err = fed.ClassCounts(); err != nil {
			return nil, nil, fmt.Errorf("%s: counting classes: %w", spec.name, err)
		}
		if len(s.totals) != c {
			return nil, nil, fmt.Errorf("%s: %d class counts for %d classes", spec.name, len(s.totals), c)
		}
	}
	return cl, s, nil
}

// Protocol returns the protocol's name.
func (s *binServer) Protocol() string { return s.spec.name }

// Broadcast is empty: a binning client needs nothing from the server.
func (s *binServer) Broadcast() []float64 { return nil }

// UpdateLen returns 2·C·B.
func (s *binServer) UpdateLen() int { return 2 * s.classes * s.spec.bins }

// Check refuses updates of the wrong length, with non-finite or negative
// counts, or, under privacy, a class histogram above its clip norm.
func (s *binServer) Check(u []float64) error {
	if err := checkFinite(u, s.UpdateLen()); err != nil {
		return err
	}
	for i, v := range u {
		if v < 0 {
			return fmt.Errorf("%w: count %d is negative (%v)", ErrBadUpdate, i, v)
		}
	}
	if s.priv == nil {
		return nil
	}
	b, n := s.spec.bins, s.classes*s.spec.bins
	for j := range s.classes {
		for _, h := range []struct {
			name string
			x    []float64
			c    float64
		}{{"positive", u[j*b : (j+1)*b], s.priv.ClipPos}, {"negative", u[n+j*b : n+(j+1)*b], s.priv.ClipNeg}} {
			if nrm := dp.Norm(h.x); nrm > h.c*(1+normSlack) {
				return fmt.Errorf("%w: the %s histogram of class %d has norm %v, above the clip norm %v", ErrBadUpdate, h.name, j, nrm, h.c)
			}
		}
	}
	return nil
}

// Add adds an update to the round's sums.
func (s *binServer) Add(u []float64) error {
	if len(u) != s.UpdateLen() {
		return fmt.Errorf("%w: %d values, want %d", ErrBadUpdate, len(u), s.UpdateLen())
	}
	s.open = true
	n := s.classes * s.spec.bins
	for i, v := range u[:n] {
		s.round.Pos[i] += v
	}
	for i, v := range u[n:] {
		s.round.Neg[i] += v
	}
	return nil
}

// Result returns the calibrator formed from the sums so far.
func (s *binServer) Result() (*Result, error) {
	cal, err := s.calibrator()
	if err != nil {
		return nil, err
	}
	return &Result{
		Protocol:   s.spec.name,
		Calibrator: cal,
		Histograms: s.cum.Clone(),
		Privacy:    record(s.ledger, s.sigPos, s.priv, true, s.rounds),
		Ledger:     s.ledger,
	}, nil
}

func weighted(w calib.Weighting) bool { return w == calib.WeightAll || w == calib.WeightChanged }

// EndRound adds the round's (noisy) sums to the running sums.
func (s *binServer) EndRound(t, participants int) error {
	if t != s.closed+1 {
		return fmt.Errorf("%s: round %d closed after round %d", s.spec.name, t, s.closed)
	}
	if err := s.endRound(t, participants); err != nil {
		return err
	}
	s.closed, s.open = t, false
	return nil
}

func (s *binServer) endRound(t, participants int) error {
	if e := s.ext; e != nil {
		s.ext = nil
		if err := e.spend(s.ledger); err != nil {
			return err
		}
		if participants > 0 {
			s.extVar += e.z * e.z
			if err := s.cum.Add(s.round); err != nil {
				return err
			}
			s.round.Reset()
		}
		return s.snapshot(t)
	}
	if s.ledger != nil {
		if err := chargeRound(s.ledger, s.spec.name, t, s.plan.Mechanisms, s.rounds.SampleRate); err != nil {
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
	return s.snapshot(t)
}

// snapshot reports the calibrator after round t, if asked.
func (s *binServer) snapshot(t int) error {
	if s.spec.snapshot != nil {
		c, err := s.calibrator()
		if err != nil {
			return err
		}
		s.spec.snapshot(t, c)
	}
	return nil
}

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
	case s.noisy == 0 && s.extVar == 0:
		alpha = make([]float64, s.classes) // nothing aggregated: trust the base model
	default:
		sigmaAcc := s.sigPos * math.Sqrt(float64(s.noisy))
		if s.extVar > 0 { // distributed rounds: σ_acc² = Σ_t σ_t²
			sigmaAcc = math.Sqrt(sigmaAcc*sigmaAcc + s.extVar*s.priv.ClipPos*s.priv.ClipPos)
		}
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
