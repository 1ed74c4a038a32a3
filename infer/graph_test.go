package infer

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/onnx"
)

// twoOutputs writes tiny.onnx with a second float32 output,
// "probabilities" = Softmax(logits), as an appended calibrator adds one,
// and returns its bytes, its path and the name of the logits output.
func twoOutputs(t *testing.T) (model []byte, path, logitsName string) {
	t.Helper()
	m, err := onnx.ReadFile("testdata/tiny.onnx")
	if err != nil {
		t.Fatal(err)
	}
	logitsName = m.Outputs()[0].Name
	m.AddNodes(onnx.NewNode("Softmax", []string{logitsName}, []string{"probabilities"}, onnx.AttrInt("axis", 1)))
	m.AddOutputs(onnx.NewValueInfo("probabilities", onnx.Float, onnx.Shape{{Param: "batch"}, {Value: 3}}))
	path = filepath.Join(t.TempDir(), "tiny2.onnx")
	if err := m.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return m.Bytes(), path, logitsName
}

// softmax64 returns the softmax of z in float64.
func softmax64(z []float64) []float64 {
	p := make([]float64, len(z))
	top := slices.Max(z)
	sum := 0.0
	for i, v := range z {
		p[i] = math.Exp(v - top)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// tinyBatch preprocesses images for tiny.onnx by hand.
func tinyBatch(ref *tinyWeights, imgs [][]uint8) *Batch {
	b := &Batch{Shape: []int64{int64(len(imgs)), 1, 4, 4}}
	for _, img := range imgs {
		for _, v := range img {
			b.Float = append(b.Float, float32((float64(v)*ref.Tiny.Scale-ref.Tiny.Mean)/ref.Tiny.Std))
		}
	}
	return b
}

// TestInferExtra collects the logits and a second output in the same runs,
// one at a time or three at once, and checks both against the float64
// reference, with the outputs' columns known when the session opens and
// (open) left to the first run, which then runs alone.
func TestInferExtra(t *testing.T) {
	_, path, _ := twoOutputs(t)
	ref := loadTinyWeights(t)
	imgs := images(10, 16, 3)
	for _, open := range []bool{false, true} {
		for _, batch := range []int{1, 3, 10} {
			for _, runs := range []int{1, 3} {
				s := openTest(t, path, Options{Batch: batch, Threads: 1, Runs: runs, Extra: []string{"probabilities"}})
				if open {
					// As for a model whose output shapes leave the
					// columns to the first run.
					s.classes, s.cols[0] = 0, 0
				}
				res, err := s.Infer(context.Background(), &sliceReader{recs: imageRecords(imgs, 4, 4, 1)})
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Extra) != 1 || res.Extra[0].Name != "probabilities" || res.Extra[0].Columns != 3 || len(res.Extra[0].Values) != 3*len(imgs) {
					t.Fatalf("open %t, batch %d, runs %d: extra outputs %+v, want one of 10×3 probabilities", open, batch, runs, res.Extra)
				}
				for i, img := range imgs {
					z := ref.tinyLogits(img)
					p := softmax64(z)
					for c := range z {
						if got := res.Logits[i*3+c]; !closeTo(got, z[c]) {
							t.Errorf("batch %d, runs %d, record %d, class %d: logit %v, want %v", batch, runs, i, c, got, z[c])
						}
						if got := res.Extra[0].Values[i*3+c]; !closeTo(got, p[c]) {
							t.Errorf("batch %d, runs %d, record %d, class %d: probability %v, want %v", batch, runs, i, c, got, p[c])
						}
					}
				}
			}
		}
	}

	// RunExtra appends to what it is given; Run drops the extra output.
	s := openTest(t, path, Options{Threads: 1, Extra: []string{"probabilities"}})
	b := tinyBatch(ref, imgs[:2])
	logits, extra, err := s.RunExtra([]float32{7}, [][]float32{{8, 9}}, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(logits) != 7 || logits[0] != 7 || len(extra) != 1 || len(extra[0]) != 8 || extra[0][0] != 8 || extra[0][1] != 9 {
		t.Fatalf("RunExtra gave %v and %v", logits, extra)
	}
	if p := softmax64(ref.tinyLogits(imgs[1])); !closeTo(extra[0][7], p[2]) {
		t.Errorf("RunExtra: probability %v, want %v", extra[0][7], p[2])
	}
	if got, err := s.Run(nil, b); err != nil || !slices.Equal(got, logits[1:]) {
		t.Errorf("Run = %v, %v; want RunExtra's logits %v", got, err, logits[1:])
	}
}

func TestInferExtraErrors(t *testing.T) {
	requireRuntime(t)
	_, path, logitsName := twoOutputs(t)
	for _, tc := range []struct {
		opt  Options
		want string
	}{
		{Options{Extra: []string{"nope"}}, `model has no output "nope" (outputs: "` + logitsName + `", "probabilities")`},
		{Options{Extra: []string{logitsName}}, `output "` + logitsName + `" is asked for twice`},
		{Options{Extra: []string{"probabilities", "probabilities"}}, `output "probabilities" is asked for twice`},
		{Options{Output: "probabilities", Extra: []string{"probabilities"}}, `output "probabilities" is asked for twice`},
	} {
		s, err := OpenSession(path, tc.opt)
		if err == nil {
			s.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), path+": ") {
			t.Errorf("Extra %q: error %v, want %q", tc.opt.Extra, err, tc.want)
		}
	}
}

// TestGraph runs the two-output model through Graph, from memory and from
// its file, and checks it against Session and the reference.
func TestGraph(t *testing.T) {
	requireRuntime(t)
	model, path, logitsName := twoOutputs(t)
	ref := loadTinyWeights(t)
	imgs := images(4, 16, 5)
	b := tinyBatch(ref, imgs)
	open := map[string]func(GraphOptions) (*Graph, error){
		"bytes": func(o GraphOptions) (*Graph, error) { return OpenGraph(model, o) },
		"file":  func(o GraphOptions) (*Graph, error) { return OpenGraphFile(path, o) },
	}
	for name, open := range open {
		for _, tc := range []struct {
			outputs []string
			want    []string
		}{
			{nil, []string{logitsName, "probabilities"}},
			{[]string{"probabilities", logitsName}, []string{"probabilities", logitsName}},
			{[]string{"probabilities"}, []string{"probabilities"}},
		} {
			g, err := open(GraphOptions{Threads: 1, Outputs: tc.outputs})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if ins := g.Inputs(); len(ins) != 1 || ins[0].Type != "float32" || !slices.Equal(ins[0].Shape[1:], []int64{1, 4, 4}) {
				t.Errorf("%s: inputs %+v", name, ins)
			}
			var outNames []string
			for _, o := range g.Outputs() {
				outNames = append(outNames, o.Name)
			}
			if !slices.Equal(outNames, tc.want) {
				t.Errorf("%s: outputs %q, want %q", name, outNames, tc.want)
			}
			got, err := g.Run(b)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for k, out := range tc.want {
				if len(got[k]) != 3*len(imgs) {
					t.Fatalf("%s: output %q has %d values, want %d", name, out, len(got[k]), 3*len(imgs))
				}
				for i, img := range imgs {
					want := ref.tinyLogits(img)
					if out == "probabilities" {
						want = softmax64(want)
					}
					for c, w := range want {
						if v := got[k][i*3+c]; !closeTo(v, w) {
							t.Errorf("%s: output %q, record %d, class %d: %v, want %v", name, out, i, c, v, w)
						}
					}
				}
			}
			if err := g.Close(); err != nil {
				t.Error(err)
			}
			if _, err := g.Run(b); err == nil || !strings.Contains(err.Error(), "closed Graph") {
				t.Errorf("%s: Run after Close: %v", name, err)
			}
		}
	}
}

func TestGraphErrors(t *testing.T) {
	requireRuntime(t)
	model, _, _ := twoOutputs(t)
	for _, tc := range []struct {
		opt  GraphOptions
		want string
	}{
		{GraphOptions{Inputs: []string{"nope"}}, `model has no input "nope"`},
		{GraphOptions{Outputs: []string{"nope"}}, `model has no output "nope"`},
		{GraphOptions{Threads: -1}, "threads = -1"},
	} {
		if g, err := OpenGraph(model, tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			if g != nil {
				g.Close()
			}
			t.Errorf("%+v: error %v, want %q", tc.opt, err, tc.want)
		}
	}
	if _, err := OpenGraph([]byte("not a model"), GraphOptions{}); err == nil || !strings.Contains(err.Error(), "not a model ONNX Runtime can read") {
		t.Errorf("garbage: error %v", err)
	}
	if _, err := OpenGraphFile(filepath.Join(t.TempDir(), "none.onnx"), GraphOptions{}); err == nil || !strings.Contains(err.Error(), "none.onnx") {
		t.Errorf("missing file: error %v", err)
	}
	g, err := OpenGraph(model, GraphOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, tc := range []struct {
		in   []*Batch
		want string
	}{
		{nil, "the model takes 1 inputs"},
		{[]*Batch{{Shape: []int64{2, 1, 4, 4}, Float: make([]float32, 16)}}, "of shape [2 1 4 4]"},
		{[]*Batch{{Shape: []int64{1, 1, 4, 5}, Float: make([]float32, 20)}}, "running the model"},
	} {
		if _, err := g.Run(tc.in...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%v): error %v, want %q", tc.in, err, tc.want)
		}
	}
}
