package infer

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/infer/data"
	"github.com/fedcalib/fedcalib/infer/resize"
)

func TestGeometry(t *testing.T) {
	// A 2×4 gray image of two equal rows. Resizing the shorter side to 1
	// gives 1×2 (⌊1·4/2⌋); the rows are equal, so only the columns
	// 0, 10, 20, 30 matter: halving stretches the triangle to support 2,
	// weights 3/7, 3/7, 1/7 give (0·3 + 10·3 + 20)/7 = 7.1 → 7 and
	// (10 + 20·3 + 30·3)/7 = 22.9 → 23.
	img := data.Record{Image: []uint8{0, 10, 20, 30, 0, 10, 20, 30}, Shape: []int{2, 4}, Label: 3, Client: "c"}
	for _, tc := range []struct {
		pre   Preprocessing
		shape []int
		want  []uint8
	}{
		{Preprocessing{}, []int{2, 4}, img.Image},
		{Preprocessing{Resize: []int{1}}, []int{1, 2}, []uint8{7, 23}},
		{Preprocessing{Resize: []int{1}, Interpolation: resize.Nearest}, []int{1, 2}, []uint8{10, 30}},
		{Preprocessing{Crop: []int{2}}, []int{2, 2}, []uint8{10, 20, 10, 20}},
		{Preprocessing{Resize: []int{2, 4}, Crop: []int{1, 3}}, []int{1, 3}, []uint8{0, 10, 20}},
	} {
		g := geometry{pre: &tc.pre}
		got, err := g.apply(&img)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Shape, tc.shape) || !bytes.Equal(got.Image, tc.want) || got.Label != 3 || got.Client != "c" {
			t.Errorf("%v: %v %v label %d client %q, want %v %v", tc.pre, got.Shape, got.Image, got.Label, got.Client, tc.shape, tc.want)
		}
	}
	g := geometry{pre: &Preprocessing{Crop: []int{2}}}
	if _, err := g.apply(&data.Record{Float: []float32{1, 2}, Shape: []int{2}}); err == nil || !strings.Contains(err.Error(), "apply to image records") {
		t.Errorf("float record: %v", err)
	}
}

// TestBatcherImageSizes reads the parity sample's images of many sizes
// through the batcher: without a crop the second size is refused with a
// hint naming the flags; with the imagenet preset every row is 3×224×224.
func TestBatcherImageSizes(t *testing.T) {
	for _, tc := range []struct {
		pre  Preprocessing
		want string // an error, or "" for none
	}{
		{Preprocessing{Layout: NCHW}, "images of different sizes need a crop: flags --resize and --crop, or --preprocess imagenet"},
		{presets["imagenet"], ""},
	} {
		rd, err := data.Open("imagefolder:testdata/parity/images")
		if err != nil {
			t.Fatal(err)
		}
		bt := &batcher{rd: rd, enc: newEncoder(tc.pre, Float32, "x", []int64{3, -1, -1}), dtype: Float32, size: 64, clients: map[string]int32{}}
		sl := &slot{}
		_, _, err = bt.fill(sl, nil)
		rd.Close()
		switch {
		case tc.want != "":
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: %v, want an error containing %q", tc.pre, err, tc.want)
			}
		case err != nil:
			t.Errorf("%v: %v", tc.pre, err)
		case sl.rows != 25 || !slices.Equal(bt.enc.sample, []int64{3, 224, 224}):
			t.Errorf("%v: %d rows of %v, want 25 of [3 224 224]", tc.pre, sl.rows, bt.enc.sample)
		}
	}
}
