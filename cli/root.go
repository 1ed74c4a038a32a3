package cli

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/infer"
)

// Exit statuses returned by Main (README.md, "Exit status").
const (
	ExitOK          = 0 // success
	ExitFailed      = 1 // a check ran and failed its bar
	ExitUsage       = 2 // bad usage or bad input
	ExitEnvironment = 3 // the environment failed: ONNX Runtime missing or unloadable, npm unreachable in setup
	exitUnknown     = 2
)

// ErrCheckFailed is wrapped by errors that mean "the command ran correctly
// and the thing it checked did not pass"; Main maps them to ExitFailed.
var ErrCheckFailed = errors.New("check failed")

// Main runs the fedcalib command line with args (without the program name),
// writing to stdout and stderr, and returns the process exit status:
// ExitFailed for errors wrapping ErrCheckFailed, ExitEnvironment for
// those wrapping infer.ErrRuntimeNotFound or infer.ErrFetch, ExitUsage for
// any other.
func Main(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(stderr, "fedcalib: %v\n", err)
	return exitStatus(err)
}

// exitStatus maps an error of a command to the exit status it means.
func exitStatus(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrCheckFailed):
		return ExitFailed
	case errors.Is(err, infer.ErrRuntimeNotFound), errors.Is(err, infer.ErrFetch):
		return ExitEnvironment
	}
	return exitUnknown
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "fedcalib",
		Short: "Federated, private post-hoc calibration of ONNX classifiers",
		Long: `fedcalib runs an ONNX classifier on CPU to get logits, fits post-hoc
calibrators federatedly (optionally under user-level differential privacy),
measures calibration, and exports calibrated models.

Exit status:
  0  success
  1  a check ran and failed its bar (fedcalib check)
  2  bad usage or bad input (a flag, a file, a value); nothing was written
  3  the environment failed: ONNX Runtime is missing or cannot be loaded
     (run "fedcalib setup"), or npm could not fetch it during setup`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
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
		newPrivacyCmd(),
		newExperimentCmd(),
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

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the fedcalib version",
		Example: "  fedcalib version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "fedcalib %s\n", Version())
			return err
		},
	}
}
