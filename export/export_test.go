package export

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/onnx"
	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// needRuntime skips the test when ONNX Runtime is not installed (make
// setup installs it; make test always has it).
func needRuntime(t *testing.T) {
	t.Helper()
	if _, err := infer.InitRuntime(""); err != nil {
		if errors.Is(err, infer.ErrRuntimeNotFound) {
			t.Skipf("ONNX Runtime not installed (run make setup): %v", err)
		}
		t.Fatal(err)
	}
}

// skewed returns n labelled logits of c classes from an over-confident
// model: labels drawn from softmax(z/3) but logits z.
func skewed(n, c int, seed uint64) *calib.Set {
	rng := rand.New(rand.NewPCG(seed, 1))
	s := &calib.Set{Logits: make([]float64, n*c), Labels: make([]int, n), Classes: c}
	p := make([]float64, c)
	for i := 0; i < n; i++ {
		z := s.Row(i)
		y := rng.IntN(c)
		for j := range z {
			z[j] = rng.NormFloat64() * 2
		}
		z[y] += 4
		for j := range p {
			p[j] = z[j] / 3
		}
		calib.Softmax(p, p)
		u, acc := rng.Float64(), 0.0
		s.Labels[i] = c - 1
		for j, v := range p {
			acc += v
			if u < acc {
				s.Labels[i] = j
				break
			}
		}
	}
	return s
}

// fitted returns one fitted calibrator of every method and weighting.
func fitted(t *testing.T, c int) map[string]calib.Calibrator {
	t.Helper()
	s := skewed(600, c, 7)
	out := map[string]calib.Calibrator{
		"temp":     calib.NewTemperature(c),
		"vector":   calib.NewVector(c),
		"matrix":   calib.NewMatrix(c),
		"opvector": calib.NewOPVector(c),
		"fedcal":   calib.NewFedCalMLP(c, 3),
		"bin":      &calib.Histogram{Bins: 16},
		"bbq":      &calib.BBQ{Mexp: 5},
		"isotonic": &calib.Isotonic{Bins: 64},
	}
	for name, cal := range out {
		if err := cal.Fit(s); err != nil {
			t.Fatalf("fit %s: %v", name, err)
		}
	}
	alpha := make([]float64, c)
	for j := range alpha {
		alpha[j] = 0.2 + 0.6*float64(j)/float64(c)
	}
	for _, mode := range []calib.Weighting{calib.WeightAll, calib.WeightChanged} {
		h := *out["bin"].(*calib.Histogram)
		if err := h.SetWeighting(mode, alpha); err != nil {
			t.Fatal(err)
		}
		out["bin-"+string(mode)] = &h
		q := *out["bbq"].(*calib.BBQ)
		if err := q.SetWeighting(mode, alpha); err != nil {
			t.Fatal(err)
		}
		out["bbq-"+string(mode)] = &q
		iso := *out["isotonic"].(*calib.Isotonic)
		if err := iso.SetWeighting(mode, alpha); err != nil {
			t.Fatal(err)
		}
		out["isotonic-"+string(mode)] = &iso
	}
	return out
}

// TestVerifyEveryMethod runs the standalone ONNX form of every calibrator
// × weighting in ONNX Runtime on its probe set and compares it with Go.
func TestVerifyEveryMethod(t *testing.T) {
	needRuntime(t)
	for _, c := range []int{2, 10} {
		for name, cal := range fitted(t, c) {
			probe := Probe(cal, 1)
			if err := Verify(cal, probe, Options{}); err != nil {
				t.Errorf("C=%d %s: %v", c, name, err)
			}
		}
	}
}

