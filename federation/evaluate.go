package federation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
)

// Federated evaluation measures a calibrator (or the base model) on the
// test data of many clients without pooling it: each client accumulates
// the per-bin statistics of its own rows (calib.Accumulator: per class
// and bin the count, the confidence sum and the number labelled; the
// same over the top probability; the NLL and Brier sums) and the server
// sums them. Metrics come from the sums, never from averaging per-client
// metrics, so without privacy they equal the metrics of the pooled rows
// bit for bit: a client sends the exact encoding of its accumulator
// (calib.Accumulator.AppendEncoded), which the server merges in integer
// arithmetic.
//
// With privacy (user-level, SPEC §7) a client sends its statistics vector
// (calib.Accumulator.AppendStats) clipped to L2 norm C instead, so adding
// or removing one client's whole test data moves the sum by at most C in
// L2 norm; the server adds N(0, σ²) to every coordinate of the sum, with
// σ = z·C for the noise multiplier z that spends (ε, δ) in one release
// of one Gaussian mechanism, and computes the metrics from the noisy
// statistics with calib.MetricsFromStats, which clamps them valid.

// EvaluationProtocol names the evaluation's steps (ServerStep.Protocol)
// and its privacy releases.
const EvaluationProtocol = dp.KindEvaluation

// DefaultEvalClip is the default L2 clip norm C of a client's statistics
// vector in a private evaluation. A client with n test rows of C classes
// has a vector of norm about n·√(C+2) (one count per class and example,
// most of them in the same bin), so 100 leaves a client of about 30 rows
// of 10 classes unclipped; larger clients are scaled down and weigh less.
const DefaultEvalClip = 100

// EvalOptions configure Evaluate. The zero value evaluates exactly, with
// calib.DefaultMetricBins bins, on one goroutine per CPU.
type EvalOptions struct {
	// Bins is the number of equal-width bins of cwECE and ECE; 0 means
	// calib.DefaultMetricBins.
	Bins int
	// Privacy, if not nil, makes the evaluation (ε, δ) user-level
	// differentially private. Its Clip is the L2 clip norm C of each
	// client's statistics vector (zero means DefaultEvalClip); ClipPos,
	// ClipNeg and AlphaZ belong to fits and must be zero. An infinite
	// Epsilon runs the private path without noise or clipping.
	Privacy *Privacy
	// Seed seeds the noise (unless Privacy.Secure).
	Seed uint64
	// Workers is the number of goroutines that run clients, as in
	// Rounds; zero means one per CPU. Results do not depend on it.
	Workers int
}

// EvalResult is the result of a federated evaluation. The zero value
// holds no result.
type EvalResult struct {
	// Metrics are the metrics of the summed statistics: exactly those of
	// the pooled test rows without privacy, those of the noisy
	// statistics (calib.MetricsFromStats) with.
	Metrics calib.Metrics
	// Clients is the number of clients whose statistics were summed.
	Clients int
	// Stats holds the summed statistics of an exact evaluation (for the
	// top-label errors and reliability diagrams); nil when private.
	Stats *calib.Accumulator
	// Noisy is the noisy statistics vector a private evaluation released
	// (the layout of calib.Accumulator.AppendStats), before clamping; nil
	// when not private.
	Noisy []float64
	// Privacy records the privacy of a private evaluation (Rounds 1,
	// SampleRate 1, Clip the clip norm C); nil when not private or for
	// an infinite ε.
	Privacy *calib.Privacy
	// Ledger holds the evaluation's release; nil when Privacy is.
	Ledger *dp.Ledger
}

// PlanEvalNoise returns the noise plan of a private evaluation with p's
// budget, clip norm (zero: DefaultEvalClip) and accountant: one Gaussian
// mechanism of sensitivity C applied once to every client. Its Family is
// zero. It returns an error for invalid privacy settings.
func PlanEvalNoise(p *Privacy) (*NoisePlan, error) {
	r, err := resolveEval(p)
	if err != nil {
		return nil, err
	}
	return r.plan(0, 0, 1, 1)
}

// EvalRelease returns the release a private evaluation with noise plan
// plan records in a privacy ledger: one round, every client.
func EvalRelease(plan *NoisePlan) dp.Release {
	return dp.Release{Mechanism: EvaluationProtocol, Noise: plan.Mechanisms, SampleRate: 1, Rounds: 1}
}

