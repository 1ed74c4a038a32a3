package network

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strconv"
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

	// tamper, in tests, edits the unmask requests of round t before they
	// are sent: a coordinator that asks for both shares of a peer.
	tamper func(t int, reqs map[uint32]*secagg.UnmaskRequest)
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
	case cfg.RoundTimeout < 0 || cfg.EnrolTimeout < 0 || cfg.MaxAttempts < 0 || cfg.Replicas < 0:
		return nil, fmt.Errorf("%w: negative timeout, attempts or replicas", ErrConfig)
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
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Coordinator{cfg: cfg, fed: fed}, nil
}

// settings are the parts of a Config a stored run must share with the
// config that resumes it.
type settings struct {
	Federation  string          `json:"federation"`
	Spec        federation.Spec `json:"spec"`
	T           int             `json:"rounds"`
	SampleRate  float64         `json:"sample_rate"`
	Seed        uint64          `json:"seed"`
	DrawSeed    bool            `json:"draw_seed"`
	SecureNoise bool            `json:"secure_noise"`
	Clients     []string        `json:"clients"`
	Classes     int             `json:"classes"`
	Secure      *SecureConfig   `json:"secure,omitempty"`
}

// checkpoint is what the coordinator commits after every round.
type checkpoint struct {
	// Settings is empty: the settings, with the allow-list (most of a
	// checkpoint's size with many clients), are stored once, under
	// settingsKey. A checkpoint of fedcalib before wire version 3 holds
	// them here.
	Settings settings            `json:"settings,omitzero"`
	Seed     uint64              `json:"seed"`
	Classes  int                 `json:"classes"`
	Counts   []float64           `json:"counts,omitempty"`
	Enrolled []int               `json:"enrolled"`
	State    json.RawMessage     `json:"state"`
	Records  []calib.RoundRecord `json:"records"`
	// Survivors counts, per round closed, the clients whose distributed
	// noise reached the sum (distributed noise only).
	Survivors []int `json:"survivors,omitempty"`
}

// Keys of the state bucket.
const (
	checkpointKey = "checkpoint"
	settingsKey   = "settings"
)

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
	want   settings       // the run's settings, as stored under settingsKey
	sec    *securePlan    // nil without secure aggregation
	secIn  chan *nats.Msg // secure-aggregation messages from the clients

	mu       sync.Mutex
	welcome  Welcome
	ready    map[int][]float64 // client → class counts (nil when not needed)
	started  bool              // the enrolment phase is over
	done     bool
	enrolled chan struct{} // signalled when a client becomes ready
}

