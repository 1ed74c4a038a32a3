package federation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/fedcalib/fedcalib/calib"
)

// A protocol of this package is two steps, so that the same code runs in
// one process and across machines:
//
//   - the client step (ClientStep) runs on a data owner's machine: from its
//     own calibration data and the server's broadcast it computes the
//     round's update, clipped as the protocol's privacy asks — the update
//     is all that leaves the client;
//   - the server step (ServerStep) checks each update it receives, folds the
//     round's updates together in client order, adds the noise, updates
//     the calibrator and charges the privacy ledger.
//
// An update travels as a flat []float64: for the binning protocols the
// class-positive histograms then the class-negative ones (2·C·B counts,
// row-major by class); for FedAvg the parameter delta Δ_k. Fit drives the
// steps in process (the simulation); package network drives the same
// steps over NATS. Every random draw is a function of the run's seed and
// the round (client sampling, noise) or of (seed, round, client) (a
// client's own stream, see ClientRand), never of the driver, so both
// drivers give bit-identical calibrators for the same seed.

// ErrBadUpdate is returned (wrapped, with the reason) by ServerStep.Check for
// an update the server must refuse: wrong length, a non-finite value, a
// negative count, or a norm above the clip bound.
var ErrBadUpdate = errors.New("bad update")

// ClientStep is the client step of a protocol. Implementations are safe for
// concurrent use.
type ClientStep interface {
	// Update appends to dst the update of round t (1-based) computed from
	// the client's calibration data local and the server's broadcast, and
	// returns the extended slice. rng is the client's stream of the round
	// (ClientRand), used by protocols whose local fit is random.
	Update(dst []float64, t int, local *calib.Set, broadcast []float64, rng *rand.Rand) ([]float64, error)
}

// ServerStep is the server step of a protocol. It is not safe for concurrent
// use: a driver calls it from one goroutine.
type ServerStep interface {
	// Protocol names the protocol, e.g. "FedBBQ".
	Protocol() string
	// Broadcast returns what every participant of the next round
	// receives: the current parameters w^t of FedAvg, nothing for the
	// binning protocols. The caller must not modify it.
	Broadcast() []float64
	// UpdateLen returns the length of a valid update.
	UpdateLen() int
	// Check returns an error wrapping ErrBadUpdate when u is not an
	// update this server may accept. A driver that receives updates from
	// other machines checks each before Add.
	Check(u []float64) error
	// Add folds one participant's update into the current round. A driver
	// calls it once per participant in increasing client order, so that
	// floating-point sums do not depend on arrival order.
	Add(u []float64) error
	// EndRound closes round t after its last Add: it charges the round's
	// releases to the privacy ledger (also for a round nobody took part
	// in), adds the noise and updates the calibrator. participants is the
	// number of updates added.
	EndRound(t, participants int) error
	// Result returns the fit after the rounds closed so far; the driver
	// fills in Result.Rounds.
	Result() (*Result, error)
}

// Scheduler is an optional capability of a ServerStep whose protocol
// does not run the rounds r it was made for as they are: FedScalBin runs
// 2T rounds, the last T sampled from a stream of their own. A driver
// runs rounds 1 to Rounds() and samples each round with Participants;
// for a server step without it, Schedule gives r.T and r.Participants.
type Scheduler interface {
	// Rounds returns the number of rounds the protocol runs.
	Rounds() int
	// Participants returns the clients, in increasing order, that take
	// part in round t of a federation of K clients.
	Participants(t, clients int) []int
}

// Schedule returns the schedule of the server step s made for the rounds
// r: s itself when it is a Scheduler, else r.T rounds sampled by
// r.Participants.
func Schedule(s ServerStep, r Rounds) Scheduler { return scheduleOf(s, r) }

// scheduleOf returns v when it is a Scheduler (a server step, or Run's
// protocol), else the rounds r as they are.
func scheduleOf(v any, r Rounds) Scheduler {
	if sc, ok := v.(Scheduler); ok {
		return sc
	}
	return plainSchedule{r}
}

// plainSchedule is the schedule of the rounds r as they are.
type plainSchedule struct{ r Rounds }

func (p plainSchedule) Rounds() int                       { return p.r.T }
func (p plainSchedule) Participants(t, clients int) []int { return p.r.Participants(t, clients) }

