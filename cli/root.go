package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/infer/data"
	"github.com/fedcalib/fedcalib/internal/fileio"
	"github.com/fedcalib/fedcalib/network"
)

// Exit statuses returned by Main (README.md, "Exit status").
const (
	ExitOK          = 0   // success
	ExitFailed      = 1   // a check ran and failed its bar
	ExitUsage       = 2   // bad usage or bad input
	ExitEnvironment = 3   // the environment failed: ONNX Runtime or libturbojpeg missing or unloadable, npm unreachable in setup
	ExitRetry       = 4   // serve, join: a failure that running the same command again may cure (network.Retryable)
	ExitInterrupted = 130 // SIGINT or SIGTERM stopped the command (128 + SIGINT, as shells report it)
	exitUnknown     = 2
)

// interruptGrace is how long MainContext waits, once its context is
// cancelled, for the command to stop and clean up by itself: 1.5 s, so
// that a process stops within 2 s of SIGINT or SIGTERM even in a step
// that cannot be stopped (a model run in ONNX Runtime, a fit), its
// temporary files removed.
const interruptGrace = 1500 * time.Millisecond

// ErrCheckFailed is wrapped by errors that mean "the command ran correctly
// and the thing it checked did not pass"; Main maps them to ExitFailed.
var ErrCheckFailed = errors.New("check failed")

// Main runs the fedcalib command line with args (without the program name),
// writing to stdout and stderr, and returns the process exit status:
// ExitFailed for errors wrapping ErrCheckFailed, ExitEnvironment for
// those wrapping infer.ErrRuntimeNotFound, infer.ErrFetch or
// data.ErrJPEGLibrary, ExitRetry
// for those network.Retryable reports (serve and join), ExitUsage for any
// other. It is MainContext with a context never cancelled.
func Main(args []string, stdout, stderr io.Writer) int {
	return MainContext(context.Background(), args, stdout, stderr)
}

// MainContext is Main with a context, which the command gets as its
// cmd.Context(); the fedcalib binary cancels it on SIGINT and SIGTERM.
// Once ctx is cancelled, MainContext waits up to interruptGrace for the
// command to stop (commands check ctx between steps; a step running in
// ONNX Runtime cannot be stopped), removes every temporary file still
// open (fileio.RemoveTemps), prints one line saying what the command
// left (its stopAnnotation, or no partial output) and returns
// ExitInterrupted; the command may still be running when it returns, so
// the caller should exit. A command that completes despite the signal
// gets its own status.
func MainContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		select {
		case err = <-done:
		case <-time.After(interruptGrace):
			err = context.Cause(ctx)
		}
		fileio.RemoveTemps()
	}
	switch {
	case err == nil:
		return ExitOK
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "fedcalib: stopped (%v): %s\n", context.Cause(ctx), stopNote(root, args))
		return ExitInterrupted
	}
	fmt.Fprintf(stderr, "fedcalib: %v\n", err)
	return exitStatus(err)
}

// stopAnnotation is the cobra annotation in which a command that keeps
// what it finished when interrupted (experiment's runs.csv, serve's
// checkpoints) says so; the others leave no partial output.
const stopAnnotation = "fedcalib.stopped"

// stopNote says what an interrupted command left: its stopAnnotation, or
// that it left no partial output.
func stopNote(root *cobra.Command, args []string) string {
	if cmd, _, err := root.Find(args); err == nil && cmd.Annotations[stopAnnotation] != "" {
		return cmd.Annotations[stopAnnotation]
	}
	return "no partial output was left behind"
}

