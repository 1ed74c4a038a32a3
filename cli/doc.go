// Package cli implements the fedcalib command-line interface.
//
// Each command lives in its own file and only parses flags, calls the
// library packages (calib, federation, dp, infer, onnx, export) and prints
// results. Main maps errors to exit statuses: 0 on success, 1 when a check
// fails its bar, 2 for usage and input errors, 3 when the environment
// fails, 4 for a failure of serve or join that a retry may cure
// (network.Retryable), 130 when interrupted.
package cli
