package network

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/federation"
)

// Version is the version of the wire protocol that hello requests carry;
// the coordinator refuses other versions. Version 4 runs secure
// aggregation with signed keys and a consistency check (secagg wire
// version 2, SecureRound.Identities and MinSurvivors). Version 3 sends each update to
// the coordinator as a core NATS request, which the coordinator answers
// (version 2 published it to a JetStream stream); version 2 invited each
// round's participants on their own inboxes (version 1 announced every
// round to every client).
const Version = 4

// Headers of an update message.
const (
	hdrFederation = "Fedcalib-Federation"
	hdrRound      = "Fedcalib-Round"
	hdrClient     = "Fedcalib-Client"
	hdrAttempt    = "Fedcalib-Attempt" // secure aggregation: the round's attempt
	hdrStage      = "Fedcalib-Stage"   // secure aggregation: the message's stage
)

// hello is a client's first enrolment request.
type hello struct {
	Kind    string `json:"kind"` // "hello"
	Version int    `json:"version"`
}

// ready is a client's second enrolment request, once its data is loaded.
type ready struct {
	Kind    string    `json:"kind"` // "ready"
	Version int       `json:"version"`
	Classes int       `json:"classes"`
	Counts  []float64 `json:"counts,omitempty"` // N_j^k, only when Welcome.NeedCounts
}

// Welcome is the coordinator's answer to an enrolment request: what a
// client needs to compute its updates. The zero value is not a valid
// welcome.
type Welcome struct {
	// Error, if not empty, says why the coordinator refused the request.
	Error string `json:"error,omitempty"`
	// Federation is the federation's name.
	Federation string `json:"federation"`
	// Client is the client's index k, its line in the allow-list.
	Client int `json:"client"`
	// Clients is the number of clients K.
	Clients int `json:"clients"`
	// Classes is the number of classes C; 0 while no client has said.
	Classes int `json:"classes"`
	// Spec is the protocol.
	Spec federation.Spec `json:"spec"`
	// Rounds is T and p.
	Rounds int     `json:"rounds"`
	Rate   float64 `json:"sample_rate"`
	// Seed is the run's seed: sampling, client streams, initial
	// parameters (and, with SecureNoise off, the noise).
	Seed uint64 `json:"seed"`
	// NeedCounts asks the client to send its class counts (non-private
	// weighted binning only).
	NeedCounts bool `json:"need_counts,omitempty"`
	// SparseUpdates lets the client send its updates in the sparse
	// encoding when that is smaller (Config.SparseUpdates).
	SparseUpdates bool `json:"sparse_updates,omitempty"`
	// Done reports that the run has finished.
	Done bool `json:"done,omitempty"`
	// Abort, with Done, says why the coordinator gave the run up
	// (Announcement.Abort).
	Abort string `json:"abort,omitempty"`
}

// Announcement is a round invitation, which the coordinator sends to each
// participant of the round on its own inbox (fedcalib.F.inbox.P.invite),
// or the end of the run (Done), which it sends to every client on
// fedcalib.F.round. The zero value is not a valid announcement.
type Announcement struct {
	// Federation is the federation's name.
	Federation string `json:"federation"`
	// Round is t, 1 to Rounds (Rounds+1: the evaluation round).
	Round int `json:"round"`
	// Attempt counts the announcements of the round that did not close,
	// from 1.
	Attempt int `json:"attempt"`
	// Rounds is the number of rounds of the run: T, or 2T for scalbin
	// (federation.Scheduler).
	Rounds int `json:"rounds"`
	// Broadcast is the server's broadcast of the round
	// (federation.ServerStep.Broadcast).
	Broadcast []float64 `json:"broadcast"`
	// Participants lists the clients sampled for the round, increasing,
	// under secure aggregation only (the clients need it to build the
	// round's graph); a plain invitation leaves it out, so that a client
	// learns nothing of who else was sampled.
	Participants []int `json:"participants,omitempty"`
	// Deadline is when the round closes with whoever answered.
	Deadline time.Time `json:"deadline"`
	// Seed is the run's seed.
	Seed uint64 `json:"seed"`
	// Done reports that the run has finished: clients may leave.
	Done bool `json:"done,omitempty"`
	// Abort, with Done, says why the coordinator gave up the run before
	// its end (too few clients, a store it cannot write, …); empty for a
	// run that ended normally. A client then exits with an error
	// wrapping ErrAborted.
	Abort string `json:"abort,omitempty"`
	// Secure, if not nil, runs the round under secure aggregation: the
	// participants send their update only quantised and masked
	// (SecureRound).
	Secure *SecureRound `json:"secure,omitempty"`
	// Evaluation, if not nil, invites the client to the run's evaluation
	// round (round T+1, after the fit): it answers with the per-bin
	// statistics of its test rows under the fitted calibrator
	// (federation.EvalSteps) instead of an update.
	Evaluation *EvalRound `json:"evaluation,omitempty"`
}

