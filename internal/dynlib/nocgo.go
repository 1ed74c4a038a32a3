//go:build !cgo

package dynlib

import "unsafe"

// noCgo is the reason of every failure in a build without cgo.
const noCgo = "fedcalib was built without cgo (CGO_ENABLED=0), which loading it needs"

// dlopen fails: a build without cgo cannot load a library.
func dlopen(path string) (unsafe.Pointer, string) { return nil, noCgo }

// dlsym is never called: dlopen returns no handle.
func dlsym(h unsafe.Pointer, name string) unsafe.Pointer {
	panic("dynlib: dlsym in a build without cgo")
}

// dlclose is never called: dlopen returns no handle.
func dlclose(h unsafe.Pointer) { panic("dynlib: dlclose in a build without cgo") }
