package network

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/secagg"
)

// Config configures a Coordinator. The zero value is not usable: Spec,
// Rounds.T, Rounds.SampleRate and Clients must be set.
type Config struct {
	// Federation is the federation's name; empty means
	// DefaultFederation.
	Federation string
	// Spec is the protocol, as "fedcalib calibrate" states it.
	Spec federation.Spec
	// Rounds holds T, the sample rate p and the seed; its Workers and
	// Progress are not used.
	Rounds federation.Rounds
	// DrawSeed draws the seed from crypto/rand on a fresh run (and reuses
	// the stored one on a resumed run) instead of using Rounds.Seed.
	DrawSeed bool
	// SecureNoise draws the noise of a private fit from crypto/rand
	// (federation.Privacy.Secure); false draws it from the seeded stream
	// of (seed, t), as the simulation does — reproducible, but only fit
	// for tests, since anyone who knows the seed knows the noise.
	SecureNoise bool
	// Clients is the allow-list: client k is Clients[k].
	Clients []string
	// Classes is the number of classes C; zero means that of the first
	// client to enrol (all must agree).
	Classes int
	// MinClients is the number of accepted updates a round needs to close
	// (or every participant's, when fewer were sampled), and the number
	// of clients that must enrol; zero means 1.
	MinClients int
	// RoundTimeout is how long a round waits for updates; zero means one
	// minute.
	RoundTimeout time.Duration
	// EnrolTimeout is how long a fresh run waits for every client to
	// enrol before it starts with those that did; zero means five
	// minutes.
	EnrolTimeout time.Duration
	// MaxAttempts is how many times a round is announced before the run
	// fails with ErrTooFewClients; zero means 3.
	MaxAttempts int
	// SparseUpdates lets the clients send an update in a sparse encoding
	// (a bitmap of the values that are not zero, and those values) when
	// that is smaller than the dense one (every value); both are exact.
	// A binning update of a client with a few dozen rows is then several
	// times smaller, but its size, which a network observer sees through
	// TLS, tells how many of its histogram cells are not empty: a little
	// about the client's data that the fixed size of a dense update does
	// not tell. False (the default) keeps every update the same size.
	SparseUpdates bool
	// Replicas is the number of JetStream replicas of the state bucket
	// (3 in a three-node cluster); zero means 1.
	Replicas int
	// Holder names this coordinator in the federation's lease, which a
	// second coordinator's refusal prints; empty means the program, its
	// process id, host and start time.
	Holder string
	// LeaseTTL is how long the federation's lease lasts without renewal:
	// after a coordinator dies, another can take the federation over
	// that long after the dead one's last renewal; zero means
	// DefaultLeaseTTL (15 s).
	LeaseTTL time.Duration
	// Exclusive takes the lease at once, whoever holds it: for a caller
	// that knows no other coordinator can reach the bucket, such as serve
	// with its embedded server, whose store it has locked (ErrLocked).
	// False (an external NATS deployment) refuses to start while another
	// coordinator's lease is live (ErrLeased).
	Exclusive bool
	// Secure, if not nil, runs every round under secure aggregation
	// (SecAgg+, package secagg): the coordinator receives each update
	// only quantised and masked and learns only the round's sum (see
	// SecureConfig and the package doc).
	Secure *SecureConfig
	// Evaluate, if not nil, runs an evaluation round after round T:
	// every allow-listed client is invited to send the per-bin statistics
	// of its test rows under the fitted calibrator (federation.EvalSteps
	// with these options; Seed and Workers are not used: the noise of a
	// private evaluation comes, as the fit's, from crypto/rand with
	// SecureNoise, else from the run's seed). Its Privacy needs a finite
	// Epsilon. Not with Secure.
	Evaluate *federation.EvalOptions
	// Log receives refused updates and retried rounds; nil means none.
	Log *slog.Logger
	// Progress, if not nil, is called after each round is committed.
	Progress func(RoundReport)
	// Observer, if not nil, receives the run's events for monitoring.
	Observer Observer

	// tamper, in tests, edits the survivor sets of attempt a of round t
	// before they are sent to each client for signing: a coordinator
	// that tells clients different survivors.
	tamper func(t, a int, sets map[uint32]*secagg.SurvivorSet)
}

