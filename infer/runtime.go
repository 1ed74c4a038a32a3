package infer

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/klauspost/compress/gzip"
	ort "github.com/yalue/onnxruntime_go"

	"github.com/fedcalib/fedcalib/internal/fileio"
)

// The ONNX Runtime build fedcalib runs against: the linux-x64 shared library
// shipped inside the npm package onnxruntime-node, pinned by version and by
// the SHA-256 of the library itself.
const (
	// RuntimeVersion is the pinned ONNX Runtime (and onnxruntime-node) version.
	RuntimeVersion = "1.24.3"
	// RuntimeSHA256 is the hex SHA-256 of the pinned libonnxruntime.so.1.
	RuntimeSHA256 = "92ba8e44d31b80a34f5e805076a044122c3be1fffe0d88ed790de7267b0b2682"
	// RuntimeLibrary is the file name of the shared library.
	RuntimeLibrary = "libonnxruntime.so.1"
	// RuntimeEnv is the environment variable that names a library to use
	// instead of the cached one.
	RuntimeEnv = "ONNXRUNTIME_SHARED_LIBRARY_PATH"

	runtimePackage = "onnxruntime-node"
	runtimeEntry   = "package/bin/napi-v6/linux/x64/" + RuntimeLibrary
)

// ErrRuntimeNotFound is wrapped by every error that means the ONNX Runtime
// shared library is missing, corrupt or cannot be loaded.
var ErrRuntimeNotFound = errors.New("ONNX Runtime not found")

// ErrFetch is wrapped by the errors of Setup that mean npm could not
// fetch the ONNX Runtime package: npm is missing or failed, or the package
// registry is unreachable or refuses. Like ErrRuntimeNotFound it is a fault
// of the environment, not of the user's input.
var ErrFetch = errors.New("cannot fetch ONNX Runtime")

// fetchError marks an error of npm as matching ErrFetch, keeping its
// message.
type fetchError struct{ error }

func (e fetchError) Is(target error) bool { return target == ErrFetch }
func (e fetchError) Unwrap() error        { return e.error }

// RuntimeError reports an ONNX Runtime library that is missing, has the
// wrong hash or cannot be loaded. It matches ErrRuntimeNotFound with
// errors.Is, and its message tells the user how to fix it.
type RuntimeError struct {
	Path   string // the library tried; empty when none was found at all
	Reason string // what is wrong with it
}

func (e *RuntimeError) Error() string {
	const fix = "run `make setup` (or `fedcalib setup`), or set " + RuntimeEnv
	if e.Path == "" {
		return fmt.Sprintf("%v: %s", ErrRuntimeNotFound, fix)
	}
	return fmt.Sprintf("%v (%s: %s): %s", ErrRuntimeNotFound, e.Path, e.Reason, fix)
}

// Is reports whether target is ErrRuntimeNotFound.
func (e *RuntimeError) Is(target error) bool { return target == ErrRuntimeNotFound }

// CachedRuntimePath returns where Setup installs the pinned library:
// os.UserCacheDir()/fedcalib/onnxruntime/RuntimeVersion/RuntimeLibrary.
// The file need not exist.
func CachedRuntimePath() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("locating the user cache directory: %w", err)
	}
	return filepath.Join(dir, "fedcalib", "onnxruntime", RuntimeVersion, RuntimeLibrary), nil
}

// ResolveRuntime finds the ONNX Runtime shared library: explicit when it is
// not empty (a command-line flag), else the file named by the environment
// variable RuntimeEnv, else the cached copy that Setup installs. Explicit
// and environment paths are used as they are (any ONNX Runtime ≥ 1.24
// works); the cached copy must match RuntimeSHA256. The error is a
// *RuntimeError.
func ResolveRuntime(explicit string) (string, error) {
	for _, p := range []string{explicit, os.Getenv(RuntimeEnv)} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			return "", &RuntimeError{Path: p, Reason: statReason(err)}
		}
		return p, nil
	}
	p, err := CachedRuntimePath()
	if err != nil {
		return "", &RuntimeError{Reason: err.Error()}
	}
	sum, err := fileio.SHA256(p)
	if errors.Is(err, os.ErrNotExist) {
		return "", &RuntimeError{}
	}
	if err != nil {
		return "", &RuntimeError{Path: p, Reason: err.Error()}
	}
	if sum != RuntimeSHA256 {
		return "", &RuntimeError{Path: p, Reason: "sha256 " + sum + " is not the pinned " + RuntimeSHA256}
	}
	return p, nil
}

