package data

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// ShakespeareLetters is LEAF's Shakespeare vocabulary (ALL_LETTERS in
// LEAF's language_utils.py): 80 characters. The label of a next character
// is its index in this string, and a model recipe that encodes input text
// the same way uses the index of each input character.
const ShakespeareLetters = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"

// WindowLen is the number of characters in the input of a text record:
// LEAF's Shakespeare sequence length.
const WindowLen = 80

// LetterIndex returns the index of c in ShakespeareLetters, or -1 when c
// is not in the vocabulary (LEAF maps such characters to -1 too).
func LetterIndex(c rune) int {
	if c >= utf8.RuneSelf {
		return -1
	}
	return strings.IndexByte(ShakespeareLetters, byte(c))
}

// shakespeareClasses returns the vocabulary as one-character class names.
func shakespeareClasses() []string {
	names := make([]string, len(ShakespeareLetters))
	for i := range names {
		names[i] = ShakespeareLetters[i : i+1]
	}
	return names
}

// leafText turns a role's raw text into the character sequence that LEAF's
// preprocessing (txt_to_data in gen_all_data.py) windows: newlines become
// spaces and runs of two or more spaces become one.
func leafText(raw []byte, dst []rune) []rune {
	dst = dst[:0]
	spaces := 0
	for _, c := range string(raw) {
		if c == '\n' {
			c = ' '
		}
		if c == ' ' {
			spaces++
			continue
		}
		if spaces > 0 {
			dst = append(dst, ' ')
			spaces = 0
		}
		dst = append(dst, c)
	}
	if spaces > 0 {
		dst = append(dst, ' ')
	}
	return dst
}

// roleSource yields the raw text of successive roles.
type roleSource interface {
	nextRole() (client string, raw []byte, err error)
	Close() error
}

// textReader emits every WindowLen-character window of each role's text
// with the following character as label, as LEAF does. Windows whose next
// character is outside ShakespeareLetters are skipped.
type textReader struct {
	src    roleSource
	client string
	text   []rune
	i      int // start of the next window
}

func (r *textReader) Next(rec *Record) error {
	for {
		for r.i+WindowLen < len(r.text) {
			start := r.i
			r.i++
			label := LetterIndex(r.text[start+WindowLen])
			if label < 0 {
				continue
			}
			rec.setText(string(r.text[start : start+WindowLen]))
			rec.Label = label
			rec.Client = r.client
			return nil
		}
		client, raw, err := r.src.nextRole()
		if err != nil {
			return err
		}
		r.client, r.text, r.i = client, leafText(raw, r.text), 0
	}
}

func (r *textReader) Classes() []string { return shakespeareClasses() }

func (r *textReader) Close() error { return r.src.Close() }

// openSpeakersSpec opens "FILE.txt".
func openSpeakersSpec(rest string) (Reader, error) {
	f, err := os.Open(rest)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("data: %w", err)
	}
	src, err := newSpeakers(f, fi.Size(), rest)
	if err != nil {
		f.Close()
		return nil, err
	}
	src.closer = f
	return &textReader{src: src}, nil
}

// span is a byte range [off, end) of a file.
type span struct{ off, end int64 }

// speakers splits a play's text into roles. A speaker heading is a line
// that ends with ':' and follows a blank line or starts the file, such as
// "First Citizen:"; the lines up to the next heading are the role's. Lines
// of the same role are joined by newlines, in file order; text before the
// first heading belongs to no role and is skipped.
type speakers struct {
	name   string
	ra     io.ReaderAt
	closer io.Closer
	roles  []string          // in order of first appearance
	lines  map[string][]span // each role's lines
	buf    []byte
}

