package data

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The images of testdata/imagefolder (made by testdata/gen.go), as RGB.
var (
	rgbA = []byte{255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30}            // cat/a.png
	rgbB = []byte{0, 0, 0, 64, 64, 64, 128, 128, 128, 255, 255, 255}      // cat/b.png, gray
	rgbC = []byte{100, 150, 200, 100, 150, 200, 100, 150, 200, 7, 8, 9}   // dog/c.png, alpha dropped
	rgbD = []byte{200, 100, 50, 200, 100, 50, 200, 100, 50, 200, 100, 50} // dog/sub/d.jpg, lossy
)

// checkImages compares records with want, allowing JPEG images (jpeg[i])
// to differ by 2 levels.
func checkImages(t *testing.T, spec string, got []Record, want [][]byte, labels []int, jpeg []bool) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", spec, len(got), len(want))
	}
	for i, rec := range got {
		if rec.Label != labels[i] || rec.Client != "" || !slices.Equal(rec.Shape, []int{2, 2, 3}) {
			t.Errorf("%s: record %d: label %d client %q shape %v, want %d, \"\", [2 2 3]", spec, i, rec.Label, rec.Client, rec.Shape, labels[i])
		}
		tol := 0
		if jpeg[i] {
			tol = 2
		}
		for j := range want[i] {
			if d := int(rec.Image[j]) - int(want[i][j]); d < -tol || d > tol {
				t.Errorf("%s: record %d pixels %v, want %v (±%d)", spec, i, rec.Image, want[i], tol)
				break
			}
		}
	}
}

func TestImageFolderDir(t *testing.T) {
	spec := "imagefolder:testdata/imagefolder"
	got, classes := openAll(t, spec)
	if !reflect.DeepEqual(classes, []string{"cat", "dog"}) {
		t.Errorf("classes %q, want [cat dog]", classes)
	}
	checkImages(t, spec, got, [][]byte{rgbA, rgbB, rgbC, rgbD}, []int{0, 0, 1, 1}, []bool{false, false, false, true})

	// SUBDIR is joined to the directory.
	got, classes = openAll(t, "imagefolder:testdata:imagefolder")
	if len(got) != 4 || !reflect.DeepEqual(classes, []string{"cat", "dog"}) {
		t.Errorf("with SUBDIR: %d records, classes %q", len(got), classes)
	}
}

func TestImageFolderTar(t *testing.T) {
	const archive = "testdata/imagefolder.tgz"
	// The archive holds train/dog before train/cat: labels follow the
	// sorted class names, records the archive order.
	spec := "imagefolder:" + archive + ":train"
	got, classes := openAll(t, spec)
	if !reflect.DeepEqual(classes, []string{"cat", "dog"}) {
		t.Errorf("classes %q, want [cat dog]", classes)
	}
	checkImages(t, spec, got, [][]byte{rgbC, rgbD, rgbA, rgbB}, []int{1, 1, 0, 0}, []bool{false, true, false, false})

	// The same archive named .tar.gz (the committed fixture is .tgz so that
	// no .tar.gz sits in the repository beside the real data sets).
	b, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	renamed := filepath.Join(t.TempDir(), "imagefolder.tar.gz")
	if err := os.WriteFile(renamed, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if again, _ := openAll(t, "imagefolder:"+renamed+":train"); len(again) != len(got) {
		t.Errorf("as .tar.gz: %d records, want %d", len(again), len(got))
	}

	got, classes = openAll(t, "imagefolder:"+archive+":test")
	if !reflect.DeepEqual(classes, []string{"bird"}) {
		t.Errorf("test classes %q, want [bird]", classes)
	}
	checkImages(t, "test", got, [][]byte{rgbA}, []int{0}, []bool{false})

	// Without SUBDIR the top directories are the classes, as torchvision
	// would make them.
	got, classes = openAll(t, "imagefolder:"+archive)
	if !reflect.DeepEqual(classes, []string{"test", "train"}) {
		t.Errorf("classes %q, want [test train]", classes)
	}
	var labels []int
	for _, r := range got {
		labels = append(labels, r.Label)
	}
	if !reflect.DeepEqual(labels, []int{1, 1, 1, 1, 0}) {
		t.Errorf("labels %v, want [1 1 1 1 0]", labels)
	}
}

func TestImageFolderErrors(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "empty/a/x.png", rgbPNG(t))
	writeFile(t, dir, "empty/b/notes.txt", []byte("no image"))
	writeFile(t, dir, "bmp/a/x.bmp", []byte("BM"))
	writeFile(t, dir, "fake/a/x.png", []byte("GIF89a"))
	writeFile(t, dir, "corrupt/a/x.png", rgbPNG(t)[:40])
	writeFile(t, dir, "flat/x.png", rgbPNG(t))
	plain := writeFile(t, dir, "plain.zip", []byte("PK"))
	emptyTar := writeFile(t, dir, "bmp.tar.gz", tarGz(t, []string{"a/x.bmp"}, map[string][]byte{"a/x.bmp": []byte("BM")}))
	for _, tc := range []struct {
		spec, msg string
		open      bool // Open fails, rather than Next
		format    bool // the error wraps ErrFormat
	}{
		{"imagefolder:" + filepath.Join(dir, "empty"), "b: class directory holds no PNG or JPEG image", false, false},
		{"imagefolder:" + filepath.Join(dir, "bmp"), "x.bmp: only PNG and JPEG images are supported", false, false},
		{"imagefolder:" + filepath.Join(dir, "fake"), "x.png: not a PNG or JPEG image", false, true},
		{"imagefolder:" + filepath.Join(dir, "corrupt"), "x.png: decoding image", false, true},
		{"imagefolder:" + filepath.Join(dir, "flat"), "no class subdirectories", true, false},
		{"imagefolder:" + plain, "wants a directory or a .tar.gz", true, false},
		{"imagefolder:" + emptyTar, "bmp.tar.gz:a/x.bmp: only PNG and JPEG", true, false},
		{"imagefolder:testdata/imagefolder.tgz:valid", `no class directories under "/valid/"`, true, false},
	} {
		r, err := Open(tc.spec)
		if (err != nil) != tc.open {
			t.Errorf("Open(%q) error %v, want error: %v", tc.spec, err, tc.open)
			continue
		}
		if err == nil {
			_, err = drain(r, 10)
			r.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error %v, want one containing %q", tc.spec, err, tc.msg)
		} else if errors.Is(err, ErrFormat) != tc.format {
			t.Errorf("%s: errors.Is(%v, ErrFormat) = %v", tc.spec, err, !tc.format)
		}
	}
}

// rgbPNG returns the bytes of testdata's cat/a.png.
func rgbPNG(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/imagefolder/cat/a.png")
	if err != nil {
		t.Fatal(err)
	}
	return b
}
