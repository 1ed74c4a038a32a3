// Package integration holds end-to-end tests that drive the fedcalib
// binary as a user would, through real ONNX Runtime, and the demo script
// run by `make demo` (demo.sh).
//
// The tests build the binary once, then run each step in a fresh process:
// calibrators are fitted, exported into an ONNX model, loaded again from
// disk and checked. Where Debian's python3-onnx is installed, the exported
// models must also pass onnx.checker.check_model(full_check=True). Tests
// skip with a clear message when ONNX Runtime is not installed (run
// `make setup`). TestReportInBrowser renders a calibration report in
// headless Chromium, which chromium.sh finds or, with
// FEDCALIB_INSTALL_CHROMIUM=1 (as .ci/run sets), installs from Debian; it
// skips, saying why, where there is none. TestStatusAndMetrics runs a
// coordinator with --metrics and reads "fedcalib status" of its store
// while it runs and once it is killed. prometheus.sh (not run by make
// test) installs Debian's prometheus, has it scrape a coordinator once and
// prints the fedcalib metrics' names.
package integration
