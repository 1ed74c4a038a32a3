package cli

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/spf13/pflag"

	"github.com/fedcalib/fedcalib/infer/logits"
)

// inputKind is the --input flag of the commands that read a logits file:
// what its "logits" array holds, logits.InputLogits or
// logits.InputProbabilities. The zero value means logits.
type inputKind string

// registerInput adds --input, setting in, to the flags f.
func registerInput(f *pflag.FlagSet, in *inputKind) {
	f.Var(in, "input", fmt.Sprintf(`what the logits file's "logits" array holds: %s, or %s (a model ending in softmax), turned into log-probabilities log max(p, %g); a row outside [0, 1] or not summing to 1 within %g is an error`,
		logits.InputLogits, logits.InputProbabilities, logits.ProbabilityFloor, logits.ProbabilitySumTolerance))
}

// String returns the kind; "logits" for the zero value.
func (in *inputKind) String() string {
	if *in == "" {
		return logits.InputLogits
	}
	return string(*in)
}

// Set sets the kind from the flag's value, refusing unknown kinds.
func (in *inputKind) Set(v string) error {
	if v != logits.InputLogits && v != logits.InputProbabilities {
		return fmt.Errorf("want %s or %s", logits.InputLogits, logits.InputProbabilities)
	}
	*in = inputKind(v)
	return nil
}

// Type names the flag's values in help texts.
func (in *inputKind) Type() string { return "logits|probabilities" }

// readLogits is readLogitsIn within logits.DefaultMemoryBudget.
func readLogits(path string, in inputKind) (*logits.File, error) {
	return readLogitsIn(context.Background(), path, in)
}

// readLogitsIn reads the logits file at path (logits.ReadBudget, within
// the memory budget of ctx) holding input of kind in, and turns
// probabilities into log-probabilities (logits.File.ConvertInput).
func readLogitsIn(ctx context.Context, path string, in inputKind) (*logits.File, error) {
	f, err := logits.ReadBudget(path, memoryBudget(ctx))
	if err != nil {
		return nil, err
	}
	if err := convertInput(f, path, in); err != nil {
		return nil, err
	}
	return f, nil
}

// convertInput turns f, the logits file at path holding input of kind in,
// into logits (logits.File.ConvertInput).
func convertInput(f *logits.File, path string, in inputKind) error {
	if err := f.ConvertInput(in.String()); err != nil {
		return fmt.Errorf("%s: --input %s: %w", path, in.String(), err)
	}
	return nil
}

// readColumnsFirst reads the logits file at path, holding input of kind
// in, in two steps: its columns (labels, client and split columns, class
// names), which it passes to partition, then — once partition has
// returned, the client and split columns are dropped (the partition has
// them) and the memory they and partition's work took is given back to
// the operating system — its logits. A federated run's peak memory is
// then the logits, the labels and the partition, not also the columns
// and the partition's transient memory beside them.
//
// The whole file must fit the memory budget of ctx, checked before
// anything is read.
func readColumnsFirst(ctx context.Context, path string, in inputKind, partition func(*logits.File) error) (*logits.File, error) {
	a, err := logits.Open(path)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	a.SetMemoryBudget(memoryBudget(ctx))
	if err := a.CheckBudget(); err != nil {
		return nil, err
	}
	f, err := a.ReadColumns()
	if err != nil {
		return nil, err
	}
	if err := partition(f); err != nil {
		return nil, err
	}
	f.Client, f.Split = nil, nil
	debug.FreeOSMemory()
	if err := a.ReadLogits(f); err != nil {
		return nil, err
	}
	if err := convertInput(f, path, in); err != nil {
		return nil, err
	}
	boundHeap(f)
	return f, nil
}
