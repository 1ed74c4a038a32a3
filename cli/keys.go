package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/network"
)

func newKeysCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Manage client identities of a networked federation",
		Long: `keys manages the identities of "fedcalib join" clients: NATS NKey user key
pairs (ed25519). The coordinator's allow-list ("fedcalib serve --clients")
holds their public keys, one a line.`,
		Args: cobra.NoArgs,
	}
	var out string
	newCmd := &cobra.Command{
		Use:   "new --out F.nkey",
		Short: "Make a client identity and print its public key",
		Long: `keys new writes a new NKey user seed (the client's secret) to --out with
mode 0600, never over an existing file, and prints the public key on
stdout: send that line to the coordinator for its allow-list.`,
		Example: `  fedcalib keys new --out site-a.nkey >> allow.txt`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("keys new needs --out F, the key file to write")
			}
			pub, err := network.WriteKey(out)
			if err != nil {
				return fmt.Errorf("--out %w", err)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), pub)
			return err
		},
	}
	newCmd.Flags().StringVar(&out, "out", "", "file to write the key's seed to, mode 0600 (required)")
	cmd.AddCommand(newCmd)
	return cmd
}
