package network

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/secagg"
)

// Stages of a round under secure aggregation, as the Fedcalib-Stage
// header names them. Client → coordinator, on fedcalib.F.secagg.P:
// stageKeys (secagg.AdvertiseKeys), stageShares (secagg.ShareKeys),
// stageMasked (secagg.MaskedInput), stageSigned
// (secagg.SurvivorSignature), stageUnmask (secagg.UnmaskResponse).
// Coordinator → client, on the client's inbox fedcalib.F.inbox.P.secagg:
// stageNeighbours (secagg.NeighbourKeys), stageRouted
// (secagg.RoutedShares), stageSurvivors (secagg.SurvivorSet),
// stageRequest (secagg.UnmaskRequest).
const (
	stageKeys       = "keys"
	stageShares     = "shares"
	stageMasked     = "masked"
	stageSigned     = "signed"
	stageUnmask     = "unmask"
	stageNeighbours = "neighbour-keys"
	stageRouted     = "routed-shares"
	stageSurvivors  = "survivors"
	stageRequest    = "unmask-request"
)

// secContext returns secagg.Config.Context of attempt a of round t of
// federation fed: every key, share and signature of the attempt is bound
// to it, so nothing of another federation, round or attempt is accepted.
func secContext(fed string, t, a int) []byte {
	return fmt.Appendf(nil, "fedcalib federation %q round %d attempt %d", fed, t, a)
}

// graphSeed returns the neighbour-graph seed of round t of federation
// fed (secagg.Config.Seed): SHA-256 of a domain, the federation, the
// run's seed, the round and its participants. Every client derives it
// and refuses another, so the coordinator cannot change a round's graph
// between attempts or show clients different graphs, and a restarted
// coordinator finds the same one. It is fixed once the participants are:
// colluding clients can compute it early, but not move in it.
func graphSeed(fed string, runSeed uint64, t int, parts []int) [32]byte {
	h := sha256.New()
	fmt.Fprintf(h, "fedcalib/secagg graph seed\x00%q\x00%d\x00%d", fed, runSeed, t)
	var b [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(b[:], uint64(p))
		h.Write(b[:])
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// identities decodes the NKey public keys of the participants ids (in
// the same order) into the Ed25519 keys secagg verifies signatures with.
func identities(pubs []string, ids []uint32) (map[uint32]ed25519.PublicKey, error) {
	if len(pubs) != len(ids) {
		return nil, fmt.Errorf("%d identities for %d participants", len(pubs), len(ids))
	}
	out := make(map[uint32]ed25519.PublicKey, len(ids))
	for i, p := range pubs {
		raw, err := nkeys.Decode(nkeys.PrefixByteUser, []byte(p))
		if err != nil || len(raw) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("participant %d: %q is not an NKey user public key", ids[i], p)
		}
		out[ids[i]] = ed25519.PublicKey(raw)
	}
	return out, nil
}

// signingKey returns the Ed25519 private key of an NKey user seed.
func signingKey(seed []byte) (ed25519.PrivateKey, error) {
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKey, err)
	}
	defer kp.Wipe()
	enc, err := kp.PrivateKey()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKey, err)
	}
	raw, err := nkeys.Decode(nkeys.PrefixBytePrivate, enc)
	if err != nil || len(raw) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("%w: the key's private half is not an Ed25519 key", ErrKey)
	}
	return ed25519.PrivateKey(raw), nil
}

// attemptEnd says how far a failed attempt got, which decides whether
// the round may be run again and whether it is charged.
type attemptEnd int

const (
	// endRetry: the attempt failed before any client signed a survivor
	// set: no sum is computable, and the round may be run again.
	endRetry attemptEnd = iota
	// endSigned: clients signed, but some survivor has fewer than t
	// signing neighbours, so no client unmasks: no sum is computable,
	// and the signers sign nothing else this round (secagg.Memory), so
	// the round releases nothing.
	endSigned
	// endCharged: the unmask requests went out: the survivors' sum is
	// computable, computed or not, and the round is charged for it.
	endCharged
)

