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
	io.Reader // what Read reads from now
	f         *os.File
	gz        *gzip.Reader
	whole     *wholeGzip        // the content inflated whole, once Read reads from it
	pending   <-chan *wholeGzip // the inflating of the whole content under way, or nil
	read      int64             // bytes of content Read has returned
	hold      bool              // Read leaves pending alone (tests)
}

// openStream opens name for sequential reading, decompressing it when its
// content starts with the gzip magic number, as it is read, by
// klauspost/compress. With whole, a gzip file is also inflated at once
// with libdeflate, on a goroutine of its own, where it can be
// (inflateWhole: a regular file of at most maxWholeGzip bytes
// decompressed, the library loads, the data is clean gzip): once that is
// done, Read goes on from the whole content at the offset it has
// reached, so the first records come as soon as the streaming reader
// gives them and the rest at libdeflate's speed. Both give the same
// bytes; a file libdeflate refuses is read the streaming way to its end,
// which reports what is wrong with it as before.
func openStream(name string, whole bool) (*stream, error) {
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
		if whole {
			// inflateWhole reads f with ReadAt, which leaves the
			// streaming reader's offset alone.
			done := make(chan *wholeGzip, 1)
			go func() { done <- inflateWhole(f) }()
			s.pending = done
		}
	}
	s.Reader = br
	return s, nil
}

// Read reads the next bytes of the content, from the whole content once
// it has been inflated.
func (s *stream) Read(p []byte) (int, error) {
	if s.pending != nil && !s.hold {
		select {
		case w := <-s.pending:
			s.adopt(w)
		default:
		}
	}
	n, err := s.Reader.Read(p)
	s.read += int64(n)
	return n, err
}

// wait waits until the whole content is inflated, or found not to be,
// and reads from it from then on if it is.
func (s *stream) wait() {
	if s.pending != nil {
		s.adopt(<-s.pending)
	}
}

// adopt takes w, the whole content inflated (nil if it could not be), as
// what Read reads from, at the offset Read has reached.
func (s *stream) adopt(w *wholeGzip) {
	s.pending = nil
	if w == nil {
		return
	}
	if s.read > int64(len(w.buf)) {
		// The two decoders disagree (they should not): the streaming
		// one, which reports what is wrong, goes on.
		w.release()
		return
	}
	w.off = int(s.read)
	s.whole, s.Reader = w, w
}

// Close closes the file, after the inflating of the whole content, if
// under way, has ended.
func (s *stream) Close() error {
	s.wait()
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