// TestProbeHitsEveryBin checks that the probe set puts, for each class, a
// softmax probability in every bin of a binning calibrator.
func TestProbeHitsEveryBin(t *testing.T) {
	for _, cal := range []calib.Calibrator{&calib.Histogram{Bins: 16, Table: make([]float64, 3*16)}, &calib.BBQ{Mexp: 7, Table: make([]float64, 3*128)}} {
		k := cal.Classes()
		bins := 16
		if q, ok := cal.(*calib.BBQ); ok {
			bins = 1 << q.Mexp
		}
		probe := Probe(cal, 1)
		hit := make([]bool, k*bins)
		p := make([]float64, k)
		for i := 0; i < len(probe); i += k {
			for j := range p {
				p[j] = float64(probe[i+j])
			}
			calib.Softmax(p, p)
			for j, v := range p {
				hit[j*bins+calib.Bin(v, bins)] = true
			}
		}
		for b, ok := range hit {
			if !ok {
				t.Errorf("%s: class %d, bin %d never hit", cal.Method(), b/bins, b%bins)
			}
		}
	}
}

// TestOrderPreservingExportKeepsArgmax checks in ONNX Runtime that the
// exported order-preserving calibrators never move the argmax.
func TestOrderPreservingExportKeepsArgmax(t *testing.T) {
	needRuntime(t)
	cals := fitted(t, 10)
	for _, name := range []string{"opvector", "fedcal", "temp"} {
		cal := cals[name]
		m, err := Standalone(cal)
		if err != nil {
			t.Fatal(err)
		}
		probe := Probe(cal, 2)
		got, err := run(m.Bytes(), "logits", []string{DefaultOutput}, []int64{int64(len(probe) / 10), 10}, probe, "")
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(probe); i += 10 {
			z, p := probe[i:i+10], got[0][i:i+10]
			top := argmax(z)
			for j := range z {
				if z[j] == z[top] && p[j] != p[top] {
					t.Errorf("%s row %d: tied logits %d and %d got %v and %v", name, i/10, j, top, p[j], p[top])
				}
				if p[j] > p[top] {
					t.Errorf("%s row %d: class %d overtakes the top class", name, i/10, j)
				}
			}
		}
	}
}

func argmax(x []float32) int {
	k := 0
	for j, v := range x {
		if v > x[k] {
			k = j
		}
	}
	return k
}

