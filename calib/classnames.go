package calib

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// ErrClassNames is wrapped by the errors of MatchClassNames: two sources
// name the classes differently, in number or in order.
var ErrClassNames = errors.New("class names do not match")

// MaxClassNameBytes bounds the length of one class name in bytes, so that
// a corrupt file cannot drive a large allocation.
const MaxClassNameBytes = 1 << 12

// CheckClassNames reports whether names can name the classes classes
// classes, in label order: an empty (nil) list names none and is always
// accepted; otherwise there is one name per class, each non-empty, valid
// UTF-8, at most MaxClassNameBytes long, without NUL bytes (which a NumPy
// string array drops), and no two alike. Line breaks are allowed (the
// Shakespeare data names a class "\n"), though a labels file cannot hold
// them.
func CheckClassNames(names []string, classes int) error {
	if len(names) == 0 {
		return nil
	}
	if len(names) != classes {
		return fmt.Errorf("%d class names for %d classes", len(names), classes)
	}
	seen := make(map[string]int, len(names))
	for i, s := range names {
		switch {
		case s == "":
			return fmt.Errorf("class %d has an empty name", i)
		case len(s) > MaxClassNameBytes:
			return fmt.Errorf("class %d has a name of %d bytes, more than %d", i, len(s), MaxClassNameBytes)
		case !utf8.ValidString(s):
			return fmt.Errorf("class %d: name %q is not valid UTF-8", i, s)
		case strings.IndexByte(s, 0) >= 0:
			return fmt.Errorf("class %d: name %q holds a NUL byte", i, s)
		}
		if j, ok := seen[s]; ok {
			return fmt.Errorf("classes %d and %d are both named %q", j, i, s)
		}
		seen[s] = i
	}
	return nil
}

// MatchClassNames reports whether the class names a, read from the source
// aFrom (such as "model.onnx's metadata"), and b, from bFrom, agree: they
// do when either list is empty (that source names no classes) or both are
// equal, name by name. Otherwise the error wraps ErrClassNames and names
// both sources and their first difference, in count or in order.
func MatchClassNames(aFrom string, a []string, bFrom string, b []string) error {
	if len(a) == 0 || len(b) == 0 {
		return nil
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Errorf("%w: class %d is %q in %s but %q in %s", ErrClassNames, i, a[i], aFrom, b[i], bFrom)
		}
	}
	if len(a) != len(b) {
		return fmt.Errorf("%w: %d names in %s but %d in %s", ErrClassNames, len(a), aFrom, len(b), bFrom)
	}
	return nil
}

// ReadClassNames reads a labels file from r: one class name a line, in
// label order, as Triton's and torchvision's labels files hold them.
// Spaces, tabs and a carriage return around a name are removed; empty
// lines at the end are ignored, an empty line before a name is an error.
// The names must pass CheckClassNames for their own number of classes.
func ReadClassNames(r io.Reader) ([]string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), MaxClassNameBytes+2)
	var names []string
	line, blank := 0, 0 // blank: the first empty line since the last name
	for sc.Scan() {
		line++
		s := strings.Trim(sc.Text(), " \t\r")
		if s == "" {
			if blank == 0 {
				blank = line
			}
			continue
		}
		if blank > 0 {
			return nil, fmt.Errorf("line %d is empty: a labels file holds one class name a line", blank)
		}
		names = append(names, s)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("line %d: longer than %d bytes", line+1, MaxClassNameBytes)
		}
		return nil, err
	}
	if len(names) == 0 {
		return nil, errors.New("no class names: a labels file holds one class name a line")
	}
	if err := CheckClassNames(names, len(names)); err != nil {
		return nil, err
	}
	return names, nil
}
