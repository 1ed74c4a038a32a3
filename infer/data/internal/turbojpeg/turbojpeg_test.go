//go:build cgo

package turbojpeg

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenErrors checks the errors of a library that is missing or is
// not TurboJPEG: both wrap ErrNotFound and say how to install it.
func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "libturbojpeg.so.0")
	if err := os.WriteFile(notELF, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, reason string }{
		{filepath.Join(dir, "missing.so"), "No such file"},
		{notELF, "file too short"},
		{"libc.so.6", "it has no tjInitDecompress"},
	} {
		_, err := spec.Open(tc.path)
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("open(%s): %v, want an error wrapping ErrNotFound", tc.path, err)
		}
		for _, want := range []string{tc.path, tc.reason, "apt-get install libturbojpeg0", LibraryEnv} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("open(%s): %q does not say %q", tc.path, err, want)
			}
		}
	}
}
