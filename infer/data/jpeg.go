package data

import (
	"image"
)

// JPEG pixels as libjpeg produces them.
//
// Go's image/jpeg returns a JPEG's YCbCr planes at their coded resolution,
// and image.YCbCr's conversion to RGB takes, for each pixel, the nearest
// chroma sample and converts with its own fixed-point constants. libjpeg
// (and libjpeg-turbo, which PIL, torchvision and OpenCV use) instead
// interpolates subsampled chroma with a triangle filter ("fancy
// upsampling", jdsample.c) and converts with the tables of jdcolor.c. The
// functions below reproduce both from the decoded planes; with the planes
// of internal/ljpeg, which uses libjpeg's inverse DCT, a JPEG decodes
// here to the pixels of PIL's Image.open(f).convert("RGB").

// yccToRGB stores the H×W×3 RGB pixels of m in dst (len(dst) ≥ 3·W·H),
// upsampling the chroma planes as libjpeg's default decompression does
// (do_fancy_upsampling) and converting YCbCr to RGB with libjpeg's
// arithmetic. scratch is reused for the upsampled chroma planes and
// returned, grown as needed. m.Rect.Min must be the origin, as it is for
// images returned by image/jpeg; yccToRGB reports false, and does
// nothing, when it is not.
func yccToRGB(dst []uint8, m *image.YCbCr, scratch []uint8) ([]uint8, bool) {
	if m.Rect.Min != (image.Point{}) {
		return scratch, false
	}
	var hx, vy int // horizontal and vertical chroma subsampling factors
	switch m.SubsampleRatio {
	case image.YCbCrSubsampleRatio444:
		hx, vy = 1, 1
	case image.YCbCrSubsampleRatio422:
		hx, vy = 2, 1
	case image.YCbCrSubsampleRatio420:
		hx, vy = 2, 2
	case image.YCbCrSubsampleRatio440:
		hx, vy = 1, 2
	case image.YCbCrSubsampleRatio411:
		hx, vy = 4, 1
	case image.YCbCrSubsampleRatio410:
		hx, vy = 4, 2
	default:
		return scratch, false
	}
	w, h := m.Rect.Dx(), m.Rect.Dy()
	n := w * h
	if cap(scratch) < 2*n {
		scratch = make([]uint8, 2*n)
	}
	scratch = scratch[:2*n]
	cb, cr := scratch[:n], scratch[n:]
	p := chromaPlane{w: (w + hx - 1) / hx, h: (h + vy - 1) / vy, stride: m.CStride}
	p.pix = m.Cb
	p.upsample(cb, w, h, hx, vy)
	p.pix = m.Cr
	p.upsample(cr, w, h, hx, vy)
	i := 0
	for y := range h {
		row := m.Y[y*m.YStride : y*m.YStride+w]
		for x, lum := range row {
			k := y*w + x
			dst[i], dst[i+1], dst[i+2] = libjpegYCbCrToRGB(lum, cb[k], cr[k])
			i += 3
		}
	}
	return scratch, true
}

// chromaPlane is one subsampled chroma component: w×h samples (libjpeg's
// downsampled_width and downsampled_height, the image size divided by the
// subsampling factor and rounded up), row y starting at pix[y·stride].
type chromaPlane struct {
	pix          []uint8
	w, h, stride int
}

// row returns row y of the plane, replicating the first and
// last rows beyond the plane's top and bottom edges, as libjpeg's main
// buffer controller (jdmainct.c) supplies its context rows.
func (p chromaPlane) row(y int) []uint8 {
	y = max(0, min(y, p.h-1))
	return p.pix[y*p.stride : y*p.stride+p.w]
}

