package federation

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
)

// FedAvg is federated scaling, the paper's Algorithm 2 run as FedAvg on
// parameter deltas (SPEC §6). The server holds the parameters w^t of a
// calib.Scaler, starting from the scaler's identity. Each round, every
// participant k sets its scaler to w^t, fits it to its calibration data
// (warm-started) and returns Δ_k = w_k − w^t; the server sets
// w^{t+1} = w^t + η_S·(Σ_k Δ_k)/|P_t|, summing in client order.
//
// With Clip > 0 and no Privacy, each Δ_k is first clipped to L2 norm Clip
// (the paper's "temperature clipping", App. A.3.5). With Privacy
// (DP-FedAvg), each Δ_k is clipped to Privacy.Clip, the server adds
// N(0, σ²I) to the sum, σ = C·z with z from dp.Plan (one mechanism per
// round; σ = C·√(T/(2ρ)) under zCDP), and divides by the expected number
// of participants p·K instead of |P_t|. A round nobody takes part in
// leaves w unchanged but is still charged.
//
// A client without calibration data returns Δ_k = 0. A temperature the
// noise pushes outside [calib.MinTemperature, calib.MaxTemperature] is
// clamped to it, and a calib.Projector's parameters (beta's a, b) are
// projected onto its constraints (post-processing, free of privacy cost).
//
// FedTemp, FedVector, FedMatrix, FedOPVector and FedCal return FedAvg for
// each scaler of the paper.
type FedAvg struct {
	// Name names the protocol in results, e.g. "FedTemp".
	Name string
	// Scaler returns a new scaler for the given number of classes at its
	// initial (identity) parameters. rng is the stream of the client that
	// will fit it, or of the server for the initial parameters, for
	// scalers whose construction or fit is random. Required.
	Scaler func(classes int, rng *rand.Rand) calib.Scaler
	// ServerLR is the server learning rate η_S; zero means 1.
	ServerLR float64
	// Clip, if positive, clips each Δ_k to this L2 norm without adding
	// noise. It is ignored with Privacy, which has its own clip norm.
	Clip float64
	// Privacy, if not nil, makes the fit differentially private.
	Privacy *Privacy
	// Snapshot, if not nil, is called after every round with the
	// calibrator the server holds then.
	Snapshot func(round int, c calib.Calibrator)

	// shared, if not nil, replaces the noise plan and ledger that
	// Privacy would make: FedScalBin's scaling stage noises and charges
	// its rounds within the whole fit's budget.
	shared *sharedNoise
}

// sharedNoise is a noise plan and ledger that a protocol run as one
// stage of another shares with it.
type sharedNoise struct {
	plan   *NoisePlan
	ledger *dp.Ledger
}

// FedTemp returns FedAvg over temperature scaling: the parameter is T
// itself, starting from 1.
func FedTemp() *FedAvg { return fedAvgOf(calib.MethodTemp) }

// FedVector returns FedAvg over vector scaling, from a = 1, b = 0.
func FedVector() *FedAvg { return fedAvgOf(calib.MethodVector) }

// FedMatrix returns FedAvg over matrix scaling, from A = I, b = 0.
func FedMatrix() *FedAvg { return fedAvgOf(calib.MethodMatrix) }

// FedOPVector returns FedAvg over order-preserving vector scaling, which
// never changes the most probable class.
func FedOPVector() *FedAvg { return fedAvgOf(calib.MethodOPVector) }

// FedCal returns the FedCal baseline (Peng et al. 2024, post-hoc): FedAvg
// over calib.FedCalMLP, trained locally by SGD whose example order comes
// from the client's stream. The server's initial network is drawn from
// the run's seed.
func FedCal() *FedAvg { return fedAvgOf(calib.MethodFedCal) }

// fedAvgOf returns FedAvg over the registry's scaling method name.
func fedAvgOf(name string) *FedAvg {
	m, err := calib.LookupMethod(name)
	if err != nil {
		panic(err) // the names are the registry's own constants
	}
	return newFedAvg(m)
}

// newFedAvg returns FedAvg over the scaler of method m.
func newFedAvg(m calib.Method) *FedAvg {
	return &FedAvg{Name: m.Protocol, Scaler: m.NewScaler}
}

// scaleClient is the client step of FedAvg: fit the scaler locally from
// w^t and return the clipped delta.
type scaleClient struct {
	f       *FedAvg
	classes int
	clip    float64 // 0: none; the DP clip norm under privacy
}

