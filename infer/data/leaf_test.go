package data

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// femnistWant describes a record of testdata/leaf/femnist: x is all 1
// except x[0] = 0, x[29] = 0.25 and x[783] = last.
type femnistWant struct {
	client string
	label  int
	last   float32
}

func checkFEMNIST(t *testing.T, spec string, got []Record, want []femnistWant) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", spec, len(got), len(want))
	}
	for i, rec := range got {
		w := want[i]
		if rec.Client != w.client || rec.Label != w.label || !reflect.DeepEqual(rec.Shape, []int{28, 28}) || rec.Image != nil || rec.Text != "" {
			t.Errorf("%s: record %d: client %q label %d shape %v; want %q %d [28 28]", spec, i, rec.Client, rec.Label, rec.Shape, w.client, w.label)
		}
		if len(rec.Float) != 784 {
			t.Fatalf("%s: record %d has %d floats", spec, i, len(rec.Float))
		}
		for j, v := range rec.Float {
			want := float32(1)
			switch j {
			case 0:
				want = 0
			case 29:
				want = 0.25
			case 783:
				want = w.last
			}
			if v != want {
				t.Errorf("%s: record %d x[%d] = %v, want %v", spec, i, j, v, want)
			}
		}
	}
}

func TestLEAFFEMNIST(t *testing.T) {
	train := []femnistWant{{"f_a", 61, 0.5}, {"f_a", 0, 0.125}, {"f_b", 10, 0.75}}
	test := []femnistWant{{"f_a", 36, 0.1}}
	trainFile, _ := os.ReadFile("testdata/leaf/femnist/train/shard_0.json")
	testFile, _ := os.ReadFile("testdata/leaf/femnist/test/shard_0.json")
	archive := writeFile(t, t.TempDir(), "femnist.tar.gz", tarGz(t,
		[]string{"data/train/shard_0.json", "data/test/shard_0.json", "data/README.md"},
		map[string][]byte{"data/train/shard_0.json": trainFile, "data/test/shard_0.json": testFile, "data/README.md": []byte("#")}))
	for _, tc := range []struct {
		spec string
		want []femnistWant
	}{
		{"leaf:testdata/leaf/femnist:train", train},
		{"leaf:testdata/leaf/femnist:test", test},
		{"leaf:testdata/leaf/femnist", append(append([]femnistWant(nil), test...), train...)}, // lexical order
		{"leaf:testdata/leaf/femnist/train/shard_0.json", train},
		{"testdata/leaf/femnist/train/shard_0.json", train},
		{"leaf:" + archive + ":train", train},
		{"leaf:" + archive + ":test", test},
		{"leaf:" + archive, append(append([]femnistWant(nil), train...), test...)}, // archive order
	} {
		got, classes := openAll(t, tc.spec)
		checkFEMNIST(t, tc.spec, got, tc.want)
		if len(classes) != 62 || classes[0] != "0" || classes[10] != "A" || classes[36] != "a" || classes[61] != "z" {
			t.Errorf("%s: classes %q", tc.spec, classes)
		}
	}
}

func TestLEAFShakespeare(t *testing.T) {
	got, classes := openAll(t, "leaf:testdata/leaf/shakespeare:test")
	want := []Record{
		// 'f' is ShakespeareLetters[58], '\n' [0] and '}' [79].
		{Text: "To be, or not to be: that is the question: Whether 'tis nobler in the mind to su", Label: 58, Client: "ARIEL"},
		{Text: `He said "hi" \ and left }` + strings.Repeat(" ", 55), Label: 0, Client: "ARIEL"},
		{Text: strings.Repeat("a", 80), Label: 79, Client: "CALIBAN"},
	}
	for i := range got {
		got[i].Shape = nil // empty, not nil, after reuse; either is fine
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("records\n got %+v\nwant %+v", got, want)
	}
	if len(classes) != 80 || classes[0] != "\n" || classes[58] != "f" || classes[79] != "}" {
		t.Errorf("classes %q", classes)
	}
}

// leafBytes returns a LEAF reader over in-memory files.
func leafBytes(files ...string) (*leafReader, error) {
	src := &byteFiles{}
	for i, f := range files {
		src.names = append(src.names, "f"+string(rune('0'+i))+".json")
		src.data = append(src.data, []byte(f))
	}
	return newLEAFReader(src)
}

