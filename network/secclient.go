package network

import (
	"context"
	"encoding"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/secagg"
)

// errStageTimeout reports that the coordinator's message of a stage did
// not come before the round's deadline: the round went on without the
// client, or failed.
var errStageTimeout = errors.New("no message from the coordinator before the round's deadline")

// secureJoin is a client's side of secure aggregation.
type secureJoin struct {
	nc         *nats.Conn
	fed, pub   string
	seed       []byte   // the client's NKey seed: its signing key
	allow      []string // the allow-list the client holds, nil: none
	k          int
	in         <-chan *nats.Msg // the client's secure-aggregation inbox
	anns       <-chan *nats.Msg // the client's invitations and the end of the run
	rep        *ClientReport
	log        *slog.Logger
	drop       func(t int, stage string) bool
	t, attempt int
	// mem is the client's secagg.Memory of each round it took part in
	// (rounds before the latest are forgotten: the coordinator never
	// goes back).
	mem map[int]*secagg.Memory
}

// memory returns the client's record of round t, forgetting earlier
// rounds.
func (sj *secureJoin) memory(t int) *secagg.Memory {
	if sj.mem == nil {
		sj.mem = map[int]*secagg.Memory{}
	}
	for r := range sj.mem {
		if r < t {
			delete(sj.mem, r)
		}
	}
	if sj.mem[t] == nil {
		sj.mem[t] = &secagg.Memory{}
	}
	return sj.mem[t]
}

// checkIdentities checks the identities a secure round announces: one
// per participant, this client's own key for itself, and, when the client
// holds the allow-list, line p of it for participant p. Errors wrap
// ErrFederation.
func checkIdentities(a *Announcement, allow []string, pub string, k int) error {
	sr := a.Secure
	if len(sr.Identities) != len(a.Participants) {
		return fmt.Errorf("%w: %d identities for %d participants", ErrFederation, len(sr.Identities), len(a.Participants))
	}
	self := false
	for i, p := range a.Participants {
		if p == k {
			self = true
			if sr.Identities[i] != pub {
				return fmt.Errorf("%w: the round's identity of this client is not its key", ErrFederation)
			}
		}
		if allow != nil && (p < 0 || p >= len(allow) || allow[p] != sr.Identities[i]) {
			return fmt.Errorf("%w: the round's identity of participant %d is not on the allow-list", ErrFederation, p)
		}
	}
	if !self {
		return fmt.Errorf("%w: the round does not name this client among its participants", ErrFederation)
	}
	return nil
}

// refuse records a refused request of the coordinator and returns it as
// an error.
func (sj *secureJoin) refuse(a *Announcement, what string, err error) error {
	sj.rep.Refused = append(sj.rep.Refused, fmt.Sprintf("round %d attempt %d: %s: %v", a.Round, a.Attempt, what, err))
	return fmt.Errorf("refused %s: %w", what, err)
}

