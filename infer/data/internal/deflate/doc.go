// Package deflate decompresses whole gzip buffers with libdeflate, which
// it loads at run time.
//
// libdeflate (Debian's libdeflate0) inflates several times faster than
// Go's compress/flate or klauspost/compress, but only a whole buffer at a
// time, into an output buffer whose size the caller gives: it never
// allocates from the gzip trailer's ISIZE, which an attacker controls, and
// reports ErrShortBuffer where the output would not fit. Its caller (the
// dataset readers of infer/data) keeps the streaming decompressor of
// klauspost/compress for everything else: no library, a pipe, a file
// larger than its cap, and data that Gunzip refuses.
//
// The library is opened with dlopen (internal/dynlib) the first time a
// Decompressor is made:
// the file named by the environment variable LibraryEnv when it is set,
// else Library from the system's library path. Building fedcalib
// therefore needs no libdeflate headers, and a machine without the
// library gets an error wrapping ErrNotFound, which callers treat as
// "use the slower decompressor". Loading needs cgo; in a build without
// cgo, NewDecompressor fails that way too.
//
// Only the documented, stable libdeflate API (libdeflate.h, version 1.5
// and later; an opaque handle and plain integers, declared here) is used:
// libdeflate_alloc_decompressor, libdeflate_gzip_decompress_ex,
// libdeflate_deflate_decompress_ex (the tests compare raw deflate with
// klauspost/compress through it) and libdeflate_free_decompressor.
//
// Gunzip accepts what Go's gzip reader accepts, and no more: libdeflate
// skips a header CRC and allows file names and comments of any length,
// which compress/gzip and klauspost/compress check or refuse; Gunzip
// checks each member's header as they do before libdeflate inflates it,
// and reports ErrCorrupt for any header they would refuse. Members follow
// each other as in their multistream mode (the default): the data ends
// cleanly only at the end of a member.
//
// A Decompressor holds one libdeflate handle and is not safe for
// concurrent use; make one per goroutine.
package deflate
