package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fedcalib/fedcalib/calib"
)

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
	pub := m.Subject[enrolPrefixLen(r.fed):]
	reply := func(w Welcome) {
		b, err := json.Marshal(w)
		if err == nil {
			err = r.answer(m, pub, b)
		}
		if err != nil {
			r.cfg.Log.Warn("answering an enrolment", "err", err)
		}
	}
	if !ownInbox(r.fed, pub, m.Reply) {
		r.cfg.Log.Warn("ignored an enrolment whose reply subject is not the sender's inbox", "key", pub, "reply", fmt.Sprintf("%.80q", m.Reply))
		return
	}
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
	w.Client, w.Done, w.Abort = k, r.done, r.aborted
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
		r.observeEnrolled()
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
