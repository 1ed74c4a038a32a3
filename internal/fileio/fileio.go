// Package fileio holds fedcalib's file helpers: Write and Create, which
// never leave a half-written output behind (SPEC §10), and WriteDir, its
// counterpart for a directory of files; CheckOutput and
// CheckDir, which refuse an output before any work is done; and SHA256,
// the content hash recorded in provenance and used to verify downloads.
//
// Outputs are written through a temporary file in the output's directory,
// named "." + the output's base name + ".tmp" + random digits (TempPrefix),
// renamed over the output only when complete. Every error path and a
// cancelled context remove it, and RemoveTemps removes every one still
// open in the process (cli.Main calls it when SIGINT or SIGTERM arrives).
// Only SIGKILL or a crash can leave one behind: the next Create or Write
// of the same output removes those older than StaleAfter.
package fileio

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// chunk is how many bytes Write writes between checks of its context.
const chunk = 4 << 20

// Write writes data to path atomically: see WriteContext.
func Write(path string, data []byte) error {
	return WriteContext(context.Background(), path, data)
}

// WriteContext writes data to path through a temporary file in the same
// directory (see Create), which it syncs, gives mode 0644 and renames over
// path. On error, or when ctx is cancelled before the rename, it removes
// the temporary file, leaves path as it was and returns the error (ctx's
// error when cancelled).
func WriteContext(ctx context.Context, path string, data []byte) error {
	t, err := Create(ctx, path)
	if err != nil {
		return err
	}
	defer t.Abort()
	for len(data) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(len(data), chunk)
		if _, err := t.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return t.Commit(ctx)
}

// A Temp is an output being written: a temporary file in the directory
// of its Path, which Commit renames over Path and Abort removes. Create
// makes one; the zero Temp is not usable. A Temp must not be used by
// several goroutines at once.
type Temp struct {
	f    *os.File
	path string
	done bool // committed or aborted
}

// Create starts writing the file at path: it removes the stale temporary
// files of path (see StaleAfter) and creates a new one, empty, named
// TempPrefix(path) followed by random digits and registered for
// RemoveTemps. It fails when ctx is already cancelled. Errors name path,
// not the temporary file.
func Create(ctx context.Context, path string) (*Temp, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	removeStale(dir, base)
	f, err := os.CreateTemp(dir, tempBase(base)+"*")
	if err != nil {
		return nil, fmt.Errorf("cannot write %s: %w", path, unwrapPath(err))
	}
	register(f.Name())
	return &Temp{f: f, path: path}, nil
}

// Name returns the temporary file's name: the file holds what was
// written so far and may be read (say by ONNX Runtime) before Commit.
func (t *Temp) Name() string { return t.f.Name() }

// Path returns the output the Temp will become.
func (t *Temp) Path() string { return t.path }

// Write appends p to the temporary file.
func (t *Temp) Write(p []byte) (int, error) {
	n, err := t.f.Write(p)
	if err != nil {
		return n, fmt.Errorf("writing %s: %w", t.path, unwrapPath(err))
	}
	return n, nil
}

// Commit gives the temporary file mode 0644, syncs and closes it, and
// renames it over Path. On error, or when ctx is cancelled, it removes the
// temporary file and leaves Path as it was.
func (t *Temp) Commit(ctx context.Context) (err error) {
	if t.done {
		return errors.New("fileio: Commit of a finished Temp")
	}
	defer func() {
		if err != nil {
			t.Abort()
		}
	}()
	if err := t.f.Chmod(0o644); err != nil {
		return fmt.Errorf("writing %s: %w", t.path, unwrapPath(err))
	}
	if err := t.f.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", t.path, unwrapPath(err))
	}
	if err := t.f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", t.path, unwrapPath(err))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.Rename(t.f.Name(), t.path); err != nil {
		return fmt.Errorf("cannot write %s: %w", t.path, unwrapPath(err))
	}
	t.done = true
	unregister(t.f.Name())
	return nil
}

// Abort closes and removes the temporary file, leaving Path as it was. It
// does nothing after Commit or a first Abort, so it may be deferred.
func (t *Temp) Abort() {
	if t.done {
		return
	}
	t.done = true
	t.f.Close()
	os.Remove(t.f.Name())
	unregister(t.f.Name())
}

// unwrapPath returns the cause of a *os.PathError or *os.LinkError, whose
// message would name the temporary file, and err itself otherwise.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// SHA256 returns the hex SHA-256 of the file at path.
func SHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
