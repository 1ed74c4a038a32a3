package fileio

import (
	"errors"
	"os"
	"path/filepath"
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
