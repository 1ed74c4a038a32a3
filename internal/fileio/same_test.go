package fileio

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSameAndCheckOutput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.npz")
	other := filepath.Join(dir, "other.npz")
	link := filepath.Join(dir, "link.npz")
	for _, p := range []string{in, other} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(in, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{in, in, true},
		{in, link, true},
		{in, filepath.Join(dir, ".", "in.npz"), true},
		{in, other, false},
		{filepath.Join(dir, "new"), filepath.Join(dir, "sub", "..", "new"), true}, // neither exists: cleaned paths
		{filepath.Join(dir, "new"), in, false},
	} {
		if got := Same(tc.a, tc.b); got != tc.want {
			t.Errorf("Same(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	for _, tc := range []struct {
		out    string
		inputs []string
		bad    bool
	}{
		{in, []string{in}, true},
		{link, []string{in}, true},
		{in, []string{"npz:" + in + ":test"}, true},
		{in, []string{other + "," + in}, true},
		{in, []string{other}, false},
		{filepath.Join(dir, "new.npz"), []string{in}, false},
	} {
		err := CheckOutput(tc.out, tc.inputs...)
		if got := errors.Is(err, ErrOutputIsInput); got != tc.bad {
			t.Errorf("CheckOutput(%s, %v) = %v, want refused %v", tc.out, tc.inputs, err, tc.bad)
		}
	}
}

func TestCheckDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file.json")
	if err := os.WriteFile(file, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	readOnly := filepath.Join(dir, "ro")
	if err := os.Mkdir(readOnly, 0o500); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string // want: "" for no error, else a part of it
	}{
		{"new file", filepath.Join(dir, "new.json"), ""},
		{"existing file", file, ""},
		{"relative", "new.json", ""},
		{"a directory", dir, "is a directory: name a file"},
		{"missing directory", filepath.Join(dir, "nope", "x.json"), "directory " + filepath.Join(dir, "nope") + " does not exist: create it first"},
		{"a file as directory", filepath.Join(file, "x.json"), file + " is not a directory"},
		{"proc", "/proc/fedcalib-out.json", "cannot write into directory /proc"},
	}
	if os.Geteuid() != 0 { // root writes into a 0500 directory
		tests = append(tests, struct{ name, path, want string }{"read-only", filepath.Join(readOnly, "x.json"), "cannot write into directory " + readOnly})
	}
	for _, tt := range tests {
		err := CheckDir(tt.path)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: CheckDir(%s) = %v, want nil", tt.name, tt.path, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: CheckDir(%s) = %v, want an error containing %q", tt.name, tt.path, err, tt.want)
		case err != nil && strings.Contains(err.Error(), ".tmp"):
			t.Errorf("%s: CheckDir(%s) = %v names a temporary file", tt.name, tt.path, err)
		}
	}
	if got, want := names(t, dir), []string{"file.json", "ro"}; !slices.Equal(got, want) {
		t.Errorf("CheckDir left %v in the directory, want %v", got, want)
	}
	if _, err := os.Stat("new.json"); err == nil {
		t.Error("CheckDir created new.json")
	}
}
