//go:build cgo

package deflate

import (
	"bytes"
	stdgzip "compress/gzip"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
)

// TestOpenErrors checks the errors of a library that is missing or is
// not libdeflate: both wrap ErrNotFound and say how to install it.
func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "libdeflate.so.0")
	if err := os.WriteFile(notELF, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, reason string }{
		{filepath.Join(dir, "missing.so"), "No such file"},
		{notELF, "file too short"},
		{"libc.so.6", "it has no libdeflate_alloc_decompressor"},
	} {
		_, err := spec.Open(tc.path)
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("open(%s): %v, want an error wrapping ErrNotFound", tc.path, err)
		}
		for _, want := range []string{tc.path, tc.reason, "apt-get install libdeflate0", LibraryEnv, "klauspost/compress instead"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("open(%s): %q does not say %q", tc.path, err, want)
			}
		}
	}
}

// newDecompressor returns a Decompressor, or skips the test where the
// library is not installed.
func newDecompressor(t testing.TB) *Decompressor {
	t.Helper()
	d, err := NewDecompressor()
	if errors.Is(err, ErrNotFound) {
		t.Skipf("libdeflate is not installed: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// goGunzip decompresses src as the streaming path of infer/data does, with
// klauspost/compress/gzip in its default multistream mode, reading at
// most limit bytes.
func goGunzip(src []byte, limit int) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(src))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(zr, int64(limit)))
}

// gzipOf compresses b with klauspost/compress at level.
func gzipOf(b []byte, level int) []byte {
	var buf bytes.Buffer
	w, err := gzip.NewWriterLevel(&buf, level)
	if err != nil {
		panic(err)
	}
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// member builds a gzip member by hand: header flags flg with the given
// optional fields (a header CRC is computed when flg has FHCRC), the
// deflate data of content (stored), and the trailer.
func member(flg byte, extra []byte, name, comment string, content []byte) []byte {
	h := []byte{gzipID1, gzipID2, gzipDeflate, flg, 0, 0, 0, 0, 0, 255}
	if flg&flagExtra != 0 {
		h = binary.LittleEndian.AppendUint16(h, uint16(len(extra)))
		h = append(h, extra...)
	}
	if flg&flagName != 0 {
		h = append(append(h, name...), 0)
	}
	if flg&flagComment != 0 {
		h = append(append(h, comment...), 0)
	}
	if flg&flagHdrCrc != 0 {
		h = binary.LittleEndian.AppendUint16(h, uint16(crc32.ChecksumIEEE(h)))
	}
	var body bytes.Buffer
	fw, _ := flate.NewWriter(&body, flate.NoCompression)
	fw.Write(content)
	fw.Close()
	h = append(h, body.Bytes()...)
	h = binary.LittleEndian.AppendUint32(h, crc32.ChecksumIEEE(content))
	return binary.LittleEndian.AppendUint32(h, uint32(len(content)))
}

// pseudoImages returns n bytes that compress as MNIST does: runs of zero
// background with noisy strokes.
func pseudoImages(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		if r.IntN(4) == 0 {
			b[i] = byte(r.IntN(256))
		}
	}
	return b
}

