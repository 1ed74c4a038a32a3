// Command fedcalib calibrates ONNX classifiers on data that cannot be pooled.
//
// Run "fedcalib --help" for the commands; they live in package cli. The
// exit status is 0 on success, 1 when a check fails its bar, 2 on bad
// usage or input, 3 when the environment fails (ONNX Runtime missing or
// unloadable, npm unreachable during setup), 4 when serve or join failed
// in a way that running it again may cure (the network, too few clients,
// another coordinator) and 130 when SIGINT or SIGTERM stopped it: see
// cli.MainContext.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/fedcalib/fedcalib/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.MainContext(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
