package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/export"
	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/infer/data"
	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/onnx"
)

// inferOverrides maps the infer command's preprocessing flags to the
// metadata keys they override.
var inferOverrides = []struct{ flag, key, usage string }{
	{"resize", infer.KeyResize, "resize images first: S scales the shorter side to S (torchvision's Resize(S)), H,W to H×W"},
	{"crop", infer.KeyCrop, "crop images, after resizing, to the centred S×S or H,W window (torchvision's CenterCrop)"},
	{"interpolation", infer.KeyInterpolation, "the resizing filter: bilinear (default), bicubic, nearest, box, hamming or lanczos, as PIL applies them"},
	{"scale", infer.KeyScale, "multiply raw input values by this first (e.g. 0.00392156862745098 for 1/255)"},
	{"mean", infer.KeyMean, "subtract this after scaling: one number, or comma-separated, one per channel"},
	{"std", infer.KeyStd, "divide by this after subtracting the mean: one number, or one per channel"},
	{"layout", infer.KeyLayout, "model input layout: NCHW, NHWC or NC (flat features)"},
	{"dtype", infer.KeyDType, "model input element type: float32 or int64"},
	{"vocab", infer.KeyVocab, "text vocabulary: character i of the string is token i (needs --dtype int64)"},
	{"classes", infer.KeyClasses, "comma-separated class names, in output order"},
}

