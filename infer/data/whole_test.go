package data

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/fedcalib/fedcalib/infer/data/internal/deflate"
)

// requireLibdeflate skips a test that needs libdeflate where it is not
// installed (gzip files are then read the streaming way, which the other
// tests cover).
func requireLibdeflate(t *testing.T) {
	t.Helper()
	d, err := deflate.NewDecompressor()
	if errors.Is(err, deflate.ErrNotFound) {
		t.Skipf("libdeflate is not installed: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
}

// mnistLike returns n bytes that compress as MNIST's images do: zero
// background with noisy strokes.
func mnistLike(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	b := make([]byte, n)
	for i := range b {
		if r.IntN(4) == 0 {
			b[i] = byte(r.IntN(256))
		}
	}
	return b
}

// readStream opens name with openStream(name, whole), reads it in reads
// of chunk bytes and returns the content, the error that ended it (nil at
// a clean end) and whether the file was inflated whole.
func readStream(t *testing.T, name string, whole bool, chunk int) ([]byte, error, bool) {
	t.Helper()
	s, err := openStream(name, whole)
	if err != nil {
		return nil, err, false
	}
	defer s.Close()
	var out []byte
	buf := make([]byte, chunk)
	for {
		n, err := s.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			s.wait() // whether the whole content was inflated, however soon the streaming reader got there
			if err == io.EOF {
				err = nil
			}
			return out, err, s.whole != nil
		}
	}
}

// gzipFixtures writes gzip files to dir, clean or not, and returns their
// paths by name.
func gzipFixtures(t *testing.T, dir string) map[string]string {
	t.Helper()
	img := mnistLike(100*28*28, 1)
	good := gz(idxFile([]int{100, 28, 28}, img))
	trailer := func(b []byte, crc, size int) []byte {
		b = bytes.Clone(b)
		if crc != 0 {
			b[len(b)-8] ^= byte(crc)
		}
		if size != 0 {
			binary.LittleEndian.PutUint32(b[len(b)-4:], uint32(int(binary.LittleEndian.Uint32(b[len(b)-4:]))+size))
		}
		return b
	}
	var best bytes.Buffer
	w, _ := gzip.NewWriterLevel(&best, gzip.BestSpeed)
	w.Write(mnistLike(10<<20, 3)) // more than two release steps
	w.Close()
	files := map[string][]byte{
		"clean.gz":            good,
		"empty-content.gz":    gz(nil),
		"two-members.gz":      append(gz(idxFile([]int{100, 28, 28}, img)[:5000]), gz(idxFile([]int{100, 28, 28}, img)[5000:])...),
		"ten-MiB.gz":          best.Bytes(),
		"truncated.gz":        good[:len(good)/2],
		"no-trailer.gz":       good[:len(good)-8],
		"trailing-garbage.gz": append(bytes.Clone(good), "garbage"...),
		"trailing-zeros.gz":   append(bytes.Clone(good), make([]byte, 100)...),
		"bad-crc.gz":          trailer(good, 1, 0),
		"isize-too-small.gz":  trailer(good, 0, -1),
		"isize-too-large.gz":  trailer(good, 0, 1<<20),
		"isize-over-cap.gz":   trailer(good, 0, maxWholeGzip),
		"corrupt-deflate.gz":  append(append(bytes.Clone(good[:40]), good[40]^0xff), good[41:]...),
		"magic-only.gz":       {0x1f, 0x8b},
	}
	paths := map[string]string{}
	for name, b := range files {
		paths[name] = writeFile(t, dir, name, b)
	}
	return paths
}

// TestWholeGzip checks that a gzip file inflated whole with libdeflate
// reads as the same bytes as klauspost/compress's streaming reader gives,
// in reads of any size, and that every file libdeflate refuses or that
// does not end cleanly is read the streaming way, with the same bytes
// and error.
func TestWholeGzip(t *testing.T) {
	requireLibdeflate(t)
	paths := gzipFixtures(t, t.TempDir())
	clean := map[string]bool{"clean.gz": true, "empty-content.gz": true, "two-members.gz": true, "ten-MiB.gz": true}
	// The committed tar.gz and, when the module cache has them, MNIST's
	// four files.
	paths["testdata/imagefolder.tgz"] = "testdata/imagefolder.tgz"
	clean["testdata/imagefolder.tgz"] = true
	if !testing.Short() {
		if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
			dir := filepath.Join(strings.TrimSpace(string(out)), filepath.FromSlash(gomnistModule), "data")
			for _, f := range []string{"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", "train-labels-idx1-ubyte.gz"} {
				if p := filepath.Join(dir, f); fileSize(p) > 0 {
					paths[f], clean[f] = p, true
				}
			}
		}
	}
	for name, path := range paths {
		t.Run(name, func(t *testing.T) {
			want, wantErr, streamed := readStream(t, path, false, 1<<16)
			if streamed {
				t.Fatal("openStream(name, false) inflated the file whole")
			}
			if (wantErr == nil) != clean[name] {
				t.Fatalf("the streaming reader ends with %v; the fixture is meant to be clean: %v", wantErr, clean[name])
			}
			for _, chunk := range []int{1, 784, 1 << 16, 16 << 20} {
				if chunk == 1 && len(want) > 1<<20 {
					continue
				}
				got, err, whole := readStream(t, path, true, chunk)
				if whole != clean[name] {
					t.Errorf("reads of %d: inflated whole: %v, want %v", chunk, whole, clean[name])
				}
				if !bytes.Equal(got, want) || fmt.Sprint(err) != fmt.Sprint(wantErr) {
					t.Errorf("reads of %d: %d bytes and %v; the streaming reader gives %d bytes and %v", chunk, len(got), err, len(want), wantErr)
				}
			}
		})
	}
}

