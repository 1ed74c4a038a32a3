package turbojpeg

/*
#include <stddef.h>
#include <stdio.h>
#include <string.h>

// The TurboJPEG API as turbojpeg.h documents it: a handle is opaque.
typedef void *fc_tjhandle;

// fc_tj holds the functions fedcalib calls, resolved by dynlib.
typedef struct {
	fc_tjhandle (*init_decompress)(void);
	int (*decompress2)(fc_tjhandle, const unsigned char *, unsigned long,
	                   unsigned char *, int, int, int, int, int);
	char *(*error_str2)(fc_tjhandle);
	int (*error_code)(fc_tjhandle);
	int (*destroy)(fc_tjhandle);
} fc_tj;

static fc_tjhandle fc_tj_init(const fc_tj *t) { return t->init_decompress(); }

static void fc_tj_destroy(const fc_tj *t, fc_tjhandle h) { t->destroy(h); }

// fc_tj_decompress decodes the size bytes at src into dst (height rows of
// pitch bytes, pixel format pf) with flags. It returns 0 when the image
// decoded cleanly; 1 when libjpeg decoded it from corrupt data, with its
// first warning in msg; -1 when libjpeg could not decode it, with the
// error in msg.
//
// TurboJPEG reports an error after a warning as a warning
// (tjGetErrorCode), so a first pass stops at the first warning
// (TJFLAG_STOPONWARNING), which tells a clean image, an error and a
// warning apart exactly; only an image with a warning is decoded again
// to its end. libjpeg writes the text of the first warning of an image,
// and of an error, to TurboJPEG's message: in the second pass it is still
// the first warning's text unless an error followed. Messages are read
// in this call because TurboJPEG keeps them per thread.
static int fc_tj_decompress(const fc_tj *t, fc_tjhandle h,
                            const unsigned char *src, unsigned long size,
                            unsigned char *dst, int width, int pitch,
                            int height, int pf, int flags,
                            char *msg, size_t n) {
	enum { TJERR_WARNING = 0, TJFLAG_STOPONWARNING = 8192 };
	if (t->decompress2(h, src, size, dst, width, pitch, height, pf, flags | TJFLAG_STOPONWARNING) == 0)
		return 0;
	snprintf(msg, n, "%s", t->error_str2(h));
	if (t->error_code(h) != TJERR_WARNING)
		return -1;
	if (t->decompress2(h, src, size, dst, width, pitch, height, pf, flags) == 0)
		return 1; // not reached: tjDecompress2 fails on a warning
	const char *again = t->error_str2(h);
	if (strncmp(msg, again, n - 1) != 0) {
		snprintf(msg, n, "%s", again);
		return -1;
	}
	return 1;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/fedcalib/fedcalib/internal/dynlib"
)

// library is the loaded TurboJPEG library's functions. It is never
// unloaded.
type library struct{ c C.fc_tj }

// msgLen bounds the messages copied from C (libjpeg's JMSG_LENGTH_MAX is
// 200).
const msgLen = 256

// newLibrary returns the functions of l, loaded with spec.
func newLibrary(l *dynlib.Library) *library {
	fn := func(name string) *[0]byte { return (*[0]byte)(l.Symbol(name)) }
	return &library{c: C.fc_tj{
		init_decompress: fn(symInitDecompress),
		decompress2:     fn(symDecompress2),
		error_str2:      fn(symGetErrorStr2),
		error_code:      fn(symGetErrorCode),
		destroy:         fn(symDestroy),
	}}
}

// loaded is the library of the process, loaded the first time a Decoder
// is made, from the path in LibraryEnv or else Library. Like the ONNX
// Runtime environment (infer/runtime.go) it is process-wide because a
// shared library is: it is opened once and never closed. A failed load
// is not retried; the process must be restarted with the library in
// place.
var loaded = dynlib.Loader(&spec, newLibrary)

// tj returns TurboJPEG's pixel format for f.
func (f Format) tj() C.int {
	if f == CMYK {
		return tjpfCMYK
	}
	return tjpfRGB
}

// Decoder decodes JPEG images. It holds a TurboJPEG handle and must not
// be used by two goroutines at once. Close frees the handle; a Decoder
// that is dropped without Close frees it when garbage-collected.
type Decoder struct {
	lib     *library
	h       C.fc_tjhandle
	cleanup runtime.Cleanup
	msg     [msgLen]C.char
}

// NewDecoder loads the library (once per process) and returns a Decoder.
// The error wraps ErrNotFound when the library cannot be loaded.
func NewDecoder() (*Decoder, error) {
	lib, err := loaded()
	if err != nil {
		return nil, err
	}
	h := C.fc_tj_init(&lib.c)
	if h == nil {
		return nil, errors.New("turbojpeg: tjInitDecompress failed (out of memory?)")
	}
	d := &Decoder{lib: lib, h: h}
	d.cleanup = runtime.AddCleanup(d, func(h C.fc_tjhandle) { C.fc_tj_destroy(&lib.c, h) }, h)
	return d, nil
}

// Close frees the decoder's handle. It is safe to call more than once.
func (d *Decoder) Close() {
	if d.h == nil {
		return
	}
	d.cleanup.Stop()
	C.fc_tj_destroy(&d.lib.c, d.h)
	d.h = nil
}

// Decode decodes the JPEG data src into dst, width×height pixels of
// format f, row after row (len(dst) must be width·height·f.Size()). width
// and height must be the image's, as its frame header gives them: libjpeg
// scales a larger image down to fit dst and never writes outside it.
//
// err is non-nil when libjpeg could not decode the image (dst is then
// partly written). Otherwise warning is empty, or holds libjpeg's first
// warning about corrupt data it decoded anyway (bytes before a marker, a
// bad Huffman code, data that ended early, which libjpeg completes with
// gray); dst then holds libjpeg's pixels, which are what PIL returns.
func (d *Decoder) Decode(dst, src []byte, width, height int, f Format) (warning string, err error) {
	if d.h == nil {
		panic("turbojpeg: Decode after Close")
	}
	if width <= 0 || height <= 0 || len(dst) != width*height*f.Size() {
		panic(fmt.Sprintf("turbojpeg: %d-byte destination for %d×%d pixels of %d bytes", len(dst), width, height, f.Size()))
	}
	if len(src) == 0 {
		return "", errors.New("empty JPEG")
	}
	r := C.fc_tj_decompress(&d.lib.c, d.h,
		(*C.uchar)(unsafe.Pointer(&src[0])), C.ulong(len(src)),
		(*C.uchar)(unsafe.Pointer(&dst[0])), C.int(width), C.int(width*f.Size()), C.int(height),
		f.tj(), tjflagLimitScans, &d.msg[0], msgLen)
	runtime.KeepAlive(src)
	runtime.KeepAlive(dst)
	switch r {
	case 0:
		return "", nil
	case 1:
		return C.GoString(&d.msg[0]), nil
	}
	return "", errors.New(C.GoString(&d.msg[0]))
}
