package integration

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/internal/fileio"
	"github.com/fedcalib/fedcalib/onnx"
	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// slowIterations is the trip count of slowModel's loop: about two
// seconds of ONNX Runtime per run on one thread of a busy machine.
const slowIterations = 600_000

// slowModel writes into dir a model that takes seconds to run, model.onnx
// with its weights in the external file weights.bin (so that export
// verifies it from the output's temporary file), and returns its path.
// It computes logits = tanh^n(x)·w for x float32 [batch, 4] by a Loop of
// n iterations, with w [4, 3].
func slowModel(t *testing.T, dir string, n int64) string {
	t.Helper()
	w := make([]float32, 12)
	raw := make([]byte, 4*len(w))
	for i := range w {
		w[i] = float32(math.Sin(float64(i)))
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(w[i]))
	}
	if err := os.WriteFile(filepath.Join(dir, "weights.bin"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	body := &onnxpb.GraphProto{
		Name: proto.String("body"),
		Node: []*onnxpb.NodeProto{
			onnx.NewNode("Identity", []string{"cond_in"}, []string{"cond_out"}),
			onnx.NewNode("Tanh", []string{"v_in"}, []string{"v_out"}),
		},
		Input: []*onnxpb.ValueInfoProto{
			onnx.NewValueInfo("i", onnx.Int64, onnx.Shape{}),
			onnx.NewValueInfo("cond_in", onnx.Bool, onnx.Shape{}),
			onnx.NewValueInfo("v_in", onnx.Float, nil),
		},
		Output: []*onnxpb.ValueInfoProto{
			onnx.NewValueInfo("cond_out", onnx.Bool, onnx.Shape{}),
			onnx.NewValueInfo("v_out", onnx.Float, nil),
		},
	}
	loop := onnx.NewNode("Loop", []string{"n", "", "x"}, []string{"v"}, &onnxpb.AttributeProto{
		Name: proto.String("body"), Type: onnxpb.AttributeProto_GRAPH.Enum(), G: body,
	})
	weights := &onnxpb.TensorProto{
		Name:         proto.String("w"),
		DataType:     proto.Int32(int32(onnx.Float)),
		Dims:         []int64{4, 3},
		DataLocation: onnxpb.TensorProto_EXTERNAL.Enum(),
		ExternalData: []*onnxpb.StringStringEntryProto{
			{Key: proto.String("location"), Value: proto.String("weights.bin")},
			{Key: proto.String("offset"), Value: proto.String("0")},
			{Key: proto.String("length"), Value: proto.String(fmt.Sprint(len(raw)))},
		},
	}
	m, err := onnx.FromProto(&onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(13)}},
		Graph: &onnxpb.GraphProto{
			Name: proto.String("slow"),
			Node: []*onnxpb.NodeProto{
				loop,
				onnx.NewNode("MatMul", []string{"v", "w"}, []string{"logits"}),
			},
			Initializer: []*onnxpb.TensorProto{onnx.NewTensorInt64("n", nil, []int64{n}), weights},
			Input:       []*onnxpb.ValueInfoProto{onnx.NewValueInfo("x", onnx.Float, onnx.Shape{{Param: "batch"}, {Value: 4}})},
			Output:      []*onnxpb.ValueInfoProto{onnx.NewValueInfo("logits", onnx.Float, onnx.Shape{{Param: "batch"}, {Value: 3}})},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "model.onnx")
	if err := m.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSignalDuringExport interrupts `fedcalib export` with SIGINT while it
// verifies the calibrated model from the output's temporary file (an
// interrupted export used to leave a hidden .tmp of the model's size):
// it must exit with status 130 and one line on stderr, leaving neither
// the output nor any temporary file.
func TestSignalDuringExport(t *testing.T) {
	bin := fedcalibBin(t)
	dir := t.TempDir()
	model := slowModel(t, dir, slowIterations)
	cf := filepath.Join(dir, "temp.json")
	if err := calib.WriteFile(cf, calib.NewTemperature(3), nil, calib.Provenance{}); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "model.calibrated.onnx")
	cmd := exec.Command(bin, "export", "--model", model, "--calibrator", cf, "--out", out)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	launched := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// Wait for the temporary file of the output: the model has run once
	// (the check of its logits) and is being verified.
	prefix := filepath.Base(fileio.TempPrefix(out))
	deadline := time.After(2 * time.Minute)
	for tmp := ""; tmp == ""; {
		select {
		case err := <-exited:
			t.Fatalf("export ended (%v) before its temporary file appeared: raise slowIterations\nstdout: %s\nstderr: %s", err, &stdout, &stderr)
		case <-deadline:
			cmd.Process.Kill()
			t.Fatal("no temporary file of the output after 2 minutes")
		case <-time.After(5 * time.Millisecond):
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), prefix) {
				tmp = e.Name()
			}
		}
	}
	t.Logf("temporary file after %v", time.Since(launched))
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var werr error
	select {
	case werr = <-exited:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatal("export still running a minute after SIGINT")
	}
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.ExitCode() != 130 {
		t.Errorf("export after SIGINT: %v, want exit status 130", werr)
	}
	const want = "fedcalib: stopped (interrupt signal received): no partial output was left behind\n"
	if stderr.String() != want || stdout.Len() != 0 {
		t.Errorf("stdout %q, stderr %q; want nothing and %q", &stdout, &stderr, want)
	}
	t.Logf("stopped %v after SIGINT", time.Since(start))
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("export took %v to stop after SIGINT", waited)
	}
	after, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := entryNames(after), entryNames(before); !slices.Equal(got, want) {
		t.Errorf("directory holds %v after SIGINT, want %v", got, want)
	}
}

func entryNames(entries []os.DirEntry) []string {
	s := make([]string, len(entries))
	for i, e := range entries {
		s[i] = e.Name()
	}
	return s
}
