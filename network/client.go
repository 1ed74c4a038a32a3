package network

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
)

// ClientConfig configures a client of a federation. The zero value is not
// usable: Key and Data must be set.
type ClientConfig struct {
	// Federation is the federation's name; empty means
	// DefaultFederation.
	Federation string
	// Key is the client's identity.
	Key Key
	// Data returns the client's calibration rows, given the welcome
	// (whose Client is the client's index k). It is called once.
	Data func(w Welcome) (*calib.Set, error)
	// TestData, if not nil, returns the client's test rows for the
	// run's evaluation round, given the welcome; it is called once, when
	// the client is first invited to one. A client without it does not
	// take part in evaluation rounds.
	TestData func(w Welcome) (*calib.Set, error)
	// Enrolled, if not nil, is called with the welcome once the
	// coordinator accepted the client's ready request: the client is
	// enrolled.
	Enrolled func(w Welcome)
	// EnrolTimeout is how long to wait for a coordinator to answer the
	// enrolment; zero means 30 seconds.
	EnrolTimeout time.Duration
	// Log receives one line per round the client answers; nil means
	// none.
	Log *slog.Logger
	// AllowList, if not nil, is the federation's allow-list as the client
	// holds it (ReadAllowList): under secure aggregation it refuses a
	// round whose announced identity of participant k is not line k, so a
	// coordinator cannot make up the other participants' keys. nil trusts
	// the coordinator's announcement.
	AllowList []string
	// Observer, if not nil, receives the client's events for monitoring.
	Observer ClientObserver

	// drop, in tests, makes the client drop out of round t just before
	// it would send its message of the stage (secure aggregation).
	drop func(t int, stage string) bool
}

// ClientReport is what a client did in a run. The zero value reports
// nothing.
type ClientReport struct {
	// Welcome is the coordinator's welcome.
	Welcome Welcome
	// Rounds is the number of rounds of the run's fit: Welcome.Rounds,
	// or twice it for scalbin (federation.Scheduler); the evaluation
	// round, if any, is the one after. Zero when the run had ended
	// before the client enrolled.
	Rounds int
	// Answered lists the rounds in which the client sent an update (under
	// secure aggregation: its masked input), the evaluation round
	// included.
	Answered []int
	// Refused lists the requests of the coordinator the client refused,
	// with the reason: under secure aggregation, a survivor set it would
	// not sign or an unmask request it would not answer (secagg.Client's
	// SignSurvivors and Unmask).
	Refused []string
	// Sent and Received are the payload bytes the client sent (updates,
	// every try of each, and secure-aggregation messages) and received (invitations, the end of
	// the run, secure-aggregation messages).
	Sent, Received int64
}