// resolveEval validates the privacy of an evaluation and fills in its
// defaults.
func resolveEval(p *Privacy) (*resolved, error) {
	if p.ClipPos != 0 || p.ClipNeg != 0 || p.AlphaZ != 0 {
		return nil, errors.New("privacy: an evaluation clips each client's statistics to one norm, Clip: ClipPos, ClipNeg and AlphaZ must be zero")
	}
	q := *p
	if q.Clip == 0 {
		q.Clip = DefaultEvalClip
	}
	return q.resolve(false)
}

// EvalSteps returns the client and server steps of a federated evaluation
// of cal (nil: the base model's softmax) over a federation of classes
// classes, so that a driver other than Evaluate (package network) runs the
// same evaluation. The evaluation is one round in which every client
// takes part. It returns an error for fewer than 2 classes, a calibrator
// of other classes, bins outside [0, calib.MaxMetricBins] or invalid
// privacy settings.
func EvalSteps(classes int, cal calib.Calibrator, o EvalOptions) (ClientStep, *EvalServer, error) {
	if cal != nil && cal.Classes() != classes {
		return nil, nil, fmt.Errorf("the %s calibrator is for %d classes but the data has %d", cal.Method(), cal.Classes(), classes)
	}
	sum, err := calib.NewAccumulator(classes, o.Bins)
	if err != nil {
		return nil, nil, err
	}
	s := &EvalServer{sum: sum, seed: o.Seed}
	c := &evalClient{cal: cal, classes: classes, bins: sum.Bins(), clip: math.Inf(1)}
	if o.Privacy != nil {
		r, err := resolveEval(o.Privacy)
		if err != nil {
			return nil, nil, err
		}
		plan, err := r.plan(0, 0, 1, 1)
		if err != nil {
			return nil, nil, err
		}
		l, err := r.ledger()
		if err != nil {
			return nil, nil, err
		}
		s.priv, s.plan, s.ledger = r, plan, l
		s.noisy = make([]float64, calib.StatsLen(classes, sum.Bins()))
		c.private, c.clip = true, r.Clip
	}
	return c, s, nil
}

// evalClient is the client step of an evaluation.
type evalClient struct {
	cal           calib.Calibrator
	classes, bins int
	private       bool
	clip          float64 // +Inf: none
}

// Update appends the client's statistics on its test rows local: the
// exact encoding, or with privacy the statistics vector clipped to L2
// norm C.
func (c *evalClient) Update(dst []float64, _ int, local *calib.Set, _ []float64, _ *rand.Rand) ([]float64, error) {
	if local.Classes != c.classes {
		return nil, fmt.Errorf("client data has %d classes, the evaluation %d", local.Classes, c.classes)
	}
	acc, err := calib.NewAccumulator(c.classes, c.bins)
	if err != nil {
		return nil, err
	}
	if local.Len() > 0 {
		probs, err := calib.Probabilities(local, c.cal)
		if err != nil {
			return nil, err
		}
		if err := acc.Add(probs, local.Labels); err != nil {
			return nil, err
		}
	}
	if !c.private {
		return acc.AppendEncoded(dst), nil
	}
	n := len(dst)
	dst = acc.AppendStats(dst)
	clip(dst[n:], c.clip)
	return dst, nil
}

// EvalServer is the server step of a federated evaluation (EvalSteps):
// it sums the clients' statistics and, with privacy, adds the noise and
// charges its ledger. Its Result is EvalResult. It is not safe for
// concurrent use. The zero value is not usable.
type EvalServer struct {
	sum     *calib.Accumulator
	seed    uint64
	clients int
	closed  bool

	priv   *resolved // nil: exact
	plan   *NoisePlan
	ledger *dp.Ledger
	noisy  []float64
}

var _ ServerStep = (*EvalServer)(nil)

// Protocol returns EvaluationProtocol.
func (s *EvalServer) Protocol() string { return EvaluationProtocol }

// Broadcast returns nil: the clients hold the calibrator they evaluate.
func (s *EvalServer) Broadcast() []float64 { return nil }

// UpdateLen returns the length of a client's statistics: the exact
// encoding's (calib.EncodedLen) or, with privacy, the statistics
// vector's (calib.StatsLen).
func (s *EvalServer) UpdateLen() int {
	if s.priv != nil {
		return len(s.noisy)
	}
	return calib.EncodedLen(s.sum.Classes(), s.sum.Bins())
}

