package network

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
)

// updateBuffer is how many update messages the coordinator's
// subscription holds before the connection drops new ones.
const updateBuffer = 4096

// invite sends the round invitation a to each client of ks on its own
// inbox (fedcalib.F.inbox.P.invite): a client that was not sampled hears
// nothing of the round, so a round costs O(pK) messages, not O(K).
func (r *run) invite(a *Announcement, ks []int) error {
	if err := r.lease.check(); err != nil {
		return err
	}
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
	if err := r.lease.check(); err != nil {
		return err
	}
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
	r.began = time.Now()
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
	if err := r.lease.check(); err != nil {
		return err
	}
	r.observeRound(rep)
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
	if !ownInbox(r.fed, pub, m.Reply) {
		r.cfg.Log.Warn("ignored an update whose reply subject is not the sender's inbox", "client", k, "reply", fmt.Sprintf("%.80q", m.Reply))
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
func (r *run) ack(m *nats.Msg, pub, reason string) {
	if err := r.answer(m, pub, []byte(reason)); err != nil {
		r.cfg.Log.Warn("answering an update", "err", err)
	}
}

// answer sends b in answer to the request m of the client pub, and is the
// only way the coordinator answers a client's request: only on that
// client's own inbox (fedcalib.F.inbox.P.…), whatever reply subject the
// request carries, so that no client can have the coordinator write, with
// its permissions, to another client's subjects, the round subject, the
// bucket or the JetStream API (a confused deputy). A request whose reply
// subject is elsewhere gets no answer, and an error says why.
func (r *run) answer(m *nats.Msg, pub string, b []byte) error {
	if !ownInbox(r.fed, pub, m.Reply) {
		return fmt.Errorf("%w: the reply subject %.80q of client %s is not under its inbox %s.>: not answered", ErrNotAllowed, m.Reply, pub, inboxPrefix(r.fed, pub))
	}
	return r.nc.Publish(m.Reply, b)
}

// finish marks the run done and tells the clients (end).
func (r *run) finish() {
	r.end(&Announcement{Federation: r.fed, Round: r.sched.Rounds(), Rounds: r.sched.Rounds(), Seed: r.cp.Seed, Done: true})
}

// abort tells the clients that the coordinator gives the run up, and why
// (err): they leave at once instead of waiting for invitations that will
// not come. Not for a coordinator stopped (it may be restarted and resume)
// or that lost its lease (another coordinator runs the federation now).
func (r *run) abort(err error) {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrLeaseLost) || r.nc.IsClosed() {
		return
	}
	rounds := 0
	if r.sched != nil {
		rounds = r.sched.Rounds()
	}
	r.mu.Lock()
	r.aborted = err.Error()
	r.mu.Unlock()
	r.end(&Announcement{Federation: r.fed, Round: len(r.cp.Records), Rounds: rounds, Seed: r.cp.Seed, Done: true, Abort: err.Error()})
}

// end marks the run done and announces a: three times to all on
// fedcalib.F.round, and once on each allow-listed client's own inbox,
// where a client that missed the broadcasts (while it reconnected, or
// where the subject's interest had not reached every node of a cluster)
// still learns it. That is K messages once a run, not once a round.
func (r *run) end(a *Announcement) {
	r.mu.Lock()
	r.done = true
	r.mu.Unlock()
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
