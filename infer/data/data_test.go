package data

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestSpecHelpListsFormats(t *testing.T) {
	if len(Formats()) != 11 {
		t.Errorf("Formats() = %v, want the 11 formats of SpecHelp", Formats())
	}
	for _, f := range Formats() {
		if opener(f) == nil {
			t.Errorf("opener(%q) = nil", f)
		}
		if !strings.Contains(SpecHelp, "  "+f+":") {
			t.Errorf("SpecHelp does not describe %s:", f)
		}
	}
	if opener("png") != nil || opener("") != nil {
		t.Error("opener accepts an unknown format")
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	tgz := writeFile(t, dir, "data.tar.gz", tarGz(t, nil, nil))
	for _, tc := range []struct{ spec, msg string }{
		{"", "empty dataset spec"},
		{"bogus:" + dir, `unknown dataset format "bogus"`},
		{"mnist:" + filepath.Join(dir, "missing"), "is not a directory"},
		{"mnist:", `has no path after "mnist:"`},
		{"leaf:", `has no path after "leaf:"`},
		{filepath.Join(dir, "none"), "no such file"},
		{"png:" + dir, `unknown dataset format "png"`}, // not a path either
		{dir, "cannot tell the dataset format of this directory; prefix the spec with a format"},
		{tgz, "cannot tell the dataset format from the file name"},
		{"testdata/speakers.txt:x", "format speakers takes no option"},
		{"mnist:" + dir + ":valid", `unknown split "valid" (want train, test, or all for train then test)`},
	} {
		r, err := Open(tc.spec)
		if err == nil {
			r.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "data: ") {
			t.Errorf("Open(%q) error %v, want one starting with \"data: \" and containing %q", tc.spec, err, tc.msg)
		}
	}
}

func TestOpenPathWithColon(t *testing.T) {
	images, labels := threeImages()
	dir := filepath.Join(t.TempDir(), "run:1")
	writeFile(t, dir, "train-images-idx3-ubyte", images)
	writeFile(t, dir, "train-labels-idx1-ubyte", labels)
	for _, spec := range []string{"mnist:" + dir, "mnist:" + dir + ":train", dir, dir + ":train"} {
		if got, _ := openAll(t, spec); len(got) != 3 {
			t.Errorf("%s: %d records, want 3", spec, len(got))
		}
	}
}

// TestRecordReuse checks that a Record filled by one kind of reader and
// then another holds only the second one's fields.
func TestRecordReuse(t *testing.T) {
	var rec Record
	for _, spec := range []string{"imagefolder:testdata/imagefolder", "speakers:testdata/speakers.txt", "leaf:testdata/leaf/femnist:test", "imagefolder:testdata/imagefolder"} {
		r, err := Open(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Next(&rec); err != nil {
			t.Fatal(err)
		}
		r.Close()
		set := 0
		if rec.Image != nil {
			set++
			if len(rec.Image) != rec.Shape[0]*rec.Shape[1]*rec.Shape[2] {
				t.Errorf("%s: %d bytes for shape %v", spec, len(rec.Image), rec.Shape)
			}
		}
		if rec.Float != nil {
			set++
		}
		if rec.Text != "" {
			set++
			if len(rec.Shape) != 0 {
				t.Errorf("%s: text record with shape %v", spec, rec.Shape)
			}
		}
		if set != 1 {
			t.Errorf("%s: %d of Image, Float, Text set: %+v", spec, set, rec)
		}
	}
}

func TestCloseTwice(t *testing.T) {
	// Readers release their files once; a second Close must not panic.
	for _, spec := range []string{"imagefolder:testdata/imagefolder.tgz:train", "leaf:testdata/leaf/femnist:train", "speakers:testdata/speakers.txt"} {
		r, err := Open(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Errorf("%s: Close: %v", spec, err)
		}
		r.Close()
	}
}
