// Package calib implements post-hoc calibrators and calibration metrics for
// multiclass classifiers, usable centrally without any federation.
//
// Logits and probabilities are dense row-major matrices held in []float64
// slices: row i of an n×c matrix is x[i*c : (i+1)*c]. A Set pairs logits
// with integer labels in [0, c).
//
// Every calibrator implements Calibrator. Binning calibrators (Histogram,
// BBQ, Isotonic, EqualMass) work on softmax probabilities and can be built
// from aggregated one-vs-all histograms, which is how a federated server
// builds them (Isotonic's central fit is exact instead, on the sorted
// scores, unless given bins); scaling calibrators (Temperature, Vector, Matrix,
// Dirichlet, OPVector, FedCalMLP, and the one-vs-rest Platt and Beta)
// work on logits (Beta on the softmax probabilities of the logits). ScalingBinning, of the Hybrid
// family, scales the logits (Temperature) and then bins the scaled
// probabilities into equal-mass bins formed from ValueHistograms. Calibrators are serialised to the
// versioned JSON sidecar format by Encode and read back by Decode.
//
// The formulas follow the fedcalib specification (SPEC §4–§5), which in turn
// follows Maddock, Cormode and Maple, "Private Federated Multiclass Post-hoc
// Calibration" (ICLR 2026), Appendices B.3–B.5.
package calib
