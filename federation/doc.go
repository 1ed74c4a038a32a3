// Package federation simulates federated post-hoc calibration: it splits a
// labelled data set among clients, samples clients over rounds, runs each
// participant's local computation in-process, aggregates on a server, and
// implements the protocols of Maddock, Cormode and Maple, "Private
// Federated Multiclass Post-hoc Calibration" (ICLR 2026), with and without
// user-level differential privacy.
//
// # Partitions
//
// A Partition assigns every example of a data set to one client and, within
// the client, to its train, calibration or test split (or drops it). Three
// schemes make one: Dirichlet label skew with concentration β (the paper's
// App. A.2, after Yurochkin et al. 2019), IID dealing, and the natural
// partition carried in a client column (LEAF users, Shakespeare roles),
// optionally with LEAF's "sample" rule. A Partition is saved as versioned
// JSON together with a fingerprint of the data it was made for, and refuses
// to be applied to other data.
//
// # Rounds
//
// Run drives T rounds of Poisson client sampling with rate p. Participants
// run on a pool of worker goroutines; every random choice comes from a
// stream derived from (seed, round, client) and the server folds client
// updates in client-index order, so results are bit-identical for a seed
// whatever the number of workers. Each round reports telemetry: the
// participants, the bytes each would send and receive, and their compute
// time.
//
// # Protocols
//
// Binning (FedBin, FedBBQ; the paper's Algorithm 1) sums one-vs-all class
// histograms over rounds and weights the calibrator toward the base model
// when little data has been aggregated. Scaling (FedTemp, FedVector,
// FedMatrix, FedOPVector, FedCal; Algorithm 2) runs FedAvg on parameter
// deltas. Both take an optional Privacy that clips each client's
// contribution and adds Gaussian noise calibrated to (ε, δ) by the dp
// package; every noisy release is recorded in a dp ledger.
package federation
