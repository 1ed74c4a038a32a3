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

// anOutput is one output of a command, for checkApart: the flag that
// named it, its path, and whether it is a directory the command writes
// whole (such as export's --test-vectors).
type anOutput struct {
	flag, path string
	dir        bool
}

// checkApart refuses, before any work, outputs of one command that
// overlap: two naming one file (through links too), or an output inside
// a directory another output writes whole, which the directory's write
// would destroy or fail on once the first output is written. Empty paths
// are skipped. Commands writing several outputs call it with all of them
// (export: --out with --test-vectors).
func checkApart(outs ...anOutput) error {
	type resolved struct {
		anOutput
		real string
	}
	var rs []resolved
	for _, o := range outs {
		if strings.TrimSpace(o.path) == "" {
			continue
		}
		real, err := fileio.Resolve(o.path)
		if err != nil {
			return fmt.Errorf("%s %s: %w", o.flag, o.path, err)
		}
		rs = append(rs, resolved{o, real})
	}
	for i, a := range rs {
		for _, b := range rs[i+1:] {
			switch {
			case a.real == b.real || fileio.Same(a.path, b.path):
				return fmt.Errorf("%s %s and %s %s name the same file: give each output its own name", a.flag, a.path, b.flag, b.path)
			case b.dir && within(a.real, b.real):
				return fmt.Errorf("%s %s is inside %s %s, which is written whole: put it elsewhere", a.flag, a.path, b.flag, b.path)
			case a.dir && within(b.real, a.real):
				return fmt.Errorf("%s %s is inside %s %s, which is written whole: put it elsewhere", b.flag, b.path, a.flag, a.path)
			}
		}
	}
	return nil
}

// within reports whether the absolute path p lies under the directory dir.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && filepath.IsLocal(rel)
}