// attemptResult is what an attempt yields.
type attemptResult struct {
	sum       []float64 // the dequantised sum, nil if not computed
	survivors []int     // the clients in the survivor set S
}

// updateLen returns the update length of spec's protocol for clients
// clients of classes classes.
func updateLen(spec federation.Spec, clients, classes int, r federation.Rounds) (int, error) {
	f, err := spec.Fitter()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	st, ok := f.(federation.Stepper)
	if !ok {
		return 0, fmt.Errorf("%w: method %s has no protocol steps", ErrConfig, spec.Method)
	}
	zero := func() ([]float64, error) { return make([]float64, classes), nil }
	_, s, err := st.Steps(federation.Federation{Clients: clients, Classes: classes, ClassCounts: zero}, r)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if _, ok := s.(federation.SumStep); !ok {
		return 0, fmt.Errorf("%w: secure aggregation of %s is not implemented (its stages send updates of different lengths): fit it without secure aggregation", ErrConfig, s.Protocol())
	}
	return s.UpdateLen(), nil
}

// secureRound runs round t under secure aggregation: attempts of the
// five stages, run again only while no client has signed a survivor set,
// until one reaches the unmasking; then AddSum (if the sum was computed),
// the distributed release if any, EndRound and the commit. A round whose
// unmask requests went out is charged for its survivors whether or not
// the sum was computed: from there the sum is computable.
func (r *run) secureRound(ctx context.Context, t int, rep *RoundReport) error {
	cfg := r.cfg
	parts := rep.Sampled
	step := r.server.(federation.SumStep)
	var (
		sum       []float64
		survivors []int // whose updates are in sum
		charged   int   // size of the survivor set whose sum became computable
	)
	switch {
	case len(parts) < 3:
		cfg.Log.Warn("secure aggregation needs at least three participants (the sum of two tells each the other's input): the round releases nothing", "round", t, "sampled", len(parts))
	case r.sec.distributed() && len(parts) < r.sec.survivors:
		cfg.Log.Warn("fewer participants sampled than the survivors the distributed noise is planned for: the round releases nothing", "round", t, "sampled", len(parts), "planned", r.sec.survivors)
	default:
		need := min(cfg.MinClients, len(parts))
		if r.sec.distributed() {
			need = r.sec.survivors
		}
		// One graph seed for every attempt of the round, which the
		// clients derive too (graphSeed).
		seed := graphSeed(r.fed, r.cp.Seed, t, parts)
		for rep.Attempts = 1; ; rep.Attempts++ {
			res, end, err := r.secureAttempt(ctx, t, rep, seed, need)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err == nil || end == endCharged {
				charged = len(res.survivors)
				if err == nil {
					sum, survivors = res.sum, res.survivors
				} else {
					cfg.Log.Warn("secure aggregation failed after the unmask requests went out: the round is charged for its survivors and releases nothing", "round", t, "attempt", rep.Attempts, "survivors", charged, "err", err)
				}
				break
			}
			if end == endSigned {
				cfg.Log.Warn("secure aggregation failed after the survivors signed: the round releases nothing", "round", t, "attempt", rep.Attempts, "err", err)
				break
			}
			if rep.Attempts >= cfg.MaxAttempts {
				return fmt.Errorf("%w: secure aggregation of %d sampled clients failed in %d attempts (last: %w); a round needs %d survivors (--min-clients)",
					ErrTooFewClients, len(parts), rep.Attempts, err, need)
			}
			cfg.Log.Warn("secure aggregation failed before any survivor signed: inviting the round's participants again; nothing was released", "round", t, "attempt", rep.Attempts, "err", err)
		}
	}
	start := time.Now()
	in := make(map[int]bool, len(survivors))
	for _, k := range survivors {
		in[k] = true
	}
	for _, k := range parts {
		if in[k] {
			rep.Participants = append(rep.Participants, k)
		} else {
			rep.Dropouts = append(rep.Dropouts, k)
		}
	}
	if len(survivors) > 0 {
		if err := step.AddSum(sum, len(survivors)); err != nil {
			return err
		}
	}
	if r.sec.distributed() {
		rel := dp.Release{Mechanism: fmt.Sprintf("%s round %d (distributed Skellam, %d survivors)", r.server.Protocol(), t, charged), SampleRate: cfg.Rounds.SampleRate, Rounds: 1}
		z := 0.0
		if charged > 0 {
			rel.Skellam = []dp.Skellam{r.sec.skellam.Round(r.sec.clientVar, charged)}
			z = math.Sqrt(float64(charged)*r.sec.clientVar) / r.sec.q.Scale
		}
		if err := step.NoisedRound(rel, z); err != nil {
			return err
		}
		r.cp.Survivors = append(r.cp.Survivors, charged)
	}
	if err := r.server.EndRound(t, len(survivors)); err != nil {
		return err
	}
	rep.Compute += time.Since(start)
	return r.closeRound(ctx, rep)
}

