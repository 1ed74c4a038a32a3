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

// CheckOutput returns an error wrapping ErrOutputIsInput when out names an
// existing file that is one of inputs. An input may be a path or a data
// specification such as "mnist:DIR:test" or "a.npy,b.npy": every part
// between colons and commas that names an existing file counts. An output
// that does not exist yet is always allowed.
func CheckOutput(out string, inputs ...string) error {
	fo, err := os.Stat(out)
	if err != nil {
		return nil // a new file
	}
	for _, in := range inputs {
		parts := append([]string{in}, strings.FieldsFunc(in, func(r rune) bool { return r == ':' || r == ',' })...)
		for _, part := range parts {
			if fi, err := os.Stat(part); err == nil && os.SameFile(fi, fo) {
				return fmt.Errorf("%s %w (%s): choose another output file", out, ErrOutputIsInput, in)
			}
		}
	}
	return nil
}
