package network

import (
	"strings"
	"time"
)

// Observer receives the events of a coordinator's run, for monitoring
// (package network/metrics exports them to Prometheus). Its methods are
// called from the coordinator's goroutines, one at a time for a run, and
// must return quickly; they must not call back into the coordinator.
type Observer interface {
	// Opened is called once the store was opened, its checkpoint read
	// and the coordinator listens for enrolments: before the enrolment
	// phase of a fresh run.
	Opened()
	// Started is called when the rounds are about to start (after the
	// enrolment phase of a fresh run): resumedAfter is the last round
	// closed before this process started, 0 for a fresh run; rounds is
	// the number of rounds of the run.
	Started(resumedAfter, rounds int)
	// Enrolled is called with the number of clients enrolled so far,
	// each time it grows.
	Enrolled(clients int)
	// RoundClosed is called once a round was closed and its checkpoint
	// committed (before Config.Progress).
	RoundClosed(RoundObservation)
	// Checkpoint is called after each write of the checkpoint, with its
	// latency and error (nil when it was committed).
	Checkpoint(latency time.Duration, err error)
	// SecureStage is called after each coordinator stage of a secure
	// aggregation round (collecting keys, shares, masked inputs,
	// signatures and unmasking responses) with its duration.
	SecureStage(stage string, d time.Duration)
}

// RoundObservation is what an Observer learns of a closed round. The
// zero value observes nothing.
type RoundObservation struct {
	// Round is the round's number, from 1.
	Round int
	// Attempts is the number of times it was announced.
	Attempts int
	// Updates and Dropouts count the participants whose update was
	// aggregated and those whose update was not.
	Updates, Dropouts int
	// Refused lists, per refused update, its reason class
	// (RefusalReason).
	Refused []string
	// Duration is the round's wall-clock time, from its first invitation
	// to its committed checkpoint; Compute is the coordinator's
	// computation within it (RoundReport.Compute) and Commit the
	// checkpoint's write.
	Duration, Compute, Commit time.Duration
	// Private reports a private fit; Epsilon and Rho are then the ε and
	// the zCDP ρ spent so far.
	Private      bool
	Epsilon, Rho float64
}

// Refusal reason classes of RefusalReason.
const (
	RefusedFederation = "federation" // sent for another federation
	RefusedRound      = "round"      // no or another round number
	RefusedIdentity   = "identity"   // sent as another client
	RefusedEncoding   = "encoding"   // not a well-formed update
	RefusedShape      = "shape"      // the wrong number of values
	RefusedValue      = "value"      // NaN, infinite or negative values
	RefusedNorm       = "norm"       // above the clip norm
	RefusedOther      = "other"      // none of the above
)

// RefusalReason returns the class of the reason a coordinator gives for
// refusing an update, one of the Refused constants: a label of few values
// for metrics, where the reason itself names clients and numbers.
func RefusalReason(reason string) string {
	for _, c := range []struct{ substr, class string }{
		{"federation \"", RefusedFederation},
		{"round", RefusedRound},
		{"sent as client", RefusedIdentity},
		{"clip norm", RefusedNorm},
		{"values, want", RefusedShape},
		{"bytes is not", RefusedEncoding},
		{"empty message", RefusedEncoding},
		{"sparse update", RefusedEncoding},
		{"negative", RefusedValue},
		{"≥ 0", RefusedValue},
		{"value ", RefusedValue},
		{"sums probabilities", RefusedValue},
	} {
		if strings.Contains(reason, c.substr) {
			return c.class
		}
	}
	return RefusedOther
}

// Connections returns the number of client connections of the embedded
// server: the coordinator's own included.
func (s *Server) Connections() int {
	return s.ns.NumClients()
}

// observeOpened tells the observer, if any, that the store is open.
func (r *run) observeOpened() {
	if o := r.cfg.Observer; o != nil {
		o.Opened()
	}
}

// observeStarted tells the observer, if any, that the rounds start.
func (r *run) observeStarted(resumedAfter int) {
	if o := r.cfg.Observer; o != nil {
		o.Started(resumedAfter, r.sched.Rounds())
		o.Enrolled(len(r.ready))
	}
}

// observeEnrolled tells the observer, if any, how many clients are
// enrolled; r.mu is held.
func (r *run) observeEnrolled() {
	if o := r.cfg.Observer; o != nil {
		o.Enrolled(len(r.ready))
	}
}

// observeCheckpoint tells the observer, if any, of a checkpoint write
// begun at start that returned *err.
func (r *run) observeCheckpoint(start time.Time, err *error) {
	d := time.Since(start)
	r.lastCommit = d
	if o := r.cfg.Observer; o != nil {
		o.Checkpoint(d, *err)
	}
}

// observeStage tells the observer, if any, of a secure-aggregation stage
// begun at start.
func (sx *exchange) observeStage(stage string, start time.Time) {
	if o := sx.cfg.Observer; o != nil {
		o.SecureStage(stage, time.Since(start))
	}
}

// observeRound tells the observer, if any, of the closed round rep, begun
// at r.began.
func (r *run) observeRound(rep *RoundReport) {
	o := r.cfg.Observer
	if o == nil {
		return
	}
	ob := RoundObservation{
		Round: rep.Round, Attempts: rep.Attempts,
		Updates: len(rep.Participants), Dropouts: len(rep.Dropouts),
		Duration: time.Since(r.began), Compute: rep.Compute, Commit: r.lastCommit,
	}
	for _, why := range rep.Refused {
		ob.Refused = append(ob.Refused, RefusalReason(why))
	}
	if r.cfg.Spec.Private() {
		if res, err := r.server.Result(); err == nil && res.Privacy != nil {
			ob.Private, ob.Epsilon, ob.Rho = true, res.Privacy.Epsilon, res.Privacy.Rho
		}
	}
	o.RoundClosed(ob)
}

// ClientObserver receives the events of a client's run, for monitoring
// (package network/metrics exports them to Prometheus). Its methods are
// called from the client's goroutine and must return quickly.
type ClientObserver interface {
	// Answered is called after the client sent its update of a round
	// (the evaluation round included), with the time it took to compute
	// it and to send it (until the coordinator's answer), and whether
	// the coordinator took it. Under secure aggregation it is called
	// once the round's exchange ended without error, send being the
	// whole exchange (its five stages).
	Answered(round int, compute, send time.Duration, taken bool)
}

// observeSecure tells o, if not nil, of a secure-aggregation round whose
// update was computed from computing and whose exchange, begun at
// sending, ended with err.
func observeSecure(o ClientObserver, round int, computing, sending time.Time, err error) {
	if o != nil && err == nil {
		o.Answered(round, sending.Sub(computing), time.Since(sending), true)
	}
}
