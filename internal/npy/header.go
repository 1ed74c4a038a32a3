package npy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// MaxHeader bounds the length of a .npy header dictionary that ReadHeader
// accepts; NumPy writes a few hundred bytes at most.
const MaxHeader = 1 << 16

// MaxDims bounds the number of dimensions of an array (NumPy's limit is
// 64).
const MaxDims = 64

// ErrNotNPY is returned by ReadHeader for a stream that does not start
// with the .npy magic string.
var ErrNotNPY = errors.New("no \\x93NUMPY magic")

// Header is the parsed header of a .npy array. The zero value is a
// C-order scalar of no dtype.
type Header struct {
	// Descr is the dtype, such as "<f4" or "|u1".
	Descr string
	// Fortran is true for column-major (Fortran-order) data.
	Fortran bool
	// Shape is the array's shape; empty for a scalar.
	Shape []int
}

// ReadHeader reads the magic string, the format version (1.0, 2.0 or
// 3.0), the header length and the header dictionary of a .npy stream
// from r, and parses the dictionary with ParseHeader. It returns the
// header and the number of bytes read, after which r is positioned at
// the array's data. Its errors say what is wrong without naming the
// stream; a stream that ends early gives an error wrapping
// io.ErrUnexpectedEOF.
func ReadHeader(r io.Reader) (Header, int, error) {
	var pre [12]byte
	if _, err := io.ReadFull(r, pre[:10]); err != nil {
		return Header{}, 0, eof(err)
	}
	if string(pre[:6]) != "\x93NUMPY" {
		return Header{}, 0, ErrNotNPY
	}
	var hlen, n int
	switch pre[6] {
	case 1:
		hlen, n = int(binary.LittleEndian.Uint16(pre[8:])), 10
	case 2, 3: // 3.0 differs from 2.0 only by allowing UTF-8 in the header
		if _, err := io.ReadFull(r, pre[10:]); err != nil {
			return Header{}, 0, eof(err)
		}
		hlen, n = int(binary.LittleEndian.Uint32(pre[8:])), 12
	default:
		return Header{}, 0, fmt.Errorf("format version %d.%d is not supported", pre[6], pre[7])
	}
	if hlen > MaxHeader {
		return Header{}, 0, fmt.Errorf("header of %d bytes is too long", hlen)
	}
	dict := make([]byte, hlen)
	if _, err := io.ReadFull(r, dict); err != nil {
		return Header{}, 0, eof(err)
	}
	h, err := ParseHeader(string(dict))
	if err != nil {
		return Header{}, 0, err
	}
	return h, n + hlen, nil
}

// eof turns io.EOF, a stream that ends before its header does, into
// io.ErrUnexpectedEOF.
func eof(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// ParseHeader parses a .npy header dictionary such as
//
//	{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }
//
// followed by padding: the three keys in any order, single or double
// quotes, Python 2 long integers (3L) and spaces anywhere between tokens.
func ParseHeader(dict string) (Header, error) {
	var h Header
	p := &dictParser{s: dict}
	if !p.accept('{') {
		return h, errors.New("header does not start with '{'")
	}
	seen := map[string]bool{}
	for {
		if p.accept('}') {
			break
		}
		key, err := p.str()
		if err != nil {
			return h, fmt.Errorf("key: %w", err)
		}
		if seen[key] {
			return h, fmt.Errorf("key %q repeated", key)
		}
		seen[key] = true
		if !p.accept(':') {
			return h, fmt.Errorf("no ':' after key %q", key)
		}
		switch key {
		case "descr":
			if p.peek() == '[' {
				return h, errors.New("descr: structured dtypes are not supported")
			}
			if h.Descr, err = p.str(); err != nil {
				return h, fmt.Errorf("descr: %w", err)
			}
		case "fortran_order":
			switch {
			case p.word("True"):
				h.Fortran = true
			case p.word("False"):
			default:
				return h, errors.New("fortran_order: want True or False")
			}
		case "shape":
			if h.Shape, err = p.tuple(); err != nil {
				return h, fmt.Errorf("shape: %w", err)
			}
		default:
			return h, fmt.Errorf("unknown key %q", key)
		}
		if !p.accept(',') {
			if !p.accept('}') {
				return h, fmt.Errorf("no ',' or '}' after %q", key)
			}
			break
		}
	}
	if strings.TrimRight(p.s[p.i:], " \t\r\n\x00") != "" {
		return h, errors.New("text after '}'")
	}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return h, fmt.Errorf("no %q key", k)
		}
	}
	return h, nil
}

// dictParser scans the Python literal of a .npy header.
type dictParser struct {
	s string
	i int
}

func (p *dictParser) skip() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n' || p.s[p.i] == '\r') {
		p.i++
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (p *dictParser) peek() byte {
	p.skip()
	if p.i == len(p.s) {
		return 0
	}
	return p.s[p.i]
}

// accept consumes c if it is the next non-space byte.
func (p *dictParser) accept(c byte) bool {
	if p.peek() == c {
		p.i++
		return true
	}
	return false
}

// word consumes w if it comes next.
func (p *dictParser) word(w string) bool {
	p.skip()
	if strings.HasPrefix(p.s[p.i:], w) {
		p.i += len(w)
		return true
	}
	return false
}

// str consumes a quoted string without escapes.
func (p *dictParser) str() (string, error) {
	q := p.peek()
	if q != '\'' && q != '"' {
		return "", errors.New("want a quoted string")
	}
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 {
		return "", errors.New("unterminated string")
	}
	v := p.s[p.i+1 : p.i+1+end]
	if strings.IndexByte(v, '\\') >= 0 {
		return "", errors.New("escapes in strings are not supported")
	}
	p.i += end + 2
	return v, nil
}

// tuple consumes a tuple of non-negative integers: (), (3,), (3, 2).
func (p *dictParser) tuple() ([]int, error) {
	if !p.accept('(') {
		return nil, errors.New("want a tuple")
	}
	shape := []int{}
	for !p.accept(')') {
		p.skip()
		j := p.i
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		if j == p.i {
			return nil, errors.New("want a non-negative integer")
		}
		n, err := strconv.Atoi(p.s[p.i:j])
		if err != nil {
			return nil, err
		}
		if len(shape) == MaxDims {
			return nil, fmt.Errorf("more than %d dimensions", MaxDims)
		}
		shape = append(shape, n)
		p.i = j
		if p.i < len(p.s) && p.s[p.i] == 'L' {
			p.i++
		}
		if !p.accept(',') {
			if !p.accept(')') {
				return nil, errors.New("want ',' or ')'")
			}
			break
		}
	}
	return shape, nil
}