// Join connects to the server of d with cfg.Key, enrols in the federation
// and answers every round invitation it receives (on its own inbox) with
// its update, until the coordinator announces the end of the run (to
// every client, on fedcalib.F.round). Errors wrap
// ErrUnreachable, ErrNotAllowed, ErrFederation or ErrKey.
func Join(ctx context.Context, d Dial, cfg ClientConfig) (*ClientReport, error) {
	fed := fedOr(cfg.Federation)
	if err := ValidFederation(fed); err != nil {
		return nil, err
	}
	if cfg.Key.Public == "" || cfg.Data == nil {
		return nil, fmt.Errorf("%w: a client needs a key and its data", ErrConfig)
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	pub := cfg.Key.Public
	d.Seed, d.Creds, d.inboxPrefix = cfg.Key.Seed, cfg.Key.Creds, inboxPrefix(fed, pub)
	asyncErr := make(chan error, 8)
	d.OnError = func(err error) {
		select {
		case asyncErr <- err:
		default:
		}
	}
	closed := make(chan struct{})
	nc, err := d.connectWait(ctx)
	if err != nil {
		return nil, err
	}
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	defer nc.Close()
	// Invitations and the end of the run share one channel, in the
	// order each subscription delivers them.
	anns := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(subjRound(fed), anns)
	if err != nil {
		return nil, fmt.Errorf("%w: subscribing to the announcements: %w", ErrNotAllowed, err)
	}
	defer sub.Unsubscribe()
	isub, err := nc.ChanSubscribe(subjInvite(fed, pub), anns)
	if err != nil {
		return nil, fmt.Errorf("%w: subscribing to the inbox: %w", ErrNotAllowed, err)
	}
	defer isub.Unsubscribe()
	w, err := request(ctx, nc, fed, pub, hello{Kind: "hello", Version: Version}, or(cfg.EnrolTimeout, 30*time.Second), asyncErr)
	if err != nil {
		return nil, err
	}
	rep := &ClientReport{Welcome: *w}
	if w.Done {
		return rep, (&Announcement{Abort: w.Abort}).aborted()
	}
	set, err := cfg.Data(*w)
	if err != nil {
		return nil, err
	}
	rd := ready{Kind: "ready", Version: Version, Classes: set.Classes}
	if w.NeedCounts {
		rd.Counts = make([]float64, set.Classes)
		for _, y := range set.Labels {
			rd.Counts[y]++
		}
	}
	if w, err = request(ctx, nc, fed, pub, rd, or(cfg.EnrolTimeout, 30*time.Second), asyncErr); err != nil {
		return nil, err
	}
	rep.Welcome = *w
	if w.Done { // the run ended, or was given up, while the client loaded its data
		return rep, (&Announcement{Abort: w.Abort}).aborted()
	}
	if cfg.Enrolled != nil {
		cfg.Enrolled(*w)
	}
	k := w.Client
	fitter, err := w.Spec.Fitter()
	if err != nil {
		return nil, fmt.Errorf("the coordinator's protocol: %w", err)
	}
	stepper, ok := fitter.(federation.Stepper)
	if !ok {
		return nil, fmt.Errorf("the coordinator's protocol %s has no client step", w.Spec.Method)
	}
	zero := func() ([]float64, error) { return make([]float64, w.Classes), nil } // the client's server step is unused
	rounds := federation.Rounds{T: w.Rounds, SampleRate: w.Rate, Seed: w.Seed}
	step, srv, err := stepper.Steps(federation.Federation{Clients: w.Clients, Classes: w.Classes, ClassCounts: zero}, rounds)
	if err != nil {
		return nil, fmt.Errorf("the coordinator's protocol: %w", err)
	}
	rep.Rounds = federation.Schedule(srv, rounds).Rounds()
	secIn := make(chan *nats.Msg, 64)
	ssub, err := nc.ChanSubscribe(subjSecAggIn(fed, pub), secIn)
	if err != nil {
		return nil, fmt.Errorf("%w: subscribing to the inbox: %w", ErrNotAllowed, err)
	}
	defer ssub.Unsubscribe()
	sj := &secureJoin{nc: nc, fed: fed, pub: pub, seed: cfg.Key.Seed, allow: cfg.AllowList, k: k, in: secIn, anns: anns, rep: rep, log: log, drop: cfg.drop}
	done, doneAttempt := 0, 0  // last round (and attempt) answered
	var doneDeadline time.Time // the deadline of the invitation last answered (plain rounds)
	var buf []float64
	var pending *Announcement // an invitation (or the end) read during a secure exchange
	var test *calib.Set       // the test rows, loaded for the evaluation round
	skipped := false          // an evaluation round was ignored, for want of test rows
	for {
		if pending != nil {
			a := *pending
			pending = nil
			if a.Done {
				return rep, a.aborted()
			}
			if a.Secure == nil || !slices.Contains(a.Participants, k) || a.Round < done || (a.Round == done && a.Attempt <= doneAttempt) {
				continue
			}
			if a.Seed != w.Seed {
				return rep, fmt.Errorf("%w: round %d announces seed %d, the welcome %d", ErrFederation, a.Round, a.Seed, w.Seed)
			}
			computing := time.Now()
			if buf, err = step.Update(buf[:0], a.Round, set, a.Broadcast, federation.ClientRand(a.Seed, a.Round, k)); err != nil {
				return rep, fmt.Errorf("round %d: %w", a.Round, err)
			}
			sending := time.Now()
			pending, err = sj.run(ctx, &a, buf)
			observeSecure(cfg.Observer, a.Round, computing, sending, err)
			done, doneAttempt = a.Round, a.Attempt
			if err != nil {
				log.Warn("secure aggregation", "round", a.Round, "attempt", a.Attempt, "err", err)
			}
			continue
		}
		var m *nats.Msg
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-closed:
			return rep, fmt.Errorf("%w: lost the connection to %s and could not reconnect", ErrUnreachable, d.URL)
		case err := <-asyncErr:
			if errors.Is(err, nats.ErrPermissionViolation) {
				return rep, fmt.Errorf("%w: %w", ErrNotAllowed, err)
			}
			log.Warn("connection", "err", err)
			continue
		case m = <-anns:
		}
		a, ok := readAnnouncement(m, fed, pub)
		if !ok {
			log.Warn("ignored a malformed announcement")
			continue
		}
		rep.Received += int64(len(m.Data))
		if a.Done {
			return rep, a.aborted()
		}
		if a.Secure != nil {
			pending = &a
			continue
		}
		// An invitation sent again to the participants not answered yet
		// (for clients that connected late) is ignored once answered: an
		// answered client hears it only if it was queued while the client
		// sent. A round answered but invited again under another
		// deadline is a new attempt or a restarted coordinator, which
		// does not have the update (it is not stored): send it again.
		if a.Round < done || (a.Round == done && a.Attempt == doneAttempt && a.Deadline.Equal(doneDeadline)) {
			continue
		}
		if a.Seed != w.Seed {
			return rep, fmt.Errorf("%w: round %d announces seed %d, the welcome %d", ErrFederation, a.Round, a.Seed, w.Seed)
		}
		start := time.Now()
		if a.Evaluation != nil {
			if cfg.TestData == nil {
				if !skipped {
					log.Info("no test data: not taking part in the evaluation round", "round", a.Round)
					skipped = true
				}
				continue
			}
			if test == nil {
				if test, err = cfg.TestData(*w); err != nil {
					return rep, fmt.Errorf("evaluation round: %w", err)
				}
			}
			if buf, err = evalUpdate(buf[:0], a, w.Classes, test); err != nil {
				return rep, fmt.Errorf("evaluation round %d: %w", a.Round, err)
			}
		} else if buf, err = step.Update(buf[:0], a.Round, set, a.Broadcast, federation.ClientRand(a.Seed, a.Round, k)); err != nil {
			return rep, fmt.Errorf("round %d: %w", a.Round, err)
		}
		sending := time.Now()
		n, err := send(ctx, nc, fed, pub, a, k, encodeUpdate(buf, w.SparseUpdates))
		if o := cfg.Observer; o != nil && (err == nil || errors.Is(err, errRefused)) {
			o.Answered(a.Round, sending.Sub(start), time.Since(sending), err == nil)
		}
		rep.Sent += n
		if errors.Is(err, errRefused) {
			log.Warn("the coordinator refused the update", "round", a.Round, "err", err)
		} else if err != nil {
			log.Warn("could not send the update", "round", a.Round, "err", err)
			continue // the next invitation of the round tries again
		}
		if a.Round != done {
			rep.Answered = append(rep.Answered, a.Round)
		}
		done, doneAttempt, doneDeadline = a.Round, a.Attempt, a.Deadline
		log.Info("sent update", "round", a.Round, "of", a.Rounds, "client", k, "values", len(buf), "compute", time.Since(start).Round(time.Microsecond))
	}
}

