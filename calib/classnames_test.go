package calib

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestCheckClassNames(t *testing.T) {
	for _, tt := range []struct {
		names   []string
		classes int
		want    string // "" for no error
	}{
		{nil, 3, ""},
		{[]string{}, 3, ""},
		{[]string{"cat", "dog"}, 2, ""},
		{[]string{"a b", "é", "\U0001F426"}, 3, ""},
		{[]string{"cat", "dog"}, 3, "2 class names for 3 classes"},
		{[]string{"cat", ""}, 2, "class 1 has an empty name"},
		{[]string{"cat", "cat"}, 2, `classes 0 and 1 are both named "cat"`},
		{[]string{"\n", " ", ","}, 3, ""}, // the Shakespeare data's first classes
		{[]string{"cat", "d\x00g"}, 2, "class 1: name \"d\\x00g\" holds a NUL byte"},
		{[]string{"cat", "\x00"}, 2, "holds a NUL byte"},
		{[]string{"cat", "\xff"}, 2, "class 1: name \"\\xff\" is not valid UTF-8"},
		{[]string{"cat", strings.Repeat("x", MaxClassNameBytes+1)}, 2, "class 1 has a name of 4097 bytes, more than 4096"},
	} {
		err := CheckClassNames(tt.names, tt.classes)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("CheckClassNames(%q, %d) = %v, want %q", tt.names, tt.classes, err, tt.want)
		}
	}
}

func TestMatchClassNames(t *testing.T) {
	abc := []string{"a", "b", "c"}
	for _, tt := range []struct {
		a, b []string
		want string // "" for no error
	}{
		{abc, []string{"a", "b", "c"}, ""},
		{nil, abc, ""},
		{abc, nil, ""},
		{abc, []string{"a", "c", "b"}, `class names do not match: class 1 is "b" in A but "c" in B`},
		{abc, []string{"a", "b"}, "class names do not match: 3 names in A but 2 in B"},
		{[]string{"a", "b"}, abc, "class names do not match: 2 names in A but 3 in B"},
		{abc, []string{"x", "b"}, `class 0 is "a" in A but "x" in B`},
	} {
		err := MatchClassNames("A", tt.a, "B", tt.b)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("MatchClassNames(%q, %q) = %v, want nil", tt.a, tt.b, err)
		case tt.want != "" && (err == nil || err.Error() != tt.want && !strings.Contains(err.Error(), tt.want)):
			t.Errorf("MatchClassNames(%q, %q) = %v, want %q", tt.a, tt.b, err, tt.want)
		case tt.want != "" && !errors.Is(err, ErrClassNames):
			t.Errorf("MatchClassNames(%q, %q) = %v, does not wrap ErrClassNames", tt.a, tt.b, err)
		}
	}
}

func TestReadClassNames(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
		err  string
	}{
		{"cat\ndog\n", []string{"cat", "dog"}, ""},
		{"cat\r\ndog", []string{"cat", "dog"}, ""},
		{"  tabby cat \t\ndog\n\n\n", []string{"tabby cat", "dog"}, ""},
		{"0\n1\n2\n3\n", []string{"0", "1", "2", "3"}, ""},
		{"", nil, "no class names"},
		{"\n\n", nil, "no class names"},
		{"cat\n\ndog\n", nil, "line 2 is empty"},
		{"\ncat\n", nil, "line 1 is empty"},
		{"cat\ncat\n", nil, `classes 0 and 1 are both named "cat"`},
		{"cat\n" + strings.Repeat("x", MaxClassNameBytes+10) + "\n", nil, "line 2: longer than 4096 bytes"},
	} {
		got, err := ReadClassNames(strings.NewReader(tt.in))
		if tt.err == "" {
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ReadClassNames(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("ReadClassNames(%q) error %v, want %q", tt.in, err, tt.err)
		}
	}
}

// FuzzReadClassNames checks that what ReadClassNames accepts passes
// CheckClassNames and survives a labels file written from it, one name a
// line.
func FuzzReadClassNames(f *testing.F) {
	f.Add("cat\ndog\n")
	f.Add("  a \r\n\n")
	f.Add("a\n\nb")
	f.Fuzz(func(t *testing.T, in string) {
		names, err := ReadClassNames(strings.NewReader(in))
		if err != nil {
			return
		}
		if err := CheckClassNames(names, len(names)); err != nil {
			t.Fatalf("ReadClassNames(%q) = %q, which CheckClassNames refuses: %v", in, names, err)
		}
		back, err := ReadClassNames(strings.NewReader(strings.Join(names, "\n") + "\n"))
		if err != nil || !reflect.DeepEqual(back, names) {
			t.Fatalf("names %q written one a line read back as %q, %v", names, back, err)
		}
	})
}

// TestClassNamesInCalibratorFile checks that provenance.class_names
// survives Encode and Decode, and that both refuse names that do not fit
// the calibrator.
func TestClassNamesInCalibratorFile(t *testing.T) {
	c := NewTemperature(2)
	c.C = 3
	prov := Provenance{Seed: 1, ClassNames: []string{"cat", "dog", "bird"}}
	var buf bytes.Buffer
	if err := Encode(&buf, c, nil, prov); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"class_names": [`) {
		t.Errorf("encoded file has no class_names:\n%s", buf.String())
	}
	_, f, err := Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.Provenance.ClassNames, prov.ClassNames) {
		t.Errorf("decoded class names %q, want %q", f.Provenance.ClassNames, prov.ClassNames)
	}

	if err := Encode(&buf, c, nil, Provenance{ClassNames: []string{"cat", "dog"}}); err == nil || !strings.Contains(err.Error(), "provenance.class_names: 2 class names for 3 classes") {
		t.Errorf("Encode with 2 names for 3 classes: %v", err)
	}
	const head = `{"format":"fedcalib.calibrator/v1","method":"bin","classes":2,"params":{"bins":1,"table":[0.5,0.5]},"provenance":`
	for in, want := range map[string]string{
		head + `{"seed":0,"class_names":["a"]}}`:      "provenance.class_names: 1 class names for 2 classes",
		head + `{"seed":0,"class_names":["a","a"]}}`:  `both named "a"`,
		head + `{"seed":0,"class_names":["a",""]}}`:   "class 1 has an empty name",
		head + `{"seed":0,"class_names":"a,b"}}`:      "cannot unmarshal string",
		head + `{"seed":0,"class_names":["a","b"]}}x`: "not a calibrator file",
	} {
		if _, _, err := Decode(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%s): %v, want %q", in, err, want)
		}
	}
}
