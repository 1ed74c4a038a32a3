package infer

import (
	"errors"
	"image"
	"image/png"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/infer/data"
	"github.com/fedcalib/fedcalib/infer/resize"
)

// TestTorchvisionParity compares the images fedcalib feeds a model with
// torchvision's: testdata/parity/images, read as an ImageFolder, resized
// and center-cropped, against the tensors torchvision's ImageFolder +
// Resize + CenterCrop + ToTensor made from the same files
// (testdata/parity/gen.py), times 255. Every value must be equal.
func TestTorchvisionParity(t *testing.T) {
	const root = "testdata/parity"
	for _, tc := range []struct {
		config  string
		pre     Preprocessing
		classes []string
	}{
		{"imagenet", Preprocessing{Resize: []int{256}, Crop: []int{224}}, []string{"jpeg", "png"}},
		{"bicubic64", Preprocessing{Resize: []int{64}, Crop: []int{56}, Interpolation: resize.Bicubic}, []string{"exif", "jpeg", "png"}},
		{"nearest64", Preprocessing{Resize: []int{64}, Crop: []int{56}, Interpolation: resize.Nearest}, []string{"exif", "jpeg", "png"}},
		{"lanczos40x30", Preprocessing{Resize: []int{40, 30}, Crop: []int{32}, Interpolation: resize.Lanczos}, []string{"exif", "jpeg", "png"}},
	} {
		t.Run(tc.config, func(t *testing.T) {
			rd, err := data.Open("imagefolder:" + root + "/images")
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			files := parityFiles(t, root+"/images")
			geo := geometry{pre: &tc.pre}
			var rec data.Record
			var values, differ, worst, images int
			for i := 0; ; i++ {
				err := rd.Next(&rec)
				if errors.Is(err, io.EOF) {
					if i != len(files) {
						t.Fatalf("read %d images, want %d", i, len(files))
					}
					break
				}
				if err != nil {
					t.Fatalf("%s: %v", files[i], err)
				}
				class, _, _ := strings.Cut(files[i], "/")
				if !slices.Contains(tc.classes, class) {
					continue
				}
				got, err := geo.apply(&rec)
				if err != nil {
					t.Fatal(err)
				}
				want := readRGB(t, filepath.Join(root, "ref", tc.config, files[i]+".png"))
				if !slices.Equal(got.Shape, []int{want.H, want.W, 3}) {
					t.Errorf("%s: shape %v, want %d×%d×3", files[i], got.Shape, want.H, want.W)
					continue
				}
				n, d := 0, 0
				for k, v := range want.Pix {
					if g := int(got.Image[k]); g != int(v) {
						n++
						d = max(d, abs(g-int(v)))
					}
				}
				if n > 0 {
					t.Errorf("%s: %d of %d values differ from torchvision's, by up to %d", files[i], n, len(want.Pix), d)
				}
				images++
				values += len(want.Pix)
				differ += n
				worst = max(worst, d)
			}
			t.Logf("%s: %d images, %d of %d values differ from torchvision's (largest difference %d)", tc.config, images, differ, values, worst)
		})
	}
}

func abs(x int) int { return max(x, -x) }

// parityFiles lists the images under root as class/file, in the order an
// ImageFolder reads them.
func parityFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		files = append(files, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// readRGB reads an 8-bit RGB PNG.
func readRGB(t *testing.T, path string) resize.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	rgba, ok := m.(*image.RGBA)
	if !ok {
		t.Fatalf("%s: %T, want 8-bit RGB", path, m)
	}
	b := rgba.Bounds()
	out := resize.Image{H: b.Dy(), W: b.Dx(), C: 3}
	for y := range out.H {
		for x := range out.W {
			c := rgba.RGBAAt(x, y)
			out.Pix = append(out.Pix, c.R, c.G, c.B)
		}
	}
	return out
}