// TestWholeGzipTakesOver checks that reading goes on from the content
// inflated whole at whatever offset the streaming reader has reached when
// libdeflate is done: the bytes are the streaming reader's, whether it
// takes over at the start, in the middle of a buffer, at a buffer's end,
// one byte before the end or at the end.
func TestWholeGzipTakesOver(t *testing.T) {
	requireLibdeflate(t)
	path := gzipFixtures(t, t.TempDir())["clean.gz"]
	want, wantErr, _ := readStream(t, path, false, 1<<16)
	if wantErr != nil {
		t.Fatal(wantErr)
	}
	for _, at := range []int{0, 1, 784, 1 << 16, 1<<16 + 1, len(want) - 1, len(want)} {
		s, err := openStream(path, true)
		if err != nil {
			t.Fatal(err)
		}
		s.hold = true
		got := make([]byte, at)
		if _, err := io.ReadFull(s, got); err != nil {
			t.Fatalf("at %d: streaming: %v", at, err)
		}
		if s.whole != nil {
			t.Fatalf("at %d: read from the whole content while held", at)
		}
		s.wait()
		if s.whole == nil {
			t.Fatalf("at %d: the clean file was not inflated whole", at)
		}
		rest, err := io.ReadAll(s)
		if err != nil {
			t.Fatalf("at %d: %v", at, err)
		}
		if got = append(got, rest...); !bytes.Equal(got, want) {
			t.Errorf("taken over at %d: %d bytes differ from the streaming reader's %d", at, len(got), len(want))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// recordsDigest reads each spec to its end and returns one line per spec:
// the SHA-256 of its records, and the error that ended reading.
func recordsDigest(specs []string) string {
	var sb strings.Builder
	for _, spec := range specs {
		h := sha256.New()
		r, err := Open(spec)
		if err == nil {
			var rec Record
			for err == nil {
				if err = r.Next(&rec); err == nil {
					fmt.Fprintf(h, "%v %d %q %d|", rec.Shape, rec.Label, rec.Client, len(rec.Image))
					h.Write(rec.Image)
				}
			}
			r.Close()
			if err == io.EOF {
				err = nil
			}
		}
		fmt.Fprintf(&sb, "%s %s %v\n", spec, hex.EncodeToString(h.Sum(nil)), err)
	}
	return sb.String()
}

// TestGzipWithoutLibdeflate reads IDX datasets, clean and corrupt, in
// this process (libdeflate loaded) and in a fresh one whose
// FEDCALIB_LIBDEFLATE names a missing file, and checks that both read the
// same records and end with the same errors, which name the file: the
// library changes the speed, nothing else.
func TestGzipWithoutLibdeflate(t *testing.T) {
	if specs := os.Getenv("FEDCALIB_TEST_DIGEST_SPECS"); specs != "" {
		// The fresh process.
		if _, err := deflate.NewDecompressor(); !errors.Is(err, deflate.ErrNotFound) {
			t.Fatalf("NewDecompressor with %s=%s: %v, want ErrNotFound", deflate.LibraryEnv, os.Getenv(deflate.LibraryEnv), err)
		}
		if err := os.WriteFile(os.Getenv("FEDCALIB_TEST_DIGEST_OUT"), []byte(recordsDigest(strings.Split(specs, "\n"))), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	requireLibdeflate(t)
	dir := t.TempDir()
	img := mnistLike(300*28*28, 5)
	lab := make([]byte, 300)
	for i := range lab {
		lab[i] = byte(i % 10)
	}
	images := gz(idxFile([]int{300, 28, 28}, img))
	labels := gz(idxFile([]int{300}, lab))
	for name, b := range map[string][]byte{
		"clean":     images,
		"truncated": images[:len(images)*2/3],
		"garbage":   append(bytes.Clone(images), "garbage"...),
		"bad-crc":   append(bytes.Clone(images[:len(images)-8]), 1, 2, 3, 4, 5, 6, 7, 8),
	} {
		writeFile(t, dir, name+"-images-idx3-ubyte.gz", b)
		writeFile(t, dir, name+"-labels-idx1-ubyte.gz", labels)
	}
	var specs []string
	for _, name := range []string{"clean", "truncated", "garbage", "bad-crc"} {
		specs = append(specs, "idx:"+filepath.Join(dir, name+"-images-idx3-ubyte.gz"))
	}
	want := recordsDigest(specs)
	if !strings.Contains(want, "truncated-images-idx3-ubyte.gz: image ") || strings.Count(want, " <nil>\n") != 3 {
		t.Fatalf("in this process:\n%s\nwant the truncated file to fail naming it, the others to read", want)
	}
	out := filepath.Join(dir, "digest")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestGzipWithoutLibdeflate$", "-test.count", "1")
	cmd.Env = append(os.Environ(), "FEDCALIB_TEST_DIGEST_SPECS="+strings.Join(specs, "\n"),
		"FEDCALIB_TEST_DIGEST_OUT="+out, deflate.LibraryEnv+"="+filepath.Join(dir, "missing", "libdeflate.so.0"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fresh process: %v\n%s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("without libdeflate:\n%s\nwith it:\n%s", got, want)
	}
}
