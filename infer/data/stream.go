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
	*bufio.Reader
	f  *os.File
	gz *gzip.Reader
}

// openStream opens name for sequential reading, decompressing it when its
// content starts with the gzip magic number.
func openStream(name string) (*stream, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	s := &stream{f: f}
	br := bufio.NewReaderSize(f, 1<<16)
	if magic, _ := br.Peek(2); string(magic) == gzipMagic {
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
func openTar(name string) (*tarStream, error) {
	s, err := openStream(name)
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
