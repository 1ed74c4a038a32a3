package cli

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/onnx"
)

// TestExportRecordsPreprocessing runs the ImageNet-shaped model (no
// preprocessing metadata, as torchvision exports it) over the parity
// sample with --preprocess imagenet, calibrates the logits, and exports
// the calibrator with the same flag: the exported model's metadata then
// holds the preset's keys (resize, crop and interpolation among them),
// and infer runs it with no flags to the same logits. Exported without
// the flag, the model is refused by infer for want of them.
func TestExportRecordsPreprocessing(t *testing.T) {
	requireORT(t)
	const model = "../infer/testdata/imagenet_shaped.onnx"
	const data = "imagefolder:../infer/testdata/parity/images"
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	run := func(args ...string) {
		t.Helper()
		if code, _, stderr := fedcalib(args...); code != 0 {
			t.Fatalf("%s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
	}
	run("infer", "--model", model, "--data", data, "--out", path("a.npz"), "--threads", "1", "--quiet", "--preprocess", "imagenet")
	run("calibrate", "--method", "temp", "--central", "--logits", path("a.npz"), "--quiet", "--out", path("t.json"))
	run("export", "--model", model, "--calibrator", path("t.json"), "--out", path("with.onnx"), "--preprocess", "imagenet")
	run("export", "--model", model, "--calibrator", path("t.json"), "--out", path("without.onnx"))

	m, err := onnx.ReadFile(path("with.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := infer.Preset("imagenet")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{infer.KeyResize, infer.KeyCrop, infer.KeyInterpolation, infer.KeyScale, infer.KeyMean, infer.KeyStd, infer.KeyLayout} {
		if got, ok := m.MetadataValue(k); !ok || got != want[k] {
			t.Errorf("exported metadata %s = %q (present %t), want %q", k, got, ok, want[k])
		}
	}
	if want[infer.KeyResize] != "256" || want[infer.KeyCrop] != "224" || want[infer.KeyInterpolation] != "bilinear" {
		t.Fatalf("the imagenet preset is not torchvision's Resize(256) bilinear + CenterCrop(224): %v", want)
	}

	run("infer", "--model", path("with.onnx"), "--data", data, "--out", path("b.npz"), "--threads", "1", "--quiet")
	a, err := logits.Read(path("a.npz"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := logits.Read(path("b.npz"))
	if err != nil {
		t.Fatal(err)
	}
	if b.Len() != 25 || !slices.Equal(a.Logits, b.Logits) {
		t.Errorf("infer on the exported model, no flags: %d rows, logits equal %t; want 25 rows, the logits of --preprocess imagenet",
			b.Len(), slices.Equal(a.Logits, b.Logits))
	}
	if code, _, stderr := fedcalib("infer", "--model", path("without.onnx"), "--data", data, "--out", path("c.npz"), "--quiet"); code == 0 || !strings.Contains(stderr, "no preprocessing metadata") {
		t.Errorf("infer on the model exported without --preprocess: exit %d, %q; want a refusal naming the missing metadata", code, stderr)
	}
}

// TestExportPreprocessingRefused checks the preprocessing flags export
// refuses: a value infer cannot parse, and any with --sidecar.
func TestExportPreprocessingRefused(t *testing.T) {
	requireORT(t)
	const model = "../infer/testdata/imagenet_shaped.onnx"
	dir := t.TempDir()
	cal := filepath.Join(dir, "t.json")
	if code, _, stderr := fedcalib("infer", "--model", model, "--data", "imagefolder:../infer/testdata/parity/images",
		"--out", filepath.Join(dir, "a.npz"), "--threads", "1", "--quiet", "--preprocess", "imagenet"); code != 0 {
		t.Fatal(stderr)
	}
	if code, _, stderr := fedcalib("calibrate", "--method", "temp", "--central", "--logits", filepath.Join(dir, "a.npz"), "--quiet", "--out", cal); code != 0 {
		t.Fatal(stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--out", filepath.Join(dir, "x.onnx"), "--crop", "0"}, "--crop"},
		{[]string{"--out", filepath.Join(dir, "x.onnx"), "--interpolation", "sharpest"}, "--interpolation"},
		{[]string{"--out", filepath.Join(dir, "x.json"), "--sidecar", "--preprocess", "imagenet"}, "--sidecar and --standalone write none"},
	} {
		args := append([]string{"export", "--model", model, "--calibrator", cal}, tc.args...)
		if code, _, stderr := fedcalib(args...); code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q; want a refusal naming %q", tc.args, code, stderr, tc.want)
		}
	}
}
