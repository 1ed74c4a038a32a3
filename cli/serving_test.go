package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/export"
	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/internal/onnxtest"
	"github.com/fedcalib/fedcalib/onnx"
	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// TestExportServing exports the tiny model (classes zero, one, two) into
// a Triton repository and as test vectors in one run without --out, then
// replays the vectors: exit 0 as written, 1 after a flipped byte of
// output_0.pb, 2 after a truncated one.
func TestExportServing(t *testing.T) {
	requireORT(t)
	tc := calib.NewTemperature(3)
	tc.T = 1.7
	cf := writeCalibrator(t, tc)
	dir := t.TempDir()
	repo, vec := filepath.Join(dir, "repo"), filepath.Join(dir, "vec")
	code, stdout, stderr := fedcalib("export", "--model", "../infer/testdata/tiny.onnx", "--calibrator", cf,
		"--triton", repo, "--max-batch", "16", "--test-vectors", vec)
	if code != ExitOK {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, `Triton model "tiny"`) || !strings.Contains(stdout, "check --test-vectors "+vec) {
		t.Errorf("stdout %q", stdout)
	}
	config, err := os.ReadFile(filepath.Join(repo, "tiny", "config.pbtxt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`name: "tiny"`, `platform: "onnxruntime_onnx"`, "max_batch_size: 16", `label_filename: "labels.txt"`, "dims: [ 1, 4, 4 ]"} {
		if !strings.Contains(string(config), want) {
			t.Errorf("config.pbtxt lacks %q:\n%s", want, config)
		}
	}
	if labels, err := os.ReadFile(filepath.Join(repo, "tiny", "labels.txt")); string(labels) != "zero\none\ntwo\n" {
		t.Errorf("labels.txt %q, %v", labels, err)
	}
	served, err := os.ReadFile(filepath.Join(repo, "tiny", "1", "model.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if replayed, err := os.ReadFile(filepath.Join(vec, "model.onnx")); err != nil || !bytes.Equal(served, replayed) {
		t.Errorf("the Triton model and the test vectors' model differ (%v)", err)
	}

	code, stdout, stderr = fedcalib("check", "--test-vectors", vec, "--json")
	var rep vectorsReport
	if code != ExitOK || json.Unmarshal([]byte(stdout), &rep) != nil {
		t.Fatalf("check: exit %d: %s%s", code, stdout, stderr)
	}
	// 4 random rows: logits and probabilities, 3 classes each.
	if !rep.Pass || rep.Sets != 1 || rep.Values != 24 || rep.MaxError != 0 || rep.Tolerance != 1e-5 {
		t.Errorf("report %+v", rep)
	}
	if code, _, stderr := fedcalib("check", "--test-vectors", vec, "--model", filepath.Join(repo, "tiny", "1", "model.onnx")); code != ExitOK {
		t.Errorf("check --model: exit %d: %s", code, stderr)
	}

	// A recorded file missing is bad input (exit 2), not a pass: the last
	// output, or the first with the second left.
	out1 := filepath.Join(vec, "test_data_set_0", "output_1.pb")
	kept, err := os.ReadFile(out1)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(out1)
	if code, _, stderr := fedcalib("check", "--test-vectors", vec); code != ExitUsage || !strings.Contains(stderr, "output_1.pb is missing") {
		t.Errorf("output_1.pb removed: exit %d, %q", code, stderr)
	}
	if err := os.WriteFile(out1, kept, 0o644); err != nil {
		t.Fatal(err)
	}
	out0 := filepath.Join(vec, "test_data_set_0", "output_0.pb")
	b0, _ := os.ReadFile(out0)
	os.Remove(out0)
	if code, _, stderr := fedcalib("check", "--test-vectors", vec); code != ExitUsage || !strings.Contains(stderr, "output_0.pb is missing but output_1.pb exists") {
		t.Errorf("output_0.pb removed: exit %d, %q", code, stderr)
	}
	if err := os.WriteFile(out0, b0, 0o644); err != nil {
		t.Fatal(err)
	}
	onnxtest.FlipFloat(t, out0)
	if code, _, stderr := fedcalib("check", "--test-vectors", vec); code != ExitFailed || !strings.Contains(stderr, "output_0.pb (logits) value 0") {
		t.Errorf("flipped byte: exit %d, %q", code, stderr)
	}
	b, _ := os.ReadFile(out0)
	if err := os.WriteFile(out0, b[:len(b)-2], 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := fedcalib("check", "--test-vectors", vec); code != ExitUsage || !strings.Contains(stderr, "output_0.pb") {
		t.Errorf("truncated file: exit %d, %q", code, stderr)
	}
}

// TestExportServingRefuses checks the bad uses of --triton and
// --test-vectors: each exits 2 before any work, writing nothing.
func TestExportServingRefuses(t *testing.T) {
	tc := calib.NewTemperature(3)
	cf := writeCalibrator(t, tc)
	dir := t.TempDir()
	taken := filepath.Join(dir, "taken")
	if err := os.MkdirAll(filepath.Join(taken, "tiny"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(taken, "tiny", "config.pbtxt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	model := "../infer/testdata/tiny.onnx"
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", model, "--calibrator", cf}, "--out FILE"},
		{[]string{"--model", model, "--calibrator", cf, "--sidecar", "--triton", filepath.Join(dir, "r")}, "drop --sidecar"},
		{[]string{"--model", model, "--calibrator", cf, "--triton", taken}, `already holds a model "tiny"`},
		{[]string{"--model", model, "--calibrator", cf, "--triton", filepath.Join(dir, "r"), "--name", "a/b"}, "model name"},
		{[]string{"--model", model, "--calibrator", cf, "--triton", filepath.Join(dir, "r"), "--max-batch", "-1"}, "max batch size"},
		{[]string{"--model", model, "--calibrator", cf, "--triton", filepath.Join(dir, "r"), "--max-batch", "2147483648"}, "max batch size 2147483648"},
		{[]string{"--model", model, "--calibrator", cf, "--triton", filepath.Join(dir, "r"), "--version", "0"}, "--version is 0"},
		{[]string{"--model", model, "--calibrator", cf, "--out", filepath.Join(dir, "o.onnx"), "--version", "2"}, "with --triton"},
		{[]string{"--model", model, "--calibrator", cf, "--test-vectors", taken}, "not empty"},
	} {
		code, _, stderr := fedcalib(append([]string{"export"}, tt.args...)...)
		if code != ExitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tt.args, code, stderr, tt.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%s holds %d entries, want only %s", dir, len(entries), taken)
	}
	if code, _, stderr := fedcalib("check", "--test-vectors", dir, "--data", "mnist:x"); code != ExitUsage || !strings.Contains(stderr, "drop --data") {
		t.Errorf("check --test-vectors --data: exit %d, %q", code, stderr)
	}
}

// TestExportStandaloneVectors writes the standalone calibrator's test
// vectors (its probe set) and Triton entry, named after the calibrator
// file and labelled with its class names, and replays the vectors.
func TestExportStandaloneVectors(t *testing.T) {
	requireORT(t)
	h := &calib.Histogram{Bins: 4, Table: []float64{0.1, 0.2, -1, 0.9, 0.3, 0.5, 0.6, 0.7}}
	dir := t.TempDir()
	cf := filepath.Join(dir, "bin.json")
	if err := calib.WriteFile(cf, h, nil, calib.Provenance{ClassNames: []string{"cat", "dog"}}); err != nil {
		t.Fatal(err)
	}
	vec, repo := filepath.Join(dir, "vec"), filepath.Join(dir, "repo")
	if code, _, stderr := fedcalib("export", "--calibrator", cf, "--standalone", "--test-vectors", vec, "--triton", repo); code != ExitOK {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	if labels, err := os.ReadFile(filepath.Join(repo, "bin", "labels.txt")); string(labels) != "cat\ndog\n" {
		t.Errorf("labels.txt %q, %v", labels, err)
	}
	if config, err := os.ReadFile(filepath.Join(repo, "bin", "config.pbtxt")); err != nil || !strings.Contains(string(config), `name: "logits"`) ||
		strings.Count(string(config), `label_filename: "labels.txt"`) != 1 {
		t.Errorf("config.pbtxt (%v):\n%s", err, config)
	}
	if code, stdout, stderr := fedcalib("check", "--test-vectors", vec); code != ExitOK || !strings.Contains(stdout, "PASS") {
		t.Errorf("check: exit %d: %s%s", code, stdout, stderr)
	}
}

// TestExportAllFormsOrNone exports, with --out, --test-vectors and
// --triton in one run, a model whose logits output declares no shape:
// the model and the vectors can be written, the Triton entry cannot
// (Triton needs every output's rank). It used to write --out and the
// vectors and then fail; now it fails writing nothing.
func TestExportAllFormsOrNone(t *testing.T) {
	requireORT(t)
	m, err := onnx.ReadFile("../infer/testdata/tiny.onnx")
	if err != nil {
		t.Fatal(err)
	}
	pb := proto.Clone(m.Proto()).(*onnxpb.ModelProto)
	for _, o := range pb.Graph.Output {
		o.Type.GetTensorType().Shape = nil
	}
	noShape, err := onnx.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	model := filepath.Join(dir, "noshape.onnx")
	if err := noShape.WriteFile(model); err != nil {
		t.Fatal(err)
	}
	tc := calib.NewTemperature(3)
	tc.T = 1.5
	cf := writeCalibrator(t, tc)
	out, vec, repo := filepath.Join(dir, "out.onnx"), filepath.Join(dir, "vec"), filepath.Join(dir, "repo")
	code, _, stderr := fedcalib("export", "--model", model, "--calibrator", cf, "--out", out, "--test-vectors", vec, "--triton", repo)
	if code != ExitUsage || !strings.Contains(stderr, "declares no shape") {
		t.Fatalf("exit %d, %q; want 2 and the Triton refusal", code, stderr)
	}
	for _, p := range []string{out, vec, repo} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was written", p)
		}
	}
	// Without --triton both forms are written.
	if code, _, stderr := fedcalib("export", "--model", model, "--calibrator", cf, "--out", out, "--test-vectors", vec); code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, p := range []string{out, filepath.Join(vec, "model.onnx")} {
		if _, err := os.Stat(p); err != nil {
			t.Error(err)
		}
	}
}

// TestExportVectorsData records real inputs: the first 4 records of an
// IDX dataset for the tiny model, whose recorded logits must be the
// first 4 rows `fedcalib infer` writes for the same data (computed
// independently, in batches of 256), and the first 4 rows of that
// logits file for the standalone calibrator. Both replay; the wrong kind
// of data for each is refused.
func TestExportVectorsData(t *testing.T) {
	requireORT(t)
	const model = "../infer/testdata/tiny.onnx"
	images, _ := writeIDX(t, 10, 4, 4)
	dir := t.TempDir()
	lf := filepath.Join(dir, "l.npz")
	if code, _, stderr := fedcalib("infer", "--model", model, "--data", "idx:"+images, "--out", lf, "--quiet"); code != 0 {
		t.Fatalf("infer: exit %d: %s", code, stderr)
	}
	f, err := logits.Read(lf)
	if err != nil {
		t.Fatal(err)
	}
	tc := calib.NewTemperature(3)
	tc.T = 1.5
	cf := writeCalibrator(t, tc)
	read := func(path string) *onnx.Tensor {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		x, err := onnx.ParseTensor(b)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	vec, alone := filepath.Join(dir, "vec"), filepath.Join(dir, "alone")
	for _, args := range [][]string{
		{"export", "--model", model, "--calibrator", cf, "--test-vectors", vec, "--test-vectors-data", "idx:" + images},
		{"export", "--calibrator", cf, "--standalone", "--test-vectors", alone, "--test-vectors-data", lf},
		{"check", "--test-vectors", vec},
		{"check", "--test-vectors", alone},
	} {
		if code, _, stderr := fedcalib(args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
	}
	in := read(filepath.Join(vec, "test_data_set_0", "input_0.pb"))
	got := read(filepath.Join(vec, "test_data_set_0", "output_0.pb"))
	if !slices.Equal(in.Dims, []int64{4, 1, 4, 4}) || !slices.Equal(got.Dims, []int64{4, 3}) || !slices.Equal(got.Float, f.Logits[:12]) {
		t.Errorf("model vectors: input %v, logits %v %v; want the first 4 rows infer wrote, %v", in.Dims, got.Dims, got.Float, f.Logits[:12])
	}
	if in := read(filepath.Join(alone, "test_data_set_0", "input_0.pb")); !slices.Equal(in.Float, f.Logits[:12]) {
		t.Errorf("standalone vectors: input %v, want %v", in.Float, f.Logits[:12])
	}
	for _, args := range [][]string{
		{"--model", model, "--calibrator", cf, "--test-vectors", filepath.Join(dir, "a"), "--test-vectors-data", lf},
		{"--calibrator", cf, "--standalone", "--test-vectors", filepath.Join(dir, "b"), "--test-vectors-data", "idx:" + images},
		{"--model", model, "--calibrator", cf, "--out", filepath.Join(dir, "c.onnx"), "--test-vectors-data", lf},
	} {
		if code, _, stderr := fedcalib(append([]string{"export"}, args...)...); code != ExitUsage || !strings.Contains(stderr, "--test-vectors-data") {
			t.Errorf("%v: exit %d, %q", args, code, stderr)
		}
	}
}

// TestFormsWriteUndo checks the rollback of a multi-form write: the
// model file cannot be written (its directory does not exist), so the
// test vectors and the Triton entry written before it are removed — an
// empty vectors directory that existed is left empty, the repository
// created for the entry is removed.
func TestFormsWriteUndo(t *testing.T) {
	m, err := onnx.ReadFile("../infer/testdata/tiny.onnx")
	if err != nil {
		t.Fatal(err)
	}
	c := calib.NewTemperature(3)
	c.T = 2
	if _, _, err := export.Append(m, c, nil, export.Options{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	vec, repo := filepath.Join(dir, "vec"), filepath.Join(dir, "repo")
	if err := os.Mkdir(vec, 0o755); err != nil {
		t.Fatal(err)
	}
	entry, err := export.PrepareTriton(repo, m, export.TritonOptions{Name: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	x := &onnx.Tensor{Name: "x", Elem: onnx.Float, Dims: []int64{1, 1, 4, 4}, Float: make([]float32, 16)}
	y := &onnx.Tensor{Name: "logits", Elem: onnx.Float, Dims: []int64{1, 3}, Float: make([]float32, 3)}
	f := &forms{m: m, out: filepath.Join(dir, "missing", "out.onnx"), vectors: vec, repo: repo,
		set: &export.TestSet{Inputs: []*onnx.Tensor{x}, Outputs: []*onnx.Tensor{y, y}}, triton: entry}
	if err := f.write(context.Background()); err == nil {
		t.Fatal("the model file was written into a missing directory")
	}
	if entries, err := os.ReadDir(vec); err != nil || len(entries) != 0 {
		t.Errorf("%s: %d entries (%v), want it left empty", vec, len(entries), err)
	}
	if _, err := os.Stat(repo); !os.IsNotExist(err) {
		t.Errorf("%s is left behind (%v)", repo, err)
	}
}
