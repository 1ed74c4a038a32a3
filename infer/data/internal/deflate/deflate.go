package deflate

/*
#include <stddef.h>

// The libdeflate API as libdeflate.h documents it: a decompressor is
// opaque; results are enum libdeflate_result.
typedef void *fc_dfhandle;

enum {
	FC_LIBDEFLATE_SUCCESS = 0,
	FC_LIBDEFLATE_BAD_DATA = 1,
	FC_LIBDEFLATE_SHORT_OUTPUT = 2,
	FC_LIBDEFLATE_INSUFFICIENT_SPACE = 3,
};

// fc_df holds the functions fedcalib calls, resolved by dynlib.
typedef struct {
	fc_dfhandle (*alloc)(void);
	int (*gzip_ex)(fc_dfhandle, const void *, size_t, void *, size_t, size_t *, size_t *);
	void (*free)(fc_dfhandle);
	int (*deflate_ex)(fc_dfhandle, const void *, size_t, void *, size_t, size_t *, size_t *);
} fc_df;

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
	"runtime"
	"unsafe"

	"github.com/fedcalib/fedcalib/internal/dynlib"
)

// library is the loaded libdeflate library's functions. It is never
// unloaded.
type library struct{ c C.fc_df }

// newLibrary returns the functions of l, loaded with spec.
func newLibrary(l *dynlib.Library) *library {
	fn := func(name string) *[0]byte { return (*[0]byte)(l.Symbol(name)) }
	return &library{c: C.fc_df{
		alloc:      fn(symAlloc),
		gzip_ex:    fn(symGzip),
		free:       fn(symFree),
		deflate_ex: fn(symDeflate),
	}}
}

// loaded is the library of the process, loaded the first time a
// Decompressor is made, from the path in LibraryEnv or else Library. It
// is process-wide because a shared library is (as the TurboJPEG library
// of infer/data/internal/turbojpeg): opened once and never closed. A
// failed load is not retried.
var loaded = dynlib.Loader(&spec, newLibrary)

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
