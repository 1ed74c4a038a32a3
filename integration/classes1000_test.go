package integration

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/onnx"
	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// imagenetClasses is the number of ImageNet classes.
const imagenetClasses = 1000

// writeImageNetLogits writes n rows of generated 1,000-class logits of an
// overconfident classifier (right 70% of the time, logits scaled ×3) and
// their labels, as a logits file that is also an npz dataset
// (npz:PATH:logits,labels).
func writeImageNetLogits(t *testing.T, path string, n int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(29, 1000))
	f := &logits.File{Logits: make([]float32, n*imagenetClasses), Labels: make([]int32, n), Classes: imagenetClasses}
	for i := range n {
		y := rng.IntN(imagenetClasses)
		f.Labels[i] = int32(y)
		top := y
		if rng.Float64() >= 0.7 {
			top = rng.IntN(imagenetClasses)
		}
		row := f.Logits[i*imagenetClasses : (i+1)*imagenetClasses]
		for c := range row {
			row[c] = float32(3 * rng.NormFloat64())
		}
		row[top] += 15
	}
	if err := logits.Write(path, f); err != nil {
		t.Fatal(err)
	}
}

// identityModel writes a model whose 1,000 logits are its input, x float32
// [batch, 1000] (flat records, layout NC), and returns its path.
func identityModel(t *testing.T, dir string) string {
	t.Helper()
	shape := onnx.Shape{{Param: "batch"}, {Value: imagenetClasses}}
	m, err := onnx.FromProto(&onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		MetadataProps: []*onnxpb.StringStringEntryProto{
			{Key: proto.String("fedcalib.input.layout"), Value: proto.String("NC")},
		},
		Graph: &onnxpb.GraphProto{
			Name:   proto.String("imagenet_logits"),
			Node:   []*onnxpb.NodeProto{onnx.NewNode("Identity", []string{"x"}, []string{"logits"})},
			Input:  []*onnxpb.ValueInfoProto{onnx.NewValueInfo("x", onnx.Float, shape)},
			Output: []*onnxpb.ValueInfoProto{onnx.NewValueInfo("logits", onnx.Float, shape)},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "imagenet.onnx")
	if err := m.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestImageNetClasses runs every method of the registry at C = 1,000 in
// fresh processes: infer over 2,000 rows, calibrate, export (which
// verifies the calibrated graph against the Go calibrator), then check on
// the exported model and on the model with the calibrator file, whose
// metrics must agree. The iterative scaling fits stop after 5 iterations
// (epochs for fedcal). Matrix scaling and Dirichlet calibration, whose
// parameters grow as C², must refuse with one line naming their limit.
func TestImageNetClasses(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 classes: not in -short")
	}
	bin := fedcalibBin(t)
	dir := t.TempDir()
	const rows = 2000
	data := filepath.Join(dir, "data.npz")
	writeImageNetLogits(t, data, rows)
	model := identityModel(t, dir)
	lf := filepath.Join(dir, "logits.npz")
	spec := "npz:" + data + ":logits,labels"
	out, code := run(t, bin, "infer", "--model", model, "--data", spec, "--out", lf, "--threads", "2")
	if code != 0 {
		t.Fatalf("infer: %s", out)
	}
	if want := "wrote " + lf + ": 2000 records, 1000 classes\n"; out != want {
		t.Errorf("infer printed %q, want %q", out, want)
	}
	for _, m := range calib.Methods() {
		t.Run(m.Name, func(t *testing.T) {
			cf := filepath.Join(dir, m.Name+".json")
			args := []string{"calibrate", "--central", "--method", m.Name, "--logits", lf, "--out", cf, "--quiet"}
			if m.HasBins() {
				args = append(args, "--bins-exp", "4")
			}
			if m.Family == calib.Scaling {
				// The test is of the path at C = 1,000, not of the
				// optimisers: a fit run to its tolerance costs minutes
				// here (opvector's L-BFGS, fedcal's SGD epochs; see
				// docs/BENCHMARKS.md, "calib at 1,000 classes"), so
				// the iterative fits stop after a few steps.
				args = append(args, "--max-iterations", "5")
			}
			out, code := run(t, bin, args...)
			if m.Size(imagenetClasses, 0) > imagenetClasses*imagenetClasses {
				// The C² methods refuse, in one line, naming their limit.
				if code == 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, "limited to 256 classes: use vector") {
					t.Errorf("calibrate at 1,000 classes: exit %d, %q; want a one-line refusal naming the limit", code, out)
				}
				return
			}
			if code != 0 {
				t.Fatalf("calibrate: exit %d: %s", code, out)
			}
			exported := filepath.Join(dir, m.Name+".onnx")
			if out, code := run(t, bin, "export", "--model", model, "--calibrator", cf, "--out", exported); code != 0 {
				t.Fatalf("export: exit %d: %s", code, out)
			}
			var after [2]map[string]any
			for i, args := range [][]string{
				{"check", "--model", exported, "--data", spec},
				{"check", "--model", model, "--calibrator", cf, "--data", spec},
			} {
				args = append(args, "--json", "--min-cwece-improvement", "-1", "--max-accuracy-drop", "1")
				out, code := run(t, bin, args...)
				if code != 0 {
					t.Fatalf("%v: exit %d: %s", args, code, out)
				}
				var res map[string]any
				if err := json.Unmarshal([]byte(out), &res); err != nil {
					t.Fatalf("%v: %v: %s", args, err, out)
				}
				after[i] = res["after"].(map[string]any)
			}
			for _, k := range []string{"accuracy", "cwece", "ece", "nll", "brier"} {
				g, c := after[0][k].(float64), after[1][k].(float64)
				if math.Abs(g-c) > 1e-5 {
					t.Errorf("%s of the exported graph %v, of the calibrator file %v", k, g, c)
				}
			}
		})
	}
}