// RoundReport is what a coordinator reports after each round. The zero
// value reports nothing.
type RoundReport struct {
	calib.RoundRecord
	// Rounds is the number of rounds of the run: T, or 2T for scalbin
	// (federation.Scheduler).
	Rounds int
	// Refused maps each client whose update was refused to the reason.
	Refused map[int]string
	// Epsilon is the privacy ε spent so far, 0 for a fit without privacy.
	Epsilon float64
	// Received and Sent are the payload bytes the coordinator received
	// from the participants (updates, or secure-aggregation messages) and
	// sent to them one by one (secure-aggregation messages), over all
	// attempts; invitations are not counted.
	Received, Sent int64
	// Compute is the time the coordinator spent computing the round:
	// checking and adding updates and closing the round, or, under secure
	// aggregation, the secagg server's work, decoding the sum and closing
	// the round.
	Compute time.Duration
}

// Outcome is the result of a coordinator's run. The zero value holds no
// result.
type Outcome struct {
	// Result is the server step's result: calibrator, privacy record and
	// ledger. Its Rounds field is nil.
	Result *federation.Result
	// Rounds records every round.
	Rounds []calib.RoundRecord
	// Seed is the run's seed.
	Seed uint64
	// Classes is the number of classes C.
	Classes int
	// ResumedAfter is the last round closed before this process started
	// (read from the store), 0 for a fresh run.
	ResumedAfter int
	// Evaluation is the result of the evaluation round (Config.Evaluate);
	// nil without one.
	Evaluation *federation.EvalResult
	// EvalRound records the evaluation round (Round is one after the
	// run's last); zero without one.
	EvalRound calib.RoundRecord
}

// Coordinator runs the server side of a federated fit over a NATS
// connection. Its zero value is not usable: make one with NewCoordinator.
type Coordinator struct {
	cfg Config
	fed string
}