// TestExportTinyModel exports every calibrator into the committed tiny
// model, then reloads the written file in a fresh session and checks its
// outputs and metadata.
func TestExportTinyModel(t *testing.T) {
	needRuntime(t)
	src := "../infer/testdata/tiny.onnx"
	orig, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	base, err := onnx.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	classes := int(base.Outputs()[0].Shape[1].Value)
	dir := t.TempDir()
	for name, cal := range fitted(t, classes) {
		out := filepath.Join(dir, name+".onnx")
		priv := privacyRecord(t, cal.Method(), classes)
		file := &calib.File{Privacy: priv, Provenance: calib.Provenance{Seed: 3}}
		if err := Export(src, out, cal, file, Options{}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		m, err := onnx.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := m.MetadataValue(KeyMethod); v != cal.Method() {
			t.Errorf("%s: method metadata %q", name, v)
		}
		if v, _ := m.MetadataValue(KeyEpsilon); v != fmt.Sprint(priv.Epsilon) {
			t.Errorf("%s: epsilon metadata %q", name, v)
		}
		sc, _ := m.MetadataValue(KeySidecar)
		back, _, err := calib.Decode(strings.NewReader(sc))
		if err != nil || back.Method() != cal.Method() {
			t.Errorf("%s: embedded sidecar does not decode: %v", name, err)
		}
		outs := m.Outputs()
		if len(outs) != 2 || outs[1].Name != DefaultOutput {
			t.Errorf("%s: outputs %+v, want the logits and %q", name, outs, DefaultOutput)
		}
		// A fresh session on the written file.
		if err := verifyModel(m, "", outs[0].Name, DefaultOutput, cal, Options{Seed: 9}); err != nil {
			t.Errorf("%s: reloaded model: %v", name, err)
		}
	}
	if after, _ := os.ReadFile(src); string(after) != string(orig) {
		t.Fatal("Export modified its input model")
	}
}

// privacyRecord returns a consistent privacy record (calib.Privacy.Check)
// of a fit of method over classes classes: 2 rounds of noise multiplier 1
// on every client, zCDP at δ = 1e-5.
func privacyRecord(t *testing.T, method string, classes int) *calib.Privacy {
	t.Helper()
	m, err := calib.LookupMethod(method)
	if err != nil {
		t.Fatal(err)
	}
	p := &calib.Privacy{Sigma: 1, Delta: 1e-5, Accountant: "zcdp", Rounds: 2, SampleRate: 1}
	mechs := 1.0
	if m.Family == calib.Binning {
		p.ClipPos, p.ClipNeg, mechs = 1, 1, 2*float64(classes)
	} else {
		p.Clip = 1
	}
	z := 1 / math.Sqrt(mechs)
	p.Rho = float64(p.Rounds) * dp.GaussianRho(z)
	spent, err := dp.SpentBy(dp.ZCDP, z, p.Rounds, p.SampleRate, p.Delta)
	if err != nil {
		t.Fatal(err)
	}
	p.Epsilon = spent.Epsilon
	if err := p.Check(method, classes); err != nil {
		t.Fatalf("privacyRecord: %v", err)
	}
	return p
}

func TestExportErrors(t *testing.T) {
	needRuntime(t)
	dir := t.TempDir()
	cal := calib.NewTemperature(3)
	corrupt := filepath.Join(dir, "corrupt.onnx")
	os.WriteFile(corrupt, []byte("\x08\x07\x12\xff"), 0o644)
	src := "../infer/testdata/tiny.onnx"
	tests := []struct {
		name, model, out string
		cal              calib.Calibrator
		opt              Options
		want             string
	}{
		{"corrupt", corrupt, filepath.Join(dir, "a.onnx"), cal, Options{}, "corrupt.onnx"},
		{"missing", filepath.Join(dir, "nope.onnx"), filepath.Join(dir, "b.onnx"), cal, Options{}, "nope.onnx"},
		{"in place", src, src, cal, Options{}, "is the input model"},
		{"no output", src, filepath.Join(dir, "c.onnx"), cal, Options{Logits: "nope"}, `no output "nope"`},
		{"wrong classes", src, filepath.Join(dir, "d.onnx"), calib.NewTemperature(5), Options{}, "has 3 classes but the calibrator has 5"},
	}
	for _, tt := range tests {
		err := Export(tt.model, tt.out, tt.cal, nil, tt.opt)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to contain %q", tt.name, err, tt.want)
		}
		if tt.out != src {
			if _, err := os.Stat(tt.out); !os.IsNotExist(err) {
				t.Errorf("%s: wrote %s despite the error", tt.name, tt.out)
			}
		}
	}
}

func TestProbeFinite(t *testing.T) {
	for _, v := range Probe(calib.NewTemperature(4), 3) {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatal("probe holds a non-finite logit")
		}
	}
}

