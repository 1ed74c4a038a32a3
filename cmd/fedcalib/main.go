// Command fedcalib calibrates ONNX classifiers on data that cannot be pooled.
//
// Run "fedcalib --help" for the commands; they live in package cli.
package main

import (
	"os"

	"github.com/fedcalib/fedcalib/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
