package deflate

import (
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/fedcalib/fedcalib/internal/dynlib"
)

const (
	// Library is the file name of the libdeflate library that is loaded
	// from the system's library path when LibraryEnv is not set.
	Library = "libdeflate.so.0"
	// LibraryEnv is the environment variable that names a libdeflate
	// library file to load instead of Library.
	LibraryEnv = "FEDCALIB_LIBDEFLATE"
)

// The libdeflate functions fedcalib calls.
const (
	symAlloc   = "libdeflate_alloc_decompressor"
	symGzip    = "libdeflate_gzip_decompress_ex"
	symFree    = "libdeflate_free_decompressor"
	symDeflate = "libdeflate_deflate_decompress_ex"
)

// spec loads libdeflate: Library or LibraryEnv, with the functions
// fedcalib calls, failing with a *LibraryError.
var spec = dynlib.Spec{
	Library: Library,
	Env:     LibraryEnv,
	Symbols: []string{symAlloc, symGzip, symFree, symDeflate},
	Kind:    "libdeflate, version 1.5 or later",
	Error:   func(e *dynlib.LoadError) error { return &LibraryError{LoadError: *e} },
}

// ErrNotFound is wrapped by every error that means the libdeflate library
// is missing or cannot be loaded: a fault of the machine, not of the data.
var ErrNotFound = errors.New("libdeflate not found")

// ErrShortBuffer is returned by Gunzip when the decompressed data does not
// fit the output buffer.
var ErrShortBuffer = errors.New("deflate: decompressed data larger than the buffer")

// ErrCorrupt is returned by Gunzip for data that is not gzip as Go's gzip
// reader accepts it: a bad header, corrupt or truncated deflate data, a
// checksum or size that does not match, or bytes after a member that do
// not start another.
var ErrCorrupt = errors.New("deflate: corrupt or unsupported gzip data")

// LibraryError reports a libdeflate library that cannot be loaded: Path
// is the file or library name given to dlopen, Reason why it failed (from
// dlopen, a missing function, or a build without cgo). It matches
// ErrNotFound with errors.Is, and its message says how to install the
// library.
type LibraryError struct{ dynlib.LoadError }

func (e *LibraryError) Error() string {
	return fmt.Sprintf("%v (%s: %s): gzip files are decompressed with klauspost/compress instead, more slowly; "+
		"install libdeflate (Debian and Ubuntu: apt-get install libdeflate0, which `make setup` runs as root) or set %s to its path",
		ErrNotFound, e.Path, e.Reason, LibraryEnv)
}

// Is reports whether target is ErrNotFound.
func (e *LibraryError) Is(target error) bool { return target == ErrNotFound }

// The gzip header (RFC 1952, section 2.3).
const (
	gzipID1, gzipID2, gzipDeflate = 0x1f, 0x8b, 8
	flagHdrCrc                    = 1 << 1
	flagExtra                     = 1 << 2
	flagName                      = 1 << 3
	flagComment                   = 1 << 4
	// maxString is the longest file name or comment, with its NUL, that
	// Go's gzip readers accept (their header buffer is 512 bytes).
	maxString = 512
)

// checkHeader checks the gzip member header at the start of src as Go's
// gzip readers (compress/gzip, klauspost/compress/gzip) check it, and
// reports whether they would accept it: magic, compression method,
// reserved flags, the extra field, a file name and comment of at most 511
// bytes, and the header CRC when there is one.
func checkHeader(src []byte) bool {
	if len(src) < 10 || src[0] != gzipID1 || src[1] != gzipID2 || src[2] != gzipDeflate {
		return false
	}
	flg := src[3]
	i := 10
	if flg&flagExtra != 0 {
		if len(src) < i+2 {
			return false
		}
		i += 2 + (int(src[i]) | int(src[i+1])<<8)
		if len(src) < i {
			return false
		}
	}
	for _, f := range []byte{flagName, flagComment} {
		if flg&f == 0 {
			continue
		}
		j := 0
		for ; j < maxString && i+j < len(src) && src[i+j] != 0; j++ {
		}
		if j == maxString || i+j == len(src) {
			return false
		}
		i += j + 1
	}
	if flg&flagHdrCrc != 0 {
		if len(src) < i+2 {
			return false
		}
		if uint16(crc32.ChecksumIEEE(src[:i])) != uint16(src[i])|uint16(src[i+1])<<8 {
			return false
		}
	}
	return flg>>5 == 0
}
