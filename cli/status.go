package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/network"
)

// statusFlags are the flags of fedcalib status.
type statusFlags struct {
	store, natsURL, creds, federation string
	insecure, asJSON                  bool
}

func newStatusCmd() *cobra.Command {
	var fl statusFlags
	cmd := &cobra.Command{
		Use:   "status (--store DIR | --nats URL --creds F) [--federation F] [--json]",
		Short: "Print a networked federation's state: round, participants, dropouts, ε spent",
		Long: `status reads the state a "fedcalib serve" coordinator committed after its
last round and prints it: the last round closed of the run's rounds, the
allow-listed and enrolled clients, the last round's participants and
dropouts with the totals over the rounds, the privacy ε spent against the
run's budget, when the checkpoint was written, and the coordinator's
lease: who holds it and until when, or who held it until it expired.

It disturbs nothing, whether the coordinator runs, was stopped or was
killed: with --store DIR (the coordinator's --store) it copies the
federation's state to a temporary directory and reads the copy, writing
nothing in DIR and taking no lock; with --nats URL --creds F (an external
NATS deployment and credentials that can read the federation's state
bucket, such as the coordinator's) it only reads the bucket. The ε is
that of the server's privacy ledger restored from the checkpoint, as a
resumed coordinator computes it.

--json prints the state as one JSON object (keys: federation, method,
round, rounds, clients, enrolled, participants, dropouts, updates,
dropouts_total, epsilon, epsilon_budget, rho, checkpoint, and lease
with holder, written, expires and live when there is one).`,
		Example: `  fedcalib status --store coord
  fedcalib status --nats tls://nats.example:4222 --creds coord.creds --federation mnist --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runStatus(cmd, &fl)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.store, "store", "", "the --store directory of a coordinator with an embedded server")
	f.StringVar(&fl.natsURL, "nats", "", "read from this external NATS deployment (comma-separated URLs) instead")
	f.StringVar(&fl.creds, "creds", "", "with --nats: NATS credentials that can read the federation's state bucket")
	f.BoolVar(&fl.insecure, "insecure", false, "with --nats: allow a plaintext nats:// URL to a non-loopback server")
	f.StringVar(&fl.federation, "federation", network.DefaultFederation, "name of the federation")
	f.BoolVar(&fl.asJSON, "json", false, "print one JSON object instead of lines")
	return cmd
}

func runStatus(cmd *cobra.Command, fl *statusFlags) error {
	switch {
	case (fl.store == "") == (fl.natsURL == ""):
		return errors.New("status needs --store DIR (the coordinator's) or --nats URL --creds F, not both")
	case fl.natsURL != "" && fl.creds == "":
		return errors.New("--nats needs --creds F, credentials that can read the federation's state")
	case fl.creds != "" && fl.natsURL == "":
		return errors.New("--creds goes with --nats URL")
	}
	if err := network.ValidFederation(fl.federation); err != nil {
		return fmt.Errorf("--federation: %w", err)
	}
	var st *network.Status
	var err error
	if fl.store != "" {
		st, err = network.ReadStoreStatus(cmd.Context(), fl.store, fl.federation)
	} else {
		nc, cerr := network.Dial{URL: fl.natsURL, Creds: fl.creds, Name: "fedcalib status", Insecure: fl.insecure}.Connect()
		if cerr != nil {
			return cerr
		}
		defer nc.Close()
		st, err = network.ReadStatus(cmd.Context(), nc, fl.federation)
	}
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if fl.asJSON {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(st)
	}
	return printStatus(w, st, time.Now())
}

// printStatus prints st as lines, the checkpoint's age from now.
func printStatus(w io.Writer, st *network.Status, now time.Time) error {
	var b strings.Builder
	fmt.Fprintf(&b, "federation %s: %s, round %d of %d closed\n", st.Federation, st.Method, st.Round, st.Rounds)
	fmt.Fprintf(&b, "clients: %d allow-listed, %d enrolled\n", st.Clients, st.Enrolled)
	if st.Round > 0 {
		fmt.Fprintf(&b, "round %d: %d participants %v, %d dropouts %v\n", st.Round, len(st.Participants), st.Participants, len(st.Dropouts), st.Dropouts)
		fmt.Fprintf(&b, "all rounds: %d updates aggregated, %d dropouts\n", st.Updates, st.DropoutsTotal)
	}
	if st.EpsilonBudget != 0 {
		fmt.Fprintf(&b, "privacy: ε = %.4g spent of %.4g (ρ = %.4g)\n", st.Epsilon, st.EpsilonBudget, st.Rho)
	} else {
		b.WriteString("privacy: none\n")
	}
	fmt.Fprintf(&b, "checkpoint: %s (%s ago)\n", st.Checkpoint.UTC().Format(time.RFC3339), now.Sub(st.Checkpoint).Round(time.Second))
	switch l := st.Lease; {
	case l == nil:
		b.WriteString("lease: none\n")
	case l.Live:
		fmt.Fprintf(&b, "lease: held by %s, until %s unless renewed\n", l.Holder, l.Expires.UTC().Format(time.RFC3339))
	default:
		fmt.Fprintf(&b, "lease: expired at %s, last held by %s\n", l.Expires.UTC().Format(time.RFC3339), l.Holder)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