// EvalRound is the public description of an evaluation round, announced
// with it: what a client needs to make its client step. The zero value
// is not a valid round.
type EvalRound struct {
	// Calibrator is the fitted calibrator's file (calib.Encode), with
	// its privacy record: the clients evaluate what was released.
	Calibrator json.RawMessage `json:"calibrator"`
	// Bins is the number of metric bins; 0 means
	// calib.DefaultMetricBins.
	Bins int `json:"bins,omitempty"`
	// Epsilon, if positive, makes the evaluation (Epsilon, Delta)
	// differentially private under Accountant ("zcdp" or "rdp"): a client
	// clips its statistics to L2 norm Clip. Zero means exact.
	Epsilon    float64 `json:"epsilon,omitempty"`
	Delta      float64 `json:"delta,omitempty"`
	Clip       float64 `json:"clip,omitempty"`
	Accountant string  `json:"accountant,omitempty"`
}

// options returns the evaluation options e announces.
func (e *EvalRound) options() (federation.EvalOptions, error) {
	o := federation.EvalOptions{Bins: e.Bins}
	if e.Epsilon == 0 {
		return o, nil
	}
	acc, err := dp.ParseAccountant(e.Accountant)
	if err != nil {
		return o, err
	}
	o.Privacy = &federation.Privacy{Epsilon: e.Epsilon, Delta: e.Delta, Clip: e.Clip, Accountant: acc}
	return o, nil
}

// SecureRound is the public description of one attempt of a round under
// secure aggregation, announced with it: the secagg.Config of the round
// (its participants are the announcement's) and how a client quantises
// its update. A client divides the i-th of the len(Clips) equal blocks
// of its update by Clips[i] (each histogram by its clip norm, a FedAvg
// delta by the clip norm), quantises the result with the Quantizer
// {Bits, Range, Scale, Norm}, adds Skellam noise of variance
// ClientVariance (distributed noise; 0: none) and masks it. The zero
// value is not a valid round.
type SecureRound struct {
	// Seed is the round's public graph seed (secagg.Config.Seed): a hash
	// of the federation, the run's seed, the round and its participants,
	// the same in every attempt of the round; a client derives it and
	// refuses another.
	Seed [32]byte `json:"seed"`
	// Neighbours and Threshold are k and t of the round.
	Neighbours int `json:"neighbours"`
	Threshold  int `json:"threshold"`
	// MinSurvivors is s_min: a client signs, and helps unmask, only a
	// survivor set of at least this many clients (secagg.Config).
	MinSurvivors int `json:"min_survivors"`
	// Identities are the participants' NKey public keys, in the order of
	// Announcement.Participants: the keys their signatures of the round
	// verify against. A client refuses a round whose entry for itself
	// is not its own key.
	Identities []string `json:"identities"`
	// Bits, Range, Scale and Norm are the quantiser's (secagg.Quantizer).
	Bits  int     `json:"bits"`
	Range float64 `json:"range"`
	Scale float64 `json:"scale"`
	Norm  float64 `json:"norm,omitempty"`
	// Clips are the divisors of the update's blocks.
	Clips []float64 `json:"clips"`
	// ClientVariance is the variance of the Skellam noise each client
	// adds to every coordinate, in quantised units; 0 without
	// distributed noise.
	ClientVariance float64 `json:"client_variance,omitempty"`
	// Shrink, in (0, 1], multiplies each block of an update after it is
	// divided by its clip norm, so that its stochastically rounded norm
	// stays within the clip norm the coordinator's central noise is
	// calibrated to (1 − √d/γ for blocks of d coordinates at scale γ);
	// 0 means 1 (no central noise).
	Shrink float64 `json:"shrink,omitempty"`
}

