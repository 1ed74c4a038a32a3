//go:build cgo

package dynlib

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

// fc_dl_open opens the library at path: its handle, or NULL with
// dlerror's text in msg, read in this call because dlerror keeps it per
// thread.
static void *fc_dl_open(const char *path, char *msg, size_t n) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(msg, n, "%s", e ? e : "dlopen failed");
	}
	return h;
}
*/
import "C"

import "unsafe"

// msgLen bounds the message copied from dlerror.
const msgLen = 256

// dlopen opens the library at path with RTLD_NOW | RTLD_LOCAL: its
// handle, or nil and dlerror's message.
func dlopen(path string) (unsafe.Pointer, string) {
	var msg [msgLen]C.char
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	h := C.fc_dl_open(cpath, &msg[0], msgLen)
	if h == nil {
		return nil, C.GoString(&msg[0])
	}
	return h, ""
}

// dlsym returns the address of name in the library h, or nil.
func dlsym(h unsafe.Pointer, name string) unsafe.Pointer {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return C.dlsym(h, cname)
}

// dlclose closes the library h.
func dlclose(h unsafe.Pointer) { C.dlclose(h) }
