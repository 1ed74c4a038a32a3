package federation

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"time"
)

// MaxRounds is the largest number of rounds T a federated run takes. The
// paper's longest runs have 50 rounds, and under differential privacy the
// noise of each round grows as √T, so a run of more rounds than this
// calibrates nothing that fewer rounds would not; refusing such a T up
// front also bounds the per-round statistics a run returns.
const MaxRounds = 10_000

// MaxWorkers is the largest number of goroutines a federated run may be
// asked for: far more than the cores of any machine this runs on, and
// few enough that a mistyped number cannot exhaust memory on goroutine
// stacks.
const MaxWorkers = 1024

// Rounds configures the rounds of a federated run. The zero value is not
// usable: T and SampleRate must be set.
type Rounds struct {
	// T is the number of rounds, 1 to MaxRounds. A round in which no
	// client is sampled is skipped (no client runs, the server state
	// does not change) but still counted, also for privacy.
	T int
	// SampleRate is the probability p ∈ (0, 1] with which each client
	// takes part in a round, independently of the others and of other
	// rounds (Poisson sampling). SampleRateFor turns "k clients per
	// round" into p = k/K.
	SampleRate float64
	// Seed seeds the sampling, each client's local randomness and the
	// server's noise.
	Seed uint64
	// Workers is the number of goroutines that run clients, at most
	// MaxWorkers; zero means runtime.GOMAXPROCS(0). Results do not depend
	// on it.
	Workers int
	// Progress, if not nil, is called after each round with its
	// statistics, from the goroutine that called Run.
	Progress func(RoundStats)
}

// SampleRateFor returns the sample rate p = k/K that selects k of K
// clients per round in expectation. It returns an error unless
// 1 ≤ k ≤ K.
func SampleRateFor(k, clients int) (float64, error) {
	if clients < 1 {
		return 0, fmt.Errorf("number of clients is %d: need at least 1", clients)
	}
	if k < 1 || k > clients {
		return 0, fmt.Errorf("clients per round is %d: want 1 to the number of clients, %d", k, clients)
	}
	return float64(k) / float64(clients), nil
}

// Validate reports the first invalid field of r.
func (r *Rounds) Validate() error {
	switch {
	case r.T < 1 || r.T > MaxRounds:
		return fmt.Errorf("rounds T is %d: want 1 to %d", r.T, MaxRounds)
	case !(r.SampleRate > 0 && r.SampleRate <= 1):
		return fmt.Errorf("sample rate p is %v: want 0 < p ≤ 1", r.SampleRate)
	case r.Workers < 0 || r.Workers > MaxWorkers:
		return fmt.Errorf("workers is %d: want 0 to %d (0 means one per CPU)", r.Workers, MaxWorkers)
	}
	return nil
}