// externalTiny writes the tiny model into dir with its first float
// initializer moved to the external file weights.bin, and returns its path.
func externalTiny(t *testing.T, dir string) string {
	t.Helper()
	m, err := onnx.ReadFile("../infer/testdata/tiny.onnx")
	if err != nil {
		t.Fatal(err)
	}
	pb := proto.Clone(m.Proto()).(*onnxpb.ModelProto)
	var moved bool
	for _, init := range pb.GetGraph().GetInitializer() {
		if init.GetDataType() != int32(onnx.Float) {
			continue
		}
		vals := init.GetFloatData()
		raw := init.GetRawData()
		if len(vals) > 0 {
			raw = make([]byte, 4*len(vals))
			for i, v := range vals {
				binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "weights.bin"), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		init.FloatData, init.RawData = nil, nil
		init.DataLocation = onnxpb.TensorProto_EXTERNAL.Enum()
		init.ExternalData = []*onnxpb.StringStringEntryProto{
			{Key: proto.String("location"), Value: proto.String("weights.bin")},
			{Key: proto.String("offset"), Value: proto.String("0")},
			{Key: proto.String("length"), Value: proto.String(fmt.Sprint(len(raw)))},
		}
		moved = true
		break
	}
	if !moved {
		t.Fatal("tiny.onnx has no float initializer")
	}
	ext, err := onnx.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "model.onnx")
	if err := ext.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestExportExternalData exports into a model whose weights live in an
// external file: allowed beside it (and verified by ONNX Runtime reading
// that file), refused elsewhere.
func TestExportExternalData(t *testing.T) {
	needRuntime(t)
	dir := t.TempDir()
	src := externalTiny(t, dir)
	cal := calib.NewTemperature(3)
	cal.T = 2
	out := filepath.Join(dir, "model.calibrated.onnx")
	if err := Export(src, out, cal, nil, Options{}); err != nil {
		t.Fatal(err)
	}
	m, err := onnx.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := externalData(m); len(got) != 1 || got[0] != "weights.bin" {
		t.Errorf("external data of the export: %v", got)
	}
	if err := verifyModel(m, out, "logits", DefaultOutput, cal, Options{Seed: 4}); err != nil {
		t.Errorf("reloaded: %v", err)
	}
	other := filepath.Join(t.TempDir(), "elsewhere.onnx")
	err = Export(src, other, cal, nil, Options{})
	if err == nil || !strings.Contains(err.Error(), "external files (weights.bin)") {
		t.Errorf("export to another directory: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("left %s behind", e.Name())
		}
	}
}

// TestCheckModel runs the committed bad models (see fixtures) and the
// tiny model through CheckModel: each bad one is refused for what it
// really gives, in our words, not ONNX Runtime's.
func TestCheckModel(t *testing.T) {
	needRuntime(t)
	tests := []struct {
		model   string
		classes int
		want    string // "" for no error
	}{
		{"../infer/testdata/tiny.onnx", 3, ""},
		{"../infer/testdata/tiny.onnx", 5, `output "logits" has 3 classes but the calibrator has 5`},
		{"testdata/liar.onnx", 10, `output "logits" has 3 classes (though it declares 10) but the calibrator has 10`},
		{"testdata/liar.onnx", 3, `output "logits" is declared with 10 classes but has 3: the model's declared output shape is wrong`},
		{"testdata/nan.onnx", 3, `output "logits" gives NaN (row 0, class 2) on random inputs: the model, not the calibrator, is at fault`},
		{"testdata/rank3.onnx", 3, `output "logits" has rank 3, shape [4, 2, 3]`},
		{"testdata/rank3_declared.onnx", 3, `output "logits" is declared with rank 3, [batch,2,3]`},
	}
	for _, tt := range tests {
		err := CheckModel(context.Background(), tt.model, calib.NewTemperature(tt.classes), Options{Seed: 1})
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s, %d classes: %v", tt.model, tt.classes, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s, %d classes: error %v, want %q", tt.model, tt.classes, err, tt.want)
		case err != nil && !strings.HasPrefix(err.Error(), tt.model+": "):
			t.Errorf("%s, %d classes: error %q does not start with the model's path", tt.model, tt.classes, err)
		}
	}
}

