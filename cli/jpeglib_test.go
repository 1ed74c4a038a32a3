package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/infer/data"
)

// TestExitJPEGLibrary checks, in fresh processes, that reading a JPEG
// without the TurboJPEG library (named by $FEDCALIB_LIBTURBOJPEG: missing,
// or not a library) exits 3 with one line saying how to install it, and
// that a folder of PNGs needs no library.
func TestExitJPEGLibrary(t *testing.T) {
	dir := t.TempDir()
	pngs := filepath.Join(dir, "pngs")
	if err := os.CopyFS(filepath.Join(pngs, "png"), os.DirFS("../infer/testdata/parity/images/png")); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing", "libturbojpeg.so.0")
	infer := func(images string) []string {
		return []string{"infer", "--quiet", "--model", "../infer/testdata/imagenet_shaped.onnx", "--data",
			"imagefolder:" + images, "--preprocess", "imagenet", "--out", filepath.Join(dir, "out.npz")}
	}
	for _, tc := range []struct {
		name string
		lib  string
		args []string
		code int
		want []string
	}{
		{"missing library", missing, infer("../infer/testdata/parity/images"), ExitEnvironment,
			[]string{"libturbojpeg not found (" + missing + ": ", "apt-get install libturbojpeg0", data.JPEGLibraryEnv, "exif/orient2_120x90.jpg"}},
		{"not TurboJPEG", "libc.so.6", infer("../infer/testdata/parity/images"), ExitEnvironment,
			[]string{"libturbojpeg not found (libc.so.6: it has no tjInitDecompress"}},
		{"PNGs only", missing, infer(pngs), ExitOK, nil},
	} {
		code, stderr := fedcalibFresh(t, []string{data.JPEGLibraryEnv + "=" + tc.lib}, tc.args...)
		_, msg, _ := strings.Cut(stderr, "fedcalib: ")
		ok := code == tc.code && (code == ExitOK || strings.Count(msg, "\n") == 1)
		for _, w := range tc.want {
			ok = ok && strings.Contains(msg, w)
		}
		t.Logf("%s: exit %d: %s", tc.name, code, stderr)
		if !ok {
			t.Errorf("%s: exit %d, stderr %q; want %d and one line saying %q", tc.name, code, stderr, tc.code, tc.want)
		}
	}
	for _, err := range []error{data.ErrJPEGLibrary, fmt.Errorf("reading record 3: %w", data.ErrJPEGLibrary)} {
		if got := exitStatus(err); got != ExitEnvironment {
			t.Errorf("exitStatus(%v) = %d, want %d", err, got, ExitEnvironment)
		}
	}
}
