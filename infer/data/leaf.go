package data

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// femnistClasses are the 62 FEMNIST classes in LEAF's label order:
// digits, then upper-case, then lower-case letters.
var femnistClasses = func() []string {
	var names []string
	for _, r := range [][2]byte{{'0', '9'}, {'A', 'Z'}, {'a', 'z'}} {
		for c := r[0]; c <= r[1]; c++ {
			names = append(names, string(c))
		}
	}
	return names
}()

// femnistSide is the side of a FEMNIST image: x holds 28×28 floats.
const femnistSide = 28

// leafKind is the type of a LEAF dataset's inputs, found from the data.
type leafKind int

const (
	leafUnknown leafKind = iota
	leafNumbers          // x[i] is an array of numbers (FEMNIST, Synthetic)
	leafStrings          // x[i] is a string (Shakespeare)
)

// leafUser is the part of a user's entry in user_data that the reader
// uses. Each sample stays raw until Next decodes it.
type leafUser struct {
	X []json.RawMessage `json:"x"`
	Y []json.RawMessage `json:"y"`
}

// leafReader streams LEAF JSON files: it walks each file's tokens to
// "user_data" and decodes one user's arrays at a time.
type leafReader struct {
	src    files
	name   string // current file
	dec    *json.Decoder
	inData bool // dec is inside the user_data object

	user string
	data leafUser
	i    int // next sample of user

	kind    leafKind
	dim     int // length of x[i] for leafNumbers
	classes []string
}