// newSpeakers scans the file once to find each role's lines.
func newSpeakers(ra io.ReaderAt, size int64, name string) (*speakers, error) {
	br := bufio.NewReaderSize(io.NewSectionReader(ra, 0, size), 1<<16)
	if magic, _ := br.Peek(2); string(magic) == gzipMagic {
		return nil, fmt.Errorf("data: %s: a gzip file; decompress it first", name)
	}
	s := &speakers{name: name, ra: ra, lines: map[string][]span{}}
	var (
		off       int64
		role      string
		prevBlank = true
		line      []byte
	)
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line[:0], chunk...)
		for err == bufio.ErrBufferFull {
			chunk, err = br.ReadSlice('\n')
			line = append(line, chunk...)
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("data: %s: %w", name, err)
		}
		if len(line) == 0 {
			break
		}
		start := off
		off += int64(len(line))
		body := bytes.TrimRight(line, "\r\n")
		trimmed := bytes.TrimSpace(body)
		switch {
		case len(trimmed) == 0:
			prevBlank = true
		case prevBlank && len(trimmed) > 1 && trimmed[len(trimmed)-1] == ':':
			role = string(trimmed[:len(trimmed)-1])
			if _, ok := s.lines[role]; !ok {
				s.roles = append(s.roles, role)
				s.lines[role] = nil
			}
			prevBlank = false
		default:
			if role != "" {
				s.lines[role] = append(s.lines[role], span{start, start + int64(len(body))})
			}
			prevBlank = false
		}
		if err == io.EOF {
			break
		}
	}
	if len(s.roles) == 0 {
		return nil, formatError(name, nil, `no speaker headings (a line such as "First Citizen:" after a blank line)`)
	}
	return s, nil
}

func (s *speakers) nextRole() (string, []byte, error) {
	if len(s.roles) == 0 {
		return "", nil, io.EOF
	}
	role := s.roles[0]
	s.roles = s.roles[1:]
	spans := s.lines[role]
	delete(s.lines, role)
	s.buf = s.buf[:0]
	for i, sp := range spans {
		if i > 0 {
			s.buf = append(s.buf, '\n')
		}
		n := len(s.buf)
		s.buf = append(s.buf, make([]byte, sp.end-sp.off)...)
		if _, err := s.ra.ReadAt(s.buf[n:], sp.off); err != nil {
			return "", nil, fmt.Errorf("data: %s: %w", s.name, eofError(err))
		}
	}
	return role, s.buf, nil
}

func (s *speakers) Close() error {
	s.roles = nil
	if s.closer != nil {
		err := s.closer.Close()
		s.closer = nil
		return err
	}
	return nil
}

// openRolesSpec opens "PATH": LEAF's raw Shakespeare, one text file per
// role, in a directory or a tar archive.
func openRolesSpec(rest string) (Reader, error) {
	fi, err := os.Stat(rest)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	isText := func(name string) bool { return strings.EqualFold(path.Ext(name), ".txt") }
	var src files
	switch {
	case fi.IsDir():
		var paths []string
		err := filepath.WalkDir(rest, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && isText(p) {
				paths = append(paths, p)
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("data: %w", err)
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("data: %s: no role .txt files in this directory", rest)
		}
		src = &pathList{paths: paths}
	case isTar(rest):
		t, err := openTar(rest)
		if err != nil {
			return nil, err
		}
		src = &tarMembers{t: t, keep: isText}
	default:
		return nil, fmt.Errorf("data: %s: roles wants a directory or a .tar.gz of <ROLE>.txt files", rest)
	}
	return &textReader{src: &roleFiles{files: src}}, nil
}

// roleFiles yields one role per text file, named by the file's base name
// without its extension.
type roleFiles struct {
	files files
	buf   bytes.Buffer
}

// maxRoleBytes bounds the size of one role file.
const maxRoleBytes = 1 << 28

func (r *roleFiles) nextRole() (string, []byte, error) {
	name, rd, err := r.files.next()
	if err != nil {
		return "", nil, err
	}
	r.buf.Reset()
	n, err := r.buf.ReadFrom(io.LimitReader(rd, maxRoleBytes+1))
	if err != nil {
		return "", nil, fmt.Errorf("data: %s: %w", name, err)
	}
	if n > maxRoleBytes {
		return "", nil, formatError(name, nil, "role file larger than %d bytes", maxRoleBytes)
	}
	base := path.Base(filepath.ToSlash(name))
	return strings.TrimSuffix(base, path.Ext(base)), r.buf.Bytes(), nil
}

func (r *roleFiles) Close() error { return r.files.Close() }
