package cli

import (
	"bytes"
	"cmp"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/export"
	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/internal/fileio"
	"github.com/fedcalib/fedcalib/onnx"
)

func newExportCmd() *cobra.Command {
	var (
		modelPath, calibPath, outPath, logitsOut, probsOut, ortLib, inKind string
		tritonRepo, tritonName, vectorsDir, vectorsData                    string
		sidecar, standalone                                                bool
		seed                                                               uint64
		maxBatch, version                                                  int
		pre                                                                preprocessFlags
	)
	cmd := &cobra.Command{
		Use:   "export --model M.onnx --calibrator C.json --out M.calibrated.onnx",
		Short: "Append a calibrator to an ONNX model (or write a sidecar file)",
		Long: `export appends the calibrator to the model's graph as standard ONNX
operators: the model keeps its logits output and gains a float32
probabilities output (--output-name, default "probabilities"); its
metadata_props record the method, the privacy parameters, the whole
calibrator file and a serving record: the parameters' sha256, whether
the top class can change, the fit's protocol, clients and rounds (keys
in docs/SERVING.md). Only the graph's new parts are written fresh: every other
byte of the model is kept as it was.

ONNX Runtime first runs the model alone on random inputs: its logits output
must be [batch, classes] with the calibrator's classes, as declared, and
finite. Before writing, it runs the result twice: the calibrator alone on
a probe set covering every bin of a binning calibrator and extreme logits,
and the whole model on random inputs. Its probabilities must equal the Go
calibrator's to 1e-5, or nothing is written. The write is atomic and the
input model is never modified.

The calibrator is fed what it was fitted on, as its file records
(provenance.input, written by "fedcalib calibrate --input"). A model that
ends in a Softmax (its calibrated output made by a Softmax, directly or
through Identity, Cast to float, Reshape, Flatten, Squeeze or Unsqueeze)
is detected: a calibrator fitted on probabilities then reads
max(log softmax(z), log 1e-12) computed from the Softmax's logits input
z; the metadata key fedcalib.calibration.input says "probabilities" and
"fedcalib check" judges accordingly. A calibrator fitted on logits is
refused for such an output (name the logits output with
--logits-output). --input probabilities does the same for an output that
holds probabilities without a Softmax node (log max(p, 1e-12)); --input
logits calibrates the output as logits whatever made it; an --input that
contradicts the file's provenance.input is refused. keeps_top_class is
"true" only when the method keeps the top class and the calibrator, on
its probe set, does (ties count as changes).

--sidecar writes no ONNX: it runs the model on random inputs, checks the
calibrator against the outputs it really gives (shape, classes, finite
values) and, as ONNX export does, that the calibrator's probabilities are
finite distributions on its probe set and on those outputs, and writes
the calibrator file (with the model's sha256 and the input kind to feed
it, logits or probabilities, in its provenance; rounds records kept) to
--out, for serving stacks that apply it themselves (Go: package
export/sidecar; the rule in docs/SIDECAR.md). --standalone writes an ONNX model of the
calibrator alone (input "logits" [batch, classes], output "probabilities").

--triton REPO writes the verified model into a Triton model repository:
REPO/NAME/config.pbtxt (platform onnxruntime_onnx, every input and output
with its type and dims, max_batch_size --max-batch, default 64, with
dynamic batching; a model without a variable first axis gets
max_batch_size 0), REPO/NAME/1/model.onnx and, when the classes have
names, REPO/NAME/labels.txt, named by label_filename on the [batch,
classes] outputs (the [N, classes] ones of a fixed-batch model; Triton's
classification extension). NAME is --name,
default the model file's name without extension, characters other than
letters, digits, '-' and '_' replaced by '_'. REPO/NAME must not exist,
unless --version N adds version N to it: REPO/NAME/N/model.onnx, refused
when its config.pbtxt or labels.txt is not the one this model gives.
An output of the batch axis alone (or a scalar) gets dims [1] and
reshape { shape: [ ] }, as Triton refuses empty dims; --max-batch is 1
to 2^31−1.

--test-vectors DIR writes DIR/model.onnx (the verified model) and
DIR/test_data_set_0/input_0.pb ... output_0.pb ..., serialised
TensorProtos as ONNX's test runners read them: the random inputs the
verification ran (a batch of 4, from --seed; the probe logits for
--standalone), or with --test-vectors-data real ones (the first 4 records
of a dataset spec, preprocessed as infer feeds them; for --standalone the
first 4 rows of a logits file), and every output ONNX Runtime gave. "fedcalib check
--test-vectors DIR" replays them, each value within 1e-5·(1 + |value|).
DIR must not exist, or be empty.

--preprocess, --preprocess-config and the preprocessing flags (--resize,
--crop, --interpolation, --scale, --mean, --std, --layout, --dtype,
--vocab), as infer takes them, are written into the calibrated model's
metadata_props as the fedcalib.input.* keys infer reads, replacing the
model's own key by key: pass the ones infer ran with when it made the
logits the calibrator was fitted on, and infer, check and the test
vectors then feed the exported model the same pixels with no flags.
They also preprocess --test-vectors-data. --sidecar and --standalone
write no model input, so they take none.

--out may be left out when --triton or --test-vectors is given. With
several forms, each is made and checked in memory first and written only
when all can be: an export writes all its forms or none. Neither
goes with --sidecar, and neither takes a model that keeps its weights in
external files.`,
		Example: `  fedcalib export --model mnist.onnx --calibrator bbq.json --out mnist.calibrated.onnx
  fedcalib export --model mnist.onnx --calibrator temp.json --sidecar --out mnist.calibration.json
  fedcalib export --calibrator temp.json --standalone --out temp.onnx
  fedcalib export --model mnist.onnx --calibrator temp.json --triton models --name mnist --test-vectors mnist-vectors
  # test vectors of real inputs: the first 4 test images
  fedcalib export --model mnist.onnx --calibrator temp.json --test-vectors mnist-vectors --test-vectors-data mnist:data/mnist:test
  # a torchvision model calibrated on logits of "infer --preprocess imagenet": record that preprocessing
  fedcalib export --model resnet50.onnx --calibrator temp.json --out resnet50.calibrated.onnx --preprocess imagenet
  # swap the calibrator: version 2 of the same Triton model
  fedcalib export --model mnist.onnx --calibrator bbq.json --triton models --name mnist --version 2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			serving := tritonRepo != "" || vectorsDir != ""
			if calibPath == "" || (outPath == "" && !serving) {
				return fmt.Errorf("export needs --calibrator C.json and --out FILE (or --triton REPO, --test-vectors DIR)")
			}
			if modelPath == "" && !standalone {
				return fmt.Errorf("export needs --model M.onnx (or --standalone for the calibrator alone)")
			}
			if vectorsData != "" && vectorsDir == "" {
				return fmt.Errorf("--test-vectors-data needs --test-vectors DIR")
			}
			if sidecar && serving {
				return fmt.Errorf("--triton and --test-vectors need an ONNX graph: drop --sidecar")
			}
			kind := modelOut
			if sidecar {
				kind = sidecarOut
			}
			if err := checkApart(anOutput{flag: "--out", path: outPath}, anOutput{flag: "--test-vectors", path: vectorsDir, dir: true}); err != nil {
				return err
			}
			if outPath != "" {
				if err := checkOut("--out", outPath, kind, calibPath, modelPath); err != nil {
					return err
				}
			}
			triton := export.TritonOptions{Name: tritonName, MaxBatch: maxBatch, Version: version}
			if cmd.Flags().Changed("version") && (version < 1 || tritonRepo == "") {
				return fmt.Errorf("--version is %d: want a version >= 1, with --triton", version)
			}
			if tritonRepo != "" {
				if triton.Name == "" {
					triton.Name = export.TritonName(cmp.Or(modelPath, calibPath))
				}
				if err := checkTriton(tritonRepo, triton, calibPath, modelPath); err != nil {
					return err
				}
			}
			if vectorsDir != "" {
				if err := checkNewDir("--test-vectors", vectorsDir, calibPath, modelPath); err != nil {
					return err
				}
			}
			keys, err := pre.resolve(cmd)
			if err != nil {
				return err
			}
			if len(keys) > 0 && (sidecar || standalone) {
				return fmt.Errorf("the preprocessing flags are written into the calibrated model: --sidecar and --standalone write none")
			}
			if inKind != "" && inKind != logits.InputLogits && inKind != logits.InputProbabilities {
				return fmt.Errorf("--input is %q: want %s or %s (default: what the calibrator file records, else detect a Softmax)", inKind, logits.InputLogits, logits.InputProbabilities)
			}
			c, file, err := calib.ReadFile(calibPath)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			b := terminalBar(cmd.ErrOrStderr(), "export", "")
			defer b.finish()
			opt := export.Options{Logits: logitsOut, Output: probsOut, Input: inKind, Runtime: ortLib, Seed: seed, Preprocess: keys,
				Progress: func(p export.Progress) {
					b.describe(p.Stage)
					b.set(p.Done, p.Total)
				}}
			out := cmd.OutOrStdout()
			var m *onnx.Model // the verified model, for --triton and --test-vectors
			switch {
			case standalone:
				m, err = export.Standalone(c)
				if err != nil {
					return err
				}
				if err := export.Verify(c, export.Probe(c, seed), opt); err != nil {
					return err
				}
				if !serving {
					if err := fileio.WriteContext(ctx, outPath, m.Bytes()); err != nil {
						return err
					}
					b.finish()
					fmt.Fprintf(out, "wrote %s: %s calibrator for %d classes as ONNX (verified against Go to %g)\n", outPath, c.Method(), c.Classes(), export.Tolerance)
				}
			case sidecar:
				sf, err := export.SidecarFile(ctx, modelPath, c, file, opt)
				if err != nil {
					return err
				}
				var buf bytes.Buffer
				if err := calib.EncodeFile(&buf, c, sf); err != nil {
					return err
				}
				if err := fileio.WriteContext(ctx, outPath, buf.Bytes()); err != nil {
					return err
				}
				b.finish()
				fmt.Fprintf(out, "wrote %s: %s calibrator sidecar for %s (reads %s; sha256 %s…)\n", outPath, c.Method(), filepath.Base(modelPath), sf.Provenance.Input, sf.Provenance.ModelSHA256[:12])
			case serving:
				m, err = export.CalibrateContext(ctx, modelPath, c, file, opt)
				if err != nil {
					return err
				}
			default:
				if err := export.ExportContext(ctx, modelPath, outPath, c, file, opt); err != nil {
					return err
				}
				b.finish()
				fmt.Fprintf(out, "wrote %s: %s with a %s calibrator appended (verified in ONNX Runtime against Go to %g)\n", outPath, filepath.Base(modelPath), c.Method(), export.Tolerance)
			}
			b.finish()
			if !serving {
				return nil
			}
			// Every form is made in memory first, and written only when
			// all are: all of them or none.
			if standalone {
				triton.Labels = file.Provenance.ClassNames
			}
			var vf *vectorsFrom
			if vectorsData != "" {
				vf = &vectorsFrom{data: vectorsData, model: modelPath}
			}
			forms, err := prepareForms(ctx, m, c, file, standalone, opt, outPath, vectorsDir, tritonRepo, triton, vf)
			if err != nil {
				return err
			}
			if err := forms.write(ctx); err != nil {
				return err
			}
			if outPath != "" {
				what := fmt.Sprintf("%s with a %s calibrator appended (verified in ONNX Runtime against Go to %g)", filepath.Base(modelPath), c.Method(), export.Tolerance)
				if standalone {
					what = fmt.Sprintf("%s calibrator for %d classes as ONNX (verified against Go to %g)", c.Method(), c.Classes(), export.Tolerance)
				}
				fmt.Fprintf(out, "wrote %s: %s\n", outPath, what)
			}
			if vectorsDir != "" {
				fmt.Fprintf(out, "wrote %s: %s and %s0 (%d input(s), %d output(s) from ONNX Runtime); replay: fedcalib check --test-vectors %s\n",
					vectorsDir, export.TestVectorModel, export.TestSetPrefix, len(forms.set.Inputs), len(forms.set.Outputs), vectorsDir)
			}
			if tritonRepo != "" {
				cfg := forms.triton.Config
				fmt.Fprintf(out, "wrote %s: Triton model %q (%s, max_batch_size %d)\n", forms.triton.Dir, cfg.Name, cfg.Platform, cfg.MaxBatchSize)
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
	f.StringVar(&inKind, "input", "", "what the calibrated output holds: logits or probabilities (default: what the calibrator file's provenance.input records, else probabilities when a Softmax makes it, else logits)")
	f.BoolVar(&sidecar, "sidecar", false, "write the calibrator file for serving beside the model instead of editing the graph")
	f.BoolVar(&standalone, "standalone", false, "write an ONNX model of the calibrator alone (logits in, probabilities out)")
	seed = 1
	f.Var((*seedValue)(&seed), "seed", "seed of the verification probe set and random test inputs, 0 to 2^64−1")
	f.StringVar(&ortLib, "ort-lib", "", `path to libonnxruntime.so (default: $ONNXRUNTIME_SHARED_LIBRARY_PATH, then the cache of "fedcalib setup")`)
	f.StringVar(&tritonRepo, "triton", "", "also write the verified model into this Triton model repository (REPO/NAME/config.pbtxt, 1/model.onnx, labels.txt)")
	f.StringVar(&tritonName, "name", "", "the model's name in the Triton repository (default: the model file's name, sanitised)")
	f.IntVar(&maxBatch, "max-batch", export.DefaultMaxBatch, "max_batch_size of the Triton configuration (dynamic batching), 1 to 2^31−1")
	f.IntVar(&version, "version", 0, "with --triton: the model version to write, REPO/NAME/N/model.onnx (default 1); a model directory that exists gains version N when its config.pbtxt and labels.txt are this model's (e.g. --version 2 to swap the calibrator)")
	f.StringVar(&vectorsDir, "test-vectors", "", "also write DIR/model.onnx and DIR/test_data_set_0/{input,output}_N.pb for ONNX test runners")
	f.StringVar(&vectorsData, "test-vectors-data", "", "with --test-vectors: record real inputs instead of random ones, the first 4 records (or the model's fixed batch) of a dataset spec FORMAT:PATH[:OPTION], preprocessed as infer feeds them; with --standalone, the first 4 rows of a logits file (.npz)")
	pre.register(f, "written as", false)
	cmd.MarkFlagsMutuallyExclusive("sidecar", "standalone")
	return cmd
}