func (r *Rounds) workers() int {
	if r.Workers > 0 {
		return r.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// Participants returns the clients, in increasing order, that take part in
// round t (1-based) of a federation of K clients: client k takes part when
// the k-th uniform draw of the round's sampling stream is below
// SampleRate. The same (Seed, t) always gives the same participants.
func (r *Rounds) Participants(t, clients int) []int {
	rng := stream(r.Seed, domainSample, uint64(t), 0)
	out := make([]int, 0, int(math.Ceil(r.SampleRate*float64(clients))))
	for k := range clients {
		if rng.Float64() < r.SampleRate {
			out = append(out, k)
		}
	}
	return out
}

// ClientRand returns the random generator of client k in round t: the
// stream (seed, t, k), independent of the worker that runs the client.
func ClientRand(seed uint64, t, k int) *rand.Rand {
	return stream(seed, domainClient, uint64(t), uint64(k))
}

// RoundStats is the telemetry of one round.
type RoundStats struct {
	// Round is the round number, 1 to Rounds.
	Round int
	// Rounds is the number of rounds of the run: T, or what the
	// protocol's Scheduler says (2T for FedScalBin).
	Rounds int
	// Participants is the number of clients sampled; 0 for a skipped
	// round.
	Participants int
	// UploadBytes and DownloadBytes are what each participant would send
	// to and receive from the server, encoding every number as 8 bytes
	// (without secure-aggregation overhead).
	UploadBytes, DownloadBytes int
	// ComputeTotal, ComputeMin and ComputeMax are the total, smallest and
	// largest wall time of the participants' local computations. They are
	// measurements, so unlike everything else they vary between runs.
	ComputeTotal, ComputeMin, ComputeMax time.Duration
	// Epsilon is the privacy ε spent after this round by the protocols of
	// this package, 0 for a fit without privacy.
	Epsilon float64
}

// Skipped reports whether no client took part in the round.
func (s RoundStats) Skipped() bool { return s.Participants == 0 }

// ComputeMean returns the mean local compute time of a participant, 0 for
// a skipped round.
func (s RoundStats) ComputeMean() time.Duration {
	if s.Participants == 0 {
		return 0
	}
	return s.ComputeTotal / time.Duration(s.Participants)
}

// Protocol is the server and client logic of a federated protocol, driven
// by Run. U is a client's update.
type Protocol[U any] interface {
	// Local runs client k's computation in round t and returns its
	// update. rng is the client's own stream (see ClientRand). Local is
	// called concurrently from several goroutines, for distinct clients.
	Local(t, k int, rng *rand.Rand) (U, error)
	// Aggregate folds client k's update into round t. It is called once
	// per participant, one call at a time, in increasing k, so that
	// floating-point sums do not depend on scheduling.
	Aggregate(t, k int, u U) error
	// EndRound closes round t after its last Aggregate; participants is
	// 0 for a skipped round.
	EndRound(t, participants int) error
	// Traffic returns the bytes a participant sends to and receives from
	// the server in the next round.
	Traffic() (upload, download int)
}

// Run drives p through r.T rounds over a federation of K clients, each
// sampled by r.Participants, and returns each round's statistics; a p
// that is a Scheduler runs its own rounds, sampled its own way. It stops at the first error of p, or
// when ctx is done, and returns that error with the statistics of the
// rounds completed so far. At most a small multiple of r.Workers client
// updates are held in memory at any time, however many clients take
// part.
func Run[U any](ctx context.Context, r Rounds, clients int, p Protocol[U]) ([]RoundStats, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if clients < 1 {
		return nil, fmt.Errorf("number of clients is %d: need at least 1", clients)
	}
	sched := scheduleOf(p, r)
	total := sched.Rounds()
	var stats []RoundStats // grown as rounds finish, not reserved for all rounds up front
	for t := 1; t <= total; t++ {
		if err := ctx.Err(); err != nil {
			return stats, err
		}
		parts := sched.Participants(t, clients)
		up, down := p.Traffic()
		st := RoundStats{Round: t, Rounds: total, Participants: len(parts), UploadBytes: up, DownloadBytes: down}
		if len(parts) > 0 {
			if err := runRound(ctx, &r, t, parts, p, &st); err != nil {
				return stats, fmt.Errorf("round %d: %w", t, err)
			}
		}
		if err := p.EndRound(t, len(parts)); err != nil {
			return stats, fmt.Errorf("round %d: %w", t, err)
		}
		if sp, ok := p.(spender); ok {
			st.Epsilon = sp.epsilonSpent()
		}
		stats = append(stats, st)
		if r.Progress != nil {
			r.Progress(st)
		}
	}
	return stats, nil
}

// spender is implemented by the private protocols of this package.
type spender interface {
	epsilonSpent() float64
}

type result[U any] struct {
	k       int
	u       U
	err     error
	elapsed time.Duration
}

type job[U any] struct {
	k   int
	out chan<- result[U]
}

// runRound runs the participants of round t on a worker pool and folds
// their updates in order. A feeder hands out clients in order and queues
// one result channel per client; the queue's capacity bounds the updates
// in flight.
func runRound[U any](ctx context.Context, r *Rounds, t int, parts []int, p Protocol[U], st *RoundStats) error {
	workers := min(r.workers(), len(parts))
	stop := make(chan struct{})
	order := make(chan chan result[U], 4*workers)
	jobs := make(chan job[U])
	done := make(chan struct{})
	go func() { // feeder
		defer close(order)
		defer close(jobs)
		for _, k := range parts {
			out := make(chan result[U], 1)
			select {
			case order <- out:
			case <-stop:
				return
			}
			select {
			case jobs <- job[U]{k: k, out: out}:
			case <-stop:
				return
			}
		}
	}()
	finished := make(chan struct{}, workers)
	for range workers {
		go func() {
			defer func() { finished <- struct{}{} }()
			for j := range jobs {
				start := time.Now()
				u, err := p.Local(t, j.k, ClientRand(r.Seed, t, j.k))
				j.out <- result[U]{k: j.k, u: u, err: err, elapsed: time.Since(start)}
			}
		}()
	}
	go func() {
		for range workers {
			<-finished
		}
		close(done)
	}()
	err := func() error {
		for out := range order {
			var res result[U]
			select {
			case res = <-out:
			case <-ctx.Done():
				return ctx.Err()
			}
			if res.err != nil {
				return fmt.Errorf("client %d: %w", res.k, res.err)
			}
			st.ComputeTotal += res.elapsed
			if st.ComputeMin == 0 || res.elapsed < st.ComputeMin {
				st.ComputeMin = res.elapsed
			}
			st.ComputeMax = max(st.ComputeMax, res.elapsed)
			if err := p.Aggregate(t, res.k, res.u); err != nil {
				return fmt.Errorf("client %d: %w", res.k, err)
			}
		}
		return nil
	}()
	close(stop)
	<-done // no goroutine outlives the round
	return err
}