// upsample writes the plane, upsampled by hx (1, 2 or 4) horizontally
// and vy (1 or 2) vertically and cropped to w×h, to dst (row-major, stride
// w), as libjpeg's jdsample.c does with do_fancy_upsampling:
//
//   - 2:1 horizontal (h2v1_fancy_upsample): output samples sit 1/4 and 3/4
//     of the way between input samples and take 3/4 of the nearer and 1/4
//     of the farther one, (3·near + far + 1) >> 2 for the left output
//     of a pair and (3·near + far + 2) >> 2 for the right; the first and
//     last outputs of a row copy the edge sample.
//   - 2:1 both ways (h2v2_fancy_upsample): for each output row, the column
//     sums 3·near + far over the nearer and farther input rows, then
//     (3·this + left + 8) >> 4 and (3·this + right + 7) >> 4, with
//     4·this in place of the missing neighbour at the row's ends.
//   - 2:1 vertical (h1v2_fancy_upsample): (3·near + far + 1) >> 2.
//
// libjpeg interpolates 2:1 horizontally only when the plane is wider than
// 2 samples; narrower planes, and 4:1 horizontal subsampling (4:1:1,
// 4:1:0), are replicated (h2v1_upsample, h2v2_upsample, int_upsample).
func (p chromaPlane) upsample(dst []uint8, w, h, hx, vy int) {
	fancy := hx == 1 || (hx == 2 && p.w > 2)
	var sums []int // column sums of one output row (h2v2)
	if hx == 2 && vy == 2 && fancy {
		sums = make([]int, p.w)
	}
	for y := range h {
		out := dst[y*w : (y+1)*w]
		near := p.row(y / vy)
		switch {
		case hx == 1 && vy == 1:
			copy(out, near)
		case hx == 1: // h1v2
			far := p.row(y/2 - 1 + 2*(y%2))
			for x := range out {
				out[x] = uint8((3*int(near[x]) + int(far[x]) + 1) >> 2)
			}
		case !fancy:
			for x := range out {
				out[x] = near[x/hx]
			}
		case vy == 1: // h2v1
			upsampleRow(out, near)
		default: // h2v2
			far := p.row(y/2 - 1 + 2*(y%2))
			for x := range sums {
				sums[x] = 3*int(near[x]) + int(far[x])
			}
			upsampleSums(out, sums)
		}
	}
}

// upsampleRow doubles the row in (len(in) > 2) into out, cropped to
// len(out), by h2v1_fancy_upsample's triangle filter.
func upsampleRow(out, in []uint8) {
	last := len(in) - 1
	for i := range (len(out) + 1) / 2 {
		v := int(in[i])
		left, right := v, v // the row's first and last outputs copy the edge sample
		if i > 0 {
			left = (3*v + int(in[i-1]) + 1) >> 2
		}
		if i < last {
			right = (3*v + int(in[i+1]) + 2) >> 2
		}
		out[2*i] = uint8(left)
		if 2*i+1 < len(out) {
			out[2*i+1] = uint8(right)
		}
	}
}

// upsampleSums doubles a row of h2v2 column sums (len(sums) > 2) into
// out, cropped to len(out), by h2v2_fancy_upsample's filter.
func upsampleSums(out []uint8, sums []int) {
	last := len(sums) - 1
	for i := range (len(out) + 1) / 2 {
		this := 3 * sums[i]
		left, right := sums[i], sums[i] // 4·this at the row's ends
		if i > 0 {
			left = sums[i-1]
		}
		if i < last {
			right = sums[i+1]
		}
		out[2*i] = uint8((this + left + 8) >> 4)
		if 2*i+1 < len(out) {
			out[2*i+1] = uint8((this + right + 7) >> 4)
		}
	}
}

// libjpeg's YCbCr to RGB constants (jdcolor.c): FIX(x) = ⌊x·2¹⁶ + ½⌋.
const (
	yccScaleBits = 16
	yccHalf      = 1 << (yccScaleBits - 1)
	fixCrR       = 91881  // FIX(1.40200)
	fixCbB       = 116130 // FIX(1.77200)
	fixCrG       = 46802  // FIX(0.71414)
	fixCbG       = 22554  // FIX(0.34414)
)

// libjpegYCbCrToRGB converts one full-resolution YCbCr sample to RGB as
// libjpeg's ycc_rgb_convert does: R = Y + ⌊(FIX(1.402)·Cr' + ½)⌋,
// G = Y + ⌊(−FIX(0.34414)·Cb' + ½ − FIX(0.71414)·Cr')⌋,
// B = Y + ⌊(FIX(1.772)·Cb' + ½)⌋, in units of 2⁻¹⁶ with Cb' = Cb − 128
// and Cr' = Cr − 128, each clamped to [0, 255].
func libjpegYCbCrToRGB(y, cb, cr uint8) (r, g, b uint8) {
	yy, xb, xr := int32(y), int32(cb)-128, int32(cr)-128
	r = clampUint8(yy + (fixCrR*xr+yccHalf)>>yccScaleBits)
	g = clampUint8(yy + (-fixCbG*xb+yccHalf-fixCrG*xr)>>yccScaleBits)
	b = clampUint8(yy + (fixCbB*xb+yccHalf)>>yccScaleBits)
	return r, g, b
}

func clampUint8(v int32) uint8 {
	return uint8(max(0, min(v, 255)))
}
