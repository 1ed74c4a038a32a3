package cli

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Exit statuses returned by Main.
const (
	ExitOK      = 0 // success
	ExitFailed  = 1 // a check ran and failed its bar
	ExitUsage   = 2 // bad usage or bad input
	exitUnknown = 2
)

// ErrCheckFailed is wrapped by errors that mean "the command ran correctly
// and the thing it checked did not pass"; Main maps them to ExitFailed.
var ErrCheckFailed = errors.New("check failed")

// Main runs the fedcalib command line with args (without the program name),
// writing to stdout and stderr, and returns the process exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(stderr, "fedcalib: %v\n", err)
	if errors.Is(err, ErrCheckFailed) {
		return ExitFailed
	}
	return exitUnknown
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "fedcalib",
		Short: "Federated, private post-hoc calibration of ONNX classifiers",
		Long: `fedcalib runs an ONNX classifier on CPU to get logits, fits post-hoc
calibrators federatedly (optionally under user-level differential privacy),
measures calibration, and exports calibrated models.`,
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