// Federation describes the clients a protocol's steps are made for.
type Federation struct {
	// Clients is the number of clients K ≥ 1.
	Clients int
	// Classes is the number of classes C ≥ 2.
	Classes int
	// ClassCounts returns the number N_j of calibration examples of
	// each class over the whole federation. Only the non-private weighted
	// binning protocols call it (SPEC §5); nil is allowed for the others.
	ClassCounts func() ([]float64, error)
}

func (f *Federation) check() error {
	switch {
	case f.Clients < 1:
		return fmt.Errorf("the population has %d clients: need at least 1", f.Clients)
	case f.Classes < 2:
		return fmt.Errorf("the population has %d classes: need at least 2", f.Classes)
	}
	return nil
}

// Stepper is implemented by every protocol of this package (every Fitter
// New returns): it splits the protocol into its client and server steps
// for a federation f and the rounds r.
type Stepper interface {
	Steps(f Federation, r Rounds) (ClientStep, ServerStep, error)
}

// FederationOf returns the federation of pop: its size and classes, and
// its class counts from ClassCounter or from one pass over the clients
// on workers goroutines.
func FederationOf(ctx context.Context, pop Population, workers int) Federation {
	return Federation{
		Clients:     pop.Len(),
		Classes:     pop.Classes(),
		ClassCounts: func() ([]float64, error) { return classCounts(ctx, pop, max(workers, 1)) },
	}
}

// drive runs the steps of a protocol over pop in process: each sampled
// client's update is computed on a worker pool from pop.Client(k) and
// folded in client order.
func drive(ctx context.Context, pop Population, r Rounds, c ClientStep, s ServerStep) (*Result, error) {
	d := newDriver(pop, c, s)
	var p Protocol[*[]float64] = d
	if sc, ok := s.(Scheduler); ok {
		p = scheduledDriver{d, sc}
	}
	stats, err := Run(ctx, r, pop.Len(), p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Protocol(), err)
	}
	res, err := s.Result()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Protocol(), err)
	}
	res.Rounds = stats
	return res, nil
}

// driver adapts a protocol's steps to Run.
type driver struct {
	pop    Population
	client ClientStep
	server ServerStep
	pool   sync.Pool // *[]float64 update buffers
}

// newDriver returns the driver of the steps c and s over pop.
func newDriver(pop Population, c ClientStep, s ServerStep) *driver {
	d := &driver{pop: pop, client: c, server: s}
	n := s.UpdateLen()
	d.pool.New = func() any { b := make([]float64, 0, n); return &b }
	return d
}

// scheduledDriver is the driver of a server step that is a Scheduler.
type scheduledDriver struct {
	*driver
	Scheduler
}

// Local runs client k's step; the broadcast is read concurrently but
// changes only in EndRound, after every Local of the round.
func (d *driver) Local(t, k int, rng *rand.Rand) (*[]float64, error) {
	set, err := d.pop.Client(k)
	if err != nil {
		return nil, err
	}
	buf := d.pool.Get().(*[]float64)
	u, err := d.client.Update((*buf)[:0], t, set, d.server.Broadcast(), rng)
	if err != nil {
		d.pool.Put(buf)
		return nil, err
	}
	*buf = u
	return buf, nil
}

// Aggregate folds client k's update into the round.
func (d *driver) Aggregate(t, k int, u *[]float64) error {
	err := d.server.Add(*u)
	d.pool.Put(u)
	return err
}

// EndRound closes the round.
func (d *driver) EndRound(t, participants int) error { return d.server.EndRound(t, participants) }

// Traffic: a participant sends its update and receives the broadcast.
func (d *driver) Traffic() (int, int) { return 8 * d.server.UpdateLen(), 8 * len(d.server.Broadcast()) }

// epsilonSpent reports the server's ε spent so far.
func (d *driver) epsilonSpent() float64 {
	if sp, ok := d.server.(spender); ok {
		return sp.epsilonSpent()
	}
	return 0
}

// checkFinite returns an error wrapping ErrBadUpdate for a wrong length
// or a non-finite value.
func checkFinite(u []float64, n int) error {
	if len(u) != n {
		return fmt.Errorf("%w: %d values, want %d", ErrBadUpdate, len(u), n)
	}
	for i, v := range u {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: value %d is %v", ErrBadUpdate, i, v)
		}
	}
	return nil
}

// normSlack is the relative tolerance of Check's clip-norm test: a client
// clips to exactly the bound, which rounding may exceed in the last bit.
const normSlack = 1e-9
