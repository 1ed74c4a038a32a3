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

// A Window is a rectangle of an image: rows Top to Top+H−1 and columns
// Left to Left+W−1. The zero value is empty.
type Window struct {
	Top, Left, H, W int
}

// CenterWindow returns the centred h×w window of an H×W image, as
// torchvision's CenterCrop places it (offsets rounded half to even, as
// Python's round does), and whether it lies inside the image; it does
// not when the window is larger than the image in either dimension
// (CenterCrop then pads with zeros).
func CenterWindow(H, W, h, w int) (Window, bool) {
	win := Window{Top: cropOffset(H, h), Left: cropOffset(W, w), H: h, W: w}
	return win, h <= H && w <= W
}

// A Resampler resamples images as Resample does, reusing its intermediate
// image and the kernels of the last sizes and filter it saw, so that a
// stream of images allocates nothing once warm. The zero value is ready
// to use; a Resampler must not be used by several goroutines at once.
type Resampler struct {
	tmp  []uint8
	acc  []int32         // one output row of the vertical pass's sums
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
	return r.ResampleWindow(buf, src, h, w, f, Window{H: h, W: w})
}

// ResampleWindow returns the window win of src scaled to h×w with f: the
// pixels that cropping Resample(buf, src, h, w, f) to win would give,
// computing only those (a resize followed by a centre crop, as
// torchvision's ImageNet evaluation does, does about half the work). It
// writes into buf's storage when it is large enough. The window must lie
// inside the h×w image: anything else is a programmer error.
func (r *Resampler) ResampleWindow(buf []uint8, src Image, h, w int, f Filter, win Window) Image {
	src.check()
	if h <= 0 || w <= 0 || src.H == 0 || src.W == 0 {
		panic(fmt.Sprintf("resize: resampling %d×%d to %d×%d", src.H, src.W, h, w))
	}
	if win.H <= 0 || win.W <= 0 || win.Top < 0 || win.Left < 0 || win.Top+win.H > h || win.Left+win.W > w {
		panic(fmt.Sprintf("resize: window %+v outside a %d×%d image", win, h, w))
	}
	c := src.C
	out := Image{Pix: grow(buf, win.H*win.W*c), H: win.H, W: win.W, C: c}
	if f == Nearest && (h != src.H || w != src.W) {
		nearest(out, src, h, w, win)
		return out
	}
	// The source rows the window's output rows read.
	first, last := win.Top, win.Top+win.H
	var vert kernel
	if h != src.H {
		vert = r.kernel(0, src.H, h, f)
		i := win.Top + win.H - 1
		first, last = vert.bounds[2*win.Top], vert.bounds[2*i]+vert.bounds[2*i+1]
	}
	// plane holds those rows, of the window's columns: resampled along
	// rows, or src itself, read with its stride from the window's left edge.
	plane, stride, offset := src.Pix[first*src.W*c:last*src.W*c], src.W*c, win.Left*c
	if w != src.W {
		horiz := r.kernel(1, src.W, w, f)
		stride, offset = win.W*c, 0
		r.tmp = grow(r.tmp, (last-first)*stride)
		for y := range last - first {
			horiz.apply(r.tmp[y*stride:(y+1)*stride], src.Pix[(first+y)*src.W*c:(first+y+1)*src.W*c], c, win.Left)
		}
		plane = r.tmp
	}
	row := win.W * c
	if h == src.H {
		for y := range win.H {
			copy(out.Pix[y*row:(y+1)*row], plane[y*stride+offset:])
		}
		return out
	}
	if cap(r.acc) < row {
		r.acc = make([]int32, row)
	}
	acc := r.acc[:row]
	for y := range win.H {
		i := win.Top + y
		lo, n := vert.bounds[2*i]-first, vert.bounds[2*i+1]
		// Row by row through the kernel's taps, two at a time, the first
		// one or two setting the sums: integer sums, so the same bits as
		// column by column, in the order memory is laid out.
		k := vert.k[i*vert.size:][:n]
		tap := func(j int) []uint8 { return plane[(lo+j)*stride+offset:][:len(acc)] }
		j := 1
		if a := tap(0); n == 1 {
			for x, v := range a {
				acc[x] = 1<<(precision-1) + int32(v)*k[0]
			}
		} else {
			b, w0, w1 := tap(1), k[0], k[1]
			for x, v := range a {
				acc[x] = 1<<(precision-1) + int32(v)*w0 + int32(b[x])*w1
			}
			j = 2
		}
		for ; j+1 < n; j += 2 {
			a, b, w0, w1 := tap(j), tap(j+1), k[j], k[j+1]
			for x, v := range a {
				acc[x] += int32(v)*w0 + int32(b[x])*w1
			}
		}
		if j < n {
			for x, v := range tap(j) {
				acc[x] += int32(v) * k[j]
			}
		}
		o := out.Pix[y*row : (y+1)*row]
		for x, s := range acc {
			o[x] = clamp8(s)
		}
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
	return uint8(min(max(s>>precision, 0), 255))
}

// apply resamples one row of interleaved samples with c channels into
// dst, which holds outputs from, from+1, … of the kernel: output pixel i,
// channel ch, is dst[(i−from)·c+ch], read from src[j·c+ch].
func (kn kernel) apply(dst, src []uint8, c, from int) {
	const half = 1 << (precision - 1)
	for i := range len(dst) / c {
		lo, n := kn.bounds[2*(from+i)], kn.bounds[2*(from+i)+1]
		k := kn.k[(from+i)*kn.size:][:n]
		in := src[lo*c : (lo+n)*c]
		switch c {
		case 3:
			s0, s1, s2 := int32(half), int32(half), int32(half)
			for j, wt := range k {
				p := in[3*j : 3*j+3]
				s0 += int32(p[0]) * wt
				s1 += int32(p[1]) * wt
				s2 += int32(p[2]) * wt
			}
			d := dst[3*i : 3*i+3]
			d[0], d[1], d[2] = clamp8(s0), clamp8(s1), clamp8(s2)
		case 1:
			s := int32(half)
			for j, wt := range k {
				s += int32(in[j]) * wt
			}
			dst[i] = clamp8(s)
		default:
			for ch := range c {
				s := int32(half)
				for j, wt := range k {
					s += int32(in[j*c+ch]) * wt
				}
				dst[i*c+ch] = clamp8(s)
			}
		}
	}
}

// nearest writes the window win of src scaled to h×w into out by taking
// the nearest sample, with PIL's accumulated float64 coordinates.
func nearest(out, src Image, h, w int, win Window) {
	xs := nearestIndex(src.W, w)[win.Left : win.Left+win.W]
	c := src.C
	for y, sy := range nearestIndex(src.H, h)[win.Top : win.Top+win.H] {
		in := src.Pix[sy*src.W*c:]
		o := out.Pix[y*win.W*c:]
		for x, sx := range xs {
			copy(o[x*c:x*c+c], in[sx*c:sx*c+c])
		}
	}
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
	win, _ := CenterWindow(src.H, src.W, h, w)
	top, left := win.Top, win.Left
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