func TestGunzip(t *testing.T) {
	d := newDecompressor(t)
	img := pseudoImages(1<<20, 1)
	var std bytes.Buffer
	sw := stdgzip.NewWriter(&std)
	sw.Name, sw.Comment, sw.Extra = "t10k-images-idx3-ubyte", "a comment", []byte("ex")
	sw.Write(img[:1000])
	sw.Close()
	long := strings.Repeat("n", maxString-1)
	for _, tc := range []struct {
		name string
		gz   []byte
		want []byte // by construction
	}{
		{"empty content", gzipOf(nil, gzip.DefaultCompression), nil},
		{"images, default level", gzipOf(img, gzip.DefaultCompression), img},
		{"images, best speed", gzipOf(img, gzip.BestSpeed), img},
		{"images, best compression", gzipOf(img, gzip.BestCompression), img},
		{"images, Huffman only", gzipOf(img, gzip.HuffmanOnly), img},
		{"images, stored", gzipOf(img, gzip.NoCompression), img},
		{"compress/gzip with name, comment and extra", std.Bytes(), img[:1000]},
		{"two members", append(gzipOf(img[:5000], 6), gzipOf(img[5000:9000], 1)...), img[:9000]},
		{"three members, one empty", append(append(gzipOf(img[:10], 6), gzipOf(nil, 6)...), gzipOf(img[10:20], 9)...), img[:20]},
		{"header CRC, name, comment, extra", member(flagHdrCrc|flagName|flagComment|flagExtra, []byte("xyz"), "n", "c", img[:300]), img[:300]},
		{"511-byte name", member(flagName, nil, long, "", img[:10]), img[:10]},
		{"511-byte comment", member(flagComment, nil, "", long, img[:10]), img[:10]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The second method: Go's streaming reader, as infer/data's
			// fallback reads it.
			if got, err := goGunzip(tc.gz, 1<<30); err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("klauspost/compress/gzip: %d bytes, %v; want the %d bytes", len(got), err, len(tc.want))
			}
			dst := make([]byte, len(tc.want))
			n, err := d.Gunzip(dst, tc.gz)
			if err != nil || n != len(tc.want) || !bytes.Equal(dst, tc.want) {
				t.Fatalf("Gunzip into %d bytes: %d, %v; want the %d bytes", len(dst), n, err, len(tc.want))
			}
			if len(tc.want) > 0 {
				if _, err := d.Gunzip(dst[:len(dst)-1], tc.gz); err != ErrShortBuffer {
					t.Errorf("Gunzip into one byte less: %v, want ErrShortBuffer", err)
				}
			}
			big := make([]byte, len(tc.want)+100)
			if n, err := d.Gunzip(big, tc.gz); err != nil || n != len(tc.want) || !bytes.Equal(big[:n], tc.want) {
				t.Errorf("Gunzip into a larger buffer: %d, %v", n, err)
			}
		})
	}
}

// TestGunzipRefuses checks that Gunzip refuses what Go's gzip reader
// refuses, with ErrCorrupt, and that ISIZE sizes nothing: data that would
// not fit is ErrShortBuffer whatever the trailer says.
func TestGunzipRefuses(t *testing.T) {
	d := newDecompressor(t)
	img := pseudoImages(5000, 2)
	good := gzipOf(img, 6)
	withTrailer := func(crc, size uint32) []byte {
		b := bytes.Clone(good)
		binary.LittleEndian.PutUint32(b[len(b)-8:], crc)
		binary.LittleEndian.PutUint32(b[len(b)-4:], size)
		return b
	}
	crc := crc32.ChecksumIEEE(img)
	flip := func(b []byte, i int) []byte { b = bytes.Clone(b); b[i] ^= 0x40; return b }
	badHCRC := member(flagHdrCrc, nil, "", "", img[:10])
	badHCRC[10] ^= 1
	cases := []struct {
		name string
		gz   []byte
	}{
		{"empty", nil},
		{"magic only", good[:2]},
		{"wrong magic", flip(good, 1)},
		{"method 7", append([]byte{gzipID1, gzipID2, 7}, good[3:]...)},
		{"reserved flag", flip(good, 3)},
		{"bad CRC", withTrailer(crc^1, uint32(len(img)))},
		{"ISIZE too small", withTrailer(crc, uint32(len(img)-1))},
		{"ISIZE too large", withTrailer(crc, uint32(len(img)+1))},
		{"ISIZE 4 GiB - 1", withTrailer(crc, 1<<32-1)},
		{"corrupt deflate data", flip(good, 20)},
		{"trailing garbage", append(bytes.Clone(good), 'x')},
		{"trailing zeros", append(bytes.Clone(good), make([]byte, 512)...)},
		{"second member truncated", append(bytes.Clone(good), good[:len(good)-1]...)},
		{"wrong header CRC", badHCRC},
		{"512-byte name", member(flagName, nil, strings.Repeat("n", maxString), "", img[:10])},
		{"unterminated name", member(flagName, nil, "abc", "", nil)[:13]},
		{"extra field past the end", []byte{gzipID1, gzipID2, gzipDeflate, flagExtra, 0, 0, 0, 0, 0, 255, 200, 0, 1, 2}},
	}
	for i := range len(good) {
		cases = append(cases, struct {
			name string
			gz   []byte
		}{"truncated", good[:i]})
	}
	dst := make([]byte, 3*len(img)) // room for two members
	for _, tc := range cases {
		if _, err := goGunzip(tc.gz, 1<<30); err == nil {
			t.Fatalf("%s (%d bytes): klauspost/compress/gzip accepts it", tc.name, len(tc.gz))
		}
		if _, err := d.Gunzip(dst, tc.gz); err != ErrCorrupt {
			t.Errorf("%s (%d bytes): Gunzip: %v, want ErrCorrupt", tc.name, len(tc.gz), err)
		}
	}

	// A gzip bomb: 16 MiB of zeros in some 16 kB, with an honest ISIZE
	// or one that claims a single byte, into a 1 MiB buffer.
	bomb := gzipOf(make([]byte, 16<<20), gzip.BestSpeed)
	small := make([]byte, 1<<20)
	if _, err := d.Gunzip(small, bomb); err != ErrShortBuffer {
		t.Errorf("gzip bomb: %v, want ErrShortBuffer", err)
	}
	binary.LittleEndian.PutUint32(bomb[len(bomb)-4:], 1)
	if _, err := d.Gunzip(small, bomb); err != ErrShortBuffer {
		t.Errorf("gzip bomb claiming 1 byte: %v, want ErrShortBuffer", err)
	}
}

