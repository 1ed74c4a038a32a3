package deflate

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

// The libdeflate API as libdeflate.h documents it: a decompressor is
// opaque; results are enum libdeflate_result.
typedef void *fc_dfhandle;

enum {
	FC_LIBDEFLATE_SUCCESS = 0,
	FC_LIBDEFLATE_BAD_DATA = 1,
	FC_LIBDEFLATE_SHORT_OUTPUT = 2,
	FC_LIBDEFLATE_INSUFFICIENT_SPACE = 3,
};

// fc_df holds the library and the functions fedcalib calls.
typedef struct {
	void *so;
	fc_dfhandle (*alloc)(void);
	int (*gzip_ex)(fc_dfhandle, const void *, size_t, void *, size_t, size_t *, size_t *);
	void (*free)(fc_dfhandle);
	int (*deflate_ex)(fc_dfhandle, const void *, size_t, void *, size_t, size_t *, size_t *);
} fc_df;

// fc_df_open opens the library at path into t: 0, or -1 with the reason
// in msg.
static int fc_df_open(fc_df *t, const char *path, char *msg, size_t n) {
	static const char *names[] = {
		"libdeflate_alloc_decompressor", "libdeflate_gzip_decompress_ex",
		"libdeflate_free_decompressor", "libdeflate_deflate_decompress_ex",
	};
	void **slots[] = {(void **)&t->alloc, (void **)&t->gzip_ex, (void **)&t->free, (void **)&t->deflate_ex};
	t->so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (t->so == NULL) {
		const char *e = dlerror();
		snprintf(msg, n, "%s", e ? e : "dlopen failed");
		return -1;
	}
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		*slots[i] = dlsym(t->so, names[i]);
		if (*slots[i] == NULL) {
			snprintf(msg, n, "it has no %s: not libdeflate, version 1.5 or later", names[i]);
			dlclose(t->so);
			t->so = NULL;
			return -1;
		}
	}
	return 0;
}

static fc_dfhandle fc_df_alloc(const fc_df *t) { return t->alloc(); }

static void fc_df_free(const fc_df *t, fc_dfhandle h) { t->free(h); }

// fc_df_gunzip inflates the first gzip member of the size bytes at src
// into the avail bytes at dst, and sets *in and *out to the bytes it
// read and wrote. It returns libdeflate's result.
static int fc_df_gunzip(const fc_df *t, fc_dfhandle h, const void *src, size_t size,
                        void *dst, size_t avail, size_t *in, size_t *out) {
	*in = 0;
	*out = 0;
	return t->gzip_ex(h, src, size, dst, avail, in, out);
}

// fc_df_inflate is fc_df_gunzip for raw deflate data.
static int fc_df_inflate(const fc_df *t, fc_dfhandle h, const void *src, size_t size,
                         void *dst, size_t avail, size_t *in, size_t *out) {
	*in = 0;
	*out = 0;
	return t->deflate_ex(h, src, size, dst, avail, in, out);
}
*/
import "C"

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// library is a loaded libdeflate library. It is never unloaded.
type library struct{ c C.fc_df }

// msgLen bounds the messages copied from dlerror.
const msgLen = 256

// open loads the libdeflate library at path (a file, or a name that
// dlopen looks up in the library path).
func open(path string) (*library, error) {
	l := new(library)
	var msg [msgLen]C.char
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	if C.fc_df_open(&l.c, cpath, &msg[0], msgLen) != 0 {
		// dlerror's message starts with the path it was given.
		return nil, &LibraryError{Path: path, Reason: strings.TrimPrefix(C.GoString(&msg[0]), path+": ")}
	}
	return l, nil
}

// loaded is the library of the process, loaded the first time a
// Decompressor is made, from the path in LibraryEnv or else Library. It
// is process-wide because a shared library is (as the TurboJPEG library
// of infer/data/internal/turbojpeg): opened once and never closed. A
// failed load is not retried.
var loaded = sync.OnceValues(func() (*library, error) {
	path := Library
	if p := os.Getenv(LibraryEnv); p != "" {
		path = p
	}
	return open(path)
})