// evalUpdate appends to dst the client's statistics of its test rows
// for the evaluation round a: the client step of federation.EvalSteps
// with the announced calibrator, bins and privacy.
func evalUpdate(dst []float64, a Announcement, classes int, test *calib.Set) ([]float64, error) {
	e := a.Evaluation
	cal, _, err := calib.Decode(bytes.NewReader(e.Calibrator))
	if err != nil {
		return nil, fmt.Errorf("the announced calibrator: %w", err)
	}
	o, err := e.options()
	if err != nil {
		return nil, fmt.Errorf("the announced evaluation: %w", err)
	}
	step, _, err := federation.EvalSteps(classes, cal, o)
	if err != nil {
		return nil, err
	}
	return step.Update(dst, a.Round, test, nil, nil)
}

// aborted returns nil for the end of a run, and an error wrapping
// ErrAborted with the coordinator's reason for an aborted run.
func (a *Announcement) aborted() error {
	if a.Abort == "" {
		return nil
	}
	return fmt.Errorf("%w: %.300s", ErrAborted, a.Abort)
}

// readAnnouncement decodes m, a message of the client pub's invitation
// subscription or of the round subject, and reports whether it is an
// announcement of federation fed that the client should act on: an
// invitation on its own inbox, or the end of the run on either.
func readAnnouncement(m *nats.Msg, fed, pub string) (Announcement, bool) {
	var a Announcement
	if err := json.Unmarshal(m.Data, &a); err != nil || a.Federation != fed {
		return a, false
	}
	return a, a.Done || m.Subject == subjInvite(fed, pub)
}