// Run runs the federation over nc, a connection with every permission on
// the federation's subjects and the JetStream API, resuming from the
// checkpoint in the JetStream bucket when there is one, and returns the
// outcome after the last round. It returns an error wrapping
// ErrTooFewClients when fewer than MinClients enrol in EnrolTimeout or a
// round stays short after MaxAttempts announcements, and ErrStore when
// the store holds a run with other settings; the checkpoint keeps every
// round closed before an error.
func (c *Coordinator) Run(ctx context.Context, nc *nats.Conn) (*Outcome, error) {
	r := &run{Coordinator: c, nc: nc, index: make(map[string]int, len(c.cfg.Clients)), ready: make(map[int][]float64), enrolled: make(chan struct{}, 1)}
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
	resumed, err := r.load(ctx)
	if err != nil {
		return nil, err
	}
	sub, err := nc.Subscribe(subjEnrolAll(c.fed), r.enrol)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if c.cfg.Secure != nil {
		r.secIn = make(chan *nats.Msg, 8192)
		ssub, err := nc.ChanSubscribe(subjSecAggAll(c.fed), r.secIn)
		if err != nil {
			return nil, err
		}
		defer ssub.Unsubscribe()
	}
	out := &Outcome{ResumedAfter: 0}
	if resumed {
		out.ResumedAfter = len(r.cp.Records)
	} else if err := r.enrolment(ctx); err != nil {
		return nil, err
	}
	if err := r.steps(resumed); err != nil {
		return nil, err
	}
	if !resumed {
		if err := r.storeSettings(ctx); err != nil {
			return nil, err
		}
		if err := r.commit(ctx); err != nil {
			return nil, err
		}
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
		if err == nil || ctx.Err() != nil {
			return err
		}
		r.cfg.Log.Warn("retrying", "what", what, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// updateBuffer is how many update messages the coordinator's
// subscription holds before the connection drops new ones.
const updateBuffer = 4096

// open creates the state bucket, and deletes the update stream of a
// store written by fedcalib before wire version 3, which would capture
// the updates (and answer them) in the coordinator's place.
func (r *run) open(ctx context.Context) error {
	return r.retry(ctx, "opening the store", r.open1)
}

func (r *run) open1(ctx context.Context) error {
	if err := r.js.DeleteStream(ctx, oldStreamName(r.fed)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("deleting the update stream of an older version: %w", err)
	}
	var err error
	r.kv, err = r.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:   bucketName(r.fed),
		Storage:  jetstream.FileStorage,
		Replicas: r.cfg.Replicas,
		History:  1,
	})
	if err != nil {
		return fmt.Errorf("creating the state bucket: %w", err)
	}
	return nil
}

// load reads the checkpoint, if any, and reports whether there was one.
func (r *run) load(ctx context.Context) (bool, error) {
	cfg := r.cfg
	want := settings{
		Federation: r.fed, Spec: cfg.Spec, T: cfg.Rounds.T, SampleRate: cfg.Rounds.SampleRate,
		DrawSeed: cfg.DrawSeed, SecureNoise: cfg.SecureNoise, Clients: cfg.Clients, Classes: cfg.Classes,
		Secure: cfg.Secure,
	}
	if !cfg.DrawSeed {
		want.Seed = cfg.Rounds.Seed
	}
	// Compare through JSON, as the stored settings were written.
	wb, err := json.Marshal(want)
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(wb, &want); err != nil {
		return false, err
	}
	r.want = want
	r.cp = checkpoint{Seed: want.Seed, Classes: cfg.Classes}
	var e jetstream.KeyValueEntry
	err = r.retry(ctx, "reading the checkpoint", func(ctx context.Context) error {
		var err error
		e, err = r.kv.Get(ctx, checkpointKey)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		return err
	})
	if err == nil && e == nil {
		err = jetstream.ErrKeyNotFound
	}
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		if cfg.DrawSeed {
			var b [8]byte
			if _, err := rand.Read(b[:]); err != nil {
				return false, err
			}
			r.cp.Seed = binary.LittleEndian.Uint64(b[:])
		}
		r.setWelcome()
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading the checkpoint: %w", err)
	}
	var cp checkpoint
	if err := json.Unmarshal(e.Value(), &cp); err != nil {
		return false, fmt.Errorf("%w: the checkpoint cannot be read: %w", ErrStore, err)
	}
	old := !reflect.ValueOf(cp.Settings).IsZero() // written before wire version 3
	if !old {
		err = r.retry(ctx, "reading the settings", func(ctx context.Context) error {
			var err error
			e, err = r.kv.Get(ctx, settingsKey)
			return err
		})
		if err != nil {
			return false, fmt.Errorf("%w: the store has a checkpoint but no settings: %w", ErrStore, err)
		}
		if err := json.Unmarshal(e.Value(), &cp.Settings); err != nil {
			return false, fmt.Errorf("%w: the stored settings cannot be read: %w", ErrStore, err)
		}
	}
	if !reflect.DeepEqual(cp.Settings, want) {
		return false, fmt.Errorf("%w: the store holds a run of federation %q with other settings (method, rounds, sampling, seed, privacy or allow-list): resume it with the same flags, or use another --store", ErrStore, r.fed)
	}
	if old {
		if err := r.storeSettings(ctx); err != nil {
			return false, err
		}
	}
	cp.Settings = settings{}
	r.cp = cp
	r.started = true
	for _, k := range cp.Enrolled {
		r.ready[k] = nil
	}
	r.setWelcome()
	return true, nil
}

// setWelcome fills in the welcome template from the checkpoint.
func (r *run) setWelcome() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.welcome = Welcome{
		Federation: r.fed, Clients: len(r.cfg.Clients), Classes: r.cp.Classes,
		Spec: r.cfg.Spec, Rounds: r.cfg.Rounds.T, Rate: r.cfg.Rounds.SampleRate, Seed: r.cp.Seed,
		NeedCounts: r.needCounts(), SparseUpdates: r.cfg.SparseUpdates,
	}
}

// needCounts reports whether the protocol needs the clients' class
// counts: non-private weighted binning.
func (r *run) needCounts() bool {
	m, err := calib.LookupMethod(r.cfg.Spec.Method)
	w := r.cfg.Spec.Weighting
	return err == nil && m.Family == calib.Binning && !r.cfg.Spec.Private() && (w == calib.WeightAll || w == calib.WeightChanged)
}

