//go:build cgo

package dynlib

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestOpen opens a missing file, a file that is not a library, libc
// asked for a symbol it lacks, and libc asked for symbols it has: the
// reasons are glibc's dlerror text without the path, or the Spec's
// missing-symbol sentence, and the addresses resolved lie in libc's code
// as /proc/self/maps shows it.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "libnot.so")
	if err := os.WriteFile(notELF, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.so")
	for _, tc := range []struct {
		name, path string
		symbols    []string
		reason     string // "" for success
	}{
		{"missing file", missing, []string{"strlen"}, "cannot open shared object file: No such file or directory"},
		{"not a library", notELF, nil, "file too short"},
		{"lacks a symbol", "libc.so.6", []string{"strlen", "fc_no_such_symbol"}, "it has no fc_no_such_symbol: not a test library"},
		{"has the symbols", "libc.so.6", []string{"strlen", "malloc"}, ""},
		{"no symbols asked", "libc.so.6", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Spec{Symbols: tc.symbols, Kind: "a test library"}
			l, err := s.Open(tc.path)
			if tc.reason != "" {
				var e *LoadError
				if !errors.As(err, &e) || l != nil {
					t.Fatalf("Open(%s) = %v, %v; want a *LoadError", tc.path, l, err)
				}
				if e.Path != tc.path || e.Reason != tc.reason {
					t.Errorf("Open(%s): Path %q, Reason %q; want %q, %q", tc.path, e.Path, e.Reason, tc.path, tc.reason)
				}
				if want := tc.path + ": " + tc.reason; err.Error() != want {
					t.Errorf("Open(%s): %q, want %q", tc.path, err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%s): %v", tc.path, err)
			}
			if l.Path() != tc.path {
				t.Errorf("Path() = %q, want %q", l.Path(), tc.path)
			}
			code := codeOf(t, "libc.so.6")
			for _, name := range tc.symbols {
				p := uintptr(l.Symbol(name))
				in := false
				for _, r := range code {
					in = in || r[0] <= p && p < r[1]
				}
				if !in {
					t.Errorf("Symbol(%s) = %#x, outside libc's code %x", name, p, code)
				}
			}
		})
	}
}

// codeOf returns the executable mappings of the library named base in
// this process, from /proc/self/maps.
func codeOf(t *testing.T, base string) [][2]uintptr {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	defer f.Close()
	var code [][2]uintptr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || filepath.Base(fields[5]) != base || !strings.Contains(fields[1], "x") {
			continue
		}
		lo, hi, _ := strings.Cut(fields[0], "-")
		a, err1 := strconv.ParseUint(lo, 16, 64)
		b, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad mapping %q", sc.Text())
		}
		code = append(code, [2]uintptr{uintptr(a), uintptr(b)})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(code) == 0 {
		t.Fatalf("%s has no executable mapping in /proc/self/maps", base)
	}
	return code
}

// TestSymbolNotResolved checks that asking for a symbol the Spec did not
// name panics.
func TestSymbolNotResolved(t *testing.T) {
	s := Spec{Symbols: []string{"strlen"}}
	l, err := s.Open("libc.so.6")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "malloc") {
			t.Errorf("Symbol(malloc) recovered %v, want a panic naming malloc", r)
		}
	}()
	l.Symbol("malloc")
}

// errTest is the sentinel of the errors made by testSpec's Error.
var errTest = errors.New("test library not found")

// testError is the error of a caller, as a library package makes it.
type testError struct{ LoadError }

func (e *testError) Error() string        { return "test: " + e.LoadError.Error() }
func (e *testError) Is(target error) bool { return target == errTest }

// TestLoader checks Loader's choice of path (the environment variable
// when set and not empty, else Library), the caller's error type, and
// that it loads once: later calls return the first call's result and
// use runs at most once.
func TestLoader(t *testing.T) {
	const env = "FEDCALIB_DYNLIB_TEST"
	missing := filepath.Join(t.TempDir(), "missing.so")
	for _, tc := range []struct {
		name, library, env string
		want               string // the path loaded
		ok                 bool
	}{
		{"library", "libc.so.6", "", "libc.so.6", true},
		{"env overrides", missing, "libc.so.6", "libc.so.6", true},
		{"env missing", "libc.so.6", missing, missing, false},
		{"library missing", missing, "", missing, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(env, tc.env)
			s := &Spec{
				Library: tc.library,
				Env:     env,
				Symbols: []string{"strlen"},
				Kind:    "a test library",
				Error:   func(e *LoadError) error { return &testError{*e} },
			}
			if p := s.Path(); p != tc.want {
				t.Errorf("Path() = %q, want %q", p, tc.want)
			}
			uses := 0
			load := Loader(s, func(l *Library) *Library { uses++; return l })
			l1, err1 := load()
			// The variable no longer matters once loaded.
			t.Setenv(env, "")
			l2, err2 := load()
			if l1 != l2 || err1 != err2 {
				t.Errorf("second load = %v, %v; first %v, %v", l2, err2, l1, err1)
			}
			if !tc.ok {
				var e *testError
				if !errors.As(err1, &e) || !errors.Is(err1, errTest) || e.Path != tc.want || uses != 0 || l1 != nil {
					t.Fatalf("load() = %v, %v after %d uses; want a *testError for %s and no use", l1, err1, uses, tc.want)
				}
				return
			}
			if err1 != nil || uses != 1 || l1.Path() != tc.want || l1.Symbol("strlen") == unsafe.Pointer(nil) {
				t.Fatalf("load() = %v, %v after %d uses; want %s used once", l1, err1, uses, tc.want)
			}
		})
	}
}
