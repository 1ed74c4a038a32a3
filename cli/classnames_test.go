package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/onnx"
)

// nometaFlags are the preprocessing flags that tiny_nometa.onnx (the
// tiny model without metadata) needs.
var nometaFlags = []string{"--layout", "NCHW", "--scale", "0.00392156862745098", "--mean", "0.5", "--std", "0.25"}

// TestClassNamesRoundTrip follows the names of a labels file through
// infer --labels, calibrate, export and eval: each stage must hold them
// unchanged, in order.
func TestClassNamesRoundTrip(t *testing.T) {
	requireORT(t)
	want := []string{"tabby cat", "dög", "\U0001F426"}
	dir := t.TempDir()
	labels := filepath.Join(dir, "labels.txt")
	if err := os.WriteFile(labels, []byte(strings.Join(want, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	images, _ := writeIDX(t, 60, 4, 4)
	npz := filepath.Join(dir, "l.npz")
	args := append([]string{"infer", "--model", "../infer/testdata/tiny_nometa.onnx", "--data", "idx:" + images,
		"--labels", labels, "--out", npz, "--threads", "1", "-q"}, nometaFlags...)
	if code, _, stderr := fedcalib(args...); code != 0 {
		t.Fatalf("infer: exit %d: %s", code, stderr)
	}
	f, err := logits.Read(npz)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.ClassNames, want) {
		t.Errorf("logits file's class names %q, want %q", f.ClassNames, want)
	}

	cal := filepath.Join(dir, "temp.json")
	if code, _, stderr := fedcalib("calibrate", "--central", "--method", "temp", "--logits", npz, "--out", cal); code != 0 {
		t.Fatalf("calibrate: exit %d: %s", code, stderr)
	}
	_, cf, err := calib.ReadFile(cal)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Provenance.ClassNames, want) {
		t.Errorf("calibrator's class names %q, want %q", cf.Provenance.ClassNames, want)
	}

	fed := filepath.Join(dir, "fedtemp.json")
	if code, _, stderr := fedcalib("calibrate", "--method", "temp", "--clients", "3", "--beta", "1", "--rounds", "2", "--logits", npz, "--out", fed, "-q"); code != 0 {
		t.Fatalf("calibrate (federated): exit %d: %s", code, stderr)
	}
	if _, ff, err := calib.ReadFile(fed); err != nil || !slices.Equal(ff.Provenance.ClassNames, want) {
		t.Errorf("federated calibrator's class names %v (%v), want %q", ff, err, want)
	}

	out := filepath.Join(dir, "calibrated.onnx")
	if code, _, stderr := fedcalib("export", "--model", "../infer/testdata/tiny_nometa.onnx", "--calibrator", cal, "--out", out); code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	m, err := onnx.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := m.MetadataValue(infer.KeyClasses); v != strings.Join(want, ",") {
		t.Errorf("exported %s = %q, want %q", infer.KeyClasses, v, strings.Join(want, ","))
	}

	side := filepath.Join(dir, "sidecar.json")
	if code, _, stderr := fedcalib("export", "--model", "../infer/testdata/tiny_nometa.onnx", "--calibrator", cal, "--sidecar", "--out", side); code != 0 {
		t.Fatalf("export --sidecar: exit %d: %s", code, stderr)
	}
	if _, sf, err := calib.ReadFile(side); err != nil || !slices.Equal(sf.Provenance.ClassNames, want) {
		t.Errorf("sidecar's class names %v (%v), want %q", sf, err, want)
	}

	code, stdout, stderr := fedcalib("eval", "--logits", npz, "--calibrator", cal, "--json")
	if code != 0 {
		t.Fatalf("eval --json: exit %d: %s", code, stderr)
	}
	var rep struct {
		ClassNames []string `json:"class_names"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.ClassNames, want) {
		t.Errorf("eval --json class_names %q, want %q", rep.ClassNames, want)
	}
	code, stdout, stderr = fedcalib("eval", "--logits", npz, "--calibrator", cal)
	if code != 0 {
		t.Fatalf("eval: exit %d: %s", code, stderr)
	}
	if line := "\nclass names: tabby cat, dög, \U0001F426\n"; !strings.Contains(stdout, line) {
		t.Errorf("eval's report lacks %q:\n%s", line, stdout)
	}
	code, stdout, stderr = fedcalib("eval", "--logits", npz, "--calibrator", cal, "--calibrator", cal, "--json")
	if code != 0 || !strings.Contains(stdout, `"class_names": [`) {
		t.Errorf("eval comparing calibrators: exit %d, no class_names: %s%s", code, stdout, stderr)
	}
}

// TestClassNamesMismatch checks that class names differing in number or
// order between the model, a labels file, a logits file and a calibrator
// file stop every command that reads two of them, with exit status 2 and
// an error naming both and the first difference.
func TestClassNamesMismatch(t *testing.T) {
	requireORT(t)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	images, _ := writeIDX(t, 30, 4, 4)
	// tiny.onnx names its classes zero,one,two.
	swapped := write("swapped.txt", "zero\ntwo\none\n")
	short := write("short.txt", "zero\none\n")
	long := write("long.txt", "zero\none\ntwo\nthree\n")
	npz := func(name string, names []string) string {
		p := filepath.Join(dir, name)
		f := &logits.File{Logits: []float32{1, 0, 0, 0, 1, 0}, Labels: []int32{0, 1}, Classes: 3, ClassNames: names}
		if err := logits.Write(p, f); err != nil {
			t.Fatal(err)
		}
		return p
	}
	calibrator := func(name string, names []string) string {
		p := filepath.Join(dir, name)
		if err := calib.WriteFile(p, calib.NewTemperature(3), nil, calib.Provenance{ClassNames: names}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	abc := npz("abc.npz", []string{"a", "b", "c"})
	acb := calibrator("acb.json", []string{"a", "c", "b"})
	swappedCal := calibrator("zero-two-one.json", []string{"zero", "two", "one"})
	out := filepath.Join(dir, "out")
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"infer order", []string{"infer", "--model", "../infer/testdata/tiny.onnx", "--data", "idx:" + images, "--labels", swapped, "--out", out + ".npz"},
			`class names do not match: class 1 is "two" in the names given but "one" in the model's fedcalib.classes`},
		{"infer fewer", []string{"infer", "--model", "../infer/testdata/tiny.onnx", "--data", "idx:" + images, "--labels", short, "--out", out + ".npz"},
			"class names do not match: 2 names in the names given but 3 in the model's fedcalib.classes"},
		{"infer more, no model names", append([]string{"infer", "--model", "../infer/testdata/tiny_nometa.onnx", "--data", "idx:" + images, "--labels", long, "--out", out + ".npz"}, nometaFlags...),
			`class names do not match: 4 class names given but output "logits" has 3 classes`},
		{"infer bad labels file", []string{"infer", "--model", "../infer/testdata/tiny.onnx", "--data", "idx:" + images, "--labels", write("dup.txt", "a\nb\na\n"), "--out", out + ".npz"},
			`dup.txt: classes 0 and 2 are both named "a"`},
		{"eval", []string{"eval", "--logits", abc, "--calibrator", acb},
			`class names do not match: class 1 is "b" in ` + abc + ` but "c" in ` + acb},
		{"eval compare", []string{"eval", "--logits", npz("none.npz", nil), "--calibrator", calibrator("abc.json", []string{"a", "b", "c"}), "--calibrator", acb},
			`class 1 is "b" in ` + filepath.Join(dir, "abc.json") + ` but "c" in ` + acb},
		{"check logits", []string{"check", "--logits", abc, "--calibrator", acb},
			`class 1 is "b" in ` + abc + ` but "c" in ` + acb},
		{"check model", []string{"check", "--model", "../infer/testdata/tiny.onnx", "--calibrator", swappedCal, "--data", "idx:" + images},
			`class 1 is "one" in ../infer/testdata/tiny.onnx but "two" in ` + swappedCal},
		{"export", []string{"export", "--model", "../infer/testdata/tiny.onnx", "--calibrator", swappedCal, "--out", out + ".onnx"},
			`class names do not match: class 1 is "one" in the model's fedcalib.classes but "two" in the calibrator file`},
		{"export sidecar", []string{"export", "--model", "../infer/testdata/tiny.onnx", "--calibrator", swappedCal, "--sidecar", "--out", out + ".json"},
			`tiny.onnx: class names do not match: class 1 is "one" in the model's fedcalib.classes but "two" in the calibrator file`},
	} {
		code, _, stderr := fedcalib(tt.args...)
		if code != ExitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and %q", tt.name, code, stderr, ExitUsage, tt.want)
		}
	}
	for _, p := range []string{out + ".npz", out + ".onnx", out + ".json"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s written despite the mismatch", p)
		}
	}
}
