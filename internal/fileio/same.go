package fileio

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrOutputIsInput is returned (wrapped, after the output's path) by
// CheckOutput for an output path that names one of the inputs.
var ErrOutputIsInput = errors.New("is an input")

// Same reports whether paths a and b name the same file or directory: the
// same file on disk when both exist (hard links and symbolic links
// included), else the same cleaned path.
func Same(a, b string) bool {
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	if err1 != nil || err2 != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return os.SameFile(fa, fb)
}

// CheckOutput returns an error wrapping ErrOutputIsInput when out names
// one of inputs: a file a command reads, appends to or locks. An existing
// out is compared with every existing input by device and inode
// (os.SameFile), so symbolic and hard links are seen through; an input
// may be a path or a data specification such as "mnist:DIR:test" or
// "a.npy,b.npy", whose every part between colons and commas that names
// an existing file counts. An out that does not exist yet is compared by
// the file it would create (Resolve) with the inputs that do not exist
// either, such as a privacy ledger its first run will make. Empty inputs
// are ignored.
func CheckOutput(out string, inputs ...string) error {
	refuse := func(in string) error {
		return fmt.Errorf("%s %w (%s): choose another output file", out, ErrOutputIsInput, in)
	}
	fo, err := os.Stat(out)
	if err != nil {
		ro, err := Resolve(out)
		if err != nil {
			return nil // not a path a file can be written at: the write will say
		}
		for _, in := range inputs {
			if in == "" {
				continue
			}
			if _, err := os.Stat(in); err == nil {
				continue
			}
			if ri, err := Resolve(in); err == nil && ri == ro {
				return refuse(in)
			}
		}
		return nil
	}
	for _, in := range inputs {
		if in == "" {
			continue
		}
		parts := append([]string{in}, strings.FieldsFunc(in, func(r rune) bool { return r == ':' || r == ',' })...)
		for _, part := range parts {
			if fi, err := os.Stat(part); err == nil && os.SameFile(fi, fo) {
				return refuse(in)
			}
		}
	}
	return nil
}

// CheckDir reports whether a file can be written at path, without
// writing it: path must not be a directory, and its directory must exist,
// be a directory, and accept a new file (CheckDir creates and removes an
// empty temporary file there to find out, so a read-only file system or a
// missing permission is caught as the real write would meet it). Errors
// start with path and say what to do.
func CheckDir(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%s is a directory: name a file to write in it", path)
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s: directory %s does not exist: create it first", path, dir)
	case err != nil:
		return fmt.Errorf("%s: directory %s: %w", path, dir, unwrapPath(err))
	case !fi.IsDir():
		return fmt.Errorf("%s: %s is not a directory", path, dir)
	}
	f, err := os.CreateTemp(dir, tempBase(filepath.Base(path))+"*")
	if err != nil {
		return fmt.Errorf("%s: cannot write into directory %s (%w): choose another directory", path, dir, unwrapPath(err))
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}
