// Package strictjson holds the checks fedcalib makes of a JSON document
// beyond what encoding/json makes: encoding/json takes the last of two
// equal keys of an object silently, so a file that names a field twice
// (by mistake, or to hide a value from a reader that takes the first)
// reads as one of them. DuplicateKeys finds them.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// DuplicateKeys returns an error naming the first key that appears twice
// in one object of the JSON document b, at any depth, with its path
// (such as "params.t"); nil when there is none. A document that is not
// valid JSON returns nil: the decoder that reads it says why.
func DuplicateKeys(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	type frame struct {
		keys   map[string]bool // nil for an array
		key    string          // the key whose value is being read
		expect bool            // the next string token is a key
	}
	var stack []*frame
	path := func(last string) string {
		var parts []string
		for _, f := range stack {
			if f.keys != nil && f.key != "" {
				parts = append(parts, f.key)
			}
		}
		parts[len(parts)-1] = last
		return strings.Join(parts, ".")
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return nil
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if d, ok := tok.(json.Delim); top != nil && top.keys != nil && top.expect && !(ok && d == '}') {
			k, _ := tok.(string)
			if top.keys[k] {
				top.key = k
				return fmt.Errorf("key %q appears twice in one object (%s): remove one", k, path(k))
			}
			top.keys[k], top.key, top.expect = true, k, false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, expect: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim(']'), json.Delim('}'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: an object's next token is a key.
		if len(stack) > 0 && stack[len(stack)-1].keys != nil {
			stack[len(stack)-1].expect = true
		}
	}
}
