package secagg

import "errors"

// Sentinel errors. Every error of this package wraps one of them (with
// fmt.Errorf and %w), so callers test with errors.Is.
var (
	// ErrConfig reports a round configuration out of its domain: fewer
	// than three participants, a repeated participant, a neighbour count
	// outside [2, n−1] or odd below n − 1, bits outside [1, 64], a
	// vector length below one, a participant without an identity, or an
	// attempt whose graph differs from an earlier attempt of its round
	// (Memory).
	ErrConfig = errors.New("secagg: invalid configuration")
	// ErrThreshold reports a Shamir threshold t outside (k/2, k] for k
	// neighbours: above the neighbour count no secret can ever be
	// recovered, and at or below k/2 a server could collect both kinds of
	// share of one client from two disjoint sets of its neighbours.
	ErrThreshold = errors.New("secagg: threshold out of range")
	// ErrBitsTooSmall reports a modulus 2^b too small for the sum of a
	// federation's quantised inputs and noise: the sum could wrap.
	ErrBitsTooSmall = errors.New("secagg: modulus bits too small for the federation")
	// ErrQuantizer reports quantisation parameters out of their domain or
	// an input the quantiser refuses (non-finite, or longer than its L2
	// bound).
	ErrQuantizer = errors.New("secagg: invalid quantisation")
	// ErrBothShares would be returned by Client.Unmask if answering
	// would reveal both the self-mask share and the mask-key share of the
	// same peer over several requests: with both, the server could unmask
	// that peer's input alone. Unmask answers only for the one survivor
	// set the client signed, so it is a second line of defence.
	ErrBothShares = errors.New("secagg: both shares of one peer requested")
	// ErrRefused is returned by a Client asked to sign a second survivor
	// set in one round, or to unmask for a survivor set it did not sign,
	// that is not fully signed (some survivor has fewer than t
	// neighbours among its signers) or that carries a bad signature.
	ErrRefused = errors.New("secagg: unmasking refused")
	// ErrTooFewNeighbours is returned by a Client that has fewer than t
	// neighbours left at the keys or the shares stage: going on
	// could expose its input or could not finish.
	ErrTooFewNeighbours = errors.New("secagg: fewer neighbours than the threshold")
	// ErrTooFewClients reports a survivor set no client unmasks for
	// (Graph.ValidSurvivors: fewer than s_min, a survivor with fewer
	// than t surviving or signing neighbours, a split graph), or too few
	// clients left to unmask the sum: some secret has fewer than t
	// holders.
	ErrTooFewClients = errors.New("secagg: too few clients left to unmask the sum")
	// ErrBadMessage reports a message that does not fit the round: from
	// or about a client that is not a participant or not a neighbour, a
	// duplicate, a wrong length, a share that fails authentication, a
	// signature that does not verify, a reconstructed key that does not
	// match its advertised public key.
	ErrBadMessage = errors.New("secagg: bad message")
	// ErrStage reports a call out of the protocol's order.
	ErrStage = errors.New("secagg: call out of stage")
	// ErrDecode reports bytes that are not a canonical encoding of the
	// message type asked for.
	ErrDecode = errors.New("secagg: cannot decode message")
)
