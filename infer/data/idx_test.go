package data

import (
	"errors"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// threeImages is 3 images of 2×3 pixels: image k holds bytes 6k..6k+5.
func threeImages() (images, labels []byte) {
	content := make([]byte, 18)
	for i := range content {
		content[i] = byte(i)
	}
	return idxFile([]int{3, 2, 3}, content), idxFile([]int{3}, []byte{7, 0, 9})
}

func TestIDX(t *testing.T) {
	images, labels := threeImages()
	dir := t.TempDir()
	// train: gzip images, raw labels; test: the "images.idx3" spelling.
	writeFile(t, dir, "train-images-idx3-ubyte.gz", gz(images))
	writeFile(t, dir, "train-labels-idx1-ubyte", labels)
	writeFile(t, dir, "t10k-images.idx3-ubyte", idxFile([]int{1, 2, 3}, []byte{9, 8, 7, 6, 5, 4}))
	writeFile(t, dir, "t10k-labels.idx1-ubyte", idxFile([]int{1}, []byte{4}))
	other := writeFile(t, dir, "other/my-labels.bin", labels)

	want := []Record{
		{Image: []byte{0, 1, 2, 3, 4, 5}, Shape: []int{2, 3, 1}, Label: 7},
		{Image: []byte{6, 7, 8, 9, 10, 11}, Shape: []int{2, 3, 1}, Label: 0},
		{Image: []byte{12, 13, 14, 15, 16, 17}, Shape: []int{2, 3, 1}, Label: 9},
	}
	wantTest := []Record{{Image: []byte{9, 8, 7, 6, 5, 4}, Shape: []int{2, 3, 1}, Label: 4}}
	trainImages := filepath.Join(dir, "train-images-idx3-ubyte.gz")
	for _, tc := range []struct {
		spec    string
		want    []Record
		classes []string
	}{
		{"mnist:" + dir, want, digitClasses},
		{"mnist:" + dir + ":train", want, digitClasses},
		{"mnist:" + dir + ":test", wantTest, digitClasses},
		{"fashion:" + dir + ":test", wantTest, fashionClasses},
		{dir, want, digitClasses},
		{dir + ":test", wantTest, digitClasses},
		{"idx:" + trainImages, want, nil},
		{"idx:" + trainImages + "," + other, want, nil},
		{trainImages, want, nil},
	} {
		got, classes := openAll(t, tc.spec)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: records\n got %+v\nwant %+v", tc.spec, got, tc.want)
		}
		if !reflect.DeepEqual(classes, tc.classes) {
			t.Errorf("%s: classes %q, want %q", tc.spec, classes, tc.classes)
		}
	}

	r, err := Open("mnist:" + dir)
	if err != nil {
		t.Fatal(err)
	}
	if n := r.(Sized).Len(); n != 3 {
		t.Errorf("Len = %d, want 3", n)
	}
	r.Close()
}

func TestIDXChannels(t *testing.T) {
	// Two 1×2 images with 3 channels, HWC in the file.
	images := idxFile([]int{2, 1, 2, 3}, []byte{1, 2, 3, 4, 5, 6, 11, 12, 13, 14, 15, 16})
	r, err := newIDXReader(strings.NewReader(string(images)), strings.NewReader(string(idxFile([]int{2}, []byte{1, 2}))), "i", "l", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, r)
	want := []Record{
		{Image: []byte{1, 2, 3, 4, 5, 6}, Shape: []int{1, 2, 3}, Label: 1},
		{Image: []byte{11, 12, 13, 14, 15, 16}, Shape: []int{1, 2, 3}, Label: 2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestIDXErrors(t *testing.T) {
	images, labels := threeImages()
	for _, tc := range []struct {
		name           string
		images, labels []byte
		classes        []string
		open           bool // the error comes from the headers
		msg            string
		eof            bool // the error wraps io.ErrUnexpectedEOF
	}{
		{"bad magic", append([]byte{1}, images[1:]...), labels, nil, true, "not an IDX file", false},
		{"float type", append([]byte{0, 0, 0x0D}, images[3:]...), labels, nil, true, "element type 0x0d", false},
		{"short header", images[:6], labels, nil, true, "reading IDX dimensions", true},
		{"rank 2 images", idxFile([]int{3, 6}, images[12:]), labels, nil, true, "2 dimensions", false},
		{"rank 2 labels", images, idxFile([]int{3, 1}, labels[8:]), nil, true, "label file has 2 dimensions", false},
		{"count mismatch", images, idxFile([]int{2}, []byte{1, 2}), nil, true, "2 labels for 3 images", false},
		{"empty image", idxFile([]int{3, 0, 3}, nil), labels, nil, true, "unsupported image size", false},
		{"huge image", idxFile([]int{1, 1 << 20, 1 << 20}, nil), idxFile([]int{1}, []byte{1}), nil, true, "unsupported image size", false},
		{"truncated image", images[:len(images)-1], labels, nil, false, "images: image 2 of 3", true},
		{"truncated labels", images, labels[:len(labels)-1], nil, false, "labels: label 2", true},
		{"label not a class", images, idxFile([]int{3}, []byte{7, 10, 9}), digitClasses, false, "label 10 of record 1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := newIDXReader(strings.NewReader(string(tc.images)), strings.NewReader(string(tc.labels)), "images", "labels", tc.classes)
			if err == nil {
				if tc.open {
					t.Fatal("newIDXReader succeeded, want an error")
				}
				_, err = drain(r, 10)
			} else if !tc.open {
				t.Fatalf("newIDXReader: %v", err)
			}
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want one containing %q", err, tc.msg)
			}
			if !errors.Is(err, ErrFormat) {
				t.Errorf("error %v does not wrap ErrFormat", err)
			}
			if got := errors.Is(err, io.ErrUnexpectedEOF); got != tc.eof {
				t.Errorf("errors.Is(%v, io.ErrUnexpectedEOF) = %v, want %v", err, got, tc.eof)
			}
		})
	}
}

func TestIDXOpenErrors(t *testing.T) {
	dir := t.TempDir()
	images, _ := threeImages()
	lone := writeFile(t, dir, "lone-images-idx3-ubyte", images)
	writeFile(t, dir, "bad/train-images-idx3-ubyte.gz", []byte("\x1f\x8bnot gzip"))
	writeFile(t, dir, "bad/train-labels-idx1-ubyte", nil)
	for _, tc := range []struct{ spec, msg string }{
		{"mnist:" + filepath.Join(dir, "nothing"), "is not a directory"},
		{"mnist:" + dir, "no train-images-idx3-ubyte"},
		{"mnist:" + dir + ":validation", `unknown split "validation"`},
		{"idx:" + lone, "no such file"},
		{"idx:" + filepath.Join(dir, "pictures.bin"), "cannot derive the label file name"},
		{"mnist:" + filepath.Join(dir, "bad"), "bad gzip header"},
	} {
		_, err := Open(tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Open(%q) error %v, want one containing %q", tc.spec, err, tc.msg)
		}
	}
}
