package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/infer"
)

// partitionFlags are the flags of `fedcalib partition`.
type partitionFlags struct {
	input, out, scheme, rule, fractions string
	clients, minClientSize, minSamples  int
	beta                                float64
	seed                                uint64
}

func newPartitionCmd() *cobra.Command {
	var fl partitionFlags
	cmd := &cobra.Command{
		Use:   "partition --data-or-logits F --clients K --beta B --seed S --out P.json",
		Short: "Split a data set among simulated clients (label skew, IID or natural) and save the partition",
		Long: `partition assigns every example of a data set to one client, and within the
client to its train, calibration or test split, and writes the assignment as
JSON (format fedcalib.partition/v1) with a fingerprint of the data (number of
examples and classes, SHA-256 of the labels). "fedcalib calibrate
--partition P.json" uses it, and refuses data the partition was not made for.

The input is a logits file (.npz with a "logits" array, as "fedcalib infer"
writes) or any dataset spec "fedcalib infer" reads; only labels and client
ids are used. Examples are numbered in file order, so a partition of a
dataset fits the logits that infer computes from it.

Schemes:
  dirichlet  label skew (Yurochkin et al. 2019, the paper's App. A.2): for each
             class j, q_j ~ Dirichlet(β·1_K), and class j's examples are dealt
             to the K clients in proportion to q_j. Small β = strong skew. If
             a client gets fewer than --min-client-size examples, the whole
             allocation is redrawn (at most 1000 times, then an error).
  iid        a random deal into K near-equal shares.
  natural    the data's own clients (LEAF users, speaker roles, the logits
             file's client column); users with fewer than --min-samples
             examples are dropped (LEAF uses 100).

Each client's examples are then split (--rule): "fractions" shuffles them and
cuts --fractions train,calibration,test (calibration rounded up, so every
client has calibration data); "given" keeps the logits file's split column;
"leaf-sample" keeps its train rows and turns half of its test rows (rounded
up) into calibration rows, LEAF's "sample" split as the paper uses it. All
randomness comes from --seed.`,
		Example: `  fedcalib partition --data-or-logits cifar10.npz --clients 100 --beta 0.1 --seed 1 --out p.json
  fedcalib partition --data-or-logits mnist:data/mnist:test --scheme iid --clients 10 --out iid.json
  fedcalib partition --data-or-logits femnist.npz --scheme natural --min-samples 100 --out leaf.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := makePartition(cmd.Context(), &fl, cmd.Flags().Changed("beta"))
			if err != nil {
				return err
			}
			if err := federation.WritePartition(fl.out, p); err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), partitionSummary(fl.out, p))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.input, "data-or-logits", "", "logits file (.npz) or dataset spec (FORMAT:PATH[:OPTION], as for infer) to partition (required)")
	f.StringVar(&fl.out, "out", "", "partition file to write, JSON (required; replaced atomically)")
	f.StringVar(&fl.scheme, "scheme", federation.SchemeDirichlet, "dirichlet, iid or natural")
	f.IntVar(&fl.clients, "clients", 0, "number of clients K ≥ 1 (dirichlet and iid)")
	f.Float64Var(&fl.beta, "beta", 0, "Dirichlet concentration β > 0 (dirichlet; smaller is more skewed)")
	f.Var((*seedValue)(&fl.seed), "seed", "seed of every random choice, 0 to 2^64−1")
	f.StringVar(&fl.rule, "rule", "", `how each client's data is split: fractions, given or leaf-sample (default fractions; given for natural partitions of a logits file with a split column)`)
	f.StringVar(&fl.fractions, "fractions", "0.8,0.1,0.1", "train,calibration,test fractions of each client (rule fractions)")
	f.IntVar(&fl.minClientSize, "min-client-size", federation.DefaultMinClientSize, "minimum examples per client (dirichlet redraws until it holds; iid checks N ≥ K·size)")
	f.IntVar(&fl.minSamples, "min-samples", 0, "drop natural clients with fewer examples (LEAF: 100; 0 keeps all)")
	for _, name := range []string{"data-or-logits", "out"} {
		if err := cmd.MarkFlagRequired(name); err != nil {
			panic(err)
		}
	}
	f.SortFlags = false
	return cmd
}

// makePartition reads the input and partitions it as fl says.
func makePartition(ctx context.Context, fl *partitionFlags, betaSet bool) (*federation.Partition, error) {
	if err := checkOut("--out", fl.out, partitionOut, fl.input); err != nil {
		return nil, err
	}
	frac, err := parseFractions(fl.fractions)
	if err != nil {
		return nil, err
	}
	switch fl.scheme {
	case federation.SchemeDirichlet:
		if !betaSet {
			return nil, errors.New("--scheme dirichlet needs --beta, the concentration β > 0 (e.g. 0.1 for strong skew)")
		}
		if err := checkPositive("beta", fl.beta, "Dirichlet concentration β", "e.g. 0.1 for strong label skew, 100 for almost none"); err != nil {
			return nil, err
		}
		if fl.clients < 1 {
			return nil, fmt.Errorf("--clients is %d: need at least 1 client", fl.clients)
		}
	case federation.SchemeIID:
		if fl.clients < 1 {
			return nil, fmt.Errorf("--clients is %d: need at least 1 client", fl.clients)
		}
	case federation.SchemeNatural:
		if fl.clients != 0 || betaSet {
			return nil, errors.New("--scheme natural takes its clients from the data: drop --clients and --beta")
		}
	default:
		return nil, fmt.Errorf("--scheme %q: want dirichlet, iid or natural", fl.scheme)
	}
	switch {
	case fl.minClientSize < 1: // below 1 would silently mean the default
		return nil, fmt.Errorf("--min-client-size is %d: want at least 1 example per client", fl.minClientSize)
	case fl.minSamples < 0:
		return nil, fmt.Errorf("--min-samples is %d: want ≥ 0 (0 keeps every client)", fl.minSamples)
	}
	if fl.scheme != federation.SchemeNatural && fl.rule != "" && fl.rule != string(federation.RuleFractions) {
		return nil, fmt.Errorf("--rule %s needs the data's own split, so it only applies to --scheme natural", fl.rule)
	}
	in, err := infer.ReadLabelsBudget(fl.input, memoryBudget(ctx))
	if err != nil {
		return nil, err
	}
	opt := federation.PartitionOptions{Seed: fl.seed, Fractions: frac, MinClientSize: fl.minClientSize}
	var p *federation.Partition
	switch fl.scheme {
	case federation.SchemeDirichlet:
		p, err = federation.Dirichlet(in.Labels, in.Classes, fl.clients, fl.beta, opt)
	case federation.SchemeIID:
		p, err = federation.IID(in.Labels, in.Classes, fl.clients, opt)
	case federation.SchemeNatural:
		if in.Client == nil {
			return nil, fmt.Errorf("%s has no client ids: use --scheme dirichlet or iid", fl.input)
		}
		p, err = federation.Natural(in.Labels, in.Classes, in.Client, in.Split, federation.NaturalOptions{
			Seed: fl.seed, Rule: federation.SplitRule(fl.rule), Fractions: frac, MinSamples: fl.minSamples,
		})
		if err == nil && in.Names != nil {
			for k := range p.Clients {
				p.Clients[k].Name = in.Names[p.Clients[k].ID]
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fl.input, err)
	}
	return p, nil
}

// partitionSummary is the line partition prints.
func partitionSummary(path string, p *federation.Partition) string {
	sizes := make([]int, p.Len())
	for k := range p.Clients {
		sizes[k] = p.Clients[k].Len()
	}
	lo, hi := sizes[0], sizes[0]
	for _, n := range sizes {
		lo, hi = min(lo, n), max(hi, n)
	}
	dropped := ""
	if len(p.Dropped) > 0 {
		dropped = fmt.Sprintf(" (%d dropped)", len(p.Dropped))
	}
	return fmt.Sprintf("wrote %s: %s partition of %d examples%s into %d clients of %d to %d; %d calibration, %d test examples",
		path, p.Scheme, p.Data.Examples, dropped, p.Len(), lo, hi, len(p.Rows(federation.Calibration)), len(p.Rows(federation.Test)))
}

// parseFractions parses "train,calibration,test".
func parseFractions(s string) (federation.Fractions, error) {
	parts := strings.Split(s, ",")
	if len(parts) != 3 {
		return federation.Fractions{}, fmt.Errorf("--fractions %q: want three numbers train,calibration,test summing to 1, e.g. 0.8,0.1,0.1", s)
	}
	var v [3]float64
	for i, p := range parts {
		x, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			return federation.Fractions{}, fmt.Errorf("--fractions %q: %q is not a number", s, p)
		}
		v[i] = x
	}
	return federation.Fractions{Train: v[0], Calibration: v[1], Test: v[2]}, nil
}