// Update appends the client's clipped delta Δ_k = w_k − w^t to dst; a
// client without calibration data sends Δ_k = 0.
func (c *scaleClient) Update(dst []float64, t int, local *calib.Set, w []float64, rng *rand.Rand) ([]float64, error) {
	if local.Classes != c.classes {
		return nil, fmt.Errorf("has %d classes, the federation %d", local.Classes, c.classes)
	}
	dst = append(dst[:0], make([]float64, len(w))...)
	if local.Len() == 0 {
		return dst, nil
	}
	sc := c.f.Scaler(c.classes, rng)
	if err := sc.SetParams(w); err != nil {
		return nil, err
	}
	if err := sc.Fit(local); err != nil {
		return nil, err
	}
	for i, v := range sc.Params() {
		dst[i] = v - w[i]
	}
	if c.clip > 0 {
		dp.ClipL2(dst, c.clip)
	}
	return dst, nil
}

// scaleServer is the server step of FedAvg.
type scaleServer struct {
	f       *FedAvg
	name    string
	classes int
	clients int
	rounds  Rounds
	lr      float64
	clip    float64 // bound of Check; 0: none
	priv    *resolved
	plan    *NoisePlan
	ledger  *dp.Ledger
	sigma   float64
	isTemp  bool      // the scaler is a temperature, clamped after each round
	w       []float64 // w^t; read by clients, written only in EndRound
	sum     []float64
	init    calib.Scaler
	closed  int       // last round closed by EndRound
	open    bool      // an Add since the last EndRound
	ext     *external // the next round's distributed noise (NoisedRound), nil: central
	// move is the relative L2 norm of the last applied update,
	// ‖Δw‖/max(‖w‖, 1) (−1: none applied yet).
	move float64
}

// FedAvgTolerance is the tolerance of FedAvg's fit report
// (calib.FitReport): the fit is reported converged when the server's last
// applied update moved its parameters by less than this fraction of their
// L2 norm (of 1, if smaller).
const FedAvgTolerance = 1e-3

// Fit runs f over pop for r's rounds.
func (f *FedAvg) Fit(ctx context.Context, pop Population, r Rounds) (*Result, error) {
	return fitSteps(ctx, f, pop, r)
}

// Steps returns FedAvg's client and server steps.
func (f *FedAvg) Steps(fed Federation, r Rounds) (ClientStep, ServerStep, error) {
	name := f.Name
	if name == "" {
		name = "FedAvg"
	}
	if f.Scaler == nil {
		return nil, nil, fmt.Errorf("%s: no Scaler", name)
	}
	if err := r.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := fed.check(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	c := fed.Classes
	if err := checkSize(name, c, 0); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	lr := f.ServerLR
	if lr == 0 {
		lr = 1
	}
	if !(lr > 0) || math.IsInf(lr, 1) {
		return nil, nil, fmt.Errorf("%s: server learning rate η_S is %v: it must be positive and finite", name, lr)
	}
	if f.Clip < 0 || math.IsNaN(f.Clip) {
		return nil, nil, fmt.Errorf("%s: clip norm is %v: want ≥ 0 (0: no clipping)", name, f.Clip)
	}
	init := f.Scaler(c, initRand(r.Seed))
	s := &scaleServer{f: f, name: name, classes: c, clients: fed.Clients, rounds: r, lr: lr, w: init.Params(), init: init, move: -1}
	s.sum = make([]float64, len(s.w))
	_, s.isTemp = init.(*calib.Temperature)
	if !math.IsInf(f.Clip, 1) {
		s.clip = f.Clip
	}
	if f.Privacy != nil {
		var err error
		if s.priv, err = f.Privacy.resolve(false); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		if f.shared != nil {
			s.plan, s.ledger = f.shared.plan, f.shared.ledger
		} else {
			if s.plan, err = s.priv.plan(calib.Scaling, c, r.T, r.SampleRate); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", name, err)
			}
			if s.ledger, err = s.priv.ledger(); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", name, err)
			}
		}
		s.sigma = s.plan.Sigma()
		s.clip = 0 // the privacy clip norm replaces Clip
		if !math.IsInf(s.priv.Clip, 1) {
			s.clip = s.priv.Clip
		}
	}
	return &scaleClient{f: f, classes: c, clip: s.clip}, s, nil
}

// initRand is the stream of the server's initial parameters.
func initRand(seed uint64) *rand.Rand { return ClientRand(seed, 0, 0) }

// Protocol returns the protocol's name.
func (s *scaleServer) Protocol() string { return s.name }

// Broadcast returns w^t.
func (s *scaleServer) Broadcast() []float64 { return s.w }

// UpdateLen returns the number of parameters.
func (s *scaleServer) UpdateLen() int { return len(s.w) }