// run takes part in one attempt a of a round with the client's update u:
// quantise, noise, mask, sign the survivors, unmask. It returns a newer invitation (a new
// attempt or round) or the end of the run, read meanwhile, if any.
func (sj *secureJoin) run(ctx context.Context, a *Announcement, u []float64) (*Announcement, error) {
	sr := a.Secure
	sj.t, sj.attempt = a.Round, a.Attempt
	if !(sr.ClientVariance >= 0) || math.IsInf(sr.ClientVariance, 1) || sr.ClientVariance > maxClientVariance {
		return nil, fmt.Errorf("%w: the round asks for noise variance %v", ErrFederation, sr.ClientVariance)
	}
	for _, c := range sr.Clips {
		if !(c > 0) || math.IsInf(c, 1) {
			return nil, fmt.Errorf("%w: the round announces clip norm %v", ErrFederation, c)
		}
	}
	if !(sr.Shrink >= 0 && sr.Shrink <= 1) {
		return nil, fmt.Errorf("%w: the round announces shrink factor %v", ErrFederation, sr.Shrink)
	}
	x := slices.Clone(u)
	if err := normalise(x, sr.Clips, false); err != nil {
		return nil, err
	}
	if sr.Shrink > 0 {
		for i := range x {
			x[i] *= sr.Shrink
		}
	}
	for i, v := range x {
		if math.Abs(v) > sr.Range {
			return nil, fmt.Errorf("value %d of the update, %v, is outside the secure aggregation's range ±%v", i, v, sr.Range)
		}
	}
	q := sr.quantizer()
	rng := dp.NewSecure()
	input, err := q.Quantize(nil, x, rng)
	if err != nil {
		return nil, err
	}
	q.AddNoise(input, sr.ClientVariance, rng)
	ids := make([]uint32, len(a.Participants))
	for i, p := range a.Participants {
		ids[i] = uint32(p)
	}
	if sr.Seed != graphSeed(sj.fed, a.Seed, a.Round, a.Participants) {
		return nil, sj.refuse(a, "the round", fmt.Errorf("%w: the round's graph seed is not the one its participants give", ErrFederation))
	}
	if err := checkIdentities(a, sj.allow, sj.pub, sj.k); err != nil {
		return nil, sj.refuse(a, "the round", err)
	}
	idents, err := identities(sr.Identities, ids)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFederation, err)
	}
	round, err := secagg.NewRound(secagg.Config{
		Seed: sr.Seed, Participants: ids, Neighbours: sr.Neighbours, Threshold: sr.Threshold, MinSurvivors: sr.MinSurvivors,
		Context: secContext(sj.fed, a.Round, a.Attempt), Identities: idents, Bits: sr.Bits, Dim: len(u),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFederation, err)
	}
	key, err := signingKey(sj.seed)
	if err != nil {
		return nil, err
	}
	cl, err := secagg.NewClient(round, uint32(sj.k), secagg.ClientOptions{Key: key, Memory: sj.memory(a.Round)})
	if err != nil {
		return nil, sj.refuse(a, "the round", err)
	}
	adv, err := cl.AdvertiseKeys()
	if err != nil {
		return nil, err
	}
	if stop, err := sj.send(stageKeys, adv); stop || err != nil {
		return nil, err
	}
	var nk secagg.NeighbourKeys
	if next, err := sj.wait(ctx, a, stageNeighbours, &nk); next != nil || err != nil {
		return next, err
	}
	sh, err := cl.ShareKeys(&nk)
	if err != nil {
		return nil, err
	}
	if stop, err := sj.send(stageShares, sh); stop || err != nil {
		return nil, err
	}
	var rs secagg.RoutedShares
	if next, err := sj.wait(ctx, a, stageRouted, &rs); next != nil || err != nil {
		return next, err
	}
	masked, err := cl.MaskedInput(&rs, input)
	if err != nil {
		return nil, err
	}
	if stop, err := sj.send(stageMasked, masked); stop || err != nil {
		return nil, err
	}
	sj.rep.Answered = append(sj.rep.Answered, a.Round)
	var set secagg.SurvivorSet
	if next, err := sj.wait(ctx, a, stageSurvivors, &set); next != nil || err != nil {
		return next, err
	}
	sig, err := cl.SignSurvivors(&set)
	if err != nil {
		return nil, sj.refuse(a, "the survivor set", err)
	}
	if stop, err := sj.send(stageSigned, sig); stop || err != nil {
		return nil, err
	}
	var req secagg.UnmaskRequest
	if next, err := sj.wait(ctx, a, stageRequest, &req); next != nil || err != nil {
		return next, err
	}
	resp, err := cl.Unmask(&req)
	if err != nil {
		return nil, sj.refuse(a, "the unmask request", err)
	}
	_, err = sj.send(stageUnmask, resp)
	return nil, err
}

// send publishes a message of the stage, unless the test hook drops the
// client there (stop).
func (sj *secureJoin) send(stage string, m encoding.BinaryMarshaler) (stop bool, err error) {
	if sj.drop != nil && sj.drop(sj.t, stage) {
		return true, nil
	}
	b, err := m.MarshalBinary()
	if err != nil {
		return false, err
	}
	msg := &nats.Msg{Subject: subjSecAgg(sj.fed, sj.pub), Header: secHeader(sj.fed, sj.t, sj.attempt, sj.k, stage), Data: b}
	if err := sj.nc.PublishMsg(msg); err != nil {
		return false, err
	}
	sj.rep.Sent += int64(len(b))
	return false, nil
}

// wait reads the coordinator's message of the stage into m, or returns a
// newer invitation or the end of the run.
func (sj *secureJoin) wait(ctx context.Context, a *Announcement, stage string, m encoding.BinaryUnmarshaler) (*Announcement, error) {
	timer := time.NewTimer(time.Until(a.Deadline) + time.Second)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
			return nil, fmt.Errorf("stage %s: %w", stage, errStageTimeout)
		case msg := <-sj.anns:
			b, ok := readAnnouncement(msg, sj.fed, sj.pub)
			if !ok {
				continue
			}
			if b.Done || b.Round > a.Round || (b.Round == a.Round && b.Attempt > a.Attempt) {
				sj.rep.Received += int64(len(msg.Data))
				return &b, nil
			}
		case msg := <-sj.in:
			h := msg.Header
			if h.Get(hdrFederation) != sj.fed || h.Get(hdrRound) != strconv.Itoa(a.Round) || h.Get(hdrAttempt) != strconv.Itoa(a.Attempt) || h.Get(hdrStage) != stage {
				continue
			}
			sj.rep.Received += int64(len(msg.Data))
			if err := m.UnmarshalBinary(msg.Data); err != nil {
				return nil, err
			}
			return nil, nil
		}
	}
}
