package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/infer"
)

func TestSetupCommandNPMFailure(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	npm := filepath.Join(t.TempDir(), "npm")
	if err := os.WriteFile(npm, []byte("#!/bin/sh\necho 'E404 not found' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := fedcalib("setup", "--npm", npm)
	if code != ExitEnvironment || stdout != "" || !strings.Contains(stderr, "npm pack onnxruntime-node@"+infer.RuntimeVersion+" failed") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	cached, _ := infer.CachedRuntimePath()
	if _, err := os.Stat(cached); err == nil {
		t.Errorf("a failed setup left %s", cached)
	}
}

func TestSetupCommandBadTarball(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	tgz := filepath.Join(t.TempDir(), "onnxruntime-node.tgz")
	if err := os.WriteFile(tgz, []byte("not gzip"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := fedcalib("setup", "--tarball", tgz)
	if code != ExitUsage || !strings.Contains(stderr, tgz+": not a gzip tarball") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// TestSetupCommandIdempotent puts the real library where setup installs it
// and checks that setup leaves it alone without running npm.
func TestSetupCommandIdempotent(t *testing.T) {
	lib, err := infer.ResolveRuntime("")
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	b, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	cached, err := infer.CachedRuntimePath()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cached, b, 0o755); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := fedcalib("setup", "--npm", "/nonexistent/npm")
	if infer.RuntimeSHA256 != sha256File(t, cached) {
		// Not the pinned build: setup must try to replace it and fail on npm.
		if code != ExitEnvironment {
			t.Errorf("exit %d over an unpinned library with no npm, want %d", code, ExitEnvironment)
		}
		return
	}
	if code != 0 || stdout != cached+"\n" || !strings.Contains(stderr, "already installed") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 0, the cached path, and 'already installed'", code, stdout, stderr)
	}
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestSetupMissingTarball: a --tarball that is not there is an error even
// when ONNX Runtime is already installed, not silently ignored.
func TestSetupMissingTarball(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "onnxruntime-node.tgz")
	code, _, stderr := fedcalib("setup", "--tarball", missing)
	if code != ExitUsage || !strings.Contains(stderr, missing+": not a readable file") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}
