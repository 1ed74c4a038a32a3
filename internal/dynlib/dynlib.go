package dynlib

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"
)

// Spec describes a shared library to load. The zero value names no
// library and no symbols: opening a path with it only checks that dlopen
// loads the file.
type Spec struct {
	// Library is the file or library name given to dlopen when the
	// variable Env is unset or empty; dlopen looks a name without a slash
	// up in the system's library path.
	Library string
	// Env is the environment variable whose value, when set and not
	// empty, names the library instead of Library. Empty means none.
	Env string
	// Symbols are the names that Open resolves; a library lacking one of
	// them is not loaded.
	Symbols []string
	// Kind says what a library lacking a symbol is not, such as
	// "libdeflate, version 1.5 or later": the reason is then "it has no
	// <symbol>: not <Kind>".
	Kind string
	// Error, when not nil, makes the error that Open and Loader return
	// from the *LoadError of a library that cannot be loaded. Nil returns the
	// *LoadError itself.
	Error func(*LoadError) error
}

// LoadError reports a shared library that cannot be loaded. A library
// package embeds it in its own error type, which adds the message that
// says how to install the library.
type LoadError struct {
	Path   string // the file or library name given to dlopen
	Reason string // why it failed: dlopen's message, a missing symbol, or no cgo
}

// Error returns "Path: Reason".
func (e *LoadError) Error() string { return e.Path + ": " + e.Reason }

// Library is a loaded shared library. It is never closed, so the
// addresses it holds stay valid for the life of the process. The zero
// value holds no library and no symbols: Spec.Open makes one.
type Library struct {
	path    string
	symbols map[string]unsafe.Pointer
}

// Path returns the file or library name the library was loaded from, as
// it was given to dlopen.
func (l *Library) Path() string { return l.path }

// Symbol returns the address of the symbol name, one of the Spec's
// Symbols; it panics for any other name, a programmer error.
func (l *Library) Symbol(name string) unsafe.Pointer {
	p, ok := l.symbols[name]
	if !ok {
		panic(fmt.Sprintf("dynlib: %s was not among the symbols resolved in %s", name, l.path))
	}
	return p
}

// Path returns the library that Loader loads: the value of Env when it
// is set and not empty, else Library.
func (s *Spec) Path() string {
	if s.Env != "" {
		if p := os.Getenv(s.Env); p != "" {
			return p
		}
	}
	return s.Library
}

// Open loads the library at path (a file, or a name that dlopen looks up
// in the library path) and resolves the Spec's Symbols in it. A library
// lacking one of them is closed again. The error is made by s.Error from
// a *LoadError.
func (s *Spec) Open(path string) (*Library, error) {
	h, reason := dlopen(path)
	if h == nil {
		// dlerror's message starts with the path it was given.
		return nil, s.fail(path, strings.TrimPrefix(reason, path+": "))
	}
	l := &Library{path: path, symbols: make(map[string]unsafe.Pointer, len(s.Symbols))}
	for _, name := range s.Symbols {
		p := dlsym(h, name)
		if p == nil {
			dlclose(h)
			return nil, s.fail(path, fmt.Sprintf("it has no %s: not %s", name, s.Kind))
		}
		l.symbols[name] = p
	}
	return l, nil
}

// fail returns the error of a library at path that cannot be loaded.
func (s *Spec) fail(path, reason string) error {
	e := &LoadError{Path: path, Reason: reason}
	if s.Error == nil {
		return e
	}
	return s.Error(e)
}

// Loader returns a function that loads the library of s (Spec.Path) the
// first time it is called and returns use of it, or Open's error; later
// calls return the same, and use runs at most once. A failed load is not
// retried: the process must be restarted with the library in place.
//
// The caller keeps the function in a package variable, the one
// process-wide state of a package that loads a library: a shared library
// is process-wide itself, opened once and never closed, like the ONNX
// Runtime environment (infer/runtime.go).
func Loader[T any](s *Spec, use func(*Library) T) func() (T, error) {
	return sync.OnceValues(func() (T, error) {
		l, err := s.Open(s.Path())
		if err != nil {
			var zero T
			return zero, err
		}
		return use(l), nil
	})
}