// exitStatus maps an error of a command to the exit status it means.
func exitStatus(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrCheckFailed):
		return ExitFailed
	case errors.Is(err, infer.ErrRuntimeNotFound), errors.Is(err, infer.ErrFetch), errors.Is(err, data.ErrJPEGLibrary):
		return ExitEnvironment
	case network.Retryable(err):
		return ExitRetry
	}
	return exitUnknown
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	var version bool
	root := &cobra.Command{
		Use:   "fedcalib",
		Short: "Federated, private post-hoc calibration of ONNX classifiers",
		Long: `fedcalib runs an ONNX classifier on CPU to get logits, fits post-hoc
calibrators federatedly (optionally under user-level differential privacy),
measures calibration, and exports calibrated models.

Exit status:
  0    success
  1    a check ran and failed its bar (fedcalib check)
  2    bad usage or bad input (a flag, a file, a value); nothing was written
  3    the environment failed: ONNX Runtime is missing or cannot be loaded
       (run "fedcalib setup"), or npm could not fetch it during setup; or
       a JPEG was read without libjpeg-turbo's TurboJPEG library
       (apt-get install libturbojpeg0, or set $FEDCALIB_LIBTURBOJPEG)
  4    serve, join: a failure that running the same command again may cure:
       the network (server unreachable, connection lost), too few clients,
       the run given up by its coordinator, or another coordinator holding
       the federation or its store
  130  interrupted by SIGINT or SIGTERM; no partial output was left behind
       (experiment keeps the runs it finished, serve its last checkpoint:
       the message says so)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !version {
				return cmd.Help()
			}
			return printVersion(cmd.OutOrStdout())
		},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.Flags().BoolVar(&version, "version", false, "print the version, commit, Go version and ONNX Runtime version")
	registerMemoryBudget(root)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(
		newVersionCmd(),
		newInspectCmd(),
		newInferCmd(),
		newSetupCmd(),
		newEvalCmd(),
		newPartitionCmd(),
		newCalibrateCmd(),
		newExportCmd(),
		newCheckCmd(),
		newReportCmd(),
		newPrivacyCmd(),
		newExperimentCmd(),
		newServeCmd(),
		newJoinCmd(),
		newStatusCmd(),
		newKeysCmd(),
	)
	return root
}

// Version returns the module version of the running binary, or "devel".
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// commit returns the VCS revision the binary was built from, marked
// "(modified)" when the tree had changes, or "unknown" when the build
// recorded none (go run, go test).
func commit() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = " (modified)"
			}
		}
	}
	if rev == "" {
		return "unknown"
	}
	return rev + modified
}

// runtimeVersion returns the version of the ONNX Runtime library a
// command would load, and its path: the pinned RuntimeVersion for the
// verified cached copy, else the version the library reports once
// loaded. It returns "not installed" and the reason when there is none.
func runtimeVersion() (version, where string) {
	path, err := infer.ResolveRuntime("")
	if err != nil {
		return "not installed", err.Error()
	}
	if cached, err := infer.CachedRuntimePath(); err == nil && fileio.Same(path, cached) {
		return infer.RuntimeVersion, path // ResolveRuntime checked its sha256
	}
	v, _, err := infer.LoadedRuntimeVersion("")
	if err != nil {
		return "not loadable", err.Error()
	}
	return v, path
}

// printVersion writes what `fedcalib --version` and `fedcalib version`
// print.
func printVersion(w io.Writer) error {
	ortVersion, where := runtimeVersion()
	_, err := fmt.Fprintf(w, "fedcalib %s\ncommit: %s\ngo: %s %s/%s\nONNX Runtime: %s (%s)\n",
		Version(), commit(), runtime.Version(), runtime.GOOS, runtime.GOARCH, ortVersion, where)
	return err
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the fedcalib version, commit, Go version and ONNX Runtime version",
		Example: "  fedcalib version\n  fedcalib --version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return printVersion(cmd.OutOrStdout())
		},
	}
}

// refuseFlags returns the error format (with one %s for the flag's name)
// makes of the first of names set on cmd's command line, nil when none is:
// for flags that do not apply to the run asked for.
func refuseFlags(cmd *cobra.Command, names []string, format string) error {
	for _, name := range names {
		if cmd.Flags().Changed(name) {
			return fmt.Errorf(format, name)
		}
	}
	return nil
}
