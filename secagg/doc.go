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
// A round has a public Config: a round seed, the sampled participants,
// the degree k of the neighbour graph, the Shamir threshold t, the
// modulus 2^b and the vector length. From the seed everybody derives the
// same k-regular neighbour graph (Graph: a Harary graph on a seeded
// random ring); a client talks only about its k neighbours. Then:
//
//  1. AdvertiseKeys: each client draws two X25519 key pairs, one for
//     encrypting shares (c) and one for agreeing masks (s), and sends the
//     public keys. The server forwards to each client its neighbours'
//     keys (NeighbourKeys).
//  2. ShareKeys: each client draws a 32-byte self-mask seed b_u and
//     Shamir-shares both b_u and its mask private key s_u, t-of-m, among
//     the m ≥ t neighbours that advertised (over GF(2^61 − 1), 7-byte
//     chunks; a holder's point is its index among the sorted participants
//     plus one). Each neighbour's two shares are sealed with AES-256-GCM
//     under HKDF-SHA256 of the c-agreement, bound to round, sender and
//     recipient. The server routes them (RoutedShares).
//  3. MaskedInput: each client sends y_u = x_u + PRG(b_u) + Σ_v ±PRG(s_uv)
//     mod 2^b over the neighbours v that shared, + when u < v and − when
//     u > v, so each pair's masks cancel in the sum. s_uv is HKDF-SHA256
//     of the s-agreement; PRG is AES-256-CTR with zero IV, one 64-bit
//     little-endian word per element reduced mod 2^b (uniform, as 2^b
//     divides 2^64). x_u is the client's quantised input with its share of
//     the noise already added (Quantizer, dp.SkellamPlan).
//  4. Unmask: the server asks each surviving client, for each neighbour
//     that shared, for one share: of b_v if v sent a masked input
//     (survived), of s_v if not (dropped). A client refuses to reveal both
//     kinds for one peer (ErrBothShares), in one request or over several,
//     and refuses a request naming fewer than t surviving neighbours
//     (ErrTooFewNeighbours). The server reconstructs each survivor's b_v
//     and removes PRG(b_v), reconstructs each dropped client's s_v (checked
//     against its public key), removes its pairwise masks with the
//     survivors, and obtains Σ_{u ∈ survivors} x_u mod 2^b exactly.
//
// A round survives any dropouts that leave every needed secret with t
// surviving holders: at most k − t dropouts among any client's
// neighbours, at any stage.
//
// # Threat model
//
// Semi-honest ("honest-but-curious") server and clients, as Bonawitz et
// al.'s and Bell et al.'s semi-honest protocols: everybody follows the
// protocol; the server, possibly colluding with fewer than t of any
// client's neighbours, learns only the sum of the survivors' inputs (and
// who survived). Each masked input alone is uniform on Z_{2^b}^dim. The
// refusal to reveal both shares, with t > k/2 (NewRound enforces it),
// stops a server that lies about who dropped from reconstructing both b_v
// and s_v from two disjoint sets of neighbours. Not implemented: the
// consistency-check round and the signatures of the malicious-server
// versions (a malicious server can still give different clients different
// views of who survived, and clients are not authenticated to each other
// beyond the server's routing — a PKI is needed for that); verification
// of shares (a corrupt share of b_v goes undetected and spoils the sum; a
// corrupt share of s_v is caught by the public-key check). The round seed
// must be fixed after the participants, or colluders could place
// themselves around a victim.
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
//   - k (Config.Neighbours): DefaultNeighbours(n) is the even number at or
//     above 3·⌈log₂ n⌉ (22 for n = 100, 30 for n = 1000), at most n − 1.
//   - t (Config.Threshold): in (k/2, k]; DefaultThreshold(k) = ⌊k/2⌋ + 1.
//   - noise: each client adds Skellam noise of variance
//     dp.SkellamPlan.ClientVariance (Quantizer.AddNoise) before masking,
//     sized so that the planned minimum of survivors carry the variance
//     the accountant needs; the guarantee of a round with s survivors is
//     dp.SkellamPlan.Round(v, s), recorded with the RDP accountant.
//
// # Randomness
//
// Client secrets come from an io.Reader (crypto/rand.Reader when nil);
// quantisation and noise from a *rand.Rand (dp.NewSecure for real data,
// dp.NewSeeded in simulation). With seeded sources a round is
// deterministic, whatever the order in which the driver delivers messages
// within a stage.
package secagg
