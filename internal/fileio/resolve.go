package fileio

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// maxLinks is how many symbolic links Resolve follows before it gives up,
// as the kernel does (ELOOP).
const maxLinks = 40

// Resolve returns the file that path names once every symbolic link is
// followed: those of its directories and, unlike filepath.EvalSymlinks,
// a last link whose target does not exist yet (so that a write through a
// dangling link creates the file it points to). A path whose directory
// does not exist is returned cleaned. The result is absolute. It is where an update that must
// reach the file a link names (an atomic rename, a lock) has to happen.
func Resolve(path string) (string, error) {
	p, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	for range maxLinks {
		dir, base := filepath.Split(p)
		if dir == "" {
			dir = "."
		}
		if d, err := filepath.EvalSymlinks(dir); err == nil {
			p = filepath.Join(d, base)
		}
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			return p, nil
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			return p, nil
		}
		target, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		p = filepath.Clean(target)
	}
	return "", fmt.Errorf("%s: too many levels of symbolic links", path)
}
