// Package secagg is secure aggregation with distributed noise for
// federated calibration, independent of the transport: the server learns
// the sum of the surviving clients' quantised updates, plus the noise the
// privacy accountant needs, and nothing about any one client's update.
// Messages are plain values with a binary encoding; Client and Server are
// pure state machines, and a driver (package network) carries their
// messages.
//
// # Protocol
//
// The protocol is SecAgg+ (Bell, Bonawitz, Gascón, Lepoint and Raykova,
// "Secure Single-Server Aggregation with (Poly)Logarithmic Overhead", CCS
// 2020), the sparse-graph version of SecAgg (Bonawitz et al., "Practical
// Secure Aggregation for Privacy-Preserving Machine Learning", CCS 2017).
// A round has a public Config: a round seed, the sampled participants
// with their Ed25519 identities, the degree k of the neighbour graph, the
// Shamir threshold t, the fewest survivors s_min, the modulus 2^b, the
// vector length and a transport context (federation, round, attempt).
// From the seed everybody derives the same k-regular neighbour graph
// (Graph: a Harary graph on a seeded random ring); a client talks only
// about its k neighbours. Every key derivation, sealed share and
// signature is bound to the round's session (Round.Session), a digest of
// the whole Config. Then:
//
//  1. AdvertiseKeys: each client draws two X25519 key pairs, one for
//     encrypting shares (c) and one for agreeing masks (s), and sends the
//     public keys signed with its identity. The server (which checks the
//     signature) forwards to each client its neighbours' keys
//     (NeighbourKeys); a client refuses a key whose signature does not
//     verify (substituted, or of another round or attempt).
//  2. ShareKeys: each client draws a 32-byte self-mask seed b_u and
//     Shamir-shares both b_u and its mask private key s_u, t-of-m, among
//     the m ≥ t neighbours that advertised (over GF(2^61 − 1), 7-byte
//     chunks; a holder's point is its index among the sorted participants
//     plus one). Each neighbour's two shares are sealed with AES-256-GCM
//     under HKDF-SHA256 of the c-agreement, bound to session, sender and
//     recipient. The server routes them (RoutedShares).
//  3. MaskedInput: each client sends y_u = x_u + PRG(b_u) + Σ_v ±PRG(s_uv)
//     mod 2^b over the neighbours v that shared, + when u < v and − when
//     u > v, so each pair's masks cancel in the sum. s_uv is HKDF-SHA256
//     of the s-agreement; PRG is AES-256-CTR with zero IV, one 64-bit
//     little-endian word per element reduced mod 2^b (uniform, as 2^b
//     divides 2^64). x_u is the client's quantised input with its share of
//     the noise already added (Quantizer, dp.SkellamPlan).
//  4. Consistency check: the server sends every survivor the survivor set
//     S (SurvivorSet); each signs it (SignSurvivors) if it is in it and S
//     is valid (Graph.ValidSurvivors: at least s_min clients, each with at
//     least t neighbours in S, connected), and if it has signed no other
//     set in the round over all its attempts (Memory).
//  5. Unmask: the server sends each signer S with every signature
//     (UnmaskRequest). A client reveals only for the S it signed, only if
//     every signature verifies and every member of S has t neighbours
//     among the signers: the share of b_v for each neighbour v in S, of
//     s_v for each other neighbour it holds shares of. The server
//     reconstructs each survivor's b_v and removes PRG(b_v), reconstructs
//     each dropped client's s_v (checked against its public key), removes
//     its pairwise masks with the survivors, and obtains
//     Σ_{u ∈ S} x_u mod 2^b exactly.
//
// A round survives any dropouts that leave every needed secret with t
// surviving holders and every survivor with t signing neighbours: at most
// k − t dropouts among any client's neighbours, at any stage.
//
// # Threat model
//
// Malicious server with a PKI, as Bonawitz et al. (2017, §6) and Bell et
// al. (2020): the identities are trusted; the server may lie about who
// survived, to each client differently, substitute or replay keys, and
// run an attempt again. The clients' rules above make the only sums it
// can compute those of valid survivor sets: connected (no part can be
// summed alone: Graph.Connected), of at least s_min clients, and no
// honest client in two of them per round: an honest client signs one set
// per round; each member v of a set S has t neighbours that signed S;
// learning v's input alone needs the mask key of v or of a neighbour w of
// v in S, whose shares come only from t of its neighbours that signed a
// set without it, and with 2t > k one neighbour would have signed both.
// Colluding clients can sign both: the guarantee needs fewer than 2t − k
// colluders among any client's neighbours (Params.Exposure); t colluding
// neighbours can rebuild a client's secrets even with an honest server.
// Colluders below that learn, with the server, the sum of S minus their
// own inputs. Not covered: a client that sends a corrupt share of b_v
// goes undetected and spoils the sum (a corrupt share of s_v is caught by
// the public-key check), and a client can send any masked value, shifting
// each coordinate of the sum by up to 2^(b−1) units. The round seed must
// be fixed after the participants, or colluders could aim for a
// neighbourhood.
//
// # Parameters
//
//   - b (Config.Bits, Quantizer.Bits): the modulus 2^b. The sum decodes
//     exactly when n·⌈r·γ⌉ plus the noise's tail stays below 2^(b−1)
//     (Quantizer.CheckFederation, ErrBitsTooSmall otherwise). With range
//     r = 1, scale γ = 2^16 and 10^4 clients without noise, b = 32 fits
//     (10^4·2^16 ≈ 2^29.3); b ≤ 64.
//   - range r and scale γ (Quantizer): coordinates are clipped to [−r, r]
//     and rounded stochastically to the integers after scaling by γ; each
//     client's rounding error is below 1/γ per coordinate. With r at least
//     the L2 clip norm nothing is clipped.
//   - k (Config.Neighbours): even, or n − 1 (the complete graph), at
//     least 2. With an even k every set whose members each keep more than
//     k/2 neighbours in it is connected; an odd k below n − 1 (the ring
//     plus a diameter chord) is refused, as dropouts can split it.
//     Parameters derives k and t from n, a dropout rate and a number of
//     colluders, with the probabilities of failure and exposure they
//     leave (Params); the default is Parameters(n, DefaultDropoutRate,
//     DefaultColluders(n)): k = 42, t = 24 for n = 100; k = 82, t = 54
//     for n = 1000.
//   - t (Config.Threshold): in (k/2, k].
//   - s_min (Config.MinSurvivors): at least t + 1.
//   - noise: each client adds Skellam noise of variance
//     dp.SkellamPlan.ClientVariance (Quantizer.AddNoise) before masking,
//     sized so that the noise shares protecting a client when s_min
//     survive carry the variance the accountant needs; the guarantee of a
//     round with s survivors is dp.SkellamPlan.Round(v, s), recorded with
//     the RDP accountant.
//
// # Randomness
//
// Client secrets come from an io.Reader (crypto/rand.Reader when nil);
// quantisation and noise from a *rand.Rand (dp.NewSecure for real data,
// dp.NewSeeded in simulation). With seeded sources a round is
// deterministic, whatever the order in which the driver delivers messages
// within a stage.
package secagg