// openLEAFSpec opens "PATH[:train|test]".
func openLEAFSpec(rest string) (Reader, error) {
	p, option := splitOption(rest)
	if option != "" {
		if _, err := split(rest, option); err != nil {
			return nil, err
		}
	}
	inSplit := func(name string) bool {
		if !strings.EqualFold(path.Ext(name), ".json") {
			return false
		}
		return option == "" || slices.Contains(strings.Split(path.Dir(filepath.ToSlash(name)), "/"), option)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	var src files
	switch {
	case fi.IsDir():
		var paths []string
		err := filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(p, q)
			if inSplit(rel) {
				paths = append(paths, q)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("data: %w", err)
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("data: %s: no LEAF .json files%s in this directory", p, splitNote(option))
		}
		src = &pathList{paths: paths}
	case isTar(p):
		t, err := openTar(p)
		if err != nil {
			return nil, err
		}
		src = &tarMembers{t: t, keep: inSplit}
	default:
		if option != "" {
			return nil, fmt.Errorf("data: %s: a single LEAF file takes no split (got %q)", p, option)
		}
		src = &pathList{paths: []string{p}}
	}
	r, err := newLEAFReader(src)
	if err != nil {
		src.Close()
		return nil, err
	}
	return r, nil
}

func splitNote(option string) string {
	if option == "" {
		return ""
	}
	return " under a " + option + " directory"
}

// newLEAFReader returns a reader over the LEAF files of src, having read
// the first user so that the input kind, and so Classes, are known.
func newLEAFReader(src files) (*leafReader, error) {
	r := &leafReader{src: src}
	if err := r.nextUser(); err != nil && err != io.EOF {
		return nil, err
	}
	if r.data.X != nil {
		r.setKind(r.data.X[0])
	}
	switch {
	case r.kind == leafStrings:
		r.classes = shakespeareClasses()
	case r.kind == leafNumbers && rawLen(r.data.X[0]) == femnistSide*femnistSide:
		r.classes = femnistClasses
	}
	return r, nil
}

// setKind records the input kind from a first sample.
func (r *leafReader) setKind(x json.RawMessage) {
	switch x[0] {
	case '[':
		r.kind = leafNumbers
		r.dim = -1 // set by the first decoded sample
	case '"':
		r.kind = leafStrings
	}
}

// nextUser advances to the next user with at least one sample, opening
// files as needed. It returns io.EOF after the last user of the last file.
func (r *leafReader) nextUser() error {
	for {
		if r.dec == nil {
			name, rd, err := r.src.next()
			if err != nil {
				return err
			}
			r.name, r.dec, r.inData = name, json.NewDecoder(rd), false
			if err := r.expectDelim('{', "a LEAF file must be a JSON object"); err != nil {
				return err
			}
		}
		tok, err := r.dec.Token()
		if err != nil {
			return r.jsonError(err)
		}
		if !r.inData {
			switch key := tok.(type) {
			case json.Delim: // the closing '}' of the file's object
				r.dec = nil
			case string:
				if key != "user_data" {
					if err := skipValue(r.dec); err != nil {
						return r.jsonError(err)
					}
					continue
				}
				if err := r.expectDelim('{', `"user_data" must be an object`); err != nil {
					return err
				}
				r.inData = true
			}
			continue
		}
		if _, ok := tok.(json.Delim); ok { // the closing '}' of user_data
			r.inData = false
			continue
		}
		r.user = tok.(string)
		if err := r.dec.Decode(&r.data); err != nil {
			return formatError(r.name, err, "user %q", r.user)
		}
		for i := range r.data.X {
			r.data.X[i] = bytes.TrimSpace(r.data.X[i])
		}
		if len(r.data.X) != len(r.data.Y) {
			return formatError(r.name, nil, "user %q has %d x but %d y", r.user, len(r.data.X), len(r.data.Y))
		}
		r.i = 0
		if len(r.data.X) > 0 {
			return nil
		}
	}
}

// expectDelim reads the next token and checks that it is the delimiter d.
func (r *leafReader) expectDelim(d json.Delim, msg string) error {
	tok, err := r.dec.Token()
	if err != nil {
		return r.jsonError(err)
	}
	if tok != d {
		return formatError(r.name, nil, "%s (found %v)", msg, tok)
	}
	return nil
}

func (r *leafReader) jsonError(err error) error {
	return formatError(r.name, eofError(err), "reading LEAF JSON")
}

// skipValue skips the next JSON value, token by token, so that a large
// value is not held in memory.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return eofError(err)
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			depth++
		case json.Delim(']'), json.Delim('}'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

func (r *leafReader) Next(rec *Record) error {
	if r.dec == nil && r.data.X == nil {
		return io.EOF
	}
	if r.i == len(r.data.X) {
		if err := r.nextUser(); err != nil {
			r.data.X = nil
			return err
		}
	}
	x, y := r.data.X[r.i], r.data.Y[r.i]
	if err := r.decode(rec, x, y); err != nil {
		return formatError(r.name, err, "user %q sample %d", r.user, r.i)
	}
	rec.Client = r.user
	r.i++
	return nil
}

// decode decodes one sample into rec.
func (r *leafReader) decode(rec *Record, x, y json.RawMessage) error {
	switch {
	case r.kind == leafNumbers && x[0] == '[':
		f, err := parseFloats(x, rec.Float[:0])
		if err != nil {
			return err
		}
		if r.dim < 0 {
			r.dim = len(f)
		} else if len(f) != r.dim {
			return fmt.Errorf("x has %d values, want %d like the first sample", len(f), r.dim)
		}
		rec.Float, rec.Image, rec.Text = f, nil, ""
		if len(f) == femnistSide*femnistSide {
			rec.Shape = append(rec.Shape[:0], femnistSide, femnistSide)
		} else {
			rec.Shape = append(rec.Shape[:0], len(f))
		}
		label, err := strconv.Atoi(string(y))
		if err != nil || label < 0 {
			return fmt.Errorf("y = %s is not a class index", y)
		}
		if r.dim == femnistSide*femnistSide && label >= len(femnistClasses) {
			return fmt.Errorf("y = %d is not a FEMNIST class (0..61)", label)
		}
		rec.Label = label
	case r.kind == leafStrings && x[0] == '"':
		var s, next string
		if err := json.Unmarshal(x, &s); err != nil {
			return err
		}
		if err := json.Unmarshal(y, &next); err != nil {
			return fmt.Errorf("y = %s is not a one-character string", y)
		}
		c, size := utf8.DecodeRuneInString(next)
		if size == 0 || size != len(next) {
			return fmt.Errorf("y = %s is not a one-character string", y)
		}
		label := LetterIndex(c)
		if label < 0 {
			return fmt.Errorf("y = %s is not in LEAF's Shakespeare vocabulary", y)
		}
		rec.setText(s)
		rec.Label = label
	default:
		return fmt.Errorf("x = %.20s… is neither an array of numbers nor a string like the first sample's", x)
	}
	return nil
}

// parseFloats appends the numbers of a JSON array to dst. The decoder has
// already checked that raw is valid JSON, so splitting at commas is
// enough: any element that is not a number fails to parse.
func parseFloats(raw json.RawMessage, dst []float32) ([]float32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '[' || raw[len(raw)-1] != ']' {
		return dst, fmt.Errorf("x is not an array")
	}
	body := raw[1 : len(raw)-1]
	if len(bytes.TrimSpace(body)) == 0 {
		return dst, nil
	}
	for {
		tok := body
		i := bytes.IndexByte(body, ',')
		if i >= 0 {
			tok, body = body[:i], body[i+1:]
		}
		tok = bytes.TrimSpace(tok)
		v, err := strconv.ParseFloat(string(tok), 32)
		if err != nil || !validNumber(tok) {
			return dst, fmt.Errorf("x holds %.20q, not a number", tok)
		}
		dst = append(dst, float32(v))
		if i < 0 {
			return dst, nil
		}
	}
}

// validNumber reports whether tok has the characters of a JSON number
// (strconv also accepts "Inf", "NaN", hex and underscores, which JSON
// does not; the decoder has rejected them already, but the check keeps
// parseFloats correct on its own).
func validNumber(tok []byte) bool {
	for _, c := range tok {
		switch {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
		default:
			return false
		}
	}
	return len(tok) > 0
}

func (r *leafReader) Classes() []string { return classesCopy(r.classes) }

// rawLen returns the number of elements of a JSON array of numbers.
func rawLen(x json.RawMessage) int {
	body := bytes.TrimSpace(x)
	if len(body) < 2 || len(bytes.TrimSpace(body[1:len(body)-1])) == 0 {
		return 0
	}
	return bytes.Count(body, []byte(",")) + 1
}

func (r *leafReader) Close() error {
	r.dec, r.data.X = nil, nil
	return r.src.Close()
}
