//go:build !cgo

package dynlib

import (
	"errors"
	"testing"
)

// TestOpenWithoutCgo checks that a build without cgo loads nothing and
// says why.
func TestOpenWithoutCgo(t *testing.T) {
	s := Spec{Library: "libc.so.6"}
	for _, load := range []func() (*Library, error){
		func() (*Library, error) { return s.Open("libc.so.6") },
		Loader(&s, func(l *Library) *Library { return l }),
	} {
		l, err := load()
		var e *LoadError
		if !errors.As(err, &e) || l != nil || e.Path != "libc.so.6" || e.Reason != noCgo {
			t.Errorf("load() = %v, %v; want a *LoadError for libc.so.6: %s", l, err, noCgo)
		}
	}
}