// fuzzLimit bounds the output of the fuzz targets.
const fuzzLimit = 1 << 20

// FuzzGunzip compares Gunzip with klauspost/compress/gzip (the streaming
// path of infer/data) on arbitrary input: where Gunzip succeeds, Go's
// reader gives the same bytes without error; where Go's reader reads the
// whole input cleanly, Gunzip succeeds.
func FuzzGunzip(f *testing.F) {
	img := pseudoImages(3000, 3)
	f.Add(gzipOf(img, 6))
	f.Add(gzipOf(img, gzip.HuffmanOnly))
	f.Add(gzipOf(img[:100], gzip.NoCompression))
	f.Add(append(gzipOf(img[:50], 1), gzipOf(img[50:90], 9)...))
	f.Add(member(flagHdrCrc|flagName|flagComment|flagExtra, []byte("xyz"), "n", "c", img[:30]))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, gz []byte) {
		d := newDecompressor(t)
		dst := make([]byte, fuzzLimit)
		n, err := d.Gunzip(dst, gz)
		want, goErr := goGunzip(gz, fuzzLimit+1)
		switch {
		case err == nil && (goErr != nil || !bytes.Equal(dst[:n], want)):
			t.Fatalf("Gunzip gives %d bytes, Go's reader %d bytes and %v", n, len(want), goErr)
		case err != nil && goErr == nil && len(want) <= fuzzLimit:
			t.Fatalf("Gunzip: %v, but Go's reader reads %d bytes cleanly", err, len(want))
		}
	})
}

// FuzzInflate compares libdeflate's raw deflate decompression with
// klauspost/compress/flate on arbitrary input, past the checksums that
// keep FuzzGunzip's mutations from reaching the deflate decoders: where
// both succeed, the bytes are the same; where one accepts what the other
// refuses, the fuzzer says so.
func FuzzInflate(f *testing.F) {
	img := pseudoImages(3000, 4)
	for _, level := range []int{1, 6, 9, flate.HuffmanOnly, flate.NoCompression} {
		var buf bytes.Buffer
		w, _ := flate.NewWriter(&buf, level)
		w.Write(img)
		w.Close()
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		d := newDecompressor(t)
		dst := make([]byte, fuzzLimit)
		_, n, err := d.inflate(dst, raw)
		want, goErr := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(raw)), fuzzLimit+1))
		switch {
		case err == nil && goErr == nil:
			if !bytes.Equal(dst[:n], want) {
				t.Fatalf("libdeflate gives %d bytes, klauspost/compress/flate %d other bytes", n, len(want))
			}
		case err == nil:
			t.Fatalf("libdeflate gives %d bytes; klauspost/compress/flate refuses: %v", n, goErr)
		case goErr == nil && len(want) <= fuzzLimit:
			t.Fatalf("libdeflate: %v; klauspost/compress/flate gives %d bytes", err, len(want))
		}
	})
}
