package fileio

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestWriteDir writes a tree, refuses to write over a non-empty
// directory or outside the tree, and leaves nothing behind when
// cancelled.
func TestWriteDir(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "repo")
	files := []DirFile{{"config.pbtxt", []byte("name: \"m\"\n")}, {"1/model.onnx", []byte{1, 2, 3}}}
	if err := WriteDir(context.Background(), dir, files); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(dir, f.Name))
		if err != nil || string(got) != string(f.Data) {
			t.Errorf("%s: %q, %v", f.Name, got, err)
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, %v", fi.Mode(), err)
	}
	if err := WriteDir(context.Background(), dir, files); err == nil {
		t.Error("wrote over a non-empty directory")
	}
	empty := filepath.Join(parent, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteDir(context.Background(), empty, files[:1]); err != nil {
		t.Errorf("an empty directory: %v", err)
	}
	if err := WriteDir(context.Background(), filepath.Join(parent, "x"), []DirFile{{"../escape", nil}}); err == nil {
		t.Error("wrote outside the directory")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := WriteDir(ctx, filepath.Join(parent, "cancelled"), files); err == nil {
		t.Error("cancelled write succeeded")
	}
	if got, want := names(t, parent), []string{"empty", "repo"}; !slices.Equal(got, want) {
		t.Errorf("%s holds %v, want %v", parent, got, want)
	}
}
