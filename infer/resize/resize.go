package resize

import (
	"fmt"
	"math"
)

// Image is an 8-bit image: Pix holds H rows of W pixels of C interleaved
// channels. The zero value is an empty image.
type Image struct {
	Pix     []uint8
	H, W, C int
}

// check panics when the image's buffer does not match its size: a
// programmer error.
func (m Image) check() {
	if m.H < 0 || m.W < 0 || m.C <= 0 || len(m.Pix) != m.H*m.W*m.C {
		panic(fmt.Sprintf("resize: image %d×%d×%d holds %d bytes", m.H, m.W, m.C, len(m.Pix)))
	}
}

// grow returns buf resized to n bytes, reusing its storage when it can.
func grow(buf []uint8, n int) []uint8 {
	if cap(buf) < n {
		return make([]uint8, n)
	}
	return buf[:n]
}

// ShorterSide returns the size (h, w) that torchvision's Resize(s) gives
// an h×w image: the shorter side becomes s and the longer ⌊s·long/short⌋
// (a square becomes s×s).
func ShorterSide(h, w, s int) (int, int) {
	if w <= h {
		return int(float64(s*h) / float64(w)), s
	}
	return s, int(float64(s*w) / float64(h))
}

// Resample scales src to h×w with filter f, as PIL's Image.resize does
// (see the package documentation), writing into buf's storage when it is
// large enough. An image already h×w is copied.
func Resample(buf []uint8, src Image, h, w int, f Filter) Image {
	var r Resampler
	return r.Resample(buf, src, h, w, f)
}

// A Resampler resamples images as Resample does, reusing its intermediate
// image and the kernels of the last sizes and filter it saw, so that a
// stream of images allocates nothing once warm. The zero value is ready
// to use; a Resampler must not be used by several goroutines at once.
type Resampler struct {
	tmp  []uint8
	last [2]cachedKernel // the vertical and horizontal kernels last used
}

// cachedKernel is a kernel with the sizes and filter it was made for.
type cachedKernel struct {
	n, m int
	f    Filter
	k    kernel
}

// kernel returns the kernel from n to m samples with f, from slot i of
// the cache when it was the last made there.
func (r *Resampler) kernel(i, n, m int, f Filter) kernel {
	c := &r.last[i]
	if c.k.bounds == nil || c.n != n || c.m != m || c.f != f {
		*c = cachedKernel{n: n, m: m, f: f, k: weights(n, m, f)}
	}
	return c.k
}

// Resample is the package's Resample, reusing r's buffers.
func (r *Resampler) Resample(buf []uint8, src Image, h, w int, f Filter) Image {
	src.check()
	if h <= 0 || w <= 0 || src.H == 0 || src.W == 0 {
		panic(fmt.Sprintf("resize: resampling %d×%d to %d×%d", src.H, src.W, h, w))
	}
	if h == src.H && w == src.W {
		out := Image{Pix: grow(buf, len(src.Pix)), H: h, W: w, C: src.C}
		copy(out.Pix, src.Pix)
		return out
	}
	if f == Nearest {
		return nearest(buf, src, h, w)
	}
	// Columns: the rows the vertical pass reads bound the horizontal pass.
	vert := r.kernel(0, src.H, h, f)
	first, last := vert.bounds[0], vert.bounds[2*(h-1)]+vert.bounds[2*(h-1)+1]
	tmp := Image{Pix: src.Pix[first*src.W*src.C : last*src.W*src.C], H: last - first, W: src.W, C: src.C}
	if w != src.W {
		horiz := r.kernel(1, src.W, w, f)
		out := Image{H: tmp.H, W: w, C: src.C}
		r.tmp = grow(r.tmp, out.H*out.W*out.C)
		out.Pix = r.tmp
		for y := range tmp.H {
			horiz.apply(out.Pix[y*w*src.C:(y+1)*w*src.C], tmp.Pix[y*src.W*src.C:], src.C, src.C)
		}
		tmp = out
	}
	if h == src.H {
		out := Image{Pix: grow(buf, len(tmp.Pix)), H: h, W: w, C: src.C}
		copy(out.Pix, tmp.Pix)
		return out
	}
	out := Image{Pix: grow(buf, h*w*src.C), H: h, W: w, C: src.C}
	row := w * src.C
	for x := range row {
		// Each column of samples is a strided row for the 1-D filter,
		// whose bounds count from the first row read.
		vert.applyColumn(out.Pix[x:], tmp.Pix[x:], row, first)
	}
	return out
}

// precision is the number of fractional bits of the fixed-point weights:
// 32 − 8 − 2, leaving room for 8-bit samples and overshoot in an int32.
const precision = 22

// kernel holds the fixed-point weights of a 1-D resampling from n to m
// samples: output i reads bounds[2i+1] input samples from bounds[2i],
// weighted by k[i·size : i·size+bounds[2i+1]].
type kernel struct {
	size   int
	bounds []int
	k      []int32
}