// sendTry bounds the wait for the answer to one try of send.
const sendTry = 2 * time.Second

// errRefused is wrapped by send's error when the coordinator answered
// that it refuses the update.
var errRefused = errors.New("update refused")

// send sends an encoded update to the coordinator, a core NATS request
// on the client's update subject, until the coordinator answers or the
// round's deadline passes, and returns the bytes sent (every try). The
// coordinator answers once it holds the update (or held it: a replay
// counts once), or with the reason it refuses it (errRefused).
func send(ctx context.Context, nc *nats.Conn, fed, pub string, a Announcement, k int, update []byte) (int64, error) {
	msg := &nats.Msg{Subject: subjUpdate(fed, pub), Header: nats.Header{}, Data: update}
	msg.Header.Set(hdrFederation, fed)
	msg.Header.Set(hdrRound, strconv.Itoa(a.Round))
	msg.Header.Set(hdrClient, strconv.Itoa(k))
	ctx, cancel := context.WithDeadline(ctx, a.Deadline.Add(time.Second))
	defer cancel()
	var sent int64
	for {
		// Each try waits for its answer a few seconds at most: an update
		// lost while a cluster node stops, or dropped by a coordinator
		// that was busy or restarting, is sent again in time.
		tctx, tcancel := context.WithTimeout(ctx, sendTry)
		m, err := nc.RequestMsgWithContext(tctx, msg)
		tcancel()
		sent += int64(len(msg.Data))
		if err == nil {
			if len(m.Data) > 0 {
				return sent, fmt.Errorf("%w: %s", errRefused, m.Data)
			}
			return sent, nil
		}
		if ctx.Err() != nil {
			return sent, err
		}
		select {
		case <-ctx.Done():
			return sent, err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// request sends an enrolment request and returns the coordinator's
// welcome, retrying while no coordinator answers, for at most wait.
func request(ctx context.Context, nc *nats.Conn, fed, pub string, req any, wait time.Duration, asyncErr <-chan error) (*Welcome, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := nc.RequestWithContext(rctx, subjEnrol(fed, pub), b)
		rcancel()
		select {
		case aerr := <-asyncErr:
			if errors.Is(aerr, nats.ErrPermissionViolation) {
				return nil, fmt.Errorf("%w: the server does not serve federation %q to this key: %w", ErrFederation, fed, aerr)
			}
		default:
		}
		if err == nil {
			var w Welcome
			if err := json.Unmarshal(m.Data, &w); err != nil {
				return nil, fmt.Errorf("%w: the coordinator's answer: %w", ErrFederation, err)
			}
			if w.Error != "" {
				return nil, fmt.Errorf("%w: the coordinator refused the enrolment: %s", ErrNotAllowed, w.Error)
			}
			if w.Federation != fed {
				return nil, fmt.Errorf("%w: answered by federation %q", ErrFederation, w.Federation)
			}
			return &w, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: no coordinator of federation %q answered within %v: %w", ErrFederation, fed, wait, err)
		}
		if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("%w: enrolling: %w", ErrUnreachable, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}
