package strictjson

import (
	"strings"
	"testing"
)

func TestDuplicateKeys(t *testing.T) {
	for _, tc := range []struct {
		doc, want string // want: "" for none, else a part of the error
	}{
		{`{"a": 1, "b": 2}`, ""},
		{`{"a": 1, "a": 2}`, `"a" appears twice in one object (a)`},
		{`{"a": {"x": 1}, "b": {"x": 2}}`, ""}, // equal keys in different objects
		{`{"p": {"t": 1, "t": 2}}`, `(p.t)`},
		{`{"p": [{"t": 1}, {"t": 1, "u": [1, 2], "t": 3}]}`, `(p.t)`},
		{`{"a": [], "b": {}, "c": [[{}]], "a": 0}`, `"a" appears twice`},
		{`[{"k": 1}, {"k": 2}]`, ""},
		{`{"a": "a", "b": "a"}`, ""}, // string values are not keys
		{`{"a": 1,`, ""},             // invalid: for the decoder to say
		{`{"\u0061": 1, "a": 2}`, `"a" appears twice`},
	} {
		err := DuplicateKeys([]byte(tc.doc))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want none", tc.doc, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.doc, err, tc.want)
		}
	}
}
