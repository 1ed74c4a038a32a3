package data

import (
	"io"
	"os"
)

// files yields the successive files of a dataset made of several files:
// a list of paths, or the selected members of a tar archive.
type files interface {
	// next returns the name and content of the next file, or io.EOF. The
	// content is valid until the next call.
	next() (name string, r io.Reader, err error)
	Close() error
}

// pathList yields files from a list of paths, decompressing gzip ones,
// inflated whole where whole is set (see openStream).
type pathList struct {
	paths []string
	whole bool
	cur   *stream
}

func (l *pathList) next() (string, io.Reader, error) {
	if l.cur != nil {
		l.cur.Close()
		l.cur = nil
	}
	if len(l.paths) == 0 {
		return "", nil, io.EOF
	}
	name := l.paths[0]
	l.paths = l.paths[1:]
	s, err := openStream(name, l.whole)
	if err != nil {
		return "", nil, err
	}
	l.cur = s
	return name, s, nil
}

func (l *pathList) Close() error {
	l.paths = nil
	if l.cur != nil {
		err := l.cur.Close()
		l.cur = nil
		return err
	}
	return nil
}

// tarMembers yields the regular files of a tar archive for which keep
// returns true, in archive order.
type tarMembers struct {
	t    *tarStream
	keep func(name string) bool
}

func (m *tarMembers) next() (string, io.Reader, error) {
	for {
		name, dir, err := m.t.next()
		if err != nil {
			return "", nil, err
		}
		if !dir && m.keep(name) {
			return member(m.t.name, name), m.t.tr, nil
		}
	}
}

func (m *tarMembers) Close() error { return m.t.Close() }

// fileSize returns the size of a regular file, or -1.
func fileSize(name string) int64 {
	fi, err := os.Stat(name)
	if err != nil || !fi.Mode().IsRegular() {
		return -1
	}
	return fi.Size()
}
