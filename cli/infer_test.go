package cli

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// writeIDX writes n h×w one-channel images with labels i%3 as an IDX pair
// and returns the image file's path. Pixel j of image i is (37i+11j) mod 256.
func writeIDX(t *testing.T, n, h, w int) (string, [][]uint8) {
	t.Helper()
	dir := t.TempDir()
	var img, lab bytes.Buffer
	binary.Write(&img, binary.BigEndian, []uint32{0x803, uint32(n), uint32(h), uint32(w)})
	binary.Write(&lab, binary.BigEndian, []uint32{0x801, uint32(n)})
	pix := make([][]uint8, n)
	for i := range n {
		pix[i] = make([]uint8, h*w)
		for j := range pix[i] {
			pix[i][j] = uint8((37*i + 11*j) % 256)
		}
		img.Write(pix[i])
		lab.WriteByte(byte(i % 3))
	}
	images := filepath.Join(dir, "t10k-images-idx3-ubyte")
	if err := os.WriteFile(images, img.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "t10k-labels-idx1-ubyte"), lab.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return images, pix
}

func requireORT(t *testing.T) {
	t.Helper()
	if _, err := infer.ResolveRuntime(""); err != nil {
		t.Skipf("skipping: %v", err)
	}
}

// tinyReference computes infer/testdata/tiny.onnx from the weights in
// tiny.json, in float64.
func tinyReference(t *testing.T, img []uint8) []float64 {
	t.Helper()
	b, err := os.ReadFile("../infer/testdata/tiny.json")
	if err != nil {
		t.Fatal(err)
	}
	var w struct {
		Tiny struct {
			Scale, Mean, Std float64
			W1, B1, W2, B2   []float64
		}
	}
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	m := w.Tiny
	layer := func(wt, bias, x []float64, relu bool) []float64 {
		y := make([]float64, len(bias))
		for i := range y {
			y[i] = bias[i]
			for j, v := range x {
				y[i] += wt[i*len(x)+j] * v
			}
			if relu {
				y[i] = math.Max(y[i], 0)
			}
		}
		return y
	}
	x := make([]float64, len(img))
	for i, v := range img {
		x[i] = (float64(v)*m.Scale - m.Mean) / m.Std
	}
	return layer(m.W2, m.B2, layer(m.W1, m.B1, x, true), false)
}

