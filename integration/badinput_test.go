package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// The bad-input contract (SPEC §10, issue #12): whatever the input, a
// command refuses it with exit status 2 and one line on stderr starting
// with "fedcalib:", never a stack trace, and leaves no file behind and
// no input changed. TestBadInput checks it case by case, each in a fresh
// process run in its own empty directory.

// badCase is one bad invocation.
type badCase struct {
	name string
	args []string
	// copies are fixtures copied into the case's directory before the
	// run, by fixture name, for cases whose output is an input.
	copies []string
	// ort marks cases that load ONNX Runtime once their flags pass.
	ort bool
}

// badFixtures are the small inputs of the suite, made once in a directory
// the cases only read.
type badFixtures struct {
	dir   string
	model string // the committed tiny MNIST model, 10 classes
}

func (f *badFixtures) p(name string) string { return filepath.Join(f.dir, name) }

// writeBadLogits writes a logits file of n rows over c classes, with a
// client column of 4 clients and a split column alternating calibration
// and test within each client; without columns when plain.
func writeBadLogits(t *testing.T, path string, n, c int, plain bool) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, uint64(c)))
	f := &logits.File{Classes: c, Labels: make([]int32, n)}
	if !plain {
		f.Client, f.Split = make([]int32, n), make([]uint8, n)
	}
	for i := range n {
		y := i % c
		f.Labels[i] = int32(y)
		if !plain {
			f.Client[i] = int32(i % 4)
			f.Split[i] = uint8(1 + (i/4)%2)
		}
		for j := range c {
			v := rng.NormFloat64()
			if j == y {
				v += 3
			}
			f.Logits = append(f.Logits, float32(v))
		}
	}
	if err := logits.Write(path, f); err != nil {
		t.Fatal(err)
	}
}

// writeMNISTIDX writes n 28×28 images and labels in IDX format, the tiny
// MNIST model's input; it returns the images file.
func writeMNISTIDX(t *testing.T, dir string, n int) string {
	t.Helper()
	var img, lab bytes.Buffer
	binary.Write(&img, binary.BigEndian, []uint32{0x803, uint32(n), 28, 28})
	binary.Write(&lab, binary.BigEndian, []uint32{0x801, uint32(n)})
	for i := range n {
		for p := range 28 * 28 {
			img.WriteByte(byte((i*37 + p*11) % 256))
		}
		lab.WriteByte(byte(i % 10))
	}
	images := filepath.Join(dir, "m-images-idx3-ubyte")
	if err := os.WriteFile(images, img.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "m-labels-idx1-ubyte"), lab.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return images
}

