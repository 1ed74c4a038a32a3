// Command fedcalib calibrates ONNX classifiers on data that cannot be pooled.
//
// Run "fedcalib --help" for the commands; they live in package cli. The
// exit status is 0 on success, 1 when a check fails its bar, 2 on bad
// usage or input and 3 when the environment fails (ONNX Runtime missing or
// unloadable, npm unreachable during setup): see cli.Main.
package main

import (
	"os"

	"github.com/fedcalib/fedcalib/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
