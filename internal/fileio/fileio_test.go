package fileio

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.txt")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "new" {
		t.Fatalf("read %q, %v", b, err)
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
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("directory holds %d entries, want out.txt and sub only", len(entries))
	}
	if err := Write(filepath.Join(dir, "missing", "x"), nil); err == nil {
		t.Error("Write into a missing directory succeeded")
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
