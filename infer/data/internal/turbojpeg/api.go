package turbojpeg

import (
	"errors"
	"fmt"

	"github.com/fedcalib/fedcalib/internal/dynlib"
)

const (
	// Library is the file name of the TurboJPEG library that is loaded
	// from the system's library path when LibraryEnv is not set.
	Library = "libturbojpeg.so.0"
	// LibraryEnv is the environment variable that names a TurboJPEG
	// library file to load instead of Library.
	LibraryEnv = "FEDCALIB_LIBTURBOJPEG"
)

// The TurboJPEG functions fedcalib calls.
const (
	symInitDecompress = "tjInitDecompress"
	symDecompress2    = "tjDecompress2"
	symGetErrorStr2   = "tjGetErrorStr2"
	symGetErrorCode   = "tjGetErrorCode"
	symDestroy        = "tjDestroy"
)

// spec loads the TurboJPEG library: Library or LibraryEnv, with the
// functions fedcalib calls, failing with a *LibraryError.
var spec = dynlib.Spec{
	Library: Library,
	Env:     LibraryEnv,
	Symbols: []string{symInitDecompress, symDecompress2, symGetErrorStr2, symGetErrorCode, symDestroy},
	Kind:    "libjpeg-turbo's TurboJPEG library, version 2.0 or later",
	Error:   func(e *dynlib.LoadError) error { return &LibraryError{LoadError: *e} },
}

// TurboJPEG's pixel formats (enum TJPF) and flags (TJFLAG_*), as
// turbojpeg.h defines them.
const (
	tjpfRGB          = 0
	tjpfCMYK         = 11
	tjflagLimitScans = 32768
)

// ErrNotFound is wrapped by every error that means the TurboJPEG library
// is missing or cannot be loaded: a fault of the machine, not of the
// image.
var ErrNotFound = errors.New("libturbojpeg not found")

// LibraryError reports a TurboJPEG library that cannot be loaded: Path is
// the file or library name given to dlopen, Reason why it failed (from
// dlopen, a missing function, or a build without cgo). It matches
// ErrNotFound with errors.Is, and its message says how to install the
// library.
type LibraryError struct{ dynlib.LoadError }

func (e *LibraryError) Error() string {
	return fmt.Sprintf("%v (%s: %s): JPEG images are decoded by libjpeg-turbo's TurboJPEG library; "+
		"install it (Debian and Ubuntu: apt-get install libturbojpeg0, which `make setup` runs as root) or set %s to its path",
		ErrNotFound, e.Path, e.Reason, LibraryEnv)
}

// Is reports whether target is ErrNotFound.
func (e *LibraryError) Is(target error) bool { return target == ErrNotFound }

// Format is the layout of decoded pixels. The zero value is RGB.
type Format int

const (
	// RGB is 3 bytes per pixel, red, green and blue, as libjpeg converts
	// a YCbCr, RGB or grayscale JPEG to RGB (gray is replicated).
	RGB Format = iota
	// CMYK is 4 bytes per pixel as libjpeg decodes a 4-component JPEG: a
	// YCCK image converted to CMYK, a CMYK image as stored (Adobe's
	// inverted convention included; nothing is inverted here).
	CMYK
)

// Size returns the bytes per pixel of f.
func (f Format) Size() int {
	if f == CMYK {
		return 4
	}
	return 3
}

// MaxScans is the number of scans beyond which Decode refuses a
// progressive JPEG (TJFLAG_LIMITSCANS): 500. Each scan revisits the
// whole image, so a small file of many scans could otherwise take
// unbounded time; encoders write at most a few dozen.
const MaxScans = 500
