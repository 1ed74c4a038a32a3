package infer

import (
	"slices"
	"testing"
)

// TestRunShaped runs a batch of 5 through the two-output tiny model: both
// outputs come back [5, 3] (the batch and tiny.onnx's three classes), with
// the values Run gives.
func TestRunShaped(t *testing.T) {
	requireRuntime(t)
	model, _, logitsName := twoOutputs(t)
	g, err := OpenGraph(model, GraphOptions{Threads: 1, Outputs: []string{logitsName, "probabilities"}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	in := &Batch{Shape: []int64{5, 1, 4, 4}, Float: make([]float32, 5*16)}
	for i := range in.Float {
		in.Float[i] = float32(i%7) / 7
	}
	shaped, err := g.RunShaped(in)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := g.Run(in)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range shaped {
		if !slices.Equal(o.Shape, []int64{5, 3}) || !slices.Equal(o.Float, plain[i]) {
			t.Errorf("output %d: shape %v, values %v; Run gives %v", i, o.Shape, o.Float, plain[i])
		}
	}
}