func makeBadFixtures(t *testing.T, bin string) *badFixtures {
	t.Helper()
	model, err := filepath.Abs("../models/mnist-tiny/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	fx := &badFixtures{dir: t.TempDir(), model: model}
	writeBadLogits(t, fx.p("l10.npz"), 400, 10, false)
	writeBadLogits(t, fx.p("l3.npz"), 300, 3, false)
	writeBadLogits(t, fx.p("plain.npz"), 200, 10, true)
	writeBadLogits(t, fx.p("wide.npz"), 3, 5000, true) // matrix scaling would need 2.5e7 parameters
	writeMNISTIDX(t, fx.dir, 20)
	for _, args := range [][]string{
		{"partition", "--data-or-logits", fx.p("l10.npz"), "--clients", "4", "--beta", "1", "--seed", "1", "--out", fx.p("p10.json")},
		{"partition", "--data-or-logits", fx.p("l3.npz"), "--clients", "4", "--beta", "1", "--seed", "1", "--out", fx.p("p3.json")},
		{"calibrate", "--central", "--method", "temp", "--logits", fx.p("l10.npz"), "--out", fx.p("temp10.json")},
		{"calibrate", "--central", "--method", "temp", "--logits", fx.p("l3.npz"), "--out", fx.p("temp3.json")},
	} {
		if out, code := run(t, bin, args...); code != 0 {
			t.Fatalf("fixture %v: exit %d: %s", args, code, out)
		}
	}
	modelBytes, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"model.onnx":  modelBytes,
		"empty.npz":   nil,
		"empty.json":  nil,
		"empty.onnx":  nil,
		"empty.yaml":  nil,
		"text.npz":    []byte("not a zip archive\n"),
		"text.json":   []byte("calibrator, please\n"),
		"text.onnx":   []byte("not a protobuf\n"),
		"text.yaml":   []byte("{{{ not: yaml\n"),
		"trunc.onnx":  modelBytes[:len(modelBytes)/2],
		"format.json": []byte(`{"format": "fedcalib.calibrator/v99", "method": "temp", "classes": 10, "params": {"t": 1}}` + "\n"),
	}
	for _, name := range []string{"l10.npz", "temp10.json", "p10.json"} {
		b, err := os.ReadFile(fx.p(name))
		if err != nil {
			t.Fatal(err)
		}
		files["trunc-"+name] = b[:len(b)/2]
	}
	for name, b := range files {
		if err := os.WriteFile(fx.p(name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Experiment configurations: a valid grid with one value replaced.
	const config = `datasets:
  - {name: d, logits: l10.npz, partition: {clients: 4, beta: 1, seed: 1}}
grid:
  method: temp
  rounds: ROUNDS
  seed: SEED
  EXTRA
`
	for name, r := range map[string][]string{
		"ok":           {"1", "1", ""},
		"rounds0":      {"0", "1", ""},
		"roundshuge":   {"1000000000", "1", ""},
		"seedneg":      {"1", "-1", ""},
		"serverlr0":    {"1", "1", "server_lr: 0"},
		"epsiloninf":   {"1", "1", "epsilon: .inf"},
		"epsilonnan":   {"1", "1", "epsilon: .nan"},
		"alphaznoeps":  {"1", "1", "dp_alpha_z: 2"},
		"clipposzero":  {"1", "1", "epsilon: 1\n  clip_pos: 0"},
		"samplerate2":  {"1", "1", "sample_rate: 2"},
		"deltazero":    {"1", "1", "epsilon: 1\n  delta: 0"},
		"clientsround": {"1", "1", "clients_per_round: 1000000000"},
	} {
		y := strings.NewReplacer("ROUNDS", r[0], "SEED", r[1], "EXTRA", r[2]).Replace(config)
		if err := os.WriteFile(fx.p("exp-"+name+".yaml"), []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return fx
}

// badCases lists the suite: every command; every numeric flag at 0, a
// negative value, NaN, Inf and a huge value; every file argument
// missing, empty, truncated, of the wrong format, of the wrong class
// count, and equal to the output.
func badCases(fx *badFixtures) []badCase {
	p := fx.p
	l10, l3, p10, p3, t10, t3 := p("l10.npz"), p("l3.npz"), p("p10.json"), p("p3.json"), p("temp10.json"), p("temp3.json")
	idx := "idx:" + p("m-images-idx3-ubyte")
	var cs []badCase
	add := func(name string, args ...string) *badCase {
		cs = append(cs, badCase{name: name, args: args})
		return &cs[len(cs)-1]
	}
	const huge = "1000000000"
	const overflow = "99999999999999999999" // beyond int64: a parse error

	// fedcalib itself.
	add("root/unknown command", "calibrat")
	add("root/unknown flag", "--verbose")

	// calibrate --central.
	central := func(name string, extra ...string) *badCase {
		return add("calibrate-central/"+name, append([]string{"calibrate", "--central", "--method", "bbq", "--logits", l10, "--out", "c.json"}, extra...)...)
	}
	for _, v := range []string{"0", "-1", "17", huge, "NaN", overflow} {
		central("bins-exp "+v, "--bins-exp", v)
	}
	central("seed -1", "--seed", "-1")
	central("seed NaN", "--seed", "NaN")
	central("seed 2^64", "--seed", "18446744073709551616")
	add("calibrate-central/logits missing", "calibrate", "--central", "--method", "temp", "--logits", p("none.npz"), "--out", "c.json")
	add("calibrate-central/logits empty", "calibrate", "--central", "--method", "temp", "--logits", p("empty.npz"), "--out", "c.json")
	add("calibrate-central/logits truncated", "calibrate", "--central", "--method", "temp", "--logits", p("trunc-l10.npz"), "--out", "c.json")
	add("calibrate-central/logits wrong format", "calibrate", "--central", "--method", "temp", "--logits", t10, "--out", "c.json")
	add("calibrate-central/logits not npz", "calibrate", "--central", "--method", "temp", "--logits", p("text.npz"), "--out", "c.json")
	add("calibrate-central/too many classes for matrix", "calibrate", "--central", "--method", "matrix", "--logits", p("wide.npz"), "--out", "c.json")
	add("calibrate-central/out is logits", "calibrate", "--central", "--method", "temp", "--logits", "l10.npz", "--out", "l10.npz").copies = []string{"l10.npz"}
	add("calibrate-central/out is a directory", "calibrate", "--central", "--method", "temp", "--logits", l10, "--out", ".")

	// calibrate, federated.
	fed := func(name, method string, extra ...string) *badCase {
		return add("calibrate-fed/"+name, append([]string{"calibrate", "--method", method, "--logits", l10, "-q", "--out", "c.json"}, extra...)...)
	}
	for _, v := range []string{"0", "-1", huge, "NaN", "Inf"} {
		fed("rounds "+v, "temp", "--rounds", v)
	}
	for _, v := range []string{"0", "-1", huge} {
		fed("clients "+v, "temp", "--clients", v, "--beta", "1")
		fed("clients-per-round "+v, "temp", "--clients-per-round", v)
	}
	for _, v := range []string{"0", "-1", "NaN", "Inf"} {
		fed("beta "+v, "temp", "--clients", "4", "--beta", v)
		fed("server-lr "+v, "temp", "--server-lr", v)
		fed("clip "+v, "temp", "--clip", v)
		fed("epsilon "+v, "temp", "--epsilon", v)
		fed("clip-pos "+v, "bbq", "--epsilon", "1", "--clip-pos", v)
		fed("clip-neg "+v, "bbq", "--epsilon", "1", "--clip-neg", v)
	}
	for _, v := range []string{"0", "2", "-1", "1e-300", "NaN", "Inf"} {
		if v != "1e-300" {
			fed("sample-rate "+v, "temp", "--sample-rate", v)
		}
		if v != "1e-300" && v != "-1" {
			fed("delta "+v, "temp", "--epsilon", "1", "--delta", v)
		}
	}
	fed("delta -1e-5", "temp", "--epsilon", "1", "--delta", "-1e-5")
	for _, v := range []string{"-1", "NaN", "Inf"} {
		fed("dp-alpha-z "+v, "bbq", "--epsilon", "1", "--weighting", "all", "--dp-alpha-z", v)
	}
	fed("dp-alpha-z without epsilon", "bbq", "--weighting", "all", "--dp-alpha-z", "2")
	fed("dp-alpha-z without weighting", "bbq", "--epsilon", "1", "--dp-alpha-z", "2")
	fed("workers -1", "temp", "--workers", "-1")
	fed("workers huge", "temp", "--workers", huge)
	fed("seed -1", "temp", "--seed", "-1")
	fed("bins-exp huge", "bbq", "--bins-exp", huge)
	fed("partition missing", "temp", "--partition", p("none.json"))
	fed("partition empty", "temp", "--partition", p("empty.json"))
	fed("partition truncated", "temp", "--partition", p("trunc-p10.json"))
	fed("partition wrong format", "temp", "--partition", t10)
	fed("partition of other data", "temp", "--partition", p3)
	add("calibrate-fed/out is partition", "calibrate", "--method", "temp", "--logits", l10, "--partition", "p10.json", "-q", "--out", "p10.json").copies = []string{"p10.json"}
	add("calibrate-fed/logits without clients", "calibrate", "--method", "temp", "--logits", p("plain.npz"), "-q", "--out", "c.json")

	// partition.
	part := func(name string, extra ...string) *badCase {
		return add("partition/"+name, append([]string{"partition", "--data-or-logits", l10, "--out", "p.json"}, extra...)...)
	}
	for _, v := range []string{"0", "-1", huge, overflow} {
		part("clients "+v, "--clients", v, "--beta", "1")
	}
	for _, v := range []string{"0", "-1", "NaN", "Inf"} {
		part("beta "+v, "--clients", "4", "--beta", v)
	}
	for _, v := range []string{"0", "-1", huge} {
		part("min-client-size "+v, "--clients", "4", "--beta", "1", "--min-client-size", v)
	}
	part("min-samples -1", "--scheme", "natural", "--min-samples", "-1")
	part("min-samples huge", "--scheme", "natural", "--min-samples", huge)
	part("seed -1", "--clients", "4", "--beta", "1", "--seed", "-1")
	for _, v := range []string{"NaN,0.5,0.5", "Inf,0,0", "-0.5,1,0.5", "0.8,0.1", "a,b,c"} {
		part("fractions "+v, "--clients", "4", "--beta", "1", "--fractions", v)
	}
	add("partition/input missing", "partition", "--data-or-logits", p("none.npz"), "--clients", "4", "--beta", "1", "--out", "p.json")
	add("partition/input empty", "partition", "--data-or-logits", p("empty.npz"), "--clients", "4", "--beta", "1", "--out", "p.json")
	add("partition/input truncated", "partition", "--data-or-logits", p("trunc-l10.npz"), "--clients", "4", "--beta", "1", "--out", "p.json")
	add("partition/input wrong format", "partition", "--data-or-logits", p("text.npz"), "--clients", "4", "--beta", "1", "--out", "p.json")
	add("partition/out is input", "partition", "--data-or-logits", "l10.npz", "--clients", "4", "--beta", "1", "--out", "l10.npz").copies = []string{"l10.npz"}

	// privacy.
	priv := func(name string, args ...string) { add("privacy/"+name, append([]string{"privacy"}, args...)...) }
	for _, v := range []string{"0", "-1", "NaN", "Inf"} {
		priv("epsilon "+v, "--epsilon", v)
		priv("noise-multiplier "+v, "--noise-multiplier", v)
		priv("clip "+v, "--method", "temp", "--epsilon", "1", "--clip", v)
		priv("clip-pos "+v, "--method", "bbq", "--classes", "10", "--epsilon", "1", "--clip-pos", v)
	}
	for _, v := range []string{"0", "1", "NaN", "-1e-5"} {
		priv("delta "+v, "--epsilon", "1", "--delta", v)
	}
	for _, v := range []string{"0", "-1", huge} {
		priv("rounds "+v, "--method", "temp", "--epsilon", "1", "--rounds", v)
	}
	for _, v := range []string{"0", "1", huge} {
		priv("classes "+v, "--method", "bbq", "--epsilon", "1", "--classes", v)
	}
	for _, v := range []string{"0", "-1", overflow} {
		priv("steps "+v, "--noise-multiplier", "1", "--steps", v)
	}
	for _, v := range []string{"0", "2", "NaN"} {
		priv("sample-rate "+v, "--method", "temp", "--epsilon", "1", "--sample-rate", v)
	}
	priv("noise-multiplier tiny", "--noise-multiplier", "1e-300", "--steps", "10")

	// eval.
	eval := func(name string, args ...string) *badCase {
		return add("eval/"+name, append([]string{"eval"}, args...)...)
	}
	for _, v := range []string{"0", "-1", huge, overflow} {
		eval("bins "+v, "--logits", l10, "--bins", v)
	}
	eval("logits missing", "--logits", p("none.npz"))
	eval("logits empty", "--logits", p("empty.npz"))
	eval("logits truncated", "--logits", p("trunc-l10.npz"))
	eval("logits wrong format", "--logits", t10)
	eval("calibrator missing", "--logits", l10, "--calibrator", p("none.json"))
	eval("calibrator empty", "--logits", l10, "--calibrator", p("empty.json"))
	eval("calibrator truncated", "--logits", l10, "--calibrator", p("trunc-temp10.json"))
	eval("calibrator wrong format", "--logits", l10, "--calibrator", p10)
	eval("calibrator unknown version", "--logits", l10, "--calibrator", p("format.json"))
	eval("calibrator wrong class count", "--logits", l10, "--calibrator", t3)
	eval("logits wrong class count", "--logits", l3, "--calibrator", t10)
	eval("partition of other data", "--logits", l10, "--partition", p3)
	eval("partition wrong format", "--logits", l10, "--partition", t10)
	eval("split unknown", "--logits", l10, "--split", "validation")
	eval("plot is a file", "--logits", l10, "--calibrator", t10, "--plot", "temp10.json").copies = []string{"temp10.json"}

	// check.
	check := func(name string, args ...string) *badCase {
		return add("check/"+name, append([]string{"check"}, args...)...)
	}
	// Both bars are differences of fractions: [0, 1] and [-1, 1].
	for _, v := range []string{"NaN", "-0.5", "1.5", "Inf"} {
		check("max-accuracy-drop "+v, "--logits", l10, "--calibrator", t10, "--max-accuracy-drop", v)
	}
	for _, v := range []string{"NaN", "-2", "1.5", "Inf"} {
		check("min-cwece-improvement "+v, "--logits", l10, "--calibrator", t10, "--min-cwece-improvement", v)
	}
	for _, v := range []string{"0", "-1", huge} {
		check("bins "+v, "--logits", l10, "--calibrator", t10, "--bins", v)
	}
	for _, v := range []string{"0", "-1", huge} {
		check("batch "+v, "--model", fx.model, "--calibrator", t10, "--data", idx, "--batch", v).ort = true
	}
	for _, v := range []string{"-1", huge} { // 0 is the thread plan's choice
		check("threads "+v, "--model", fx.model, "--calibrator", t10, "--data", idx, "--threads", v).ort = true
		check("runs "+v, "--model", fx.model, "--calibrator", t10, "--data", idx, "--runs", v).ort = true
	}
	check("logits missing", "--logits", p("none.npz"), "--calibrator", t10)
	check("calibrator wrong class count", "--logits", l10, "--calibrator", t3)
	check("calibrator wrong class count for model", "--model", fx.model, "--calibrator", t3, "--data", idx).ort = true
	check("model missing", "--model", p("none.onnx"), "--calibrator", t10, "--data", idx).ort = true
	check("model truncated", "--model", p("trunc.onnx"), "--calibrator", t10, "--data", idx).ort = true

	// infer.
	inf := func(name string, args ...string) *badCase {
		c := add("infer/"+name, append([]string{"infer", "--quiet"}, args...)...)
		c.ort = true
		return c
	}
	for _, v := range []string{"0", "-1", huge, overflow} {
		inf("batch "+v, "--model", fx.model, "--data", idx, "--out", "l.npz", "--batch", v)
	}
	for _, v := range []string{"-1", huge, overflow} { // 0 is the thread plan's choice
		inf("threads "+v, "--model", fx.model, "--data", idx, "--out", "l.npz", "--threads", v)
		inf("runs "+v, "--model", fx.model, "--data", idx, "--out", "l.npz", "--runs", v)
	}
	inf("model missing", "--model", p("none.onnx"), "--data", idx, "--out", "l.npz")
	inf("model empty", "--model", p("empty.onnx"), "--data", idx, "--out", "l.npz")
	inf("model truncated", "--model", p("trunc.onnx"), "--data", idx, "--out", "l.npz")
	inf("model wrong format", "--model", p("text.onnx"), "--data", idx, "--out", "l.npz")
	inf("data missing", "--model", fx.model, "--data", "idx:"+p("none-images-idx3-ubyte"), "--out", "l.npz")
	inf("data wrong format", "--model", fx.model, "--data", "idx:"+l10, "--out", "l.npz")
	inf("out is model", "--model", "model.onnx", "--data", idx, "--out", "model.onnx").copies = []string{"model.onnx"}

	// export.
	exp := func(name string, args ...string) *badCase {
		c := add("export/"+name, append([]string{"export"}, args...)...)
		c.ort = true
		return c
	}
	exp("model missing", "--model", p("none.onnx"), "--calibrator", t10, "--out", "m.onnx")
	exp("model empty", "--model", p("empty.onnx"), "--calibrator", t10, "--out", "m.onnx")
	exp("model truncated", "--model", p("trunc.onnx"), "--calibrator", t10, "--out", "m.onnx")
	exp("model wrong format", "--model", l10, "--calibrator", t10, "--out", "m.onnx")
	exp("calibrator missing", "--model", fx.model, "--calibrator", p("none.json"), "--out", "m.onnx")
	exp("calibrator empty", "--model", fx.model, "--calibrator", p("empty.json"), "--out", "m.onnx")
	exp("calibrator truncated", "--model", fx.model, "--calibrator", p("trunc-temp10.json"), "--out", "m.onnx")
	exp("calibrator wrong format", "--model", fx.model, "--calibrator", p10, "--out", "m.onnx")
	exp("calibrator wrong class count", "--model", fx.model, "--calibrator", t3, "--out", "m.onnx")
	exp("sidecar wrong class count", "--model", fx.model, "--calibrator", t3, "--sidecar", "--out", "m.json")
	exp("out is calibrator", "--model", fx.model, "--calibrator", "temp10.json", "--out", "temp10.json").copies = []string{"temp10.json"}
	exp("out is model", "--model", "model.onnx", "--calibrator", t10, "--out", "model.onnx").copies = []string{"model.onnx"}
	exp("out wrong extension", "--model", fx.model, "--calibrator", t10, "--out", "m.json")
	exp("seed -1", "--model", fx.model, "--calibrator", t10, "--out", "m.onnx", "--seed", "-1")

	// inspect.
	add("inspect/missing", "inspect", p("none.onnx"))
	add("inspect/empty", "inspect", p("empty.onnx"))
	add("inspect/truncated", "inspect", p("trunc.onnx"))
	add("inspect/wrong format", "inspect", l10)
	add("inspect/text", "inspect", p("text.onnx"))
	add("inspect/no argument", "inspect")

	// experiment.
	xp := func(name, config string, extra ...string) *badCase {
		return add("experiment/"+name, append([]string{"experiment", "--config", config, "--out", "res", "-q"}, extra...)...)
	}
	xp("config missing", p("none.yaml"))
	xp("config empty", p("empty.yaml"))
	xp("config not yaml", p("text.yaml"))
	xp("config wrong format", t10)
	for _, name := range []string{"rounds0", "roundshuge", "seedneg", "serverlr0", "epsiloninf", "epsilonnan", "alphaznoeps", "clipposzero", "samplerate2", "deltazero", "clientsround"} {
		xp(name, p("exp-"+name+".yaml"))
	}
	xp("workers -1", p("exp-ok.yaml"), "--workers", "-1")
	xp("workers huge", p("exp-ok.yaml"), "--workers", huge)
	add("experiment/out is config", "experiment", "--config", "exp-ok.yaml", "--out", "exp-ok.yaml", "-q").copies = []string{"exp-ok.yaml"}

	// setup, where it cannot touch the real cache.
	add("setup/tarball missing", "setup", "--tarball", p("none.tgz"))
	add("setup/tarball empty", "setup", "--tarball", p("empty.npz"))
	return cs
}

// TestBadInput runs every case of badCases in a fresh process.
func TestBadInput(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fedcalib")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/fedcalib").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	_, ortErr := infer.ResolveRuntime("")
	fx := makeBadFixtures(t, bin)
	fixtures := snapshot(t, fx.dir)
	cases := badCases(fx)
	if len(cases) < 80 {
		t.Fatalf("%d cases, want at least 80", len(cases))
	}
	home := t.TempDir() // setup must not touch the real cache
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.ort && ortErr != nil {
				t.Skipf("ONNX Runtime not installed (run make setup): %v", ortErr)
			}
			t.Parallel()
			dir := t.TempDir()
			for _, name := range tc.copies {
				b, err := os.ReadFile(fx.p(name))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshot(t, dir)
			cmd := exec.Command(bin, tc.args...)
			cmd.Dir = dir
			if tc.args[0] == "setup" {
				cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CACHE_HOME="+filepath.Join(home, "cache"))
			}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			msg := stderr.String()
			show := msg // a stack trace is long: show its start
			if len(show) > 400 {
				show = show[:400] + "…"
			}
			switch {
			case code != 2:
				t.Errorf("exit %d, want 2; stderr %q", code, show)
			case !strings.HasPrefix(msg, "fedcalib: ") || strings.Count(msg, "\n") != 1 || !strings.HasSuffix(msg, "\n"):
				t.Errorf("stderr %q: want one line starting with \"fedcalib: \"", show)
			}
			for _, trace := range []string{"goroutine ", "panic", "runtime error", "runtime."} {
				if strings.Contains(msg, trace) || strings.Contains(stdout.String(), trace) {
					t.Errorf("output shows %q: stderr %q", trace, show)
					break
				}
			}
			if after := snapshot(t, dir); !equalSnapshots(before, after) {
				t.Errorf("the directory changed: before %v, after %v", before, after)
			}
			if t.Failed() {
				t.Logf("fedcalib %s", strings.Join(tc.args, " "))
			} else {
				t.Log(strings.TrimSpace(msg))
			}
		})
	}
	t.Cleanup(func() {
		if after := snapshot(t, fx.dir); !equalSnapshots(fixtures, after) {
			t.Errorf("the fixtures changed: before %v, after %v", fixtures, after)
		}
	})
}

// snapshot returns every file under dir, hidden ones included, with the
// SHA-256 of its content ("dir/" for directories).
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			files[rel+"/"] = "dir"
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		files[rel] = hex.EncodeToString(sum[:8])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func equalSnapshots(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}