// NewCoordinator validates cfg and returns a coordinator. Errors wrap
// ErrConfig, ErrAllowList or ErrFederation.
func NewCoordinator(cfg Config) (*Coordinator, error) {
	fed := fedOr(cfg.Federation)
	if err := ValidFederation(fed); err != nil {
		return nil, err
	}
	if _, err := ParseAllowList([]byte(strings.Join(cfg.Clients, "\n"))); err != nil {
		return nil, err
	}
	r := cfg.Rounds
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if _, err := cfg.Spec.Options(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if f, err := cfg.Spec.Fitter(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	} else if _, ok := f.(federation.Stepper); !ok {
		return nil, fmt.Errorf("%w: method %s has no protocol steps", ErrConfig, cfg.Spec.Method)
	}
	switch {
	case cfg.MinClients < 0 || cfg.MinClients > len(cfg.Clients):
		return nil, fmt.Errorf("%w: at least %d clients asked for, but the allow-list has %d", ErrConfig, cfg.MinClients, len(cfg.Clients))
	case cfg.Classes < 0 || cfg.Classes == 1:
		return nil, fmt.Errorf("%w: %d classes: want at least 2 (0: from the clients)", ErrConfig, cfg.Classes)
	case cfg.RoundTimeout < 0 || cfg.EnrolTimeout < 0 || cfg.MaxAttempts < 0 || cfg.Replicas < 0 || cfg.LeaseTTL < 0:
		return nil, fmt.Errorf("%w: negative timeout, attempts, replicas or lease TTL", ErrConfig)
	}
	cfg.MinClients = max(cfg.MinClients, 1)
	if e := cfg.Evaluate; e != nil {
		switch {
		case cfg.Secure != nil:
			return nil, fmt.Errorf("%w: an evaluation round under secure aggregation is not implemented: drop the evaluation or secure aggregation", ErrConfig)
		case e.Privacy != nil && math.IsInf(e.Privacy.Epsilon, 1):
			return nil, fmt.Errorf("%w: evaluation ε is +Inf: want a finite ε, or no privacy", ErrConfig)
		}
		if _, _, err := federation.EvalSteps(max(cfg.Classes, 2), nil, *e); err != nil {
			return nil, fmt.Errorf("%w: evaluation: %w", ErrConfig, err)
		}
	}
	if cfg.Secure != nil {
		// Refuse a protocol secure aggregation cannot sum, and a modulus
		// too small for the federation, now, with the classes known or
		// the fewest possible; the plan is made again once the clients
		// have said.
		dim, err := updateLen(cfg.Spec, len(cfg.Clients), max(cfg.Classes, 2), cfg.Rounds)
		if err != nil {
			return nil, err
		}
		sc, err := checkSecure(*cfg.Secure, cfg.Spec, len(cfg.Clients))
		if err != nil {
			return nil, err
		}
		cfg.Secure = &sc
		if _, err := planSecure(sc, cfg.Spec, len(cfg.Clients), cfg.MinClients, cfg.Rounds.T, max(cfg.Classes, 2), dim); err != nil {
			return nil, err
		}
	}
	cfg.RoundTimeout = or(cfg.RoundTimeout, time.Minute)
	cfg.EnrolTimeout = or(cfg.EnrolTimeout, 5*time.Minute)
	cfg.MaxAttempts = orInt(cfg.MaxAttempts, 3)
	cfg.Replicas = orInt(cfg.Replicas, 1)
	cfg.LeaseTTL = or(cfg.LeaseTTL, DefaultLeaseTTL)
	if cfg.Holder == "" {
		cfg.Holder = holderName()
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Coordinator{cfg: cfg, fed: fed}, nil
}

// run is the state of one Run.
type run struct {
	*Coordinator
	nc     *nats.Conn
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	index  map[string]int
	server federation.ServerStep
	sched  federation.Scheduler // the rounds of server: T, or 2T for FedScalBin
	cp     checkpoint
	want   settings          // the run's settings, as stored under settingsKey
	sec    *securePlan       // nil without secure aggregation
	secIn  chan *nats.Msg    // secure-aggregation messages from the clients
	lease  *leaseHolder      // the federation's lease, held while the run runs
	revs   map[string]uint64 // the revision of each bucket key last read or written

	mu       sync.Mutex
	welcome  Welcome
	ready    map[int][]float64 // client → class counts (nil when not needed)
	started  bool              // the enrolment phase is over
	done     bool
	aborted  string        // why the run was given up (abort); empty otherwise
	enrolled chan struct{} // signalled when a client becomes ready

	began      time.Time     // the round's start (observe.go)
	lastCommit time.Duration // the last checkpoint's latency (observe.go)
}

// Run runs the federation over nc, a connection with the permissions of
// CoordinatorPermissions (or more) made with Dial.Coordinator, resuming from the
// checkpoint in the JetStream bucket when there is one, and returns the
// outcome after the last round. It returns an error wrapping
// ErrTooFewClients when fewer than MinClients enrol in EnrolTimeout or a
// round stays short after MaxAttempts announcements, and ErrStore when
// the store holds a run with other settings; the checkpoint keeps every
// round closed before an error.
func (c *Coordinator) Run(ctx context.Context, nc *nats.Conn) (out *Outcome, err error) {
	r := &run{Coordinator: c, nc: nc, index: make(map[string]int, len(c.cfg.Clients)), ready: make(map[int][]float64), enrolled: make(chan struct{}, 1), revs: map[string]uint64{}}
	for k, pub := range c.cfg.Clients {
		r.index[pub] = k
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	r.js = js
	if err := r.open(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if err := r.acquire(ctx, cancel); err != nil {
		return nil, err
	}
	defer r.lease.release()
	defer func() {
		// A run stopped by the loss of its lease says so, not "context
		// canceled".
		if cause := context.Cause(ctx); err != nil && errors.Is(cause, ErrLeaseLost) && !errors.Is(err, ErrLeaseLost) {
			err = cause
		}
	}()
	resumed, err := r.load(ctx)
	if err != nil {
		return nil, err
	}
	sub, err := nc.Subscribe(subjEnrolAll(c.fed), r.enrol)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	// Once clients may have enrolled, a run that fails tells them why.
	defer func() { r.abort(err) }()
	if c.cfg.Secure != nil {
		r.secIn = make(chan *nats.Msg, 8192)
		ssub, err := nc.ChanSubscribe(subjSecAggAll(c.fed), r.secIn)
		if err != nil {
			return nil, err
		}
		defer ssub.Unsubscribe()
	}
	r.observeOpened()
	out = &Outcome{ResumedAfter: 0}
	if resumed {
		out.ResumedAfter = len(r.cp.Records)
	} else if err := r.enrolment(ctx); err != nil {
		return nil, err
	}
	if err := r.steps(resumed); err != nil {
		return nil, err
	}
	r.observeStarted(out.ResumedAfter)
	if !resumed {
		if err := r.storeSettings(ctx); err != nil {
			return nil, err
		}
	}
	// The first checkpoint, or the resumed one again with this
	// coordinator's lease token: a coordinator before this one can no
	// longer write it.
	if err := r.commit(ctx); err != nil {
		return nil, err
	}
	// Updates are core NATS requests, answered once taken (see
	// receive). An update that finds the channel full is dropped by the
	// connection, and its client sends it again when no answer comes.
	msgs := make(chan *nats.Msg, updateBuffer)
	usub, err := nc.ChanSubscribe(subjUpdateAll(c.fed), msgs)
	if err != nil {
		return nil, fmt.Errorf("subscribing to the updates: %w", err)
	}
	defer usub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		return nil, fmt.Errorf("subscribing to the updates: %w", err)
	}
	for t := len(r.cp.Records) + 1; t <= r.sched.Rounds(); t++ {
		if err := r.round(ctx, t, msgs); err != nil {
			return nil, fmt.Errorf("round %d: %w", t, err)
		}
	}
	res, err := r.server.Result()
	if err != nil {
		return nil, err
	}
	r.securePrivacy(res)
	if c.cfg.Evaluate != nil {
		if out.Evaluation, out.EvalRound, err = r.evaluate(ctx, res, msgs); err != nil {
			return nil, fmt.Errorf("evaluation round: %w", err)
		}
	}
	if err := r.lease.check(); err != nil {
		return nil, err
	}
	r.finish()
	out.Result, out.Rounds, out.Seed, out.Classes = res, r.cp.Records, r.cp.Seed, r.cp.Classes
	return out, nil
}

// retry calls f until it succeeds, ctx is done or 30 seconds pass: a
// clustered JetStream may be electing a leader, after a start or after a
// node stopped.
func (r *run) retry(ctx context.Context, what string, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(actx)
		acancel()
		var stop errStop
		if errors.As(err, &stop) {
			return stop.err
		}
		if err == nil || ctx.Err() != nil {
			return err
		}
		if perr := r.permanent(err); perr != nil {
			return perr
		}
		r.cfg.Log.Warn("retrying", "what", what, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// permanent returns an error naming the cause when err is a JetStream or
// NATS error that no retry can cure (the account has no JetStream, more
// replicas than the cluster has servers, a permission the coordinator's
// user lacks), else nil: retry then gives up at once instead of trying
// for 30 seconds.
func (r *run) permanent(err error) error {
	var apiErr *jetstream.APIError
	code := jetstream.ErrorCode(0)
	if errors.As(err, &apiErr) {
		code = apiErr.ErrorCode
	}
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount), code == jetstream.JSErrCodeJetStreamNotEnabledForAccount:
		return fmt.Errorf("%w: the coordinator's NATS account has no JetStream: enable JetStream for it (its JetStream limits, or jetstream in its account's configuration): %w", ErrConfig, err)
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), code == jetstream.JSErrCodeJetStreamNotEnabled:
		// (The account-information request that open makes first maps a
		// server without JetStream, which no one answers, to this; a bare
		// "no responders" elsewhere may be a cluster electing a leader.)
		return fmt.Errorf("%w: the NATS server has no JetStream (start it with JetStream enabled, e.g. jetstream {} in its configuration): %w", ErrConfig, err)
	case code == 10074: // JSStreamReplicasNotSupportedErr
		return fmt.Errorf("%w: %d replicas of the state bucket need a JetStream cluster of at least %d servers, and this server is not clustered (--replicas 1): %w", ErrConfig, r.cfg.Replicas, r.cfg.Replicas, err)
	case code == 10005 && r.cfg.Replicas > 1: // JSClusterNoPeersErrF: fewer servers up than replicas
		return fmt.Errorf("%w: no %d JetStream servers of the cluster can hold the state bucket's %d replicas (too few servers, or too few up; --replicas): %w", ErrUnreachable, r.cfg.Replicas, r.cfg.Replicas, err)
	case errors.Is(err, nats.ErrPermissionViolation), strings.Contains(strings.ToLower(err.Error()), "permissions violation"):
		return fmt.Errorf("%w: the coordinator's NATS user lacks a permission (see network.CoordinatorPermissions and docs/NETWORK.md): %w", ErrNotAllowed, err)
	}
	return nil
}

// steps builds the server step, restoring the checkpoint's state.
func (r *run) steps(resumed bool) error {
	o, err := r.cfg.Spec.Options()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if o.Privacy != nil {
		o.Privacy.Secure = r.cfg.SecureNoise
	}
	f, err := federation.New(r.cfg.Spec.Method, o)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	st, ok := f.(federation.Stepper)
	if !ok {
		return fmt.Errorf("%w: method %s has no protocol steps", ErrConfig, r.cfg.Spec.Method)
	}
	counts := r.cp.Counts
	fed := federation.Federation{
		Clients: len(r.cfg.Clients), Classes: r.cp.Classes,
		ClassCounts: func() ([]float64, error) { return slices.Clone(counts), nil },
	}
	rounds := federation.Rounds{T: r.cfg.Rounds.T, SampleRate: r.cfg.Rounds.SampleRate, Seed: r.cp.Seed}
	_, s, err := st.Steps(fed, rounds)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	saver, ok := s.(federation.StateSaver)
	if !ok {
		return fmt.Errorf("%w: the %s server cannot save its state", ErrConfig, s.Protocol())
	}
	if resumed {
		if err := saver.Restore(r.cp.State); err != nil {
			return fmt.Errorf("%w: %w", ErrStore, err)
		}
		if saver.Closed() != len(r.cp.Records) {
			return fmt.Errorf("%w: the state closed %d rounds but %d are recorded", ErrStore, saver.Closed(), len(r.cp.Records))
		}
	}
	r.server, r.sched = s, federation.Schedule(s, rounds)
	if sc := r.cfg.Secure; sc != nil {
		if _, ok := s.(federation.SumStep); !ok {
			return fmt.Errorf("%w: the %s server cannot take a sum", ErrConfig, s.Protocol())
		}
		if r.sec, err = planSecure(*sc, r.cfg.Spec, len(r.cfg.Clients), r.cfg.MinClients, r.cfg.Rounds.T, r.cp.Classes, s.UpdateLen()); err != nil {
			return err
		}
	}
	return nil
}
