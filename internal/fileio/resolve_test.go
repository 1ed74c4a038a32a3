package fileio

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
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

// TestLongNames writes outputs whose names are legal up to NAME_MAX (255
// bytes): the temporary file's name must fit too.
func TestLongNames(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{6, 230, 231, 240, 250, 255} {
		for _, r := range []string{"a", "é"} { // multi-byte: the cut falls at a character
			body := strings.Repeat(r, (n-5)/len(r))
			base := body + strings.Repeat("b", n-5-len(body)) + ".json"
			if len(base) != n {
				t.Fatalf("built a %d-byte name, want %d", len(base), n)
			}
			path := filepath.Join(dir, base)
			if err := CheckDir(path); err != nil {
				t.Errorf("%d bytes: CheckDir: %v", n, err)
			}
			if err := Write(path, []byte("x")); err != nil {
				t.Errorf("%d bytes: Write: %v", n, err)
			}
			if b, err := os.ReadFile(path); err != nil || string(b) != "x" {
				t.Errorf("%d bytes: read back %q, %v", n, b, err)
			}
			if p := filepath.Base(TempPrefix(path)); len(p)+20 > 255 || !utf8.ValidString(p) {
				t.Errorf("%d bytes: temporary prefix %q is %d bytes", n, p, len(p))
			}
			if err := WriteDir(context.Background(), filepath.Join(dir, strings.TrimSuffix(base, ".json")+"d"), []DirFile{{Name: "f", Data: []byte("y")}}); err != nil && n < 255 {
				t.Errorf("%d bytes: WriteDir: %v", n, err)
			}
			os.Remove(path)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
}
