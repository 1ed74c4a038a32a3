package infer

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/fedcalib/fedcalib/infer/logits"
)

func TestReadLabels(t *testing.T) {
	dir := t.TempDir()
	lf := filepath.Join(dir, "l.npz")
	f := &logits.File{Logits: make([]float32, 4*3), Labels: []int32{2, 0, 1, 2}, Client: []int32{1, 1, 0, 0}, Split: []uint8{1, 2, 1, 2}, Classes: 3}
	if err := logits.Write(lf, f); err != nil {
		t.Fatal(err)
	}
	got, err := ReadLabels(lf)
	if err != nil {
		t.Fatal(err)
	}
	want := &logits.Labels{Labels: []int{2, 0, 1, 2}, Classes: 3, Client: []int32{1, 1, 0, 0}, Split: []uint8{1, 2, 1, 2}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("logits file: %+v, want %+v", got, want)
	}
	if !logits.IsFile(lf) || logits.IsFile(filepath.Join(dir, "missing.npz")) || logits.IsFile(filepath.Join("testdata", "cnn.onnx")) {
		t.Error("IsFile does not tell a logits file from others")
	}

	// A LEAF dataset names its clients: numbered in order of first
	// appearance, names kept, as Session.Infer numbers them.
	leaf, err := ReadLabels("leaf:" + filepath.Join("data", "testdata", "leaf", "femnist"))
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Classes < 2 || len(leaf.Labels) == 0 || len(leaf.Client) != len(leaf.Labels) || len(leaf.Names) == 0 || leaf.Client[0] != 0 || leaf.Split != nil {
		t.Errorf("leaf labels: %d rows, %d classes, %d clients %v, split %v", len(leaf.Labels), leaf.Classes, len(leaf.Names), leaf.Names, leaf.Split)
	}
	next := int32(0) // the id the next new client must get
	for i, id := range leaf.Client {
		switch {
		case id == next:
			next++
		case id > next:
			t.Fatalf("row %d: client id %d before id %d: not numbered in order of first appearance", i, id, next)
		}
	}
	if int(next) != len(leaf.Names) {
		t.Errorf("%d client ids for %d names", next, len(leaf.Names))
	}
	if _, err := ReadLabels(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("a missing input reads")
	}
}
