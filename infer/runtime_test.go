package infer

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/fedcalib/fedcalib/internal/fileio"
)

// tgz returns a gzip-compressed tar holding the given regular files, in order.
func tgz(t *testing.T, files ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f[0], Mode: 0o644, Size: int64(len(f[1])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, f[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// hugeEntry returns a gzip-compressed tar whose entry declares 1 TiB and
// holds nothing.
func hugeEntry(t *testing.T, name string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: 1 << 40, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestInstallEntry(t *testing.T) {
	const entry = "package/bin/lib.so"
	good := "the library bytes"
	archive := tgz(t, [2]string{"package/README.md", "hello"}, [2]string{entry, good})
	for _, tc := range []struct {
		name    string
		archive []byte
		entry   string
		sha     string
		want    string // error substring; "" for success
	}{
		{"ok", archive, entry, sha(good), ""},
		{"bad hash", archive, entry, sha("something else"), "extracted library has sha256 " + sha(good)},
		{"missing entry", archive, "package/bin/other.so", sha(good), "no package/bin/other.so in the tarball"},
		{"not gzip", []byte("plain text"), entry, sha(good), "not a gzip tarball"},
		{"truncated", archive[:len(archive)/2], entry, sha(good), "tarball"},
		{"huge entry", hugeEntry(t, entry), entry, sha(good), "declares 1099511627776 bytes, more than the 268435456"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "lib.so")
			err := installEntry(bytes.NewReader(tc.archive), tc.entry, tc.sha, dest)
			got, readErr := os.ReadFile(dest)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != good {
					t.Errorf("installed %q, want %q", got, good)
				}
				if fi, _ := os.Stat(dest); fi.Mode().Perm()&0o100 == 0 {
					t.Errorf("installed mode %v, want it executable", fi.Mode())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("installEntry = %v, want an error containing %q", err, tc.want)
			}
			if !errors.Is(readErr, os.ErrNotExist) {
				t.Errorf("a failed install left %s behind", dest)
			}
			if left, _ := filepath.Glob(filepath.Join(filepath.Dir(dest), "*")); len(left) != 0 {
				t.Errorf("a failed install left files: %v", left)
			}
		})
	}
}

func TestResolveRuntimeOrder(t *testing.T) {
	dir := t.TempDir()
	flagLib := filepath.Join(dir, "flag.so")
	envLib := filepath.Join(dir, "env.so")
	for _, p := range []string{flagLib, envLib} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	cached, err := CachedRuntimePath()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(cache, "fedcalib", "onnxruntime", RuntimeVersion, RuntimeLibrary); cached != want {
		t.Fatalf("CachedRuntimePath = %s, want %s", cached, want)
	}

	t.Setenv(RuntimeEnv, envLib)
	if got, err := ResolveRuntime(flagLib); err != nil || got != flagLib {
		t.Errorf("flag and env set: ResolveRuntime = %q, %v; want the flag's %s", got, err, flagLib)
	}
	if got, err := ResolveRuntime(""); err != nil || got != envLib {
		t.Errorf("env set: ResolveRuntime = %q, %v; want the env's %s", got, err, envLib)
	}
	t.Setenv(RuntimeEnv, filepath.Join(dir, "gone.so"))
	if _, err := ResolveRuntime(""); !errors.Is(err, ErrRuntimeNotFound) || !strings.Contains(err.Error(), "gone.so: no such file") {
		t.Errorf("env names a missing file: ResolveRuntime error %v", err)
	}

	t.Setenv(RuntimeEnv, "")
	_, err = ResolveRuntime("")
	const want = "ONNX Runtime not found: run `make setup` (or `fedcalib setup`), or set ONNXRUNTIME_SHARED_LIBRARY_PATH"
	if err == nil || err.Error() != want {
		t.Errorf("nothing installed: ResolveRuntime error\n%v\nwant\n%s", err, want)
	}

	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cached, []byte("not the library"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = ResolveRuntime("")
	if !errors.Is(err, ErrRuntimeNotFound) || !strings.Contains(err.Error(), "is not the pinned "+RuntimeSHA256) || !strings.Contains(err.Error(), "make setup") {
		t.Errorf("corrupt cached library: ResolveRuntime error %v", err)
	}
}

// fakeNPM writes an npm stand-in that records its arguments in args.txt
// and packs a tarball holding content as the runtime library.
func fakeNPM(t *testing.T, content string) (npm, argsFile string) {
	t.Helper()
	dir := t.TempDir()
	archive := filepath.Join(dir, "payload.tgz")
	if err := os.WriteFile(archive, tgz(t, [2]string{runtimeEntry, content}), 0o644); err != nil {
		t.Fatal(err)
	}
	argsFile = filepath.Join(dir, "args.txt")
	npm = filepath.Join(dir, "npm")
	script := "#!/bin/sh\necho \"$@\" > " + argsFile + "\ncp " + archive + " onnxruntime-node-" + RuntimeVersion + ".tgz\n"
	if err := os.WriteFile(npm, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return npm, argsFile
}

func TestSetupRejectsWrongLibrary(t *testing.T) {
	npm, argsFile := fakeNPM(t, "an impostor library")
	dest := filepath.Join(t.TempDir(), "cache", RuntimeLibrary)
	_, err := Setup(context.Background(), SetupOptions{NPM: npm, Dest: dest})
	if err == nil || !strings.Contains(err.Error(), "want the pinned "+RuntimeSHA256) || errors.Is(err, ErrFetch) {
		t.Errorf("Setup with a wrong library = %v, want a hash mismatch", err)
	}
	if _, err := os.Stat(dest); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Setup with a wrong library left %s", dest)
	}
	args, err := os.ReadFile(argsFile)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(args)), "pack onnxruntime-node@"+RuntimeVersion+" --ignore-scripts --silent"; got != want {
		t.Errorf("npm called with %q, want %q", got, want)
	}
}

func TestSetupNPMFails(t *testing.T) {
	npm := filepath.Join(t.TempDir(), "npm")
	if err := os.WriteFile(npm, []byte("#!/bin/sh\necho 'network unreachable' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Setup(context.Background(), SetupOptions{NPM: npm, Dest: filepath.Join(t.TempDir(), RuntimeLibrary)})
	if err == nil || !strings.Contains(err.Error(), "npm pack onnxruntime-node@"+RuntimeVersion+" failed") || !strings.Contains(err.Error(), "network unreachable") {
		t.Errorf("Setup with failing npm = %v", err)
	}
	if !errors.Is(err, ErrFetch) || errors.Is(err, ErrRuntimeNotFound) {
		t.Errorf("Setup with failing npm = %v, want an error matching ErrFetch only", err)
	}
	_, err = Setup(context.Background(), SetupOptions{NPM: filepath.Join(t.TempDir(), "no-npm"), Dest: filepath.Join(t.TempDir(), RuntimeLibrary)})
	if !errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), "is npm installed") {
		t.Errorf("Setup without npm = %v, want an error matching ErrFetch", err)
	}
}

// TestSetupIdempotent installs the real library (from wherever the tests
// load it) and checks that a second Setup neither runs npm nor rewrites it.
func TestSetupIdempotent(t *testing.T) {
	lib, err := ResolveRuntime("")
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	if sum, err := fileio.SHA256(lib); err != nil || sum != RuntimeSHA256 {
		t.Skipf("skipping: %s is not the pinned build", lib)
	}
	dest := filepath.Join(t.TempDir(), RuntimeLibrary)
	b, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dest, b, 0o755); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(dest)
	var log bytes.Buffer
	res, err := Setup(context.Background(), SetupOptions{NPM: "/nonexistent/npm", Dest: dest, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if res.Installed || res.Path != dest {
		t.Errorf("Setup over a verified library = %+v, want Installed false, Path %s", res, dest)
	}
	after, _ := os.Stat(dest)
	if !after.ModTime().Equal(before.ModTime()) {
		t.Error("Setup rewrote a verified library")
	}
	if !strings.Contains(log.String(), "already installed") {
		t.Errorf("log %q does not say it was already installed", log.String())
	}
}

func TestInitRuntimeOtherLibrary(t *testing.T) {
	requireRuntime(t)
	other := filepath.Join(t.TempDir(), "other.so")
	if err := os.WriteFile(other, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := InitRuntime(other); err == nil || !strings.Contains(err.Error(), "already loaded") {
		t.Errorf("InitRuntime with a second library = %v, want an error", err)
	}
	p, err := InitRuntime("")
	if err != nil || p == "" {
		t.Errorf("InitRuntime again = %q, %v", p, err)
	}
}

// TestInitRuntimeUnloadable loads a file that is not a shared library, in
// a fresh process (this one may have loaded the runtime already).
func TestInitRuntimeUnloadable(t *testing.T) {
	if lib := os.Getenv("FEDCALIB_TEST_UNLOADABLE"); lib != "" {
		_, err := InitRuntime(lib)
		os.Stdout.WriteString(err.Error())
		os.Exit(0)
	}
	lib := filepath.Join(t.TempDir(), RuntimeLibrary)
	if err := os.WriteFile(lib, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestInitRuntimeUnloadable$")
	cmd.Env = append(os.Environ(), "FEDCALIB_TEST_UNLOADABLE="+lib)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ONNX Runtime not found (" + lib + ": cannot load it", "run `make setup`"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("InitRuntime(not a library) = %q, want it to contain %q", out, want)
		}
	}
}