// TestExportRefusesBadModels exports calibrators into the bad models:
// before CheckModel, matrix scaling into the liar gave ONNX Runtime's
// ShapeInferenceError and temperature scaling into the NaN model blamed
// the calibrator. Nothing may be written, not even a temporary file.
func TestExportRefusesBadModels(t *testing.T) {
	needRuntime(t)
	tests := []struct {
		model string
		cal   calib.Calibrator
		want  string
	}{
		{"testdata/liar.onnx", calib.NewMatrix(10), "has 3 classes (though it declares 10) but the calibrator has 10"},
		{"testdata/liar.onnx", calib.NewMatrix(3), "is declared with 10 classes but has 3"},
		{"testdata/nan.onnx", calib.NewTemperature(3), "the model, not the calibrator, is at fault"},
		{"testdata/rank3.onnx", calib.NewVector(3), "has rank 3"},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		out := filepath.Join(dir, "out.onnx")
		err := Export(tt.model, out, tt.cal, nil, Options{})
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "ShapeInference") {
			t.Errorf("%s, %s: error %v, want %q", tt.model, tt.cal.Method(), err, tt.want)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s, %s: left %v behind", tt.model, tt.cal.Method(), entries)
		}
	}
}

func TestCheckLogits(t *testing.T) {
	batch := onnx.Shape{{Param: "batch"}, {Value: 2}}
	tests := []struct {
		name     string
		declared onnx.Shape
		shape    []int64
		rows     int64
		values   []float32
		want     string
	}{
		{"fine", batch, []int64{2, 2}, 2, []float32{1, 2, 3, 4}, ""},
		{"undeclared", nil, []int64{2, 2}, -1, []float32{1, 2, 3, 4}, ""},
		{"rank 1", nil, []int64{4}, 2, []float32{1, 2, 3, 4}, "has rank 1, shape [4]"},
		{"rows", batch, []int64{1, 2}, 2, []float32{1, 2}, "has 1 rows for a batch of 2 inputs"},
		{"classes", nil, []int64{2, 1}, 2, []float32{1, 2}, "has 1 classes but the calibrator has 2"},
		{"+Inf", batch, []int64{2, 2}, 2, []float32{1, 2, 3, float32(math.Inf(1))}, "gives +Inf (row 1, class 1)"},
	}
	for _, tt := range tests {
		err := checkLogits("z", tt.declared, tt.shape, tt.rows, tt.values, 2)
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}

// TestExportProgress checks the stages ExportContext reports, and that
// cancelling it at any stage writes nothing and leaves no temporary file.
func TestExportProgress(t *testing.T) {
	needRuntime(t)
	cal := calib.NewTemperature(3)
	cal.T = 2
	for _, external := range []bool{false, true} {
		dir := t.TempDir()
		src := "../infer/testdata/tiny.onnx"
		want := []Progress{{StageModel, 0, 4}, {StageCalibrator, 1, 4}, {StageCalibrated, 2, 4}, {StageWrite, 3, 4}, {"", 4, 4}}
		if external {
			src = externalTiny(t, dir)
			want[2].Stage, want[3].Stage = StageWrite, StageCalibrated
		}
		out := filepath.Join(dir, "out.onnx")
		var got []Progress
		opt := Options{Progress: func(p Progress) { got = append(got, p) }}
		if err := ExportContext(context.Background(), src, out, cal, nil, opt); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("external %v: progress %v, want %v", external, got, want)
		}
		if err := os.Remove(out); err != nil {
			t.Fatal(err)
		}
		before := names(t, dir)
		for _, stop := range want {
			ctx, cancel := context.WithCancel(context.Background())
			opt.Progress = func(p Progress) {
				if p == stop {
					cancel()
				}
			}
			err := ExportContext(ctx, src, out, cal, nil, opt)
			cancel()
			if stop.Stage == "" { // cancelled after the end: written
				if err != nil {
					t.Errorf("external %v: cancelled when done: %v", external, err)
				}
				os.Remove(out)
				continue
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("external %v: cancelled at %q: %v, want context.Canceled", external, stop.Stage, err)
			}
			if after := names(t, dir); !slices.Equal(after, before) {
				t.Errorf("external %v: cancelled at %q: directory holds %v, want %v", external, stop.Stage, after, before)
			}
		}
	}
}

// names lists the entries of dir.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, e := range entries {
		s = append(s, e.Name())
	}
	return s
}