// Update encodings: the first byte of an update message says which
// follows. Both carry every value exactly, bit for bit (NaN, infinities
// and −0 included).
const (
	// encDense is followed by the n values as little-endian IEEE 754
	// float64s (8·n bytes).
	encDense = 0
	// encSparse is followed by n as a uvarint, a bitmap of ⌈n/8⌉ bytes
	// whose bit i%8 of byte i/8 is set when value i is not +0 (its bits
	// are not all zero), and those values, in order, as little-endian
	// float64s. A binning update (2·C·2^m histogram cells, most of them
	// empty with a few dozen rows) is a few times smaller so; but its
	// size then tells whoever sees it (through TLS too) how many values
	// are not zero, which a dense update's fixed size does not.
	encSparse = 1
)

// encodeUpdate returns u encoded with encDense or, if sparse is true, in
// the smaller of encDense and encSparse.
func encodeUpdate(u []float64, sparse bool) []byte {
	nz := 0
	for _, v := range u {
		if math.Float64bits(v) != 0 {
			nz++
		}
	}
	var head [1 + binary.MaxVarintLen64]byte
	head[0] = encSparse
	head1 := binary.AppendUvarint(head[:1], uint64(len(u)))
	bitmap := (len(u) + 7) / 8
	if !sparse || len(head1)+bitmap+8*nz >= 1+8*len(u) {
		b := make([]byte, 1+8*len(u))
		b[0] = encDense
		for i, v := range u {
			binary.LittleEndian.PutUint64(b[1+8*i:], math.Float64bits(v))
		}
		return b
	}
	b := append(make([]byte, 0, len(head1)+bitmap+8*nz), head1...)
	mask := len(b)
	b = b[:mask+bitmap]
	for i, v := range u {
		if bits := math.Float64bits(v); bits != 0 {
			b[mask+i/8] |= 1 << (i % 8)
			b = binary.LittleEndian.AppendUint64(b, bits)
		}
	}
	return b
}

// decodeUpdate reverses encodeUpdate. A sparse update may declare at
// most maxLen values (the length of a valid update), so that a short
// message cannot make the coordinator allocate a long one; a dense
// update's length is checked by the server step.
func decodeUpdate(b []byte, maxLen int) ([]float64, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: an empty message", federation.ErrBadUpdate)
	}
	switch b[0] {
	case encDense:
		b = b[1:]
		if len(b)%8 != 0 {
			return nil, fmt.Errorf("%w: %d bytes is not a whole number of float64s", federation.ErrBadUpdate, len(b))
		}
		u := make([]float64, len(b)/8)
		for i := range u {
			u[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
		return u, nil
	case encSparse:
		n, w := binary.Uvarint(b[1:])
		if w <= 0 || n > uint64(maxLen) {
			return nil, fmt.Errorf("%w: a sparse update of more than the %d values of an update", federation.ErrBadUpdate, maxLen)
		}
		b = b[1+w:]
		bitmap := (int(n) + 7) / 8
		if len(b) < bitmap {
			return nil, fmt.Errorf("%w: a sparse update cut short", federation.ErrBadUpdate)
		}
		mask, vals := b[:bitmap], b[bitmap:]
		u := make([]float64, n)
		for i := range u {
			if mask[i/8]&(1<<(i%8)) == 0 {
				continue
			}
			if len(vals) < 8 {
				return nil, fmt.Errorf("%w: a sparse update cut short", federation.ErrBadUpdate)
			}
			u[i] = math.Float64frombits(binary.LittleEndian.Uint64(vals))
			vals = vals[8:]
		}
		if len(vals) != 0 || (n%8 != 0 && mask[bitmap-1]>>(n%8) != 0) {
			return nil, fmt.Errorf("%w: a sparse update with trailing bits or bytes", federation.ErrBadUpdate)
		}
		return u, nil
	}
	return nil, fmt.Errorf("%w: unknown update encoding %d", federation.ErrBadUpdate, b[0])
}
