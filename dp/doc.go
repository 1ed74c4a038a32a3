// Package dp provides user-level differential privacy for federated
// calibration: L2 clipping, the Gaussian mechanism, noise calibration and
// privacy accounting (SPEC §7; the paper's Appendix B.1).
//
// Neighbouring datasets differ by one client's whole data. Each client
// clips what it sends — a scaling update Δ_k to L2 norm C (ClipL2), or its
// class-positive and class-negative histograms to C₊ and C₋
// (ClipHistograms) — so the server's sums have L2 sensitivity C. The server
// adds Gaussian noise of standard deviation σ = z·C to each sum
// (AddGaussian), where the noise multiplier z comes from a Plan:
//
//   - scaling (DP-FedAvg), T rounds: σ = C·√(T/(2ρ));
//   - binning with c classes, T rounds: each of the 2c histograms gets
//     σ = (its clip norm)·√(2cT/(2ρ)).
//
// # Accounting
//
// Two accountants are offered. ZCDP is the paper's: one Gaussian mechanism
// with multiplier z is ρ = 1/(2z²)-zCDP (GaussianRho), ρ adds up over
// mechanisms and rounds, and (ε, δ) ↔ ρ use the exact conversion of
// Canonne, Kamath and Steinke 2020 (ZCDPDelta, ZCDPEpsilon, ZCDPRho). RDP
// goes beyond the paper: the Rényi DP of the Poisson-subsampled Gaussian
// mechanism (Mironov, Talwar and Zhang 2019) takes credit for sampling
// clients with rate q < 1 (RDPAccountant, PoissonGaussianRDP,
// RDPNoiseMultiplier); it reproduces the published test values of Google's
// dp_accounting. A Ledger records every release (mechanism, σ, sensitivity,
// sampling rate, rounds), reports the (ε, δ) spent, and refuses a release
// that would exceed its budget.
//
// # Noise sources
//
// AddGaussian takes its randomness from a Noise. Simulations and tests use
// NewSeeded (PCG seeded explicitly: the same seed gives the same noise);
// any release of real data must use NewSecure (ChaCha8 keyed from
// crypto/rand), whose noise nobody can predict. The package keeps no global
// random state.
//
// The noise is IEEE floating-point Gaussian noise, as in the paper; it does
// not defend against attacks on the low-order bits of floating-point
// samples.
package dp