func statReason(err error) string {
	if errors.Is(err, os.ErrNotExist) {
		return "no such file"
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// runtimeEnv is the one piece of process-wide state in fedcalib.
// onnxruntime_go keeps a single global ONNX Runtime environment per process
// (SetSharedLibraryPath, InitializeEnvironment), so it is created here, once,
// under a lock, and never destroyed: every Session in the process shares it.
var runtimeEnv struct {
	sync.Mutex
	path string // the library loaded; empty until a load succeeds
}

// LoadedRuntimeVersion loads ONNX Runtime as InitRuntime(explicit) does
// and returns the version the library reports, with its path.
func LoadedRuntimeVersion(explicit string) (version, path string, err error) {
	if path, err = InitRuntime(explicit); err != nil {
		return "", "", err
	}
	return ort.GetVersion(), path, nil
}

// InitRuntime loads the ONNX Runtime library found by
// ResolveRuntime(explicit) and creates the process-wide ONNX Runtime
// environment. It is safe to call many times and from many goroutines:
// after the first success it does nothing, unless explicit names a
// different library than the one loaded, which is an error because a
// process can hold only one. A failed load may be retried. It returns the
// path of the library in use. OpenSession calls it.
func InitRuntime(explicit string) (string, error) {
	runtimeEnv.Lock()
	defer runtimeEnv.Unlock()
	if runtimeEnv.path != "" && explicit == "" {
		return runtimeEnv.path, nil
	}
	p, err := ResolveRuntime(explicit)
	if err != nil {
		return "", err
	}
	if runtimeEnv.path != "" {
		if !fileio.Same(p, runtimeEnv.path) {
			return "", fmt.Errorf("ONNX Runtime is already loaded from %s; a process cannot also load %s", runtimeEnv.path, p)
		}
		return runtimeEnv.path, nil
	}
	ort.SetSharedLibraryPath(p)
	if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
		return "", &RuntimeError{Path: p, Reason: "cannot load it (fedcalib needs ONNX Runtime >= 1.24): " + err.Error()}
	}
	runtimeEnv.path = p
	return p, nil
}

// SetupOptions configures Setup. The zero value runs npm from PATH and
// installs into CachedRuntimePath.
type SetupOptions struct {
	// Tarball is a local onnxruntime-node-RuntimeVersion.tgz to extract
	// instead of running npm pack (for offline machines). Empty runs npm.
	Tarball string
	// NPM is the npm executable. Empty means "npm" from PATH.
	NPM string
	// Dest is the file to install. Empty means CachedRuntimePath().
	Dest string
	// Log receives one line per step. Nil discards them.
	Log io.Writer
}

// SetupResult says what Setup did.
type SetupResult struct {
	Path      string // the installed library
	Installed bool   // false when a verified copy was already there
}

// Setup installs the pinned ONNX Runtime library. It runs
// `npm pack onnxruntime-node@RuntimeVersion --ignore-scripts` in a
// temporary directory (or reads opt.Tarball), extracts only the linux-x64
// libonnxruntime.so.1, checks it against RuntimeSHA256 and renames it into
// place, so an interrupted or failed Setup leaves no partial library.
// When the destination already holds the verified library Setup does
// nothing. Setup is the only code in fedcalib that downloads anything.
// Errors of npm wrap ErrFetch.
func Setup(ctx context.Context, opt SetupOptions) (SetupResult, error) {
	logw := opt.Log
	if logw == nil {
		logw = io.Discard
	}
	dest := opt.Dest
	if dest == "" {
		p, err := CachedRuntimePath()
		if err != nil {
			return SetupResult{}, err
		}
		dest = p
	}
	if opt.Tarball != "" {
		if fi, err := os.Stat(opt.Tarball); err != nil || fi.IsDir() {
			return SetupResult{}, fmt.Errorf("setup: tarball %s: not a readable file: give the onnxruntime-node-%s.tgz that npm pack wrote", opt.Tarball, RuntimeVersion)
		}
	}
	if sum, err := fileio.SHA256(dest); err == nil && sum == RuntimeSHA256 {
		fmt.Fprintf(logw, "ONNX Runtime %s already installed at %s\n", RuntimeVersion, dest)
		return SetupResult{Path: dest}, nil
	}
	tgz := opt.Tarball
	if tgz == "" {
		tmp, err := os.MkdirTemp("", "fedcalib-setup-")
		if err != nil {
			return SetupResult{}, err
		}
		defer os.RemoveAll(tmp)
		fmt.Fprintf(logw, "fetching %s@%s with npm pack\n", runtimePackage, RuntimeVersion)
		if tgz, err = npmPack(ctx, opt.NPM, tmp); err != nil {
			return SetupResult{}, err
		}
	}
	f, err := os.Open(tgz)
	if err != nil {
		return SetupResult{}, fmt.Errorf("setup: %w", err)
	}
	defer f.Close()
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return SetupResult{}, fmt.Errorf("setup: %w", err)
	}
	if err := installEntry(f, runtimeEntry, RuntimeSHA256, dest); err != nil {
		return SetupResult{}, fmt.Errorf("setup: %s: %w", tgz, err)
	}
	fmt.Fprintf(logw, "installed ONNX Runtime %s at %s (sha256 verified)\n", RuntimeVersion, dest)
	return SetupResult{Path: dest, Installed: true}, nil
}

