package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/export"
	"github.com/fedcalib/fedcalib/onnx"
)

// checkNewDir is checkOutDir for a directory a command creates whole
// (export --test-vectors): dir must also not exist, or be empty.
func checkNewDir(flag, dir string, inputs ...string) error {
	if err := checkOutDir(flag, dir, inputs...); err != nil {
		return err
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s %s exists and is not empty: choose a new directory", flag, dir)
	}
	return nil
}

// checkTriton checks the options of export --triton before any work: a
// valid model name and batch size, a repository directory that can be
// written, and no model of that name in it.
func checkTriton(repo string, opt export.TritonOptions, inputs ...string) error {
	if err := opt.Validate(); err != nil {
		return fmt.Errorf("--name, --max-batch: %w", err)
	}
	if err := checkOutDir("--triton", repo, inputs...); err != nil {
		return err
	}
	dir := filepath.Join(repo, opt.Name)
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("--triton: %s already holds a model %q: choose another --name or remove it", repo, opt.Name)
	}
	return nil
}

// writeVectors writes the test vectors of the verified model m into dir:
// the random inputs of the verification, or the probe set of calibrator c
// when m is its standalone model.
func writeVectors(ctx context.Context, out io.Writer, dir string, m *onnx.Model, c calib.Calibrator, standalone bool, opt export.Options) error {
	var (
		set *export.TestSet
		err error
	)
	if standalone {
		set, err = export.ProbeTestSet(c, opt)
	} else {
		set, err = export.ModelTestSet(m, opt)
	}
	if err != nil {
		return err
	}
	if err := export.WriteTestVectors(ctx, dir, m, set); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s: %s and %s0 (%d input(s), %d output(s) from ONNX Runtime); replay: fedcalib check --test-vectors %s\n",
		dir, export.TestVectorModel, export.TestSetPrefix, len(set.Inputs), len(set.Outputs), dir)
	return nil
}

// vectorsReport is what `fedcalib check --test-vectors DIR --json` prints.
type vectorsReport struct {
	Pass      bool    `json:"pass"`
	Model     string  `json:"model"`
	Sets      int     `json:"sets"`
	Values    int     `json:"values"`
	Failures  int     `json:"failures"`
	MaxError  float64 `json:"max_error"`
	Tolerance float64 `json:"tolerance"`
	Worst     string  `json:"worst,omitempty"`
}

// checkVectors replays the test vectors of dir on the model at modelPath
// (dir's model.onnx when empty) and prints the report; an output beyond
// the tolerance is an error wrapping ErrCheckFailed.
func checkVectors(cmd *cobra.Command, dir, modelPath, ortLib string, asJSON bool) error {
	rep, err := export.CheckTestVectors(cmd.Context(), dir, modelPath, export.Options{Runtime: ortLib})
	if rep == nil {
		return err
	}
	out := cmd.OutOrStdout()
	r := vectorsReport{Pass: err == nil, Model: rep.Model, Sets: rep.Sets, Values: rep.Values, Failures: rep.Failures,
		MaxError: rep.MaxError, Tolerance: export.VectorTolerance, Worst: rep.Worst}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else if err == nil {
		fmt.Fprintf(out, "PASS: %s reproduces %d value(s) of %d test data set(s) in %s (max |error| %.3g, tolerance %g·(1 + |value|))\n",
			rep.Model, rep.Values, rep.Sets, dir, rep.MaxError, export.VectorTolerance)
	}
	if errors.Is(err, export.ErrVectorsDiffer) {
		return fmt.Errorf("%w: %w", ErrCheckFailed, err)
	}
	return err
}
