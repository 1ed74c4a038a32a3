package resize_test

import (
	"fmt"

	"github.com/fedcalib/fedcalib/infer/resize"
)

// torchvision's ImageNet evaluation, Resize(256) then CenterCrop(224),
// on a 375×500 photo: the resized image is 256×341, and ResampleWindow
// computes only its centred 224×224 window.
func ExampleResampler_ResampleWindow() {
	src := resize.Image{Pix: make([]uint8, 375*500*3), H: 375, W: 500, C: 3}
	for i := range src.Pix {
		src.Pix[i] = uint8(i % 251)
	}
	h, w := resize.ShorterSide(src.H, src.W, 256)
	win, inside := resize.CenterWindow(h, w, 224, 224)
	fmt.Println(h, w, win, inside)

	var r resize.Resampler
	crop := r.ResampleWindow(nil, src, h, w, resize.Bilinear, win)
	whole := resize.CenterCrop(nil, resize.Resample(nil, src, h, w, resize.Bilinear), 224, 224)
	fmt.Println(crop.H, crop.W, string(crop.Pix) == string(whole.Pix))
	// Output:
	// 256 341 {16 58 224 224} true
	// 224 224 true
}