// Decompressor inflates gzip data. It holds a libdeflate decompressor and
// must not be used by two goroutines at once. Close frees it; a
// Decompressor dropped without Close frees it when garbage-collected. The
// zero value holds none: make one with NewDecompressor.
type Decompressor struct {
	lib     *library
	h       C.fc_dfhandle
	cleanup runtime.Cleanup
}

// NewDecompressor loads the library (once per process) and returns a
// Decompressor. The error wraps ErrNotFound when the library cannot be
// loaded.
func NewDecompressor() (*Decompressor, error) {
	lib, err := loaded()
	if err != nil {
		return nil, err
	}
	return lib.decompressor()
}

func (lib *library) decompressor() (*Decompressor, error) {
	h := C.fc_df_alloc(&lib.c)
	if h == nil {
		return nil, errors.New("deflate: libdeflate_alloc_decompressor failed (out of memory?)")
	}
	d := &Decompressor{lib: lib, h: h}
	d.cleanup = runtime.AddCleanup(d, func(h C.fc_dfhandle) { C.fc_df_free(&lib.c, h) }, h)
	return d, nil
}

// Close frees the decompressor. It is safe to call more than once.
func (d *Decompressor) Close() {
	if d.h == nil {
		return
	}
	d.cleanup.Stop()
	C.fc_df_free(&d.lib.c, d.h)
	d.h = nil
}

// Gunzip decompresses the gzip data src, one member or several one after
// the other, into dst and returns the number of bytes written. It reads
// nothing beyond src and writes nothing beyond dst; the members' ISIZE
// fields are checked against the data, never used to size anything.
//
// The error is ErrShortBuffer when the data does not fit dst, and
// ErrCorrupt when src is not gzip data as Go's gzip readers accept it
// (see the package documentation): empty, truncated, corrupt, with a
// checksum or size that does not match, or followed by bytes that do not
// form another member. dst then holds partial output.
func (d *Decompressor) Gunzip(dst, src []byte) (int, error) {
	if d.h == nil {
		panic("deflate: Gunzip after Close")
	}
	n := 0
	for first := true; first || len(src) > 0; first = false {
		if !checkHeader(src) {
			return n, ErrCorrupt
		}
		in, wrote, err := d.call(true, dst[n:], src)
		if err != nil {
			return n, err
		}
		src = src[in:]
		n += wrote
	}
	return n, nil
}

// inflate decompresses the raw deflate data at the start of src into dst
// and returns the bytes it read and wrote (the tests compare it with
// klauspost/compress/flate).
func (d *Decompressor) inflate(dst, src []byte) (in, out int, err error) {
	if len(src) == 0 {
		return 0, 0, ErrCorrupt
	}
	return d.call(false, dst, src)
}

// call runs libdeflate's gzip (one member) or raw deflate decompression
// of src, which is not empty, into dst.
func (d *Decompressor) call(gzip bool, dst, src []byte) (in, out int, err error) {
	var one [1]byte // a valid address for an empty destination
	p := unsafe.Pointer(&one[0])
	if len(dst) > 0 {
		p = unsafe.Pointer(&dst[0])
	}
	var cin, cout C.size_t
	var r C.int
	if gzip {
		r = C.fc_df_gunzip(&d.lib.c, d.h, unsafe.Pointer(&src[0]), C.size_t(len(src)), p, C.size_t(len(dst)), &cin, &cout)
	} else {
		r = C.fc_df_inflate(&d.lib.c, d.h, unsafe.Pointer(&src[0]), C.size_t(len(src)), p, C.size_t(len(dst)), &cin, &cout)
	}
	runtime.KeepAlive(src)
	runtime.KeepAlive(dst)
	switch r {
	case C.FC_LIBDEFLATE_SUCCESS:
	case C.FC_LIBDEFLATE_INSUFFICIENT_SPACE:
		return 0, 0, ErrShortBuffer
	default:
		return 0, 0, ErrCorrupt
	}
	if cin == 0 || int(cin) > len(src) || int(cout) > len(dst) {
		panic("deflate: libdeflate reported reading or writing outside its buffers")
	}
	return int(cin), int(cout), nil
}
