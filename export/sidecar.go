package export

import (
	"context"
	"fmt"
	"math"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/internal/fileio"
	"github.com/fedcalib/fedcalib/onnx"
)

// SidecarFile returns the calibrator file that `export --sidecar` writes
// beside the model at modelPath for calibrator c, described by file
// (privacy, provenance, rounds: all kept): its provenance gains the
// model's sha256 and the input kind a serving stack must feed it (see
// InputKind: opt.Input and file's provenance.input, else a Softmax that
// makes the output). It first checks what an ONNX export checks without
// writing ONNX: the model fits c (CheckModel), the class names agree
// (CheckClassNames), and c's probabilities are finite distributions on
// its probe set and on the outputs the model gave on random inputs. On
// any failure it returns an error and no file.
func SidecarFile(ctx context.Context, modelPath string, c calib.Calibrator, file *calib.File, opt Options) (*calib.File, error) {
	sum, err := fileio.SHA256(modelPath)
	if err != nil {
		return nil, err
	}
	name, values, err := checkModel(ctx, modelPath, c, opt)
	if err != nil {
		return nil, err
	}
	if err := CheckClassNames(modelPath, file); err != nil {
		return nil, err
	}
	m, err := onnx.ReadFile(modelPath)
	if err != nil {
		return nil, err
	}
	kind, err := InputKind(m, name, opt.Input, fittedInput(file))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", modelPath, err)
	}
	z, err := toLogits(values, c.Classes(), kind)
	if err != nil {
		return nil, fmt.Errorf("%s: output %q: %w", modelPath, name, err)
	}
	if err := checkFinite(c, Probe(c, opt.Seed), "its probe set"); err != nil {
		return nil, err
	}
	if err := checkFinite(c, z, fmt.Sprintf("the model's output %q on random inputs", name)); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := calib.File{}
	if file != nil {
		out = *file
	}
	out.Provenance.ModelSHA256 = sum
	out.Provenance.Input = kind
	return &out, nil
}

// checkFinite applies c to the logits z and fails when a probability is
// not finite or a row does not sum to 1 within Tolerance: what Verify
// refuses in an ONNX export. on says what z are.
func checkFinite(c calib.Calibrator, z []float32, on string) error {
	k := c.Classes()
	zz := make([]float64, len(z))
	for i, v := range z {
		zz[i] = float64(v)
	}
	p := make([]float64, len(zz))
	c.Predict(p, zz)
	for r := 0; r < len(p)/k; r++ {
		sum := 0.0
		for j, v := range p[r*k : (r+1)*k] {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("verify: the %s calibrator gives %v for row %d, class %d of %s: it is not usable; nothing was written", c.Method(), v, r, j, on)
			}
			sum += v
		}
		if !(math.Abs(sum-1) <= Tolerance) {
			return fmt.Errorf("verify: the %s calibrator's probabilities for row %d of %s sum to %v, not 1; nothing was written", c.Method(), r, on, sum)
		}
	}
	return nil
}
