package cli

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/export"
	"github.com/fedcalib/fedcalib/internal/fileio"
)

func newExportCmd() *cobra.Command {
	var (
		modelPath, calibPath, outPath, logitsOut, probsOut, ortLib string
		sidecar, standalone                                        bool
		seed                                                       uint64
	)
	cmd := &cobra.Command{
		Use:   "export --model M.onnx --calibrator C.json --out M.calibrated.onnx",
		Short: "Append a calibrator to an ONNX model (or write a sidecar file)",
		Long: `export appends the calibrator to the model's graph as standard ONNX
operators: the model keeps its logits output and gains a float32
probabilities output (--output-name, default "probabilities"); its
metadata_props record the method, the privacy parameters and the whole
calibrator file. Only the graph's new parts are written fresh: every other
byte of the model is kept as it was.

ONNX Runtime first runs the model alone on random inputs: its logits output
must be [batch, classes] with the calibrator's classes, as declared, and
finite. Before writing, it runs the result twice: the calibrator alone on
a probe set covering every bin of a binning calibrator and extreme logits,
and the whole model on random inputs. Its probabilities must equal the Go
calibrator's to 1e-5, or nothing is written. The write is atomic and the
input model is never modified.

--sidecar writes no ONNX: it runs the model on random inputs, checks the
calibrator against the logits it really gives (shape, classes, finite
values), and writes the calibrator file (with the model's sha256 in
its provenance) to --out, for serving stacks that apply it themselves (Go:
package export/sidecar). --standalone writes an ONNX model of the
calibrator alone (input "logits" [batch, classes], output "probabilities").`,
		Example: `  fedcalib export --model mnist.onnx --calibrator bbq.json --out mnist.calibrated.onnx
  fedcalib export --model mnist.onnx --calibrator temp.json --sidecar --out mnist.calibration.json
  fedcalib export --calibrator temp.json --standalone --out temp.onnx`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if calibPath == "" || outPath == "" {
				return fmt.Errorf("export needs --calibrator C.json and --out FILE")
			}
			if modelPath == "" && !standalone {
				return fmt.Errorf("export needs --model M.onnx (or --standalone for the calibrator alone)")
			}
			kind := modelOut
			if sidecar {
				kind = sidecarOut
			}
			if err := checkOut("--out", outPath, kind, calibPath, modelPath); err != nil {
				return err
			}
			c, file, err := calib.ReadFile(calibPath)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			b := terminalBar(cmd.ErrOrStderr(), "export", "")
			defer b.finish()
			opt := export.Options{Logits: logitsOut, Output: probsOut, Runtime: ortLib, Seed: seed,
				Progress: func(p export.Progress) {
					b.describe(p.Stage)
					b.set(p.Done, p.Total)
				}}
			out := cmd.OutOrStdout()
			switch {
			case standalone:
				m, err := export.Standalone(c)
				if err != nil {
					return err
				}
				if err := export.Verify(c, export.Probe(c, seed), opt); err != nil {
					return err
				}
				if err := fileio.WriteContext(ctx, outPath, m.Bytes()); err != nil {
					return err
				}
				b.finish()
				fmt.Fprintf(out, "wrote %s: %s calibrator for %d classes as ONNX (verified against Go to %g)\n", outPath, c.Method(), c.Classes(), export.Tolerance)
			case sidecar:
				sum, err := fileio.SHA256(modelPath)
				if err != nil {
					return err
				}
				if err := export.CheckModel(ctx, modelPath, c, opt); err != nil {
					return err
				}
				if err := ctx.Err(); err != nil {
					return err
				}
				file.Provenance.ModelSHA256 = sum
				if err := calib.WriteFile(outPath, c, file.Privacy, file.Provenance); err != nil {
					return err
				}
				b.finish()
				fmt.Fprintf(out, "wrote %s: %s calibrator sidecar for %s (sha256 %s…)\n", outPath, c.Method(), filepath.Base(modelPath), sum[:12])
			default:
				if err := export.ExportContext(ctx, modelPath, outPath, c, file, opt); err != nil {
					return err
				}
				b.finish()
				fmt.Fprintf(out, "wrote %s: %s with a %s calibrator appended (verified in ONNX Runtime against Go to %g)\n", outPath, filepath.Base(modelPath), c.Method(), export.Tolerance)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&modelPath, "model", "", "the ONNX model to calibrate (never modified)")
	f.StringVar(&calibPath, "calibrator", "", `the calibrator file written by "fedcalib calibrate"`)
	f.StringVar(&outPath, "out", "", "where to write the calibrated model (or the sidecar, or the standalone model)")
	f.StringVar(&logitsOut, "logits-output", "", "the model output holding the logits (default: the first float32 output)")
	f.StringVar(&probsOut, "output-name", export.DefaultOutput, "name of the added probabilities output")
	f.BoolVar(&sidecar, "sidecar", false, "write the calibrator file for serving beside the model instead of editing the graph")
	f.BoolVar(&standalone, "standalone", false, "write an ONNX model of the calibrator alone (logits in, probabilities out)")
	seed = 1
	f.Var((*seedValue)(&seed), "seed", "seed of the verification probe set and random test inputs, 0 to 2^64−1")
	f.StringVar(&ortLib, "ort-lib", "", `path to libonnxruntime.so (default: $ONNXRUNTIME_SHARED_LIBRARY_PATH, then the cache of "fedcalib setup")`)
	cmd.MarkFlagsMutuallyExclusive("sidecar", "standalone")
	return cmd
}
