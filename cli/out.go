package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fedcalib/fedcalib/internal/fileio"
)

// An outKind is a kind of file a command writes: what it holds, and the
// extension its name must end in.
type outKind struct {
	what string // "a calibrator file"
	ext  string // ".json"
}

// The kinds of file fedcalib writes.
var (
	modelOut      = outKind{"an ONNX model", ".onnx"}
	sidecarOut    = outKind{"a sidecar (calibrator) file", ".json"}
	calibratorOut = outKind{"a calibrator file", ".json"}
	partitionOut  = outKind{"a partition file", ".json"}
	logitsOut     = outKind{"a logits file", ".npz"}
)

// checkOut is the one check of an output file, run before any work: out
// must be named, end in kind's extension, not be any of inputs (paths or
// dataset specs, see fileio.CheckOutput) and be writable in an existing
// directory (fileio.CheckDir). flag names the option that gave out, such
// as "--out".
func checkOut(flag, out string, kind outKind, inputs ...string) error {
	if strings.TrimSpace(out) == "" {
		return fmt.Errorf("%s is empty: name the %s file to write", flag, kind.ext)
	}
	if !strings.EqualFold(filepath.Ext(out), kind.ext) {
		return fmt.Errorf("%s %s: %s must end in %s", flag, out, kind.what, kind.ext)
	}
	if err := fileio.CheckOutput(out, inputs...); err != nil {
		return fmt.Errorf("%s %w", flag, err)
	}
	if err := fileio.CheckDir(out); err != nil {
		return fmt.Errorf("%s %w", flag, err)
	}
	return nil
}

// checkOutDir is checkOut for a command that writes several files into
// the directory dir, creating it (and its parents) when missing: dir must
// not be an existing file (an input least of all), and must be writable
// when it exists.
func checkOutDir(flag, dir string, inputs ...string) error {
	if strings.TrimSpace(dir) == "" {
		return fmt.Errorf("%s is empty: name the directory to write into", flag)
	}
	if err := fileio.CheckOutput(dir, inputs...); err != nil {
		return fmt.Errorf("%s %w", flag, err)
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil // created by the command
	case err != nil:
		return fmt.Errorf("%s %w", flag, err)
	case !fi.IsDir():
		return fmt.Errorf("%s %s is a file: give a directory", flag, dir)
	}
	if err := fileio.CheckDir(filepath.Join(dir, "probe")); err != nil {
		return fmt.Errorf("%s %s: cannot write into it: choose another directory", flag, dir)
	}
	return nil
}
