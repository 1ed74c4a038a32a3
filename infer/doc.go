// Package infer runs an ONNX classifier over a dataset with ONNX Runtime on
// CPU and collects its logits.
//
// # ONNX Runtime
//
// fedcalib runs against one pinned ONNX Runtime build (RuntimeVersion,
// checked by RuntimeSHA256). Setup installs it, once, into the per-user
// cache (CachedRuntimePath); it is the only code that downloads anything.
// ResolveRuntime finds the library: an explicit path (the --ort-lib flag),
// else the file named by $ONNXRUNTIME_SHARED_LIBRARY_PATH, else the cache.
//
// ONNX Runtime keeps one environment per process, and onnxruntime_go holds it
// in package-level state. InitRuntime creates it the first time it is needed
// and keeps it for the life of the process; it is the one piece of global
// state in fedcalib, shared by every Session and Graph. This package is the
// only one in fedcalib that imports onnxruntime_go: other packages (export's
// verification among them) run models through Session or Graph.
//
// # Sessions and inference
//
// OpenSession loads a model. Its input is the first model input and its
// output the first float32 output, unless Options names them; the input must
// have a dynamic batch (first) dimension and the output must be logits of
// shape [batch, classes]. Session.Infer reads a data.Reader to the end,
// Options.Batch records at a time, and returns a Result: the logits, the
// labels, and client ids when the reader provides client names. Outputs
// holding NaN or ±Inf are an error; outputs that look like probabilities
// (rows of non-negative numbers summing to 1) get a warning, because the
// calibrators want logits. Options.Extra names further outputs to collect
// in the same runs (the logits and the probabilities of a calibrated model
// in one pass), returned in Result.Extra. Session.Run runs one batch that
// is already a tensor.
//
// # The thread plan
//
// How a session shares the machine's cores between ONNX Runtime and the Go
// code that feeds it is decided in one place (threads.go), for every
// Session and Graph:
//
//   - Session.Infer keeps one batch per core in flight (Options.Runs; zero
//     means DefaultThreads, the cores this process may use, up to four,
//     when Options.Threads is zero too; on more cores the most runs up
//     to four that divide them), each run by a goroutine of its own on
//     one intra-op thread (or an equal share of the cores), and joins
//     their logits in the data's order. A
//     run on one thread has no barrier to wait at, so the Go runtime or
//     another process that takes a core for a while slows one run, not
//     every thread of a parallel operator. Each run reads, decodes and
//     preprocesses its own next batch (the reader shared, one batch at a
//     time, in the data's order) between its model runs, so no reading
//     goroutine competes with the runs for the cores. A batch holds at
//     most Batch records and at most 256 KiB of input (runBatch; a record
//     at least): the runs hold their activations at once, which then
//     stay in the caches. The first batches are small (k+1 sixteenths of
//     that most for the k-th run), so that every run starts after a few
//     records rather than a whole batch; when the data knows its size
//     (data.Sized), the later ones take 1/(2·Runs) of the records left,
//     so that the runs end together (batchRows); the logits do not
//     depend on the batches. Options.Threads alone,
//     Options.Runs 1 or Options.Sequential runs one batch at a time,
//     the plan of the items below;
//   - ONNX Runtime runs each model on Options.Threads intra-op threads (the
//     calling thread and Threads-1 pool threads; zero means the plan's
//     choice: DefaultThreads shared out among the runs)
//     and one inter-op thread;
//   - its pool threads sleep when they run out of work instead of
//     spinning (Options.Spin false). A spinning pool thread holds its
//     core between the operators of a run and between runs, so anything
//     else that runs (Infer's reader, the Go runtime, another process)
//     preempts it in the middle of a parallel operator, and every
//     barrier of the run then waits for a thread that is off its core:
//     on a shared 2-core machine a spinning pool ran mnist-tiny at
//     0.4–0.7× the speed of a sleeping one (docs/BENCHMARKS.md). Spin
//     restores ONNX Runtime's default, for a machine where nothing else
//     runs;
//   - with one run at a time, Session.Infer reads, decodes and
//     preprocesses the next batch on one goroutine while ONNX Runtime
//     runs the current one (Options.Sequential false): two reused batch
//     buffers, so at most one batch ahead, no copies. With sleeping pool
//     threads the reader runs in the gaps they leave (the serial parts of
//     a run, the end of each parallel operator);
//   - with one run at a time, that goroutine reads the first batch at
//     normal priority (the model waits for it) and the rest on an OS
//     thread of its own at background priority (Linux's SCHED_IDLE;
//     Options.ForegroundReader false), so that it runs only on cores the model's threads leave
//     idle and a model thread that wakes preempts it at once: reading
//     never stalls a parallel operator of the model. It stays at normal
//     priority on a busy machine (other processes' load of half a core
//     or more) and when its first batch waited for a core (a saturated
//     one): a background thread would get no core there. It moves to a
//     goroutine of normal priority, from its next record on, once Infer
//     has waited for a batch longer than the model ran on the previous
//     one (the machine has become busy, or reading costs more than the
//     model).
//
// The logits do not depend on the plan: every batch runs on the same
// session and its rows are joined in the data's order, so every
// combination of runs, threads, spinning, reading ahead and reader
// priority gives the same result bit for bit.
//
// The package prints nothing: Infer reports how far it is through
// Options.Progress, and warnings go to Options.Logger.
//
// Graph is the bare path: a model loaded with the inputs and float32
// outputs the caller names, run on tensors the caller makes, with no
// preprocessing and no checks on what the outputs hold.
//
// # Preprocessing metadata
//
// How records become model input is recorded in the model's metadata_props
// by the recipe that trained it, under these keys (the contract with the
// model recipes in package models), and can be overridden key by key with
// Options.Preprocess (the infer command's flags):
//
//	fedcalib.input.resize  images are resized first: S scales the shorter side
//	                       to S and the longer to ⌊S·long/short⌋ (torchvision's
//	                       Resize(S)); H,W scales to H×W; default none
//	fedcalib.input.crop    then cropped to the centred S×S (or H,W) window,
//	                       zero-padded where smaller (CenterCrop); default none
//	fedcalib.input.interpolation
//	                       the resizing filter: bilinear (default), bicubic,
//	                       nearest, box, hamming, lanczos, as PIL applies them
//	fedcalib.input.scale   raw values are multiplied by this first, e.g.
//	                       0.00392156862745098 (1/255) for 8-bit pixels; default 1
//	fedcalib.input.mean    subtracted next: one number, or comma-separated,
//	                       one per channel; default 0
//	fedcalib.input.std     divided by last: one number or one per channel; default 1
//	fedcalib.input.layout  NCHW, NHWC, or NC (flat features); default NC for a
//	                       rank-2 input, required for any other rank
//	fedcalib.input.dtype   float32 or int64; default: the model input's type
//	fedcalib.input.vocab   a text vocabulary: character i of the string is token i;
//	                       text records become int64 token indices (dtype int64)
//	fedcalib.classes       comma-separated class names in output order (optional)
//
// So a pixel value v of channel c becomes (v*scale - mean[c]) / std[c],
// after the image is resized and cropped (package resize: pixel for pixel
// what torchvision's Resize and CenterCrop give PIL images). Preset and
// ReadConfig give the same keys for torchvision's ImageNet evaluation and
// for Hugging Face and timm configs, and Preprocessing is their one parsed
// form.
// Records hold images as height×width×channels (HWC); a rank-2 record is
// one channel; a flat record (rank 1) is taken to be in the model's own
// element order already. A model with none of the fedcalib.input.* keys and
// no overrides is refused, naming the flags that supply them.
package infer
