package data

import (
	"archive/tar"
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/klauspost/compress/gzip"
)

// gzipMagic starts every gzip stream.
const gzipMagic = "\x1f\x8b"

// stream is a buffered reader over a file, decompressed when the file is
// gzip.
type stream struct {
	io.Reader
	f     *os.File
	gz    *gzip.Reader
	whole *wholeGzip
}

// openStream opens name for sequential reading, decompressing it when its
// content starts with the gzip magic number. With whole, a gzip file is
// inflated at once with libdeflate when it can be (inflateWhole: a
// regular file of at most maxWholeGzip bytes decompressed, the library
// loads, the data is clean gzip); otherwise, and always without whole,
// it is decompressed as it is read, by klauspost/compress. Both give the
// same bytes; a file libdeflate refuses is read the second way, which
// reports what is wrong with it as before.
func openStream(name string, whole bool) (*stream, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	s := &stream{f: f}
	br := bufio.NewReaderSize(f, 1<<16)
	if magic, _ := br.Peek(2); string(magic) == gzipMagic {
		if whole {
			// inflateWhole reads with ReadAt, so br is still at the
			// start of the file if it declines.
			if s.whole = inflateWhole(f); s.whole != nil {
				s.Reader = s.whole
				return s, nil
			}
		}
		s.gz, err = gzip.NewReader(br)
		if err != nil {
			f.Close()
			return nil, formatError(name, err, "bad gzip header")
		}
		br = bufio.NewReaderSize(s.gz, 1<<16)
	}
	s.Reader = br
	return s, nil
}

// Close closes the file.
func (s *stream) Close() error {
	if s.gz != nil {
		s.gz.Close()
	}
	if s.whole != nil {
		s.whole.release()
	}
	return s.f.Close()
}

// isTar reports whether name looks like a tar archive by its extension.
func isTar(name string) bool {
	n := strings.ToLower(name)
	return strings.HasSuffix(n, ".tar.gz") || strings.HasSuffix(n, ".tgz") || strings.HasSuffix(n, ".tar")
}

// tarStream iterates over the regular files of a tar archive, gzip
// compressed or not, in archive order.
type tarStream struct {
	name string // archive file name, for errors
	s    *stream
	tr   *tar.Reader
}

// openTar opens the tar archive name.
// An archive is decompressed as it is read, not whole: it holds whole
// files (images), whose decoding costs more than inflating them, and may
// be large.
func openTar(name string) (*tarStream, error) {
	s, err := openStream(name, false)
	if err != nil {
		return nil, err
	}
	return &tarStream{name: name, s: s, tr: tar.NewReader(s)}, nil
}

// next advances to the next regular file or directory of the archive and
// returns its cleaned slash-separated path (without a leading "./") and
// whether it is a directory. It returns io.EOF at the end of the archive.
// The file's content is read from t.tr.
func (t *tarStream) next() (name string, dir bool, err error) {
	for {
		h, err := t.tr.Next()
		if err == io.EOF {
			return "", false, io.EOF
		}
		if err != nil {
			return "", false, formatError(t.name, err, "reading tar archive")
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir:
		default:
			continue
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." || name == ".." || strings.HasPrefix(name, "../") {
			continue
		}
		return strings.TrimPrefix(name, "/"), h.Typeflag == tar.TypeDir, nil
	}
}

// Close closes the archive.
func (t *tarStream) Close() error { return t.s.Close() }

// member names a file inside an archive for error messages.
func member(archive, name string) string { return archive + ":" + name }