// weights computes the kernel that resamples n samples to m with f.
func weights(n, m int, f Filter) kernel {
	scale := float64(n) / float64(m)
	fscale := max(scale, 1)
	support := f.support() * fscale
	size := int(math.Ceil(support))*2 + 1
	kn := kernel{size: size, bounds: make([]int, 2*m), k: make([]int32, m*size)}
	w := make([]float64, size)
	for i := range m {
		centre := (float64(i) + 0.5) * scale
		lo := max(int(centre-support+0.5), 0) // int() truncates toward zero, as C's cast does
		hi := min(int(centre+support+0.5), n) - lo
		total := 0.0
		for j := range hi {
			w[j] = f.weight((float64(j+lo) - centre + 0.5) / fscale)
			total += w[j]
		}
		for j := range hi {
			v := w[j]
			if total != 0 {
				v /= total
			}
			if v < 0 {
				kn.k[i*size+j] = int32(-0.5 + v*(1<<precision))
			} else {
				kn.k[i*size+j] = int32(0.5 + v*(1<<precision))
			}
		}
		kn.bounds[2*i], kn.bounds[2*i+1] = lo, hi
	}
	return kn
}

// clamp8 converts a fixed-point sum to a sample, clamped to 0…255.
func clamp8(s int32) uint8 {
	if s <= 0 {
		return 0
	}
	if s >= 255<<precision {
		return 255
	}
	return uint8(s >> precision)
}

// apply resamples one row of interleaved samples: output pixel i, channel
// ch, is dst[i·stride+ch], read from src[j·step+ch].
func (kn kernel) apply(dst, src []uint8, stride, step int) {
	m := len(kn.bounds) / 2
	for i := range m {
		lo, n := kn.bounds[2*i], kn.bounds[2*i+1]
		k := kn.k[i*kn.size : i*kn.size+n]
		for ch := range stride {
			s := int32(1 << (precision - 1))
			for j, wt := range k {
				s += int32(src[(lo+j)*step+ch]) * wt
			}
			dst[i*stride+ch] = clamp8(s)
		}
	}
}

// applyColumn resamples one column: output i is dst[i·stride], read from
// src[(j−offset)·stride].
func (kn kernel) applyColumn(dst, src []uint8, stride, offset int) {
	m := len(kn.bounds) / 2
	for i := range m {
		lo, n := kn.bounds[2*i]-offset, kn.bounds[2*i+1]
		s := int32(1 << (precision - 1))
		for j, wt := range kn.k[i*kn.size : i*kn.size+n] {
			s += int32(src[(lo+j)*stride]) * wt
		}
		dst[i*stride] = clamp8(s)
	}
}

// nearest scales src to h×w by taking the nearest sample, with PIL's
// accumulated float64 coordinates.
func nearest(buf []uint8, src Image, h, w int) Image {
	out := Image{Pix: grow(buf, h*w*src.C), H: h, W: w, C: src.C}
	xs := nearestIndex(src.W, w)
	c := src.C
	for y, sy := range nearestIndex(src.H, h) {
		in := src.Pix[sy*src.W*c:]
		o := out.Pix[y*w*c:]
		for x, sx := range xs {
			copy(o[x*c:x*c+c], in[sx*c:sx*c+c])
		}
	}
	return out
}

// nearestIndex returns, for each of m outputs, the input sample of n that
// PIL's nearest scaling reads.
func nearestIndex(n, m int) []int {
	step := float64(n) / float64(m)
	idx := make([]int, m)
	pos := step * 0.5
	for i := range idx {
		idx[i] = min(max(int(pos), 0), n-1)
		pos += step
	}
	return idx
}

// CenterCrop returns the centred h×w window of src, as torchvision's
// CenterCrop does: the offset ((H−h)/2 rounded half to even, likewise for
// width), and where the window is larger than the image, the image first
// padded with zeros, ⌊(h−H)/2⌋ rows above and the rest below (likewise
// for columns). It writes into buf's storage when it is large enough.
func CenterCrop(buf []uint8, src Image, h, w int) Image {
	src.check()
	if h <= 0 || w <= 0 {
		panic(fmt.Sprintf("resize: cropping to %d×%d", h, w))
	}
	out := Image{Pix: grow(buf, h*w*src.C), H: h, W: w, C: src.C}
	top, left := cropOffset(src.H, h), cropOffset(src.W, w)
	c := src.C
	for y := range h {
		o := out.Pix[y*w*c : (y+1)*w*c]
		sy := y + top
		if sy < 0 || sy >= src.H {
			clear(o)
			continue
		}
		for x := range w {
			sx := x + left
			if sx < 0 || sx >= src.W {
				clear(o[x*c : x*c+c])
				continue
			}
			copy(o[x*c:x*c+c], src.Pix[(sy*src.W+sx)*c:])
		}
	}
	return out
}

// cropOffset returns where a window of size m starts in n samples: a
// negative offset pads ⌊(m−n)/2⌋ zeros before.
func cropOffset(n, m int) int {
	if m > n {
		return -((m - n) / 2)
	}
	return int(math.RoundToEven(float64(n-m) / 2))
}
