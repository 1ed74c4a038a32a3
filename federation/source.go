package federation

import (
	"errors"
	"fmt"
	"path/filepath"
)

// ErrNoClientColumn is returned (wrapped) by Source.Partition when the
// source is the data's natural partition and the data has no client
// column.
var ErrNoClientColumn = errors.New("the data has no client column")

// Source says where the clients of a federated run come from, as
// "fedcalib calibrate" and experiment configurations name them: a
// partition file, a Dirichlet label-skew partition made on the fly, or the
// natural partition of the data's client column. The zero value is the
// natural partition, each client split by the data's split column.
type Source struct {
	// File, if not empty, is a partition file made by "fedcalib
	// partition" (read by ReadPartition); the other fields must then be
	// zero.
	File string
	// Clients > 0 makes a Dirichlet label-skew partition of that many
	// clients with concentration Beta > 0 (see Dirichlet).
	Clients int
	// Beta is the Dirichlet concentration β of a partition made with
	// Clients.
	Beta float64
	// Seed seeds a partition made on the fly.
	Seed uint64
	// Fractions split each client of a partition made on the fly
	// (RuleFractions); the zero value means DefaultFractions().
	Fractions Fractions
	// Rule and MinSamples are NaturalOptions.Rule and
	// NaturalOptions.MinSamples of a natural partition.
	Rule       SplitRule
	MinSamples int
	// ForEvaluation is NaturalOptions.ForEvaluation of a natural
	// partition: clients without calibration rows are kept.
	ForEvaluation bool
}

// Partition returns the partition s names for a data set with these
// labels and classes and, when the data has them, client and split
// columns (nil otherwise; as a logits file stores them), together with a
// short description of where it came from: the file's base name,
// "Dirichlet β = 0.1" or "the data's client column". A partition file
// that was not made for these labels gives an error wrapping ErrMismatch;
// a natural partition of data without a client column, one wrapping
// ErrNoClientColumn.
func (s Source) Partition(labels []int, classes int, client []int32, split []uint8) (*Partition, string, error) {
	switch {
	case s.File != "":
		if s.Clients != 0 || s.Beta != 0 {
			return nil, "", fmt.Errorf("partition file %s gives the clients: a number of clients or β does not apply", s.File)
		}
		p, err := ReadPartition(s.File)
		if err != nil {
			return nil, "", err
		}
		if err := p.Check(labels, classes); err != nil {
			return nil, "", fmt.Errorf("%s does not fit the data: %w", s.File, err)
		}
		return p, filepath.Base(s.File), nil
	case s.Clients > 0:
		p, err := Dirichlet(labels, classes, s.Clients, s.Beta, PartitionOptions{Seed: s.Seed, Fractions: s.Fractions})
		if err != nil {
			return nil, "", err
		}
		return p, fmt.Sprintf("Dirichlet β = %v", s.Beta), nil
	case s.Clients < 0:
		return nil, "", fmt.Errorf("number of clients is %d: need at least 1", s.Clients)
	case client == nil:
		return nil, "", ErrNoClientColumn
	}
	p, err := Natural(labels, classes, client, split, NaturalOptions{
		Seed: s.Seed, Rule: s.Rule, Fractions: s.Fractions, MinSamples: s.MinSamples, ForEvaluation: s.ForEvaluation,
	})
	if err != nil {
		return nil, "", err
	}
	return p, "the data's client column", nil
}