func TestLEAFGeneric(t *testing.T) {
	// Short float vectors: Shape [2], classes unknown; users spread over two
	// files; an unknown key with nested values after user_data.
	r, err := leafBytes(
		`{"user_data": {"u1": {"x": [[0.5, -1e-1], [2, 3]], "y": [4, 0]}}, "extra": {"a": [1, {"b": []}]}}`,
		` {"users": [], "user_data": {}} `,
		`{"user_data": {"u2": {"x": [[ 7 , 8 ]], "y": [ 1 ]}}}`,
	)
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Classes(); c != nil {
		t.Errorf("classes %q, want nil", c)
	}
	got := readAll(t, r)
	want := []Record{
		{Float: []float32{0.5, -0.1}, Shape: []int{2}, Label: 4, Client: "u1"},
		{Float: []float32{2, 3}, Shape: []int{2}, Label: 0, Client: "u1"},
		{Float: []float32{7, 8}, Shape: []int{2}, Label: 1, Client: "u2"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("records\n got %+v\nwant %+v", got, want)
	}

	// No users at all: an empty reader.
	r, err = leafBytes(`{"users": [], "num_samples": [], "user_data": {}}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, r); len(got) != 0 {
		t.Errorf("%d records from an empty file", len(got))
	}
}

// TestLEAFStreams checks that records of a user come out before the
// reader has seen the rest of the file, here a syntax error.
func TestLEAFStreams(t *testing.T) {
	r, err := leafBytes(`{"user_data": {"u1": {"x": [[1], [2]], "y": [0, 1]}, "u2": {"x": [[3]], "y": [2]}, "u3": oops`)
	if err != nil {
		t.Fatal(err)
	}
	n, err := drain(r, 10)
	if n != 3 || err == nil || !strings.Contains(err.Error(), `f0.json: user "u3"`) || !errors.Is(err, ErrFormat) {
		t.Errorf("read %d records then %v; want 3 then a format error naming f0.json and user u3", n, err)
	}
}

func TestLEAFErrors(t *testing.T) {
	x784 := "[" + strings.Repeat("1,", 783) + "1]"
	for _, tc := range []struct {
		name, file, msg string
		open            bool // newLEAFReader fails
	}{
		{"array", `[1, 2]`, "a LEAF file must be a JSON object", true},
		{"user_data array", `{"user_data": [1]}`, `"user_data" must be an object`, true},
		{"truncated", `{"user_data": {"u": {"x": [[1]], "y": [0]`, `f0.json: user "u"`, true},
		{"truncated top", `{"users": ["u"`, "reading LEAF JSON", true},
		{"not json", `{"users": [u]}`, "reading LEAF JSON", true},
		{"user not object", `{"user_data": {"u": [1]}}`, `user "u": json: cannot unmarshal`, true},
		{"x y mismatch", `{"user_data": {"u": {"x": [[1], [2]], "y": [0]}}}`, `user "u" has 2 x but 1 y`, true},
		{"string label", `{"user_data": {"u": {"x": [[1]], "y": ["3"]}}}`, `user "u" sample 0: y = "3" is not a class index`, false},
		{"negative label", `{"user_data": {"u": {"x": [[1]], "y": [-1]}}}`, `y = -1 is not a class index`, false},
		{"femnist label", `{"user_data": {"u": {"x": [` + x784 + `], "y": [62]}}}`, "y = 62 is not a FEMNIST class", false},
		{"ragged", `{"user_data": {"u": {"x": [[1, 2], [3]], "y": [0, 1]}}}`, "sample 1: x has 1 values, want 2", false},
		{"string in numbers", `{"user_data": {"u": {"x": [[1, "2"]], "y": [0]}}}`, `x holds "\"2\"", not a number`, false},
		{"nested numbers", `{"user_data": {"u": {"x": [[[1]]], "y": [0]}}}`, `not a number`, false},
		{"out of range", `{"user_data": {"u": {"x": [[1e999]], "y": [0]}}}`, `x holds "1e999", not a number`, false},
		{"mixed kinds", `{"user_data": {"u": {"x": [[1], "abc"], "y": [0, 1]}}}`, "sample 1: x = \"abc\"… is neither", false},
		{"null x", `{"user_data": {"u": {"x": [null], "y": [0]}}}`, "is neither", false},
		{"oov label", `{"user_data": {"u": {"x": ["abc"], "y": ["$"]}}}`, `y = "$" is not in LEAF's Shakespeare vocabulary`, false},
		{"long label", `{"user_data": {"u": {"x": ["abc"], "y": ["ab"]}}}`, `y = "ab" is not a one-character string`, false},
		{"number label for text", `{"user_data": {"u": {"x": ["abc"], "y": [1]}}}`, `y = 1 is not a one-character string`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := leafBytes(tc.file)
			if (err != nil) != tc.open {
				t.Fatalf("newLEAFReader error %v, want error: %v", err, tc.open)
			}
			if err == nil {
				_, err = drain(r, 10)
			}
			if err == nil || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), "f0.json") {
				t.Fatalf("error %v, want one naming f0.json and containing %q", err, tc.msg)
			}
			if !errors.Is(err, ErrFormat) {
				t.Errorf("error %v does not wrap ErrFormat", err)
			}
		})
	}
	if _, err := Open("leaf:testdata/leaf/femnist:validation"); err == nil || !strings.Contains(err.Error(), `unknown split "validation"`) {
		t.Errorf("bad split: %v", err)
	}
	if _, err := Open("leaf:testdata/imagefolder:train"); err == nil || !strings.Contains(err.Error(), "no LEAF .json files under a train directory") {
		t.Errorf("no json: %v", err)
	}
}

func TestParseFloats(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []float32
		err  bool
	}{
		{"[]", nil, false},
		{"[ ]", nil, false},
		{"[0]", []float32{0}, false},
		{" [1.5, -2, 3e2,4E-1 ] ", []float32{1.5, -2, 300, 0.4}, false},
		{"[0.1]", []float32{0.1}, false}, // rounded once, to float32
		{"[1,]", nil, true},
		{"[Inf]", nil, true},
		{"[0x10]", nil, true},
		{"[1_0]", nil, true},
		{"1", nil, true},
	} {
		got, err := parseFloats([]byte(tc.in), nil)
		if (err != nil) != tc.err || (!tc.err && !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("parseFloats(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}