func newInferCmd() *cobra.Command {
	var (
		model, out       string
		labels           string
		specs            []string
		opt              infer.Options
		quiet            bool
		pre              preprocessFlags
		readAhead        bool
		backgroundReader bool
	)
	cmd := &cobra.Command{
		Use:   "infer --model MODEL.onnx --data SPEC --out LOGITS.npz",
		Short: "Run an ONNX classifier over a dataset and save its logits",
		Long: `infer runs an ONNX classifier on CPU with ONNX Runtime over every record of a
dataset, --batch records at a time, and writes the logits, labels and (when
the dataset names them) client ids to an .npz logits file: logits float32
[N, C], labels int64 [N], client int32 [N]. Clients are numbered in order of
first appearance. The class names, from --labels, else the model's
fedcalib.classes, else the dataset's (ImageFolder directories), go into
the file's classes array, from which calibrate, export and eval carry them;
--labels names that differ from the model's, in number or order, are an
error.

The model input is its first input and the output its first float32
output, unless --input/--output name others; the input needs a dynamic
batch dimension. How records become input tensors comes from the model's
metadata_props (fedcalib.input.resize, .crop, .interpolation, .scale,
.mean, .std, .layout, .dtype, .vocab); --preprocess imagenet
(torchvision's ImageNet evaluation: resize 256 bilinear, crop 224, scale
1/255, ImageNet mean and std, NCHW) or --preprocess-config (a Hugging
Face preprocessor_config.json or a timm pretrained_cfg JSON) override
them, and the preprocessing flags override those key by key; a model
without any needs at least --layout. An image is resized and cropped
first, with PIL's filters as torchvision applies them, so that a
pretrained model sees the pixels it was evaluated on; then a value v of
channel c is fed as (v*scale - mean[c]) / std[c]. Images of different
sizes need a crop. Like torchvision's loader, infer does not apply an
image's EXIF orientation.

It fails, writing nothing, on a model or dataset it cannot read, data that
does not fit the model input, labels outside the model's classes, or
NaN/Inf outputs; it warns when outputs look like probabilities, since
calibrators want logits. When a Softmax makes the output (directly or
through Identity, Cast, Reshape, Flatten, Squeeze or Unsqueeze), the file
records that it holds probabilities (its "input" array), and calibrate,
eval and check read it as --input probabilities does. A progress bar is drawn on stderr when it is a
terminal, unless --quiet.

Threads: by default infer runs one batch per core this process may use
at once (--runs; up to four, then the cores shared out among four or
fewer runs), each on one ONNX Runtime thread, and joins their logits in
the data's order; each run reads, decodes and preprocesses its own next
batch between its model runs (--read-ahead). A run on one thread waits
for no other thread, so reading, the Go runtime or another process slows
one run while it takes a core, not all of them. A batch of runs at once
holds at most 256 KiB of input (83 MNIST images, one 224×224 image; a
record at least), so that each run's activations stay in the caches, and
the first batches are smaller, so that every run starts after a few
records; data that knows its size ends in smaller batches too, so that
the runs end together. --threads N alone runs one batch at
a time on N intra-op threads (the plan before --runs) that sleep when
idle (--spin makes them spin, as ONNX Runtime does by default); the
reader then runs after the first batch on a thread of background
priority (Linux's SCHED_IDLE) that takes only cores the model leaves
idle, unless the machine is busy (other processes' load of half a core
or more), the first batch found no idle core, or infer has had to wait
for a batch longer than the model ran; --background-reader=false keeps
it at normal priority throughout. Spinning threads lose their cores
whenever anything else runs and then run at a fraction of their speed;
docs/ARCHITECTURE.md ("The thread plan") says why. The logits do not
depend on any of these flags.

ONNX Runtime is loaded from --ort-lib, else $` + infer.RuntimeEnv + `,
else the cache "fedcalib setup" fills.

` + data.SpecHelp,
		Example: `  fedcalib infer --model mnist_cnn.onnx --data mnist:data/mnist:test --out mnist_test.npz
  fedcalib infer --model femnist.onnx --data leaf:femnist/data:test --out femnist.npz --batch 512 --runs 2
  # one batch at a time on all 4 cores of a dedicated machine, spinning pool threads:
  fedcalib infer --model mnist_cnn.onnx --data mnist:data/mnist:test --out mnist_test.npz --threads 4 --spin
  # two datasets in order (rows of the first, then of the second):
  fedcalib infer --model cifar.onnx --data imagefolder:cifar10.tar.gz:train --data imagefolder:cifar10.tar.gz:test --out all.npz
  # a model exported without fedcalib metadata:
  fedcalib infer --model resnet18.onnx --data cifar10:cifar-10-binary.tar.gz:test --out cifar.npz \
      --layout NCHW --scale 0.00392156862745098 --mean 0.4914,0.4822,0.4465 --std 0.2470,0.2435,0.2616
  # a pretrained ImageNet classifier on a folder of photos of any size:
  fedcalib infer --model resnet50.onnx --data imagefolder:photos --out photos.npz --preprocess imagenet
  # the same, spelled out, with bicubic resizing:
  fedcalib infer --model resnet50.onnx --data imagefolder:photos --out photos.npz --layout NCHW \
      --resize 256 --crop 224 --interpolation bicubic --scale 0.00392156862745098 \
      --mean 0.485,0.456,0.406 --std 0.229,0.224,0.225
  # a Hugging Face or timm model's own preprocessing:
  fedcalib infer --model vit.onnx --data imagefolder:photos --out photos.npz --preprocess-config preprocessor_config.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			stderr := cmd.ErrOrStderr()
			if opt.Preprocess, err = pre.resolve(cmd); err != nil {
				return err
			}
			// The model, the labels file, the specs, and the paths inside a spec.
			inputs := append([]string{model}, specs...)
			if labels != "" {
				inputs = append(inputs, labels)
				if opt.ClassNames, err = readLabelsFile(labels); err != nil {
					return err
				}
			}
			if err := checkOut("--out", out, logitsOut, inputs...); err != nil {
				return err
			}
			finish := func() {}
			if !quiet && isTerminal(stderr) {
				opt.Progress, finish = inferBar(stderr)
			}
			opt.Sequential = !readAhead
			opt.ForegroundReader = !backgroundReader
			opt.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{ReplaceAttr: dropTime}))
			res, err := runInfer(cmd.Context(), model, strings.Join(specs, " + "), opt, specs...)
			finish()
			if err != nil {
				return err
			}
			file := res.File()
			recordInput(file, model, opt.Output)
			if err := logits.Write(out, file); err != nil {
				return err
			}
			if quiet {
				return nil
			}
			clients := ""
			if res.Client != nil {
				clients = fmt.Sprintf(", %d clients", len(res.ClientNames))
			}
			if file.Input != "" {
				clients += "; probabilities of a Softmax, recorded in the file's input array"
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %d records, %d classes%s\n", out, res.Len(), res.Classes, clients)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "the ONNX model to run (required)")
	f.StringArrayVar(&specs, "data", nil, "the dataset spec, FORMAT:PATH[:OPTION] (required; grammar above); repeat it to read several in order, e.g. a train then a test split")
	f.StringVar(&out, "out", "", "the .npz logits file to write (required; replaced atomically)")
	f.IntVar(&opt.Batch, "batch", infer.DefaultBatch, batchUsage)
	registerThreadFlags(f, &opt)
	f.BoolVar(&opt.Spin, "spin", false, "let ONNX Runtime's pool threads spin while they wait for work (its own default) instead of sleeping: can be faster on a machine where nothing else runs, much slower when anything does (e.g. --threads 4 --spin on a dedicated 4-core machine)")
	f.BoolVar(&readAhead, "read-ahead", true, "read, decode and preprocess while the model runs: with several runs at once each reads its own next batch while the others run, with one a second goroutine reads the next batch while the model runs the current one; --read-ahead=false reads between runs, one run at a time")
	f.BoolVar(&backgroundReader, "background-reader", true, "with one run at a time (--runs 1, or --threads alone): run that goroutine at background priority (SCHED_IDLE) after the first batch, when the machine is quiet, promoted to normal priority once infer waits on it longer than the model runs; e.g. --background-reader=false to read ahead at normal priority throughout")
	f.StringVar(&opt.Input, "input", "", "the model input to feed (default: the first)")
	f.StringVar(&opt.Output, "output", "", "the model output to collect (default: the first float32 output)")
	f.StringVar(&labels, "labels", "", "a labels file, one class name a line in output order, stored in the logits file (must agree with the model's "+infer.KeyClasses+", when it has them)")
	f.StringVar(&opt.Runtime, "ort-lib", "", "the ONNX Runtime shared library (default: $"+infer.RuntimeEnv+", then the setup cache)")
	f.BoolVarP(&quiet, "quiet", "q", false, "draw no progress bar and print no summary")
	pre.register(f, "overrides", true)
	for _, name := range []string{"model", "data", "out"} {
		if err := cmd.MarkFlagRequired(name); err != nil {
			panic(err)
		}
	}
	f.SortFlags = false
	return cmd
}

// readLabelsFile reads the class names of the labels file at path
// (calib.ReadClassNames).
func readLabelsFile(path string) ([]string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--labels: %w", err)
	}
	defer fh.Close()
	names, err := calib.ReadClassNames(fh)
	if err != nil {
		return nil, fmt.Errorf("--labels %s: %w", path, err)
	}
	return names, nil
}

// inferBar returns an infer.Options.Progress callback that draws a
// progress bar on w, and a function that clears it when inference ends.
func inferBar(w io.Writer) (progress func(infer.Progress), finish func()) {
	b := newBar(w, "infer", "records")
	return func(p infer.Progress) { b.set(p.Done, p.Total) }, b.finish
}

// A bar is a progress bar drawn on a terminal, made when the total is
// first known and cleared by finish. Its methods do nothing on a nil *bar,
// so commands call them whether or not they draw one.
type bar struct {
	w          io.Writer
	desc, unit string
	pb         *progressbar.ProgressBar
}

// newBar returns a bar drawn on w, described as desc, counting unit and
// showing its rate; an empty unit counts steps and shows no rate.
func newBar(w io.Writer, desc, unit string) *bar {
	return &bar{w: w, desc: desc, unit: unit}
}

// terminalBar returns newBar(w, desc, unit) when w is a terminal, else nil.
func terminalBar(w io.Writer, desc, unit string) *bar {
	if !isTerminal(w) {
		return nil
	}
	return newBar(w, desc, unit)
}

// set draws done of total units (total < 0: unknown).
func (b *bar) set(done, total int) {
	if b == nil {
		return
	}
	if b.pb == nil {
		opts := []progressbar.Option{
			progressbar.OptionSetWriter(b.w),
			progressbar.OptionSetDescription(b.desc),
			progressbar.OptionShowCount(),
			progressbar.OptionThrottle(200 * time.Millisecond),
			progressbar.OptionClearOnFinish(),
		}
		if b.unit != "" {
			opts = append(opts, progressbar.OptionSetItsString(b.unit), progressbar.OptionShowIts())
		}
		b.pb = progressbar.NewOptions64(int64(total), opts...)
	}
	b.pb.Set64(int64(done))
}

// describe changes the description drawn before the bar.
func (b *bar) describe(desc string) {
	if b == nil {
		return
	}
	b.desc = desc
	if b.pb != nil {
		b.pb.Describe(desc)
	}
}

// finish clears the bar; set draws a new one.
func (b *bar) finish() {
	if b != nil && b.pb != nil {
		b.pb.Finish()
		b.pb = nil
	}
}

// registerThreadFlags registers the thread plan's flags, which infer and
// check share: --threads and --runs, into opt.Threads and opt.Runs.
func registerThreadFlags(f *pflag.FlagSet, opt *infer.Options) {
	f.IntVar(&opt.Threads, "threads", 0, "ONNX Runtime intra-op threads of each run; 0, the default, is the thread plan's choice: the cores this process may use (GOMAXPROCS) shared out among the runs, 1 per run on up to 4 cores; --threads N alone runs one batch at a time on N threads (e.g. --threads 1 to leave the other cores to other work)")
	f.IntVar(&opt.Runs, "runs", 0, "batches run through the model at once, each on its own goroutine and holding its own activations in memory; 0, the default, is the thread plan's choice: one per core this process may use up to 4 (on more cores, the most up to 4 that divide them), or 1 when --threads is given or --read-ahead=false (e.g. --runs 1 --threads 4 for the lowest latency per batch and memory)")
}

// batchUsage is the help of --batch, in every command that runs a model.
const batchUsage = "the most records per model run; runs at once take at most 256 KiB of input a batch, a record at least (e.g. --batch 64 --runs 1)"

// maxBatch is the largest --batch: infer allocates the input tensor of a
// whole batch up front, and larger batches run no faster on a CPU.
const maxBatch = 1 << 16

// openSession opens a model for runInfer; tests replace it to count the
// sessions a command opens.
var openSession = infer.OpenSession

// runInfer opens the model and the dataset and runs the one over the other.
// With more, the datasets of specs are read one after the other in place
// of spec, which then only names them in errors.
func runInfer(ctx context.Context, model, spec string, opt infer.Options, specs ...string) (*infer.Result, error) {
	if opt.Batch <= 0 || opt.Batch > maxBatch {
		return nil, fmt.Errorf("--batch %d: want 1 to %d records per model run", opt.Batch, maxBatch)
	}
	if opt.Threads < 0 || opt.Threads > infer.MaxThreads {
		return nil, fmt.Errorf("--threads %d: want 1 to %d intra-op threads, or 0 for the thread plan's choice", opt.Threads, infer.MaxThreads)
	}
	if opt.Runs < 0 || opt.Runs > infer.MaxThreads {
		return nil, fmt.Errorf("--runs %d: want 1 to %d runs at once, or 0 for the thread plan's choice", opt.Runs, infer.MaxThreads)
	}
	// The data first, so that a compressed file inflates on a goroutine
	// of its own while ONNX Runtime loads the model; the model's errors
	// still come before the data's.
	if len(specs) == 0 {
		specs = []string{spec}
	}
	parts := make([]data.Reader, 0, len(specs))
	defer func() {
		for _, p := range parts {
			p.Close()
		}
	}()
	var dataErr error
	for _, sp := range specs {
		p, err := data.Open(sp)
		if err != nil {
			dataErr = err
			break
		}
		parts = append(parts, p)
	}
	s, err := openSession(model, opt)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if dataErr != nil {
		return nil, dataErr
	}
	rd := parts[0]
	if len(parts) > 1 {
		rd = data.Concat(parts...)
	}
	defer spareProc(s)()
	res, err := s.Infer(ctx, rd)
	if err != nil {
		return nil, fmt.Errorf("%s on %s: %w", model, spec, err)
	}
	return res, nil
}

// spareProc gives the Go runtime one P more than s's runs while they
// run, when they would otherwise hold every P (GOMAXPROCS), and returns
// the function that restores GOMAXPROCS. A run holds its P through each
// ONNX Runtime call; with no P idle, the runtime's sysmon takes the P
// back from every call that outlasts its 20 µs tick, and so wakes every
// 20 µs, and each call's return waits for a P again: 3–5 % of
// mnist-tiny's records/s (docs/BENCHMARKS.md, "infer: concurrent runs'
// batches capped"). The command owns its process, so the setting is its
// to change; package infer leaves it to its caller.
func spareProc(s *infer.Session) func() {
	runs, procs := s.Runs(), runtime.GOMAXPROCS(0)
	if runs < procs {
		return func() {}
	}
	runtime.GOMAXPROCS(runs + 1)
	return func() { runtime.GOMAXPROCS(procs) }
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// dropTime removes the time from slog records written to the terminal.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// recordInput sets f.Input, for the outputs of the named output of the
// model at path ("" for its first float32 output), to
// logits.InputProbabilities when a Softmax makes that output
// (export.InputKind), so that whoever reads f reads them as such; it
// leaves f.Input as it is otherwise.
func recordInput(f *logits.File, path, output string) {
	m, err := onnx.ReadFile(path)
	if err != nil {
		return
	}
	if kind, err := export.InputKind(m, output, "", ""); err == nil && kind == logits.InputProbabilities {
		f.Input = kind
	}
}
