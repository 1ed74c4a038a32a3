package fileio

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// names lists the entries of dir, sorted.
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

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.txt")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 2*chunk+3) // several chunks
	big[len(big)-1] = 7
	for _, data := range [][]byte{[]byte("new"), big} {
		if err := Write(path, data); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil || !slices.Equal(b, data) {
			t.Fatalf("read %d bytes, %v; want %d", len(b), err, len(data))
		}
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
	// A directory in the way: the write fails and leaves no temporary file.
	blocked := filepath.Join(dir, "sub")
	if err := os.Mkdir(blocked, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Write(blocked, []byte("x")); err == nil {
		t.Error("Write over a directory succeeded")
	}
	if got := names(t, dir); !slices.Equal(got, []string{"out.txt", "sub"}) {
		t.Errorf("directory holds %v, want out.txt and sub only", got)
	}
	// A missing directory: the error names the output, not the temporary file.
	missing := filepath.Join(dir, "missing", "x.json")
	err := Write(missing, nil)
	if err == nil || !strings.Contains(err.Error(), missing) || strings.Contains(err.Error(), ".tmp") {
		t.Errorf("Write into a missing directory: %v; want an error naming %s and no temporary file", err, missing)
	}
}

func TestWriteContextCancelled(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.onnx")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := WriteContext(ctx, path, []byte("new")); !errors.Is(err, context.Canceled) {
		t.Errorf("WriteContext with a cancelled context: %v, want context.Canceled", err)
	}
	// Cancelled between Create and Commit.
	ctx, cancel = context.WithCancel(context.Background())
	tmp, err := Create(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmp.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := tmp.Commit(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Commit with a cancelled context: %v, want context.Canceled", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("output holds %q after cancelled writes, want the old content", b)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"out.onnx"}) {
		t.Errorf("directory holds %v after cancelled writes, want out.onnx only", got)
	}
}

func TestTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.onnx")
	ctx := context.Background()

	a, err := Create(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a.Name(), TempPrefix(path)) || a.Path() != path {
		t.Errorf("temporary file %s for %s, want the prefix %s", a.Name(), a.Path(), TempPrefix(path))
	}
	if _, err := a.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(a.Name()); err != nil || string(b) != "abc" {
		t.Errorf("temporary file holds %q, %v before Commit; want abc", b, err)
	}
	a.Abort()
	a.Abort() // a second Abort does nothing
	if err := a.Commit(ctx); err == nil {
		t.Error("Commit after Abort succeeded")
	}
	if got := names(t, dir); len(got) != 0 {
		t.Errorf("directory holds %v after Abort, want nothing", got)
	}

	b, err := Create(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	b.Write([]byte("xyz"))
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.Abort() // after Commit: does nothing
	if got, _ := os.ReadFile(path); string(got) != "xyz" {
		t.Errorf("committed file holds %q, want xyz", got)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"m.onnx"}) {
		t.Errorf("directory holds %v after Commit, want m.onnx only", got)
	}
}

// TestRemoveTemps plays an interrupted process: RemoveTemps removes the
// temporary files of the writes in flight, which then fail.
func TestRemoveTemps(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	x, err := Create(ctx, filepath.Join(dir, "x.npz"))
	if err != nil {
		t.Fatal(err)
	}
	y, err := Create(ctx, filepath.Join(dir, "y.json"))
	if err != nil {
		t.Fatal(err)
	}
	done, err := Create(ctx, filepath.Join(dir, "done.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := done.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	removed := RemoveTemps()
	slices.Sort(removed)
	want := []string{x.Name(), y.Name()}
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Errorf("RemoveTemps removed %v, want %v", removed, want)
	}
	if err := x.Commit(ctx); err == nil {
		t.Error("Commit after RemoveTemps succeeded")
	}
	if got := names(t, dir); !slices.Equal(got, []string{"done.json"}) {
		t.Errorf("directory holds %v, want done.json only", got)
	}
	if again := RemoveTemps(); len(again) != 0 {
		t.Errorf("a second RemoveTemps removed %v", again)
	}
}

// TestStaleTemps checks that a write removes the temporary files of its
// output that a killed process left more than StaleAfter ago, and only
// those.
func TestStaleTemps(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-StaleAfter - time.Minute)
	files := []struct {
		name  string
		old   bool
		stays bool
	}{
		{".out.json.tmp123456", true, false},  // stale: removed
		{".out.json.tmp999", false, true},     // recent: another write may be running
		{".out.json.tmpabc", true, true},      // not a name Create makes
		{".other.json.tmp42", true, true},     // another output's
		{"out.json.tmp42", true, true},        // not hidden: not ours
		{".out.json.tmp", true, true},         // no digits
		{".out.json.tmp77.keep", true, true},  // a suffix: not ours
		{".out.json.tmp0000001", true, false}, // stale: removed
	}
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if f.old {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := Write(filepath.Join(dir, "out.json"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		_, err := os.Stat(filepath.Join(dir, f.name))
		if stays := err == nil; stays != f.stays {
			t.Errorf("%s: kept %v, want %v", f.name, stays, f.stays)
		}
	}
}

func TestSHA256(t *testing.T) {
	path := filepath.Join(t.TempDir(), "abc")
	if err := Write(path, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	// The FIPS 180-2 test vector for "abc".
	const want = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	if got, err := SHA256(path); err != nil || got != want {
		t.Errorf("SHA256 = %s, %v; want %s", got, err, want)
	}
	if _, err := SHA256(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("SHA256 of a missing file succeeded")
	}
}