// enrol answers a client's hello or ready request.
func (r *run) enrol(m *nats.Msg) {
	reply := func(w Welcome) {
		b, err := json.Marshal(w)
		if err == nil {
			err = m.Respond(b)
		}
		if err != nil {
			r.cfg.Log.Warn("answering an enrolment", "err", err)
		}
	}
	pub := m.Subject[enrolPrefixLen(r.fed):]
	k, ok := r.index[pub]
	if !ok {
		reply(Welcome{Error: fmt.Sprintf("key %s is not on the allow-list of federation %s", pub, r.fed)})
		return
	}
	var req ready
	if err := json.Unmarshal(m.Data, &req); err != nil || req.Version != Version || (req.Kind != "hello" && req.Kind != "ready") {
		reply(Welcome{Error: fmt.Sprintf("not a version-%d enrolment request of fedcalib", Version)})
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.welcome
	w.Client, w.Done = k, r.done
	if req.Kind == "hello" {
		reply(w)
		return
	}
	if err := r.checkReady(&req, &w); err != nil {
		r.cfg.Log.Warn("refused an enrolment", "client", k, "err", err)
		reply(Welcome{Error: err.Error()})
		return
	}
	if _, was := r.ready[k]; !was && !r.started {
		r.ready[k] = req.Counts
		select {
		case r.enrolled <- struct{}{}:
		default:
		}
	}
	reply(w)
}

// checkReady checks a ready request; r.mu is held.
func (r *run) checkReady(req *ready, w *Welcome) error {
	switch {
	case req.Classes < 2 || req.Classes > calib.MaxSize:
		return fmt.Errorf("%d classes: want 2 to %d", req.Classes, calib.MaxSize)
	case r.welcome.Classes == 0 && r.started:
		return errors.New("the run has started without a number of classes")
	case r.welcome.Classes == 0:
		r.welcome.Classes, r.cp.Classes, w.Classes = req.Classes, req.Classes, req.Classes
	case req.Classes != r.welcome.Classes:
		return fmt.Errorf("the client's data has %d classes, the federation %d", req.Classes, r.welcome.Classes)
	}
	if !r.welcome.NeedCounts {
		req.Counts = nil
		return nil
	}
	if len(req.Counts) != req.Classes {
		return fmt.Errorf("%d class counts for %d classes", len(req.Counts), req.Classes)
	}
	for j, v := range req.Counts {
		if !(v >= 0) || v != math.Trunc(v) || math.IsInf(v, 0) {
			return fmt.Errorf("class count %d is %v: want a whole number ≥ 0", j, v)
		}
	}
	return nil
}

// enrolment waits until every client is ready or EnrolTimeout passes.
func (r *run) enrolment(ctx context.Context) error {
	timer := time.NewTimer(r.cfg.EnrolTimeout)
	defer timer.Stop()
	K := len(r.cfg.Clients)
	for {
		r.mu.Lock()
		n := len(r.ready)
		r.mu.Unlock()
		if n == K {
			break
		}
		select {
		case <-r.enrolled:
			continue
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
		break
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = true
	if n := len(r.ready); n < r.cfg.MinClients {
		return fmt.Errorf("%w: %d of %d clients enrolled within %v, fewer than the %d needed (--min-clients)", ErrTooFewClients, n, K, r.cfg.EnrolTimeout, r.cfg.MinClients)
	}
	r.cp.Enrolled = slices.Sorted(mapsKeys(r.ready))
	if r.welcome.NeedCounts {
		r.cp.Counts = make([]float64, r.cp.Classes)
		for _, k := range r.cp.Enrolled {
			for j, v := range r.ready[k] {
				r.cp.Counts[j] += v
			}
		}
	}
	return nil
}

func mapsKeys(m map[int][]float64) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
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

// storeSettings stores the run's settings, once, before its first
// checkpoint.
func (r *run) storeSettings(ctx context.Context) error {
	return r.put(ctx, settingsKey, "storing the settings", &r.want)
}

// commit stores the checkpoint.
func (r *run) commit(ctx context.Context) error {
	state, err := r.server.(federation.StateSaver).State()
	if err != nil {
		return err
	}
	r.cp.State = state
	return r.put(ctx, checkpointKey, "committing the checkpoint", &r.cp)
}

// put stores v as JSON under key of the bucket, retrying as r.retry does;
// what names the step in errors.
func (r *run) put(ctx context.Context, key, what string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	err = r.retry(ctx, what, func(ctx context.Context) error {
		_, err := r.kv.Put(ctx, key, b)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// invite sends the round invitation a to each client of ks on its own
// inbox (fedcalib.F.inbox.P.invite): a client that was not sampled hears
// nothing of the round, so a round costs O(pK) messages, not O(K).
func (r *run) invite(a *Announcement, ks []int) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	for _, k := range ks {
		if err := r.nc.Publish(subjInvite(r.fed, r.cfg.Clients[k]), b); err != nil {
			return err
		}
	}
	return nil
}

// announce publishes a to every client on fedcalib.F.round: only the end
// of the run goes there.
func (r *run) announce(a *Announcement) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return r.nc.Publish(subjRound(r.fed), b)
}

// unanswered returns the participants parts whose update was neither
// accepted (got) nor refused: those to invite again.
func unanswered(parts []int, got map[int][]float64, refused map[int]string) []int {
	var out []int
	for _, k := range parts {
		_, ok := got[k]
		if _, no := refused[k]; !ok && !no {
			out = append(out, k)
		}
	}
	return out
}

// round runs round t: invite, collect, close, commit.
func (r *run) round(ctx context.Context, t int, msgs <-chan *nats.Msg) error {
	cfg := r.cfg
	parts := r.sched.Participants(t, len(cfg.Clients))
	rep := RoundReport{RoundRecord: calib.RoundRecord{Round: t, Sampled: parts, Participants: []int{}, Dropouts: []int{}}, Rounds: r.sched.Rounds(), Refused: map[int]string{}}
	if r.sec != nil {
		return r.secureRound(ctx, t, &rep)
	}
	var got map[int][]float64
	if len(parts) > 0 {
		// A plain invitation does not list the participants: a client
		// learns only that it was sampled.
		invitation := func(attempt int) *Announcement {
			return &Announcement{
				Federation: r.fed, Round: t, Attempt: attempt, Rounds: r.sched.Rounds(),
				Broadcast: r.server.Broadcast(),
				Deadline:  time.Now().Add(cfg.RoundTimeout), Seed: r.cp.Seed,
			}
		}
		var err error
		if got, err = r.collect(ctx, t, parts, invitation, r.server, msgs, &rep); err != nil {
			return err
		}
	}
	start := time.Now()
	for _, k := range parts {
		u, ok := got[k]
		if !ok {
			rep.Dropouts = append(rep.Dropouts, k)
			continue
		}
		if err := r.server.Add(u); err != nil {
			return err
		}
		rep.Participants = append(rep.Participants, k)
	}
	if err := r.server.EndRound(t, len(rep.Participants)); err != nil {
		return err
	}
	rep.Compute += time.Since(start)
	return r.closeRound(ctx, &rep)
}

// checker is what collect needs of a server step: the length of a valid
// update, and its check.
type checker interface {
	UpdateLen() int
	Check(u []float64) error
}

// collect invites the participants parts of round t, with the
// announcement invitation makes for each attempt, and gathers the
// updates that chk accepts until each participant answered or the
// attempt's deadline passed. While fewer than MinClients (or, when fewer
// were sampled, all of them) were accepted, it invites those that did
// not answer to a new attempt, MaxAttempts attempts at most. It returns
// the accepted updates by client.
func (r *run) collect(ctx context.Context, t int, parts []int, invitation func(attempt int) *Announcement, chk checker, msgs <-chan *nats.Msg, rep *RoundReport) (map[int][]float64, error) {
	cfg := r.cfg
	got := make(map[int][]float64, len(parts))
	sampled := make(map[int]bool, len(parts))
	for _, k := range parts {
		sampled[k] = true
	}
	need := min(cfg.MinClients, len(parts))
	every := min(time.Second, cfg.RoundTimeout/4)
	for rep.Attempts = 1; ; rep.Attempts++ {
		a := invitation(rep.Attempts)
		if err := r.invite(a, unanswered(parts, got, rep.Refused)); err != nil {
			return nil, err
		}
		deadline := time.NewTimer(cfg.RoundTimeout)
		tick := time.NewTicker(every)
	gather:
		for len(got)+len(rep.Refused) < len(parts) {
			select {
			case <-ctx.Done():
				deadline.Stop()
				tick.Stop()
				return nil, ctx.Err()
			case <-deadline.C:
				break gather
			case <-tick.C: // for clients that connected late or reconnected
				if err := r.invite(a, unanswered(parts, got, rep.Refused)); err != nil {
					cfg.Log.Warn("inviting again", "round", t, "err", err)
				}
			case m := <-msgs:
				rep.Received += int64(len(m.Data))
				st := time.Now()
				r.receive(t, m, sampled, got, rep.Refused, chk)
				rep.Compute += time.Since(st)
			}
		}
		deadline.Stop()
		tick.Stop()
		if len(got) >= need {
			return got, nil
		}
		if rep.Attempts >= cfg.MaxAttempts {
			return nil, fmt.Errorf("%w: %d of %d sampled clients sent an acceptable update in %d attempts of %v, fewer than the %d needed (--min-clients)",
				ErrTooFewClients, len(got), len(parts), rep.Attempts, cfg.RoundTimeout, need)
		}
		cfg.Log.Warn("round short of updates: inviting its participants again; nothing was released", "round", t, "updates", len(got), "needed", need, "attempt", rep.Attempts)
	}
}

// evaluate runs the evaluation round T+1 of the calibrator of res: every
// allow-listed client is invited (no sampling), the statistics of those
// that answer are summed in increasing k, and the evaluation's server
// step adds the noise of a private evaluation and charges its ledger.
// Nothing of it is checkpointed: a coordinator restarted before it ends
// runs it again, and only a finished evaluation is released.
func (r *run) evaluate(ctx context.Context, res *federation.Result, msgs <-chan *nats.Msg) (*federation.EvalResult, calib.RoundRecord, error) {
	cfg := r.cfg
	o := *cfg.Evaluate
	o.Seed, o.Workers = r.cp.Seed, 0
	ann := &EvalRound{Bins: o.Bins}
	if p := o.Privacy; p != nil {
		ann.Epsilon, ann.Delta, ann.Clip, ann.Accountant = p.Epsilon, p.Delta, p.Clip, p.Accountant.String()
		if ann.Clip == 0 {
			ann.Clip = federation.DefaultEvalClip
		}
		q := *p
		q.Secure = cfg.SecureNoise
		o.Privacy = &q
	}
	_, s, err := federation.EvalSteps(r.cp.Classes, res.Calibrator, o)
	if err != nil {
		return nil, calib.RoundRecord{}, err
	}
	var b bytes.Buffer
	if err := calib.Encode(&b, res.Calibrator, res.Privacy, calib.Provenance{Protocol: res.Protocol, Clients: len(cfg.Clients)}); err != nil {
		return nil, calib.RoundRecord{}, err
	}
	ann.Calibrator = b.Bytes()
	t := r.sched.Rounds() + 1
	parts := make([]int, len(cfg.Clients))
	for k := range parts {
		parts[k] = k
	}
	rep := RoundReport{RoundRecord: calib.RoundRecord{Round: t, Sampled: parts, Participants: []int{}, Dropouts: []int{}}, Rounds: r.sched.Rounds(), Refused: map[int]string{}}
	invitation := func(attempt int) *Announcement {
		return &Announcement{
			Federation: r.fed, Round: t, Attempt: attempt, Rounds: r.sched.Rounds(),
			Deadline: time.Now().Add(cfg.RoundTimeout), Seed: r.cp.Seed, Evaluation: ann,
		}
	}
	got, err := r.collect(ctx, t, parts, invitation, s, msgs, &rep)
	if err != nil {
		return nil, calib.RoundRecord{}, err
	}
	for _, k := range parts {
		u, ok := got[k]
		if !ok {
			rep.Dropouts = append(rep.Dropouts, k)
			continue
		}
		if err := s.Add(u); err != nil {
			return nil, calib.RoundRecord{}, err
		}
		rep.Participants = append(rep.Participants, k)
	}
	if err := s.EndRound(t, len(rep.Participants)); err != nil {
		return nil, calib.RoundRecord{}, err
	}
	ev, err := s.Evaluation()
	if err != nil {
		return nil, calib.RoundRecord{}, err
	}
	if cfg.Progress != nil {
		if ev.Privacy != nil {
			rep.Epsilon = ev.Privacy.Epsilon
		}
		cfg.Progress(rep)
	}
	return ev, rep.RoundRecord, nil
}

// closeRound commits a round closed by EndRound and reports progress.
func (r *run) closeRound(ctx context.Context, rep *RoundReport) error {
	cfg := r.cfg
	r.cp.Records = append(r.cp.Records, rep.RoundRecord)
	if err := r.commit(ctx); err != nil {
		return err
	}
	if cfg.Progress != nil {
		if cfg.Spec.Private() {
			if res, err := r.server.Result(); err == nil && res.Privacy != nil {
				rep.Epsilon = res.Privacy.Epsilon
			}
		}
		cfg.Progress(*rep)
	}
	return nil
}

// receive takes one update message of round t, refusing those that
// chk refuses, and answers it (ack).
func (r *run) receive(t int, m *nats.Msg, sampled map[int]bool, got map[int][]float64, refused map[int]string, chk checker) {
	pub := m.Subject[updatePrefixLen(r.fed):]
	k, ok := r.index[pub]
	if !ok {
		r.cfg.Log.Warn("update from a key not on the allow-list", "key", pub)
		return
	}
	reason := r.take(t, k, m, sampled, got, refused, chk)
	r.ack(m, pub, reason)
}

// take is receive's decision on the update m of client k: "" when the
// update is accepted or counted already (a replay of an accepted update,
// or of a round closed), else why it is not.
func (r *run) take(t, k int, m *nats.Msg, sampled map[int]bool, got map[int][]float64, refused map[int]string, chk checker) string {
	h := m.Header
	round, err := strconv.Atoi(h.Get(hdrRound))
	if err == nil && round != t && h.Get(hdrFederation) == r.fed {
		if round > t {
			r.cfg.Log.Warn("refused an update for a future round", "round", t, "client", k, "for", round)
			return fmt.Sprintf("%v: round %d is not open (round %d is)", federation.ErrBadUpdate, round, t)
		}
		return "" // a replay of a closed round: counted when it closed
	}
	if _, dup := got[k]; dup {
		return ""
	}
	if why, dup := refused[k]; dup {
		return why
	}
	refuse := func(reason string) string {
		refused[k] = reason
		r.cfg.Log.Warn("refused an update", "round", t, "client", k, "reason", reason)
		return reason
	}
	switch {
	case h.Get(hdrFederation) != r.fed:
		return refuse(fmt.Sprintf("%v: federation %q, not %q", federation.ErrBadUpdate, h.Get(hdrFederation), r.fed))
	case err != nil:
		return refuse(fmt.Sprintf("%v: no round number", federation.ErrBadUpdate))
	case h.Get(hdrClient) != strconv.Itoa(k):
		return refuse(fmt.Sprintf("%v: sent as client %q by client %d", federation.ErrBadUpdate, h.Get(hdrClient), k))
	case !sampled[k]:
		r.cfg.Log.Warn("refused an update from a client not sampled", "round", t, "client", k)
		return fmt.Sprintf("%v: client %d is not sampled in round %d", federation.ErrBadUpdate, k, t)
	}
	u, err := decodeUpdate(m.Data, chk.UpdateLen())
	if err == nil {
		err = chk.Check(u)
	}
	if err != nil {
		return refuse(err.Error())
	}
	got[k] = u
	return ""
}

// ack answers the update m of the client pub: an empty message when the
// update is taken (or was, for a replay), else the reason it is refused.
// It answers only on the client's own inbox, so that a client cannot have
// the coordinator write to another's.
func (r *run) ack(m *nats.Msg, pub, reason string) {
	if !strings.HasPrefix(m.Reply, inboxPrefix(r.fed, pub)+".") {
		return
	}
	if err := r.nc.Publish(m.Reply, []byte(reason)); err != nil {
		r.cfg.Log.Warn("answering an update", "err", err)
	}
}

// finish marks the run done and tells the clients: three times to all on
// fedcalib.F.round, and once on each allow-listed client's own inbox,
// where a client that missed the broadcasts (while it reconnected, or
// where the subject's interest had not reached every node of a cluster)
// still learns it. That is K messages once a run, not once a round.
func (r *run) finish() {
	r.mu.Lock()
	r.done = true
	r.mu.Unlock()
	a := &Announcement{Federation: r.fed, Round: r.sched.Rounds(), Rounds: r.sched.Rounds(), Seed: r.cp.Seed, Done: true}
	for i := range 3 {
		if i > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		if err := r.announce(a); err != nil {
			r.cfg.Log.Warn("announcing the end", "err", err)
		}
	}
	all := make([]int, len(r.cfg.Clients))
	for k := range all {
		all[k] = k
	}
	if err := r.invite(a, all); err != nil {
		r.cfg.Log.Warn("announcing the end", "err", err)
	}
	r.nc.Flush()
}