// npmPack runs npm pack for the pinned package in dir and returns the path
// of the tarball it wrote.
func npmPack(ctx context.Context, npm, dir string) (string, error) {
	if npm == "" {
		npm = "npm"
	}
	spec := runtimePackage + "@" + RuntimeVersion
	cmd := exec.CommandContext(ctx, npm, "pack", spec, "--ignore-scripts", "--silent")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stdout = io.Discard
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := bytes.TrimSpace(stderr.Bytes())
		if len(msg) > 500 {
			msg = msg[len(msg)-500:]
		}
		return "", fetchError{fmt.Errorf("setup: npm pack %s failed (is npm installed and the package registry reachable?): %w: %s", spec, err, msg)}
	}
	matches, err := filepath.Glob(filepath.Join(dir, "*.tgz"))
	if err != nil || len(matches) != 1 {
		return "", fetchError{fmt.Errorf("setup: npm pack %s wrote %d tarballs in %s, want 1", spec, len(matches), dir)}
	}
	return matches[0], nil
}

// maxRuntimeBytes bounds the library extracted from a tarball: the pinned
// one takes about 20 MB, so an entry declaring more is not it, and is
// refused before a byte is written.
const maxRuntimeBytes = 256 << 20

// installEntry reads the gzip-compressed tar stream r, extracts the regular
// file named entry, checks that its SHA-256 is wantSHA and renames it to
// dest. Nothing is left at dest unless every check passed.
func installEntry(r io.Reader, entry, wantSHA, dest string) error {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("not a gzip tarball: %w", err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return fmt.Errorf("no %s in the tarball", entry)
		}
		if err != nil {
			return fmt.Errorf("reading the tarball: %w", err)
		}
		if hdr.Name != entry {
			continue
		}
		if hdr.Typeflag != tar.TypeReg {
			return fmt.Errorf("%s in the tarball is not a regular file", entry)
		}
		if hdr.Size > maxRuntimeBytes {
			return fmt.Errorf("%s in the tarball declares %d bytes, more than the %d an ONNX Runtime library may take: not the pinned package", entry, hdr.Size, maxRuntimeBytes)
		}
		return writeVerified(io.LimitReader(tr, maxRuntimeBytes), wantSHA, dest)
	}
}

func writeVerified(r io.Reader, wantSHA, dest string) error {
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), r); err != nil {
		tmp.Close()
		return fmt.Errorf("extracting: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != wantSHA {
		return fmt.Errorf("extracted library has sha256 %s, want the pinned %s", got, wantSHA)
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dest)
}
