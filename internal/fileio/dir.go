package fileio

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// A DirFile is one file of a directory that WriteDir writes: its path
// relative to the directory, slash-separated, and its content. The zero
// value is not usable: Name must be a local path.
type DirFile struct {
	Name string // e.g. "1/model.onnx"
	Data []byte
}

// WriteDir writes a new directory dir holding files, atomically: it
// writes them into a temporary directory beside dir (named TempPrefix(dir)
// followed by random digits, registered for RemoveTemps), syncs each,
// and renames the temporary directory to dir. dir must not exist, or be
// an empty directory; its parent must exist. On error, or when ctx is
// cancelled before the rename, it removes the temporary directory and
// leaves dir as it was. Errors name dir, not the temporary directory.
func WriteDir(ctx context.Context, dir string, files []DirFile) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s exists and is not empty: choose a new directory or remove it", dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %w: choose a new directory", dir, unwrapPath(err))
	}
	for _, f := range files {
		if !filepath.IsLocal(filepath.FromSlash(f.Name)) {
			return fmt.Errorf("fileio: WriteDir of %q: not a local path", f.Name)
		}
	}
	parent, base := filepath.Split(filepath.Clean(dir))
	if parent == "" {
		parent = "."
	}
	tmp, err := os.MkdirTemp(parent, tempBase(base)+"*")
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", dir, unwrapPath(err))
	}
	register(tmp)
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
		unregister(tmp)
	}()
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := writeSynced(filepath.Join(tmp, filepath.FromSlash(f.Name)), f.Data); err != nil {
			return fmt.Errorf("writing %s: %w", filepath.Join(dir, f.Name), unwrapPath(err))
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("writing %s: %w", dir, unwrapPath(err))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	os.Remove(dir) // an empty directory, which Rename would not replace
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("cannot write %s: %w", dir, unwrapPath(err))
	}
	return nil
}

// writeSynced writes data to a new file at path with mode 0644, creating
// its directories, and syncs it.
func writeSynced(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
