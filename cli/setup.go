package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/infer"
)

func newSetupCmd() *cobra.Command {
	var opt infer.SetupOptions
	cmd := &cobra.Command{
		Use:   "setup",
		Short: "Install the pinned ONNX Runtime library into the user cache",
		Long: fmt.Sprintf(`setup installs ONNX Runtime %s, the shared library fedcalib runs models
with, into the per-user cache (%s under the user cache directory).

It runs "npm pack onnxruntime-node@%s --ignore-scripts" in a temporary
directory (or reads --tarball), extracts only the linux-x64 %s, checks
its SHA-256 against the pinned
  %s
and moves it into place. When the cache already holds the verified library
it does nothing. "make setup" runs this command; it is the only step of
fedcalib that downloads anything. When npm is missing or cannot reach the
package registry, setup exits 3 (an environment failure).

To use another ONNX Runtime (>= 1.24) instead, set
$%s or pass --ort-lib to the commands that run models.`,
			infer.RuntimeVersion, "fedcalib/onnxruntime/"+infer.RuntimeVersion+"/"+infer.RuntimeLibrary,
			infer.RuntimeVersion, infer.RuntimeLibrary, infer.RuntimeSHA256, infer.RuntimeEnv),
		Example: `  fedcalib setup
  # on a machine without network access, from a tarball fetched elsewhere:
  fedcalib setup --tarball onnxruntime-node-` + infer.RuntimeVersion + `.tgz`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opt.Log = cmd.ErrOrStderr()
			res, err := infer.Setup(cmd.Context(), opt)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), res.Path)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&opt.Tarball, "tarball", "", "extract from this onnxruntime-node-"+infer.RuntimeVersion+".tgz instead of running npm pack")
	f.StringVar(&opt.NPM, "npm", "npm", "the npm executable to run")
	return cmd
}
