// Package dynlib loads a system shared library at run time with dlopen
// and resolves the functions its caller needs, so that building fedcalib
// needs no headers or libraries of it and a machine without it fails
// only where it is used.
//
// A Spec names a library (a default file name and an environment
// variable that overrides it), the symbols to resolve and what a library
// lacking one of them is not. Spec.Open loads one file; Loader loads the
// library of the process once. A library that cannot be loaded gives an
// *LoadError carrying the path and dlopen's reason, or a missing symbol, or
// a build without cgo; Spec.Error turns it into the error of the caller,
// which says how to install the library.
//
// A library is opened with RTLD_NOW | RTLD_LOCAL, so every symbol it
// needs is bound at once and none of its symbols is seen by other
// libraries, and it is never closed: the addresses of its functions stay
// valid for the life of the process. dlopen's reason is read in the same
// C call as dlopen, because dlerror's text is kept per thread. Loading
// needs cgo; in a build without cgo every load fails with a *LoadError.
//
// The packages infer/data/internal/turbojpeg and
// infer/data/internal/deflate load libjpeg-turbo's TurboJPEG library and
// libdeflate with it; each keeps its own C shims that call through the
// resolved addresses.
package dynlib
