// Package atomicfile writes files so that no reader ever sees one half
// written: fedcalib never leaves a partial output behind (SPEC §10).
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write writes data to path through a temporary file in the same
// directory, which it syncs, gives mode 0644 and renames over path. On
// error it removes the temporary file and leaves path as it was.
func Write(path string, data []byte) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
