// Package report builds the calibration report of `fedcalib report`,
// `fedcalib check --report` and `fedcalib calibrate --report`: one
// self-contained HTML file to attach to a CI run or a pull request.
//
// Build computes what the report shows from the evaluated rows and the
// calibrators' probabilities on them: the metrics (cwECE, ECE, adaptive
// ECE, KS error, adaptive cwECE, debiased cwCE, smooth ECE, accuracy,
// NLL, Brier) with percentile bootstrap
// intervals, the CI gate's verdict on the first calibrator, the
// reliability diagrams of package diagram (top label with equal-width and
// equal-mass bins, smoothed with its bootstrap band, per class; before and
// after side by side), each calibrator's fit record (method, parameters
// summarised, convergence where recorded, provenance), its privacy record,
// the privacy ledger's state, and the provenance (model and data sha256,
// tool version, command). Report.WriteHTML writes it with inline CSS and
// SVG, no script, and a Content-Security-Policy that forbids loading
// anything, so that it reads the same offline, on a phone and on paper.
// The same input and seed give the same bytes.
package report