// secureAttempt runs one attempt of round t with the round's graph seed
// and s_min = need. On success it returns the dequantised sum of the
// survivors' updates and the survivors; on failure, how far it got.
func (r *run) secureAttempt(ctx context.Context, t int, rep *RoundReport, seed [32]byte, need int) (attemptResult, attemptEnd, error) {
	cfg, parts := r.cfg, rep.Sampled
	var res attemptResult
	ids := make([]uint32, len(parts))
	pubs := make([]string, len(parts))
	for i, k := range parts {
		ids[i], pubs[i] = uint32(k), cfg.Clients[k]
	}
	idents, err := identities(pubs, ids)
	if err != nil {
		return res, endRetry, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	sr := r.sec.round(seed, len(parts), need)
	sr.Identities = pubs
	round, err := secagg.NewRound(secagg.Config{
		Seed: seed, Participants: ids, Neighbours: sr.Neighbours, Threshold: sr.Threshold, MinSurvivors: need,
		Context: secContext(r.fed, t, rep.Attempts), Identities: idents, Bits: sr.Bits, Dim: r.sec.dim,
	})
	if err != nil {
		return res, endRetry, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	sr.MinSurvivors = round.Config().MinSurvivors
	srv := secagg.NewServer(round)
	stage := or(cfg.Secure.StageTimeout, cfg.RoundTimeout/5)
	a := &Announcement{
		Federation: r.fed, Round: t, Attempt: rep.Attempts, Rounds: r.sched.Rounds(),
		Broadcast: r.server.Broadcast(), Participants: parts,
		Deadline: time.Now().Add(5 * stage), Seed: r.cp.Seed, Secure: sr,
	}
	if err := r.invite(a, parts); err != nil {
		return res, endRetry, err
	}
	sx := &exchange{run: r, t: t, attempt: rep.Attempts, rep: rep, timeout: stage, ann: a}
	timed := func(f func() error) error {
		st := time.Now()
		err := f()
		rep.Compute += time.Since(st)
		return err
	}
	// 1. Keys.
	var nk map[uint32]*secagg.NeighbourKeys
	err = sx.collect(ctx, stageKeys, ids, func(b []byte) error {
		var m secagg.AdvertiseKeys
		if err := m.UnmarshalBinary(b); err != nil {
			return err
		}
		return timed(func() error { return checkFrom(m.Client, sx.k, srv.ReceiveKeys(&m)) })
	})
	if err == nil {
		err = timed(func() (err error) { nk, err = srv.CloseKeys(); return })
	}
	if err != nil {
		return res, endRetry, fmt.Errorf("stage 1 (keys): %w", err)
	}
	sendAll(sx, stageNeighbours, nk)
	// 2. Shares.
	var rs map[uint32]*secagg.RoutedShares
	err = sx.collect(ctx, stageShares, mapKeys(nk), func(b []byte) error {
		var m secagg.ShareKeys
		if err := m.UnmarshalBinary(b); err != nil {
			return err
		}
		return timed(func() error { return checkFrom(m.Client, sx.k, srv.ReceiveShares(&m)) })
	})
	if err == nil {
		err = timed(func() (err error) { rs, err = srv.CloseShares(); return })
	}
	if err != nil {
		return res, endRetry, fmt.Errorf("stage 2 (shares): %w", err)
	}
	sendAll(sx, stageRouted, rs)
	// 3. Masked inputs.
	var set *secagg.SurvivorSet
	err = sx.collect(ctx, stageMasked, mapKeys(rs), func(b []byte) error {
		var m secagg.MaskedInput
		if err := m.UnmarshalBinary(b); err != nil {
			return err
		}
		return timed(func() error { return checkFrom(m.Client, sx.k, srv.ReceiveMasked(&m)) })
	})
	if err == nil {
		err = timed(func() (err error) { set, err = srv.CloseMasked(); return })
	}
	if err != nil {
		return res, endRetry, fmt.Errorf("stage 3 (masked inputs): %w", err)
	}
	// 4. The consistency check: every survivor signs the survivor set.
	sets := make(map[uint32]*secagg.SurvivorSet, len(set.Survivors))
	for _, id := range set.Survivors {
		sets[id] = &secagg.SurvivorSet{Survivors: slices.Clone(set.Survivors)}
	}
	if r.cfg.tamper != nil {
		r.cfg.tamper(t, rep.Attempts, sets)
	}
	sendAll(sx, stageSurvivors, sets)
	var reqs map[uint32]*secagg.UnmaskRequest
	err = sx.collect(ctx, stageSigned, set.Survivors, func(b []byte) error {
		var m secagg.SurvivorSignature
		if err := m.UnmarshalBinary(b); err != nil {
			return err
		}
		return timed(func() error { return checkFrom(m.Client, sx.k, srv.ReceiveSignature(&m)) })
	})
	if err == nil {
		err = timed(func() (err error) { reqs, err = srv.CloseSignatures(); return })
	}
	if err != nil {
		return res, endSigned, fmt.Errorf("stage 4 (signatures): %w", err)
	}
	// 5. Unmasking. From here the sum is computable: charged.
	res.survivors = make([]int, len(set.Survivors))
	for i, id := range set.Survivors {
		res.survivors[i] = int(id)
	}
	sendAll(sx, stageRequest, reqs)
	var total []uint64
	err = sx.collect(ctx, stageUnmask, mapKeys(reqs), func(b []byte) error {
		var m secagg.UnmaskResponse
		if err := m.UnmarshalBinary(b); err != nil {
			return err
		}
		return timed(func() error { return checkFrom(m.Client, sx.k, srv.ReceiveUnmask(&m)) })
	})
	if err == nil {
		err = timed(func() (err error) { total, err = srv.Sum(); return })
	}
	if err != nil {
		return res, endCharged, fmt.Errorf("stage 5 (unmasking): %w", err)
	}
	err = timed(func() error {
		q := sr.quantizer()
		res.sum = q.Dequantize(make([]float64, 0, len(total)), total)
		return normalise(res.sum, sr.Clips, true)
	})
	if err != nil {
		return res, endCharged, err
	}
	return res, endCharged, nil
}

// checkFrom returns err, or an error when a message's client field is not
// the sender's.
func checkFrom(claimed uint32, sender int, err error) error {
	if claimed != uint32(sender) {
		return fmt.Errorf("%w: message of client %d sent by client %d", secagg.ErrBadMessage, claimed, sender)
	}
	return err
}

func mapKeys[V any](m map[uint32]V) []uint32 {
	out := make([]uint32, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// exchange is the coordinator's side of one attempt's message exchange.
type exchange struct {
	*run
	t, attempt int
	rep        *RoundReport
	timeout    time.Duration
	ann        *Announcement
	k          int // sender of the message being handled
}

// collect reads stage messages of the attempt from the expected clients
// until each sent one or the stage timeout passes, handing each to f. A
// message f refuses is logged and its sender counts as having answered.
func (sx *exchange) collect(ctx context.Context, stage string, expected []uint32, f func([]byte) error) error {
	defer sx.observeStage(stage, time.Now())
	want := make(map[int]bool, len(expected))
	for _, id := range expected {
		want[int(id)] = true
	}
	timer := time.NewTimer(sx.timeout)
	defer timer.Stop()
	var tick <-chan time.Time
	if stage == stageKeys { // a client that missed the invitation can still join
		tk := time.NewTicker(min(time.Second, sx.timeout/2))
		defer tk.Stop()
		tick = tk.C
	}
	for len(want) > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return nil
		case <-tick:
			if err := sx.invite(sx.ann, slices.Sorted(maps.Keys(want))); err != nil {
				sx.cfg.Log.Warn("inviting again", "round", sx.t, "err", err)
			}
		case m := <-sx.secIn:
			k, ok := sx.index[m.Subject[secAggPrefixLen(sx.fed):]]
			h := m.Header
			if !ok || h.Get(hdrFederation) != sx.fed || h.Get(hdrRound) != strconv.Itoa(sx.t) ||
				h.Get(hdrAttempt) != strconv.Itoa(sx.attempt) || h.Get(hdrStage) != stage || !want[k] {
				continue // another round, attempt or stage, or a client not expected
			}
			delete(want, k)
			sx.rep.Received += int64(len(m.Data))
			sx.k = k
			if err := f(m.Data); err != nil {
				sx.rep.Refused[k] = err.Error()
				sx.cfg.Log.Warn("refused a secure-aggregation message", "round", sx.t, "stage", stage, "client", k, "err", err)
			}
		}
	}
	return nil
}

// sendAll sends each client its message of the stage.
func sendAll[M encoding.BinaryMarshaler](sx *exchange, stage string, msgs map[uint32]M) {
	for _, id := range mapKeys(msgs) {
		b, err := msgs[id].MarshalBinary()
		if err == nil {
			err = sx.send(int(id), stage, b)
		}
		if err != nil {
			sx.cfg.Log.Warn("sending a secure-aggregation message", "round", sx.t, "stage", stage, "client", id, "err", err)
		}
	}
}

// send publishes one message to client k's inbox.
func (sx *exchange) send(k int, stage string, b []byte) error {
	if k < 0 || k >= len(sx.cfg.Clients) {
		return fmt.Errorf("no client %d", k)
	}
	msg := &nats.Msg{Subject: subjSecAggIn(sx.fed, sx.cfg.Clients[k]), Header: secHeader(sx.fed, sx.t, sx.attempt, k, stage), Data: b}
	sx.rep.Sent += int64(len(b))
	return sx.nc.PublishMsg(msg)
}

// secHeader returns the headers of a secure-aggregation message.
func secHeader(fed string, t, attempt, k int, stage string) nats.Header {
	h := nats.Header{}
	h.Set(hdrFederation, fed)
	h.Set(hdrRound, strconv.Itoa(t))
	h.Set(hdrAttempt, strconv.Itoa(attempt))
	h.Set(hdrClient, strconv.Itoa(k))
	h.Set(hdrStage, stage)
	return h
}

// securePrivacy completes the privacy record of a secure run.
func (r *run) securePrivacy(res *federation.Result) {
	if r.sec == nil || res.Privacy == nil {
		return
	}
	p, sc := res.Privacy, r.sec
	sa := &calib.SecureAggregation{
		Noise: sc.cfg.Noise, Neighbours: sc.cfg.Neighbours, Threshold: sc.cfg.Threshold,
		Bits: sc.q.Bits, Scale: sc.q.Scale,
	}
	if sc.distributed() {
		sa.ClientVariance, sa.L1, sa.L2 = sc.clientVar, sc.skellam.L1, sc.skellam.L2
		sa.Survivors = slices.Clone(r.cp.Survivors)
		p.Sigma = calib.DistributedSigma(sa, sc.sigmaUnit)
	}
	p.SecureAggregation = sa
}
