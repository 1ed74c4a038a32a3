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
	cmd.AddCommand(newCmd, newKeysPublicCmd(), newKeysCredsCmd())
	return cmd
}

func newKeysPublicCmd() *cobra.Command {
	var key string
	cmd := &cobra.Command{
		Use:   "public --key F",
		Short: "Print the public key of an existing client identity",
		Long: `keys public prints on stdout the public key of the client identity in --key
(an NKey user seed made by "keys new", or a NATS credentials file from
"keys creds"): the line the coordinator's allow-list needs. It reads the
file and writes nothing, so a script may run it as often as it likes, for
instance to rebuild an allow-list from the keys it already has.`,
		Example: `  fedcalib keys public --key site-a.nkey >> allow.txt
  # make the keys that are missing, then list every public key
  for s in a b c; do
    [ -f site-$s.nkey ] || fedcalib keys new --out site-$s.nkey > /dev/null
    fedcalib keys public --key site-$s.nkey
  done > allow.txt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if key == "" {
				return errors.New("keys public needs --key F, a key made by \"fedcalib keys new\"")
			}
			k, err := network.ReadKey(key)
			if err != nil {
				return fmt.Errorf("--key: %w", err)
			}
			clear(k.Seed)
			_, err = fmt.Fprintln(cmd.OutOrStdout(), k.Public)
			return err
		},
	}
	cmd.Flags().StringVar(&key, "key", "", `client identity file made by "fedcalib keys new" or "fedcalib keys creds" (required)`)
	return cmd
}

func newKeysCredsCmd() *cobra.Command {
	var key, token, out string
	cmd := &cobra.Command{
		Use:   "creds --key F.nkey --jwt U.jwt --out F.creds",
		Short: "Make a NATS credentials file from a client identity and its user JWT",
		Long: `keys creds joins a client identity made by "keys new" (--key) and the user
JWT that an external NATS deployment's operator issued for its public key
(--jwt, e.g. the output of "nsc describe user --name site-a --raw" after
"nsc add user --name site-a --public-key U…") into a NATS credentials file
(--out, mode 0600, never over an existing file), which "fedcalib join
--key" then uses with "--server" pointing at that deployment. The seed
never leaves the client's machine: the operator needs only the public key.
It checks that the JWT was issued for the key's public key.`,
		Example: `  fedcalib keys creds --key site-a.nkey --jwt site-a.jwt --out site-a.creds
  fedcalib join --server tls://nats.example.org:4222 --key site-a.creds --model m.onnx --data mnist:/data:test`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case key == "":
				return errors.New("keys creds needs --key F.nkey, the identity made by \"fedcalib keys new\"")
			case token == "":
				return errors.New("keys creds needs --jwt F, the user JWT the operator issued for the key")
			case out == "":
				return errors.New("keys creds needs --out F, the credentials file to write")
			}
			return network.WriteCreds(out, key, token)
		},
	}
	f := cmd.Flags()
	f.StringVar(&key, "key", "", `client identity file made by "fedcalib keys new" (required)`)
	f.StringVar(&token, "jwt", "", "user JWT issued for the key's public key (required)")
	f.StringVar(&out, "out", "", "credentials file to write, mode 0600 (required)")
	return cmd
}
