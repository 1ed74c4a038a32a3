package cli

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/spf13/pflag"

	"github.com/fedcalib/fedcalib/calib"
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

// readLogitsIn reads the logits file at path (logits.ReadBudget, within
// the memory budget of ctx) holding input of kind in, and turns
// probabilities into log-probabilities (logits.File.ConvertInput). f.Input
// then says which kind it read. Every command reads logits files through
// it, so --memory-budget holds for all of them.
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

// recordedInput returns the kind of input to read the logits file at
// path as: --input when given (in), refused when it contradicts the kind
// the file records (recorded, its "input" array: infer records
// probabilities for a model whose output a Softmax makes), else the
// recorded kind, else logits.
func recordedInput(in inputKind, recorded, path string) (inputKind, error) {
	switch {
	case in != "" && recorded != "" && string(in) != recorded:
		return "", fmt.Errorf("%s: --input %s, but the file records that it holds %s (its input array, written by infer): drop --input", path, in, recorded)
	case in != "":
		return in, nil
	case recorded != "":
		return inputKind(recorded), nil
	}
	return logits.InputLogits, nil
}

// convertInput turns f, the logits file at path holding input of kind in
// (see recordedInput), into logits (logits.File.ConvertInput) and sets
// f.Input to the kind read.
func convertInput(f *logits.File, path string, in inputKind) error {
	in, err := recordedInput(in, f.Input, path)
	if err != nil {
		return err
	}
	if err := f.ConvertInput(in.String()); err != nil {
		return fmt.Errorf("%s: --input %s: %w", path, in.String(), err)
	}
	f.Input = in.String()
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

// checkFitted refuses to apply the calibrator file at calibPath, file, to
// the rows of the logits file at logitsPath read as kind when the
// calibrator records that it was fitted on the other kind.
func checkFitted(calibPath string, file *calib.File, kind, logitsPath string) error {
	if rec := file.Provenance.Input; rec != "" && rec != kind {
		return fmt.Errorf("%s was fitted on %s (its provenance.input) but %s is read as %s: pass --input %s if it holds %s, or use a calibrator fitted on %s", calibPath, rec, logitsPath, kind, rec, rec, kind)
	}
	return nil
}

// fittedInput returns the input kind to read rows as for the calibrator
// file at path, file: --input when given (in), refused when it
// contradicts the kind the file records (provenance.input), else the
// file's kind, else logits.
func fittedInput(in inputKind, path string, file *calib.File) (inputKind, error) {
	rec := file.Provenance.Input
	switch {
	case in != "" && rec != "" && string(in) != rec:
		return "", fmt.Errorf("--input %s, but %s was fitted on %s (its provenance.input): drop --input, or use a calibrator fitted on %s", in, path, rec, in)
	case in != "":
		return in, nil
	}
	return inputKind(rec), nil
}
