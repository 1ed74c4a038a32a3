package fileio

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestResolve(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(real, "f.json")
	if err := os.WriteFile(file, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	mk := func(target, link string) string {
		p := filepath.Join(dir, link)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rel := mk(filepath.Join("real", "f.json"), "rel.json")
	abs := mk(file, "abs.json")
	chain := mk("rel.json", "chain.json")
	dangling := mk(filepath.Join("real", "new.json"), "dangling.json")
	dirLink := mk("real", "dirlink")
	loop := mk("loop.json", "loop.json")
	for _, tc := range []struct{ in, want string }{
		{file, file},
		{rel, file},
		{abs, file},
		{chain, file},
		{dangling, filepath.Join(real, "new.json")}, // where a write through it lands
		{filepath.Join(dirLink, "f.json"), file},
		{filepath.Join(dirLink, "x.json"), filepath.Join(real, "x.json")},
		{filepath.Join(dir, "none", "x.json"), filepath.Join(dir, "none", "x.json")},
	} {
		got, err := Resolve(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Resolve(%s) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := Resolve(loop); err == nil {
		t.Errorf("Resolve of a link to itself: no error")
	}
	// An output that does not exist yet names an input that does not
	// either (a ledger a run will make) through a link.
	if err := CheckOutput(filepath.Join(real, "new.json"), dangling); !errors.Is(err, ErrOutputIsInput) {
		t.Errorf("CheckOutput(new file, dangling link to it) = %v", err)
	}
	if err := CheckOutput(filepath.Join(real, "other.json"), dangling); err != nil {
		t.Errorf("CheckOutput(another new file) = %v", err)
	}
	// Existing files compare by inode: a hard link is the same file.
	hard := filepath.Join(dir, "hard.json")
	if err := os.Link(file, hard); err != nil {
		t.Fatal(err)
	}
	if err := CheckOutput(hard, "", rel); !errors.Is(err, ErrOutputIsInput) {
		t.Errorf("CheckOutput(hard link, symlink) = %v", err)
	}
}
