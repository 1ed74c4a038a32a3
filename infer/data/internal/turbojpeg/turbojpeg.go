package turbojpeg

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The TurboJPEG API as turbojpeg.h documents it: a handle is opaque.
typedef void *fc_tjhandle;

// fc_tj holds the library and the functions fedcalib calls.
typedef struct {
	void *so;
	fc_tjhandle (*init_decompress)(void);
	int (*decompress2)(fc_tjhandle, const unsigned char *, unsigned long,
	                   unsigned char *, int, int, int, int, int);
	char *(*error_str2)(fc_tjhandle);
	int (*error_code)(fc_tjhandle);
	int (*destroy)(fc_tjhandle);
} fc_tj;

// fc_tj_open opens the library at path into t: 0, or -1 with the reason
// in msg.
static int fc_tj_open(fc_tj *t, const char *path, char *msg, size_t n) {
	static const char *names[] = {
		"tjInitDecompress", "tjDecompress2", "tjGetErrorStr2",
		"tjGetErrorCode", "tjDestroy",
	};
	void **slots[] = {
		(void **)&t->init_decompress, (void **)&t->decompress2,
		(void **)&t->error_str2, (void **)&t->error_code,
		(void **)&t->destroy,
	};
	t->so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (t->so == NULL) {
		const char *e = dlerror();
		snprintf(msg, n, "%s", e ? e : "dlopen failed");
		return -1;
	}
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		*slots[i] = dlsym(t->so, names[i]);
		if (*slots[i] == NULL) {
			snprintf(msg, n, "it has no %s: not libjpeg-turbo's TurboJPEG library, version 2.0 or later", names[i]);
			dlclose(t->so);
			t->so = NULL;
			return -1;
		}
	}
	return 0;
}

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
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// library is a loaded TurboJPEG library. It is never unloaded.
type library struct{ c C.fc_tj }

// msgLen bounds the messages copied from C (libjpeg's JMSG_LENGTH_MAX is
// 200).
const msgLen = 256

// open loads the TurboJPEG library at path (a file, or a name that dlopen
// looks up in the library path).
func open(path string) (*library, error) {
	l := new(library)
	var msg [msgLen]C.char
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	if C.fc_tj_open(&l.c, cpath, &msg[0], msgLen) != 0 {
		// dlerror's message starts with the path it was given.
		return nil, &LibraryError{Path: path, Reason: strings.TrimPrefix(C.GoString(&msg[0]), path+": ")}
	}
	return l, nil
}

// loaded is the library of the process, loaded the first time a Decoder
// is made, from the path in LibraryEnv or else Library. Like the ONNX
// Runtime environment (infer/runtime.go) it is process-wide because a
// shared library is: it is opened once and never closed. A failed load
// is not retried; the process must be restarted with the library in
// place.
var loaded = sync.OnceValues(func() (*library, error) {
	path := Library
	if p := os.Getenv(LibraryEnv); p != "" {
		path = p
	}
	return open(path)
})

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