// Check returns an error wrapping ErrBadUpdate for statistics the server
// must refuse: not an exact encoding (calib.Accumulator.CheckEncoded)
// or, with privacy, a wrong length, a value that is not finite or is
// negative, or an L2 norm above the clip norm C.
func (s *EvalServer) Check(u []float64) error {
	if s.priv == nil {
		if err := s.sum.CheckEncoded(u); err != nil {
			return fmt.Errorf("%w: %w", ErrBadUpdate, err)
		}
		return nil
	}
	if err := checkFinite(u, len(s.noisy)); err != nil {
		return err
	}
	for i, v := range u {
		if v < 0 {
			return fmt.Errorf("%w: statistic %d is %v: statistics are ≥ 0", ErrBadUpdate, i, v)
		}
	}
	if c := s.priv.Clip; !math.IsInf(c, 1) {
		if n := dp.Norm(u); n > c*(1+normSlack) {
			return fmt.Errorf("%w: statistics have L2 norm %v, above the clip norm %v", ErrBadUpdate, n, c)
		}
	}
	return nil
}

// Add folds one client's statistics into the sum: exactly, or with
// privacy in float64 in the order of the calls.
func (s *EvalServer) Add(u []float64) error {
	if s.closed {
		return errors.New("evaluation: statistics after the round closed")
	}
	if err := s.Check(u); err != nil {
		return err
	}
	s.clients++
	if s.priv == nil {
		return s.sum.MergeEncoded(u)
	}
	for i, v := range u {
		s.noisy[i] += v
	}
	return nil
}

// EndRound closes the evaluation's one round: with privacy it charges
// the release to the ledger and adds the noise, drawn from the seed's
// evaluation stream (or crypto/rand with Privacy.Secure).
func (s *EvalServer) EndRound(_, _ int) error {
	if s.closed {
		return errors.New("evaluation: it has one round, already closed")
	}
	s.closed = true
	if s.priv == nil || s.priv.infinite {
		return nil
	}
	if err := s.ledger.Spend(EvalRelease(s.plan)); err != nil {
		return fmt.Errorf("evaluation: %w", err)
	}
	// Round 0 is no fit's round: the evaluation's noise is a stream of
	// its own, whatever seed the fit used.
	dp.AddGaussian(s.noisy, s.plan.Sigma(), s.priv.noise(s.seed, 0))
	return nil
}

// Result returns an error: an evaluation fits no calibrator. Use
// Evaluation.
func (s *EvalServer) Result() (*Result, error) {
	return nil, errors.New("an evaluation fits no calibrator: its result is EvalServer.Evaluation")
}

// Evaluation returns the result of the evaluation after its round
// closed. It returns an error wrapping calib.ErrEmpty when the clients
// held no rows (without noise).
func (s *EvalServer) Evaluation() (*EvalResult, error) {
	if !s.closed {
		return nil, errors.New("evaluation: the round has not closed")
	}
	res := &EvalResult{Clients: s.clients}
	var err error
	if s.priv == nil {
		res.Stats = s.sum
		res.Metrics, err = s.sum.Metrics()
		return res, err
	}
	res.Noisy = s.noisy
	res.Metrics, err = calib.MetricsFromStats(s.noisy, s.sum.Classes(), s.sum.Bins())
	if err != nil {
		return nil, err
	}
	res.Privacy = record(s.ledger, s.plan.Sigma(), s.priv, false, Rounds{T: 1, SampleRate: 1})
	if res.Privacy != nil {
		res.Ledger = s.ledger
	}
	return res, nil
}

// epsilonSpent reports the ε spent so far.
func (s *EvalServer) epsilonSpent() float64 {
	if s.ledger == nil {
		return 0
	}
	return s.ledger.Spent().Epsilon
}

// Evaluate measures cal (nil: the base model's softmax) on the data of
// every client of pop, its test rows as a RowPopulation or
// NewPopulation of the Test split hands them out: each client's
// statistics are computed on o.Workers goroutines and summed in client
// order (EvalSteps). Without o.Privacy the metrics equal those of the
// pooled rows bit for bit. It returns an error when the steps cannot be
// made (EvalSteps), a client's data cannot be read, or there are no rows
// (one wrapping calib.ErrEmpty).
func Evaluate(ctx context.Context, pop Population, cal calib.Calibrator, o EvalOptions) (*EvalResult, error) {
	c, s, err := EvalSteps(pop.Classes(), cal, o)
	if err != nil {
		return nil, err
	}
	d := newDriver(pop, c, s)
	r := Rounds{T: 1, SampleRate: 1, Seed: o.Seed, Workers: o.Workers}
	if _, err := Run[*[]float64](ctx, r, pop.Len(), d); err != nil {
		return nil, fmt.Errorf("%s: %w", EvaluationProtocol, err)
	}
	res, err := s.Evaluation()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EvaluationProtocol, err)
	}
	return res, nil
}
