package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/export"
	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/infer/data"
	"github.com/fedcalib/fedcalib/internal/fileio"
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
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 && opt.Version == 0 {
		return fmt.Errorf("--triton: %s already holds a model %q: choose another --name, remove it, or add a version to it with --version N", repo, opt.Name)
	}
	return nil
}

// forms are the files of a multi-form export (--out with --triton and
// --test-vectors), made in memory before any is written.
type forms struct {
	m                  *onnx.Model
	out, vectors, repo string
	set                *export.TestSet
	triton             *export.TritonEntry
}

// prepareForms makes every form the flags ask for from the verified
// model m: the test set of the vectors (the random inputs of the
// verification, or the probe set of calibrator c when m is its
// standalone model) and the Triton directory's files. Empty paths ask
// for no such form. It writes nothing.
//
// vf says where the vectors' inputs come from: nil for the random ones;
// else its data, a logits file for the standalone model or a dataset
// spec for the model at modelPath, whose first vectorRows rows (or the
// model's fixed batch) become the inputs.
func prepareForms(ctx context.Context, m *onnx.Model, c calib.Calibrator, file *calib.File, standalone bool, opt export.Options, out, vectors, repo string, topt export.TritonOptions, vf *vectorsFrom) (*forms, error) {
	f := &forms{m: m, out: out, vectors: vectors, repo: repo}
	var err error
	switch {
	case vectors == "":
	case vf != nil:
		var in *onnx.Tensor
		if in, err = vf.input(ctx, m, c, file, standalone, opt); err != nil {
			return nil, err
		}
		f.set, err = export.NewTestSet(m, []*onnx.Tensor{in}, opt)
	case standalone:
		f.set, err = export.ProbeTestSet(c, opt)
	default:
		f.set, err = export.ModelTestSet(m, opt)
	}
	if err != nil {
		return nil, err
	}
	if repo != "" {
		if f.triton, err = export.PrepareTriton(repo, m, topt); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// vectorRows is the number of rows of real data that --test-vectors-data
// records, as many as the random inputs of the verification.
const vectorRows = 4

// vectorsFrom is --test-vectors-data: the data of the test vectors'
// inputs, and the model they feed.
type vectorsFrom struct {
	data, model string
}

// input returns the test vectors' input tensor from vf.data: the first
// vectorRows rows of a logits file (.npz) for the standalone model m of
// calibrator c, read as the calibrator file records (provenance.input);
// or the first records of a dataset spec, preprocessed as infer feeds
// them to the model vf.model (its fixed batch when it has one).
func (vf *vectorsFrom) input(ctx context.Context, m *onnx.Model, c calib.Calibrator, file *calib.File, standalone bool, opt export.Options) (*onnx.Tensor, error) {
	isLogits := strings.HasSuffix(strings.ToLower(vf.data), ".npz")
	switch {
	case standalone && !isLogits:
		return nil, fmt.Errorf("--test-vectors-data %s: the standalone calibrator reads logits: give a logits file (.npz)", vf.data)
	case !standalone && isLogits:
		return nil, fmt.Errorf("--test-vectors-data %s: the model reads its own inputs: give a dataset spec (FORMAT:PATH[:OPTION])", vf.data)
	case standalone:
		lf, err := readLogitsIn(ctx, vf.data, inputKind(file.Provenance.Input))
		if err != nil {
			return nil, fmt.Errorf("--test-vectors-data: %w", err)
		}
		if lf.Classes != c.Classes() {
			return nil, fmt.Errorf("--test-vectors-data %s has %d classes but the calibrator has %d", vf.data, lf.Classes, c.Classes())
		}
		n := min(vectorRows, lf.Len())
		k := int64(lf.Classes)
		return &onnx.Tensor{Name: "logits", Elem: onnx.Float, Dims: []int64{int64(n), k}, Float: lf.Logits[:int64(n)*k]}, nil
	}
	if ins := m.Inputs(); len(ins) != 1 {
		return nil, fmt.Errorf("--test-vectors-data: the model has %d inputs; fedcalib makes real test inputs for a model of one", len(ins))
	}
	rows := vectorRows
	if in := m.Inputs()[0]; len(in.Shape) > 0 && in.Shape[0].Known() {
		rows = int(in.Shape[0].Value)
	}
	s, err := openSession(vf.model, infer.Options{Runtime: opt.Runtime, Threads: 1, Batch: rows, Preprocess: opt.Preprocess, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	rd, err := data.Open(vf.data)
	if err != nil {
		return nil, fmt.Errorf("--test-vectors-data: %w", err)
	}
	defer rd.Close()
	b, _, err := s.Encode(ctx, rd, rows)
	if err != nil {
		return nil, fmt.Errorf("--test-vectors-data %s: %w", vf.data, err)
	}
	if len(b.Shape) > 0 && int(b.Shape[0]) != rows && m.Inputs()[0].Shape[0].Known() {
		return nil, fmt.Errorf("--test-vectors-data %s has %d records; the model takes batches of %d", vf.data, b.Shape[0], rows)
	}
	elem := onnx.Float
	if b.Int != nil {
		elem = onnx.Int64
	}
	return &onnx.Tensor{Name: s.Input().Name, Elem: elem, Dims: b.Shape, Float: b.Float, Int: b.Int}, nil
}

// write writes the forms, each atomically: the vectors, the Triton
// directory, then the model file. When one fails, those already written
// are removed (a directory that existed empty is left empty), so the
// export writes all its forms or none.
func (f *forms) write(ctx context.Context) (err error) {
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	// removeDir undoes the write of dir, which was missing or empty.
	removeDir := func(dir string) func() {
		_, statErr := os.Stat(dir)
		existed := statErr == nil
		return func() {
			os.RemoveAll(dir)
			if existed {
				os.Mkdir(dir, 0o755)
			}
		}
	}
	if f.vectors != "" {
		u := removeDir(f.vectors)
		if err := export.WriteTestVectors(ctx, f.vectors, f.m, f.set); err != nil {
			return err
		}
		undo = append(undo, u)
	}
	if f.repo != "" {
		// The directories above the entry that this write creates.
		var made []string
		for d := filepath.Dir(f.triton.Dir); ; d = filepath.Dir(d) {
			if _, err := os.Stat(d); err == nil || d == filepath.Dir(d) {
				break
			}
			made = append(made, d)
		}
		u := removeDir(f.triton.Dir)
		if err := f.triton.Write(ctx); err != nil {
			for _, d := range made {
				os.Remove(d)
			}
			return err
		}
		undo = append(undo, func() {
			u()
			for _, d := range made {
				os.Remove(d)
			}
		})
	}
	if f.out != "" {
		if err := fileio.WriteContext(ctx, f.out, f.m.Bytes()); err != nil {
			return err
		}
	}
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