// Check refuses updates of the wrong length, with a non-finite value, or
// with a norm above the clip norm.
func (s *scaleServer) Check(u []float64) error {
	if err := checkFinite(u, len(s.w)); err != nil {
		return err
	}
	if nrm := dp.Norm(u); s.clip > 0 && nrm > s.clip*(1+normSlack) {
		return fmt.Errorf("%w: the update has norm %v, above the clip norm %v", ErrBadUpdate, nrm, s.clip)
	}
	return nil
}

// Add adds a participant's delta to the round's sum.
func (s *scaleServer) Add(u []float64) error {
	if len(u) != len(s.w) {
		return fmt.Errorf("%w: %d values, want %d", ErrBadUpdate, len(u), len(s.w))
	}
	s.open = true
	for i, v := range u {
		s.sum[i] += v
	}
	return nil
}

// Result returns the scaler at the current parameters.
func (s *scaleServer) Result() (*Result, error) {
	if err := s.init.SetParams(s.w); err != nil {
		return nil, fmt.Errorf("final parameters: %w", err)
	}
	return &Result{
		Protocol:   s.name,
		Calibrator: s.init,
		Privacy:    record(s.ledger, s.sigma, s.priv, false, s.rounds),
		Ledger:     s.ledger,
		Fit:        s.report(),
	}, nil
}

// report is the fit report of the rounds closed so far: converged when
// the last applied update moved w by less than FedAvgTolerance
// (relative), with T named when it sits at a bound of its range.
func (s *scaleServer) report() *calib.FitReport {
	r := &calib.FitReport{Iterations: s.closed, MaxIterations: s.rounds.T, Tolerance: FedAvgTolerance}
	switch {
	case s.move < 0:
		r.Stop = "no round had participants"
	default:
		r.Gradient = s.move
		r.Converged = s.move < FedAvgTolerance
		r.Stop = "last round's update below tolerance"
		if !r.Converged {
			r.Stop = "round limit (the last round still moved the parameters)"
		}
	}
	if s.isTemp {
		switch t := s.w[0]; {
		case t <= calib.MinTemperature:
			r.AtBound = []string{fmt.Sprintf("t = %v (lower bound)", calib.MinTemperature)}
		case t >= calib.MaxTemperature:
			r.AtBound = []string{fmt.Sprintf("t = %v (upper bound)", calib.MaxTemperature)}
		}
	}
	return r
}

// EndRound applies the round's (noisy) mean delta.
func (s *scaleServer) EndRound(t, participants int) error {
	if t != s.closed+1 {
		return fmt.Errorf("%s: round %d closed after round %d", s.name, t, s.closed)
	}
	if err := s.endRound(t, participants); err != nil {
		return err
	}
	s.closed, s.open = t, false
	return nil
}

func (s *scaleServer) endRound(t, participants int) error {
	e := s.ext
	s.ext = nil
	switch {
	case e != nil:
		if err := e.spend(s.ledger); err != nil {
			return err
		}
	case s.ledger != nil:
		if err := chargeRound(s.ledger, s.f.Name, t, s.plan.Mechanisms, s.rounds.SampleRate); err != nil {
			return err
		}
	}
	if participants > 0 {
		denom := float64(participants)
		if s.priv != nil {
			if e == nil {
				dp.AddGaussian(s.sum, s.sigma, s.priv.noise(s.rounds.Seed, t))
			}
			denom = s.rounds.SampleRate * float64(s.clients)
		}
		var moved, size float64
		for i, v := range s.sum {
			d := s.lr * (v / denom)
			size += s.w[i] * s.w[i]
			s.w[i] += d
			moved += d * d
		}
		clear(s.sum)
		s.project()
		s.move = math.Sqrt(moved) / max(math.Sqrt(size), 1)
	}
	if s.f.Snapshot != nil {
		sc := s.f.Scaler(s.classes, initRand(s.rounds.Seed))
		if err := sc.SetParams(s.w); err != nil {
			return err
		}
		s.f.Snapshot(t, sc)
	}
	return nil
}

// project keeps w where the scaler can take it: a temperature is clamped
// to [calib.MinTemperature, calib.MaxTemperature], a calib.Projector's
// parameters are projected onto its constraints (beta's a, b ≥ 0).
func (s *scaleServer) project() {
	if s.isTemp {
		s.w[0] = min(max(s.w[0], calib.MinTemperature), calib.MaxTemperature)
	}
	if p, ok := s.init.(calib.Projector); ok {
		p.Project(s.w)
	}
}

// epsilonSpent returns the ε spent so far, 0 without privacy.
func (s *scaleServer) epsilonSpent() float64 {
	if s.ledger == nil {
		return 0
	}
	return s.ledger.Spent().Epsilon
}
