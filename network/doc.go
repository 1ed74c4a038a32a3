// Package network runs a federated calibration across machines over NATS
// (core NATS for the messages, JetStream for the coordinator's
// checkpoint): a Coordinator drives the server step of a protocol of package
// federation (federation.ServerStep) and each data owner runs a Client that
// drives the client step (federation.ClientStep) on its own calibration
// data, so that only clipped updates leave a client. It is the second
// driver of federation's protocol steps, beside the in-process simulation
// federation.Fitter.Fit; package federation imports nothing of it.
//
// # Identities and the allow-list
//
// A client is an NKey user key pair (ed25519; NewKey). The coordinator's
// allow-list (ReadAllowList) holds one public key a line; the client's
// index k in the federation is its line number, counting from 0, which
// matches the client index of a simulation over the same partition.
//
// # Subjects and permissions
//
// For a federation named F (ValidFederation), with P a client's public key:
//
//	fedcalib.F.enrol.P    client → coordinator: hello and ready requests (core NATS)
//	fedcalib.F.inbox.P.>  the client's inbox: replies (welcomes, update acks)
//	fedcalib.F.inbox.P.invite  coordinator → client: its round invitations (core NATS)
//	fedcalib.F.round      coordinator → all: the end of the run (core NATS)
//	fedcalib.F.update.P   client → coordinator: the client's updates (core NATS requests)
//	fedcalib.F.secagg.P   client → coordinator: secure-aggregation messages (core NATS)
//	fedcalib.F.inbox.P.secagg  coordinator → client: its secure-aggregation messages
//
// The embedded server (NewServer) admits only the allow-listed keys and the
// coordinator's own key, and gives each client the permissions of
// ClientPermissions: publish to its own enrol, update and secagg subjects
// only, subscribe to fedcalib.F.round and its own inbox only. A client can
// therefore never read another client's update or invitation, nor the
// JetStream API. The coordinator's own key gets CoordinatorPermissions:
// it may publish only to the clients' inboxes, the round subject, its
// bucket and the JetStream API about that bucket. Whatever reply subject
// a client's request carries, the coordinator answers only on that
// client's own inbox (fedcalib.F.inbox.P.…) and ignores a request whose
// reply subject is elsewhere, so that no client can have it write, with
// its permissions, where the client may not (a confused deputy). An
// external NATS deployment must grant the same permissions.
//
// # Message flow
//
//  1. A client subscribes to fedcalib.F.round and to its invitations,
//     sends a hello to its enrol subject and receives a Welcome: its index
//     k, the number of clients K, the protocol (federation.Spec) and the
//     rounds (T, p, seed). It
//     loads its calibration rows and sends a ready request with its number
//     of classes — and, only for non-private weighted binning, its class
//     counts N_j^k, which are not private.
//  2. The coordinator waits until every allow-listed client is ready or
//     the enrolment timeout passes, and then needs at least MinClients.
//     Clients are sampled over the whole allow-list (K is its length, as
//     in the simulation), so a client that never enrolled counts as a
//     dropout when sampled; one that enrols late takes part, but its
//     class counts are not used.
//  3. For each round t it samples the participants with
//     federation.Rounds.Participants over the allow-list and invites each
//     of them on its own inbox (round, attempt, broadcast, deadline,
//     seed); the other clients hear nothing of the round, so a round
//     costs O(pK) messages, not O(K). The invitation is sent again every
//     second to the participants that have not answered (for clients
//     that connect late or reconnect). Each invited client computes its
//     update and sends it, encoded exactly (dense, or sparse when most
//     values are zero), as a request on its update subject, until the
//     coordinator answers or the deadline passes. The coordinator keeps
//     one update per client and round, so a replay counts once, and
//     answers on the client's inbox: an empty ack, or why it refused.
//  4. The coordinator refuses (and logs) an update of
//     another federation or round, of the wrong length, with a non-finite
//     or negative value or above the clip norm (federation.ServerStep.Check)
//     — that client counts as a dropout — and closes the round when every
//     participant answered or the round timeout passed. With fewer than
//     MinClients accepted updates (or all participants, when fewer were
//     sampled) the participants that have not answered are invited again
//     (a new attempt) and nothing is released: EndRound, which adds the
//     noise and charges the ledger, runs only when a round closes.
//     Otherwise it adds the updates in increasing k and calls EndRound.
//  5. After every round it commits the server's state (with the privacy
//     ledger) and the round records to the JetStream key-value bucket
//     fedcalib_F, in one put — the round's only JetStream write — and
//     only then invites the next round. A restarted coordinator resumes
//     from that checkpoint: a restart never resets the ledger. The updates
//     of the open round are held in memory only, so they die with the
//     coordinator's process; the restarted one invites the round's
//     participants again, and a client invited again to a round it
//     answered, under another attempt or deadline, sends its update
//     again.
//  6. After the last round it announces the end of the run to every
//     client on fedcalib.F.round (and once on each client's inbox, for
//     clients that missed it), and the clients leave. A run it gives up
//     (too few clients, a store it cannot write) ends the same way, with
//     the reason (Announcement.Abort): the clients return ErrAborted.
//
// # One coordinator per federation
//
// The embedded server locks its store directory (ErrLocked), and every
// coordinator holds a lease in the bucket while it runs (ErrLeased for a
// second one): taken with a revision-checked write, renewed every third
// of Config.LeaseTTL, taken over only once it expired. Its token goes
// into every checkpoint, every write of the settings and the checkpoint
// is revision-checked, and a coordinator that lost its lease stops
// before it releases anything more (ErrLeaseLost). Failures that a retry
// may cure are those of Retryable.
//
// # Secure aggregation
//
// With Config.Secure set, every round runs SecAgg+ (package secagg) among
// its participants instead of step 3's plain updates: the invitation
// lists the participants and carries a SecureRound (round seed, k, t, the
// quantiser, the clip norm of each block and, for distributed noise, each
// client's Skellam variance);
// each participant divides its update's blocks by their clip norms,
// quantises it modulo 2^b, adds its noise share if any, and exchanges keys,
// sealed shares, its masked input and the unmask shares asked of it with
// the coordinator, which routes the shares, unmasks the survivors' sum and
// gives it to the server step (federation.SumStep). The coordinator never
// sees an update, so it cannot Check one. See SecureConfig and
// docs/NETWORK.md for the parameters and the threat model.
//
// # Randomness
//
// Client sampling, each client's own stream (federation.ClientRand, used by
// fedcal's local SGD) and the initial parameters depend on the run's seed,
// which the welcome and every invitation carry. The noise of round t comes
// from the seeded stream of (seed, t) when Config.SecureNoise is false — the
// simulation's noise, so that the calibrator equals "fedcalib calibrate"
// bit for bit, but predictable by anyone who knows the seed, so only fit
// for tests — and from crypto/rand when it is true, as any real release
// must (SPEC §7).
package network