func TestInferCommand(t *testing.T) {
	requireORT(t)
	images, pix := writeIDX(t, 300, 4, 4)
	out := filepath.Join(t.TempDir(), "logits.npz")
	code, stdout, stderr := fedcalib("infer", "--model", "../infer/testdata/tiny.onnx", "--data", "idx:"+images,
		"--out", out, "--batch", "128", "--threads", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if want := "wrote " + out + ": 300 records, 3 classes\n"; stdout != want {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
	f, err := logits.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if f.Classes != 3 || f.Len() != 300 || f.Client != nil {
		t.Fatalf("file has %d classes, %d rows, client %v; want 3, 300, none", f.Classes, f.Len(), f.Client)
	}
	for i, img := range pix {
		if f.Labels[i] != int32(i%3) {
			t.Errorf("label %d = %d, want %d", i, f.Labels[i], i%3)
		}
		for c, want := range tinyReference(t, img) {
			if got := float64(f.Logits[i*3+c]); math.Abs(got-want) > 1e-5*math.Max(1, math.Abs(want)) {
				t.Errorf("row %d class %d: %v, want %v", i, c, got, want)
			}
		}
	}
}

func TestInferCommandErrors(t *testing.T) {
	requireORT(t)
	images, _ := writeIDX(t, 5, 4, 4)
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.onnx")
	tiny, err := os.ReadFile("../infer/testdata/tiny.onnx")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(corrupt, tiny[:len(tiny)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.npz")
	const old = "an older logits file"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing runtime", []string{"--ort-lib", filepath.Join(dir, "libonnxruntime.so.1")}, "ONNX Runtime not found (" + dir},
		{"wrong shape", []string{"--model", "../infer/testdata/cnn.onnx"}, `record shape [4 4 1] gives NCHW input [? 1 4 4], but model input "image" is [? 1 28 28]`},
		{"corrupt model", []string{"--model", corrupt}, corrupt + ": not a model ONNX Runtime can read"},
		{"unreadable data", []string{"--data", "idx:" + filepath.Join(dir, "none-images-idx3-ubyte")}, "none-images-idx3-ubyte"},
		{"no metadata", []string{"--model", "../infer/testdata/tiny_nometa.onnx"}, "pass --layout"},
		{"bad override", []string{"--std", "0"}, `--std: fedcalib.input.std="0"`},
		{"fixed batch", []string{"--model", "../infer/testdata/tiny_fixed.onnx"}, "fixed batch dimension"},
		{"bad batch", []string{"--batch", "0"}, "--batch 0: want 1 to 65536 records"},
		{"huge batch", []string{"--batch", "1000000000"}, "--batch 1000000000: want 1 to 65536 records"},
		{"not npz", []string{"--out", filepath.Join(dir, "out.csv")}, "must end in .npz"},
		{"bad preset", []string{"--preprocess", "cifar"}, `--preprocess: preprocessing preset "cifar": want one of imagenet`},
		{"preset and config", []string{"--preprocess", "imagenet", "--preprocess-config", "c.json"}, "--preprocess and --preprocess-config both give the preprocessing: pass one"},
		{"missing config", []string{"--preprocess-config", filepath.Join(dir, "none.json")}, "--preprocess-config: open " + filepath.Join(dir, "none.json")},
		{"bad resize", []string{"--resize", "0"}, `--resize: fedcalib.input.resize="0": want S or H,W`},
		{"bad interpolation", []string{"--interpolation", "area"}, `--interpolation: fedcalib.input.interpolation: interpolation "area"`},
		{"crop too large for the model", []string{"--crop", "5"}, `record shape [5 5 1] gives NCHW input [? 1 5 5], but model input "x" is [? 1 4 4]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(out, []byte(old), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"infer", "--quiet", "--model", "../infer/testdata/tiny.onnx", "--data", "idx:" + images, "--out", out}
			code, stdout, stderr := fedcalib(append(args, tc.args...)...)
			want := ExitUsage
			if tc.name == "missing runtime" {
				want = ExitEnvironment // an environment failure, not bad input
			}
			if code != want {
				t.Errorf("exit %d, want %d", code, want)
			}
			if !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "fedcalib: ") {
				t.Errorf("stderr %q, want one line containing %q", stderr, tc.want)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			if b, _ := os.ReadFile(out); string(b) != old {
				t.Errorf("the existing output file was changed to %d bytes", len(b))
			}
			if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
				t.Errorf("temporary files left behind: %v", left)
			}
		})
	}
}

// TestInferCommandResize runs the tiny model on 4×4 images enlarged to
// 8×8 with nearest-neighbour resizing and cropped back to their centred
// 4×4: output pixel (y, x) is input pixel (⌊(y+2)/2⌋, ⌊(x+2)/2⌋), since
// enlarging by 2 repeats each pixel twice and the crop starts at (8−4)/2.
func TestInferCommandResize(t *testing.T) {
	requireORT(t)
	images, pix := writeIDX(t, 30, 4, 4)
	out := filepath.Join(t.TempDir(), "logits.npz")
	code, _, stderr := fedcalib("infer", "--model", "../infer/testdata/tiny.onnx", "--data", "idx:"+images,
		"--out", out, "--threads", "1", "--resize", "8", "--interpolation", "nearest", "--crop", "4", "--quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	f, err := logits.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	for i, img := range pix {
		moved := make([]uint8, 16)
		for y := range 4 {
			for x := range 4 {
				moved[4*y+x] = img[4*((y+2)/2)+(x+2)/2]
			}
		}
		for c, want := range tinyReference(t, moved) {
			if got := float64(f.Logits[i*3+c]); math.Abs(got-want) > 1e-5*math.Max(1, math.Abs(want)) {
				t.Errorf("row %d class %d: %v, want %v", i, c, got, want)
			}
		}
	}
}

func TestInferCommandRefusesToOverwriteInput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "data.npz")
	if err := os.WriteFile(in, []byte("input"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := fedcalib("infer", "--model", "../infer/testdata/tiny.onnx", "--data", "npz:"+in+":x,y", "--out", in)
	if code != ExitUsage || !strings.Contains(stderr, "is an input") {
		t.Errorf("exit %d, stderr %q; want %d and a refusal", code, stderr, ExitUsage)
	}
	if b, _ := os.ReadFile(in); string(b) != "input" {
		t.Error("the input was overwritten")
	}
}

func TestInferCommandHelp(t *testing.T) {
	for _, cmd := range []string{"infer", "setup"} {
		code, stdout, _ := fedcalib(cmd, "--help")
		if code != 0 || !strings.Contains(stdout, "Examples:\n  fedcalib "+cmd) {
			t.Errorf("%s --help: exit %d, no example in %q", cmd, code, stdout)
		}
	}
	_, stdout, _ := fedcalib("infer", "--help")
	for _, flag := range []string{"--model", "--data", "--out", "--batch", "--threads", "--quiet", "--ort-lib", "--scale", "--mean", "--std", "--layout", "--dtype", "--vocab", "--classes", "--spin", "--read-ahead", "--background-reader"} {
		if !strings.Contains(stdout, flag+" ") {
			t.Errorf("infer --help does not document %s", flag)
		}
	}
}

// TestInferThreadFlagsSameFile checks that the flags of the thread plan
// change the speed, not the file: the same bytes at the defaults, with
// the reader at normal priority, reading between runs, and on one
// spinning thread.
func TestInferThreadFlagsSameFile(t *testing.T) {
	requireORT(t)
	imgs, _ := writeIDX(t, 23, 4, 4)
	dir := t.TempDir()
	var want []byte
	for i, flags := range [][]string{
		nil,
		{"--background-reader=false"},
		{"--read-ahead=false"},
		{"--threads", "1", "--spin"},
	} {
		out := filepath.Join(dir, fmt.Sprintf("%d.npz", i))
		args := append([]string{"infer", "--model", "../infer/testdata/tiny.onnx", "--data", "idx:" + imgs, "--out", out, "--batch", "4", "--quiet"}, flags...)
		if code, _, stderr := fedcalib(args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", flags, code, stderr)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want = got
		} else if !bytes.Equal(got, want) {
			t.Errorf("%v: the file differs from the defaults'", flags)
		}
	}
}

func TestInferCommandRequiredFlags(t *testing.T) {
	code, _, stderr := fedcalib("infer", "--model", "m.onnx")
	if code != ExitUsage || !slices.ContainsFunc([]string{`"data"`, `"out"`}, func(s string) bool { return strings.Contains(stderr, s) }) {
		t.Errorf("exit %d, stderr %q; want %d naming the missing flags", code, stderr, ExitUsage)
	}
}

// TestInferSeveralDatasets checks that repeated --data flags are read in
// order into one logits file.
func TestInferSeveralDatasets(t *testing.T) {
	requireORT(t)
	a, pa := writeIDX(t, 5, 4, 4)
	b, pb := writeIDX(t, 7, 4, 4)
	out := filepath.Join(t.TempDir(), "both.npz")
	code, stdout, stderr := fedcalib("infer", "--model", "../infer/testdata/tiny.onnx", "--data", "idx:"+a, "--data", "idx:"+b, "--out", out, "--threads", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, ": 12 records") {
		t.Errorf("stdout %q", stdout)
	}
	f, err := logits.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	for i, img := range append(pa, pb...) {
		for c, want := range tinyReference(t, img) {
			if got := float64(f.Logits[i*3+c]); math.Abs(got-want) > 1e-5*math.Max(1, math.Abs(want)) {
				t.Fatalf("row %d class %d: %v, want %v", i, c, got, want)
			}
		}
	}
}

// TestInferBar checks that the CLI, not package infer, draws the progress
// bar, and clears it when inference ends.
func TestInferBar(t *testing.T) {
	var buf bytes.Buffer
	progress, finish := inferBar(&buf)
	finish() // before any progress: nothing to clear
	for _, done := range []int{0, 2, 5} {
		progress(infer.Progress{Done: done, Total: 5})
	}
	finish()
	if s := buf.String(); !strings.Contains(s, "infer") || !strings.Contains(s, "/5, ") {
		t.Errorf("bar drew %q, want the description and a total of 5", s)
	}
}

// fedcalibFresh runs the command line in a new process, for runs that
// must not find ONNX Runtime already loaded, and returns its exit status
// and stderr.
func fedcalibFresh(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFreshProcessHelper$")
	cmd.Env = append(append(os.Environ(), "FEDCALIB_TEST_ARGS="+string(b)), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// TestFreshProcessHelper is the process fedcalibFresh starts.
func TestFreshProcessHelper(t *testing.T) {
	b := os.Getenv("FEDCALIB_TEST_ARGS")
	if b == "" {
		t.Skip("run by fedcalibFresh")
	}
	var args []string
	if err := json.Unmarshal([]byte(b), &args); err != nil {
		panic(err)
	}
	os.Exit(Main(args, io.Discard, os.Stderr))
}

// TestExitEnvironment checks exit status 3 for a missing or unloadable
// ONNX Runtime and for npm failing during setup, and that bad input
// beside them still exits 2.
func TestExitEnvironment(t *testing.T) {
	images, _ := writeIDX(t, 5, 4, 4)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing", infer.RuntimeLibrary)
	notALib := filepath.Join(dir, infer.RuntimeLibrary)
	if err := os.WriteFile(notALib, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	cf := writeCalibrator(t, calib.NewTemperature(3))
	failingNPM := filepath.Join(dir, "npm")
	if err := os.WriteFile(failingNPM, []byte("#!/bin/sh\necho 'ENOTFOUND registry.npmjs.org' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	infer := []string{"infer", "--quiet", "--model", "../infer/testdata/tiny.onnx", "--data", "idx:" + images, "--out", filepath.Join(dir, "out.npz")}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"infer, --ort-lib missing", nil, append(infer, "--ort-lib", missing), ExitEnvironment, "ONNX Runtime not found (" + missing + ": no such file)"},
		{"infer, $" + "ONNXRUNTIME_SHARED_LIBRARY_PATH missing", []string{"ONNXRUNTIME_SHARED_LIBRARY_PATH=" + missing}, infer, ExitEnvironment, "ONNX Runtime not found"},
		{"infer, not a library", nil, append(infer, "--ort-lib", notALib), ExitEnvironment, "cannot load it"},
		{"infer, no cache", []string{"XDG_CACHE_HOME=" + dir, "HOME=" + dir, "ONNXRUNTIME_SHARED_LIBRARY_PATH="}, infer, ExitEnvironment, "run `make setup`"},
		{"check", nil, []string{"check", "--model", "../infer/testdata/tiny.onnx", "--calibrator", cf, "--data", "idx:" + images, "--ort-lib", missing}, ExitEnvironment, "ONNX Runtime not found"},
		{"export", nil, []string{"export", "--model", "../infer/testdata/tiny.onnx", "--calibrator", cf, "--out", filepath.Join(dir, "c.onnx"), "--ort-lib", missing}, ExitEnvironment, "ONNX Runtime not found"},
		{"setup, npm fails", []string{"XDG_CACHE_HOME=" + dir}, []string{"setup", "--npm", failingNPM}, ExitEnvironment, "ENOTFOUND"},
		{"setup, no npm", []string{"XDG_CACHE_HOME=" + dir}, []string{"setup", "--npm", filepath.Join(dir, "no-npm")}, ExitEnvironment, "is npm installed"},
		{"bad input first", nil, append(infer[:len(infer)-2:len(infer)-2], "--out", filepath.Join(dir, "out.csv"), "--ort-lib", missing), ExitUsage, "must end in .npz"},
	} {
		code, stderr := fedcalibFresh(t, tc.env, tc.args...)
		_, msg, _ := strings.Cut(stderr, "fedcalib: ") // setup logs its steps first
		if code != tc.code || !strings.Contains(msg, tc.want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("%s: exit %d, stderr %q; want %d and an error line with %q", tc.name, code, stderr, tc.code, tc.want)
		}
	}
}

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{fmt.Errorf("%w: accuracy dropped", ErrCheckFailed), ExitFailed},
		{errors.New("--bins is 0"), ExitUsage},
		{&infer.RuntimeError{}, ExitEnvironment},
		{fmt.Errorf("verify: %w", &infer.RuntimeError{Path: "x.so", Reason: "cannot load it"}), ExitEnvironment},
		{fmt.Errorf("setup: %w", infer.ErrFetch), ExitEnvironment},
	} {
		if got := exitStatus(tc.err); got != tc.want {
			t.Errorf("exitStatus(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// TestInferPreprocessSources runs the ImageNet-shaped model over the
// parity sample with torchvision's ImageNet evaluation given four ways —
// the preset, a Hugging Face config, a timm config, and the flags — and
// requires the same logits from each.
func TestInferPreprocessSources(t *testing.T) {
	requireORT(t)
	dir := t.TempDir()
	hf := filepath.Join(dir, "preprocessor_config.json")
	timm := filepath.Join(dir, "config.json")
	for path, body := range map[string]string{
		hf: `{"do_resize": true, "size": {"shortest_edge": 256}, "resample": 2, "do_center_crop": true,
			"crop_size": {"height": 224, "width": 224}, "do_rescale": true, "rescale_factor": 0.00392156862745098,
			"do_normalize": true, "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}`,
		timm: `{"architecture": "resnet50", "pretrained_cfg": {"input_size": [3, 224, 224], "interpolation": "bilinear",
			"crop_pct": 0.875, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}}`,
	} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var first *logits.File
	for i, extra := range [][]string{
		{"--preprocess", "imagenet"},
		{"--preprocess-config", hf},
		{"--preprocess-config", timm},
		{"--layout", "NCHW", "--resize", "256", "--crop", "224", "--interpolation", "bilinear",
			"--scale", "0.00392156862745098", "--mean", "0.485,0.456,0.406", "--std", "0.229,0.224,0.225"},
	} {
		out := filepath.Join(dir, fmt.Sprintf("l%d.npz", i))
		args := append([]string{"infer", "--model", "../infer/testdata/imagenet_shaped.onnx", "--data",
			"imagefolder:../infer/testdata/parity/images", "--out", out, "--threads", "2", "--quiet"}, extra...)
		if code, _, stderr := fedcalib(args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, code, stderr)
		}
		f, err := logits.Read(out)
		if err != nil {
			t.Fatal(err)
		}
		if f.Len() != 25 || f.Classes != 1000 {
			t.Fatalf("%v: %d rows of %d classes, want 25 of 1000", extra, f.Len(), f.Classes)
		}
		if first == nil {
			first = f
			continue
		}
		if !slices.Equal(f.Logits, first.Logits) {
			t.Errorf("%v: logits differ from --preprocess imagenet's", extra)
		}
	}
}

// TestSpareProc checks that a command gives the Go runtime one P more
// than the runs in flight while they run, when they would hold every P,
// and restores GOMAXPROCS after.
func TestSpareProc(t *testing.T) {
	requireORT(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	for _, tc := range []struct {
		opt        infer.Options
		runs, want int
	}{
		{infer.Options{Runs: 2}, 2, 3},
		{infer.Options{Runs: 3, Threads: 1}, 3, 4},
		{infer.Options{}, 2, 3}, // the thread plan: a run per P
		{infer.Options{Runs: 1}, 1, 2},
		{infer.Options{Threads: 1}, 1, 2},
		{infer.Options{Runs: 2, Sequential: true}, 1, 2},
	} {
		s, err := infer.OpenSession("../infer/testdata/tiny.onnx", tc.opt)
		if err != nil {
			t.Fatal(err)
		}
		restore := spareProc(s)
		if got := s.Runs(); got != tc.runs {
			t.Errorf("%+v: %d runs, want %d", tc.opt, got, tc.runs)
		}
		if got := runtime.GOMAXPROCS(0); got != tc.want {
			t.Errorf("%+v: GOMAXPROCS %d while the runs run, want %d", tc.opt, got, tc.want)
		}
		restore()
		if got := runtime.GOMAXPROCS(0); got != 2 {
			t.Errorf("%+v: GOMAXPROCS %d after, want 2", tc.opt, got)
		}
		s.Close()
	}
}
