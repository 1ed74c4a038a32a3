package infer

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

// TestGivenClassNames checks Options.ClassNames: taken as the result's
// names when they agree with the model's fedcalib.classes (tiny.onnx
// names zero,one,two) or the model has none (tiny_nometa.onnx), refused
// with calib.ErrClassNames when they differ in order or count.
func TestGivenClassNames(t *testing.T) {
	requireRuntime(t)
	nometa := map[string]string{KeyLayout: "NCHW", KeyScale: "0.00392156862745098", KeyMean: "0.5", KeyStd: "0.25"}
	for _, tt := range []struct {
		model string
		pre   map[string]string
		names []string
		err   string // "" for none
	}{
		{"testdata/tiny.onnx", nil, []string{"zero", "one", "two"}, ""},
		{"testdata/tiny_nometa.onnx", nometa, []string{"cat", "dog", "bird"}, ""},
		{"testdata/tiny.onnx", nil, []string{"zero", "two", "one"}, `class names do not match: class 1 is "two" in the names given but "one" in the model's fedcalib.classes`},
		{"testdata/tiny.onnx", nil, []string{"zero", "one"}, "class names do not match: 2 names in the names given but 3 in the model's fedcalib.classes"},
		{"testdata/tiny_nometa.onnx", nometa, []string{"cat", "dog"}, `class names do not match: 2 class names given but output "logits" has 3 classes`},
	} {
		s, err := OpenSession(tt.model, Options{Threads: 1, Preprocess: tt.pre, ClassNames: tt.names})
		var res *Result
		if err == nil {
			res, err = s.Infer(context.Background(), &sliceReader{recs: imageRecords(images(4, 16, 1), 4, 4, 1)})
			s.Close()
		}
		if tt.err != "" {
			if !errors.Is(err, calib.ErrClassNames) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s with %q: error %v, want calib.ErrClassNames and %q", tt.model, tt.names, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s with %q: %v", tt.model, tt.names, err)
		}
		if !slices.Equal(res.ClassNames, tt.names) || !slices.Equal(res.File().ClassNames, tt.names) {
			t.Errorf("%s: class names %q, file's %q; want %q", tt.model, res.ClassNames, res.File().ClassNames, tt.names)
		}
	}
}

func TestJoinClassNames(t *testing.T) {
	for _, tt := range []struct {
		names []string
		want  string
		ok    bool
	}{
		{[]string{"zero", "one", "two"}, "zero,one,two", true},
		{[]string{"tabby cat", "dög"}, "tabby cat,dög", true},
		{nil, "", false},
		{[]string{"a,b", "c"}, "", false},
		{[]string{" a", "b"}, "", false},
		{[]string{"a", ""}, "", false},
	} {
		got, ok := JoinClassNames(tt.names)
		if got != tt.want || ok != tt.ok {
			t.Errorf("JoinClassNames(%q) = %q, %v; want %q, %v", tt.names, got, ok, tt.want, tt.ok)
		}
		if ok && !slices.Equal(SplitClassNames(got), tt.names) {
			t.Errorf("SplitClassNames(%q) = %q, want %q back", got, SplitClassNames(got), tt.names)
		}
	}
}

// TestReaderClassNames checks the data's class names: kept when the
// model has none (tiny_nometa.onnx) and they are valid, line breaks
// included (the Shakespeare data names a class "\n"); dropped with a
// warning when CheckClassNames refuses them.
func TestReaderClassNames(t *testing.T) {
	requireRuntime(t)
	nometa := map[string]string{KeyLayout: "NCHW", KeyScale: "0.00392156862745098", KeyMean: "0.5", KeyStd: "0.25"}
	for _, tt := range []struct {
		names, want []string
		warn        string
	}{
		{[]string{"\n", " ", "a"}, []string{"\n", " ", "a"}, ""},
		{[]string{"a", "b", "a"}, nil, `classes 0 and 2 are both named \"a\"`},
	} {
		var log bytes.Buffer
		s := openTest(t, "testdata/tiny_nometa.onnx", Options{Threads: 1, Preprocess: nometa,
			Logger: slog.New(slog.NewTextHandler(&log, nil))})
		res, err := s.Infer(context.Background(), &sliceReader{recs: imageRecords(images(4, 16, 1), 4, 4, 1), classes: tt.names})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.ClassNames, tt.want) {
			t.Errorf("data names %q: result's %q, want %q", tt.names, res.ClassNames, tt.want)
		}
		if tt.warn != "" && !strings.Contains(log.String(), tt.warn) {
			t.Errorf("data names %q: log %q, want a warning with %q", tt.names, log.String(), tt.warn)
		}
	}
}

// TestBadModelClassNames checks that fedcalib.classes values that
// CheckClassNames refuses stop OpenSession, before any record runs.
func TestBadModelClassNames(t *testing.T) {
	requireRuntime(t)
	for v, want := range map[string]string{
		"a,,b":  "fedcalib.classes: class 1 has an empty name",
		"a,b,a": `fedcalib.classes: classes 0 and 2 are both named "a"`,
	} {
		s, err := OpenSession("testdata/tiny.onnx", Options{Threads: 1, Preprocess: map[string]string{KeyClasses: v}})
		if err == nil {
			s.Close()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("fedcalib.classes %q: error %v, want %q", v, err, want)
		}
	}
}
