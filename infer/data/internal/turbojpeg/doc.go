// Package turbojpeg decodes JPEG images with libjpeg-turbo's TurboJPEG
// library, which it loads at run time.
//
// The library is opened with dlopen (internal/dynlib) the first time a
// Decoder is made:
// the file named by the environment variable LibraryEnv when it is set,
// else Library from the system's library path (Debian's libturbojpeg0).
// Building fedcalib therefore needs no JPEG headers or libraries, and a
// machine without the library fails only when it decodes a JPEG, with an
// error that wraps ErrNotFound and says how to install it. Loading needs
// cgo; in a build without cgo, NewDecoder fails that way too.
//
// Only the documented TurboJPEG API is used (turbojpeg.h, version 1.2
// to 2.x, all opaque handles and plain integers, declared here):
// tjInitDecompress, tjDecompress2, tjGetErrorStr2, tjGetErrorCode and
// tjDestroy. tjDecompress2 runs libjpeg's default decompression unless
// told otherwise: the accurate integer inverse DCT (JDCT_ISLOW; only
// TJFLAG_FASTDCT selects another) and fancy chroma upsampling (only
// TJFLAG_FASTUPSAMPLE turns it off); Decoder passes neither. Those are
// the defaults PIL's decoder runs with, so with the same libjpeg-turbo
// build the pixels are PIL's.
//
// A Decoder holds one TurboJPEG handle and is not safe for concurrent
// use; make one per goroutine. Different Decoders may decode at the same
// time. libjpeg-turbo keeps the text of its last error per thread, so
// each decode and the reading of its error happen in one C call, on one
// thread.
package turbojpeg
