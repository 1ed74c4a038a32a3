package infer

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/fedcalib/fedcalib/infer/data"
)

// recordKind is which field of a data.Record carries the input.
type recordKind int

const (
	kindImage recordKind = iota // Record.Image, uint8 HWC
	kindFloat                   // Record.Float
	kindText                    // Record.Text
)

func (k recordKind) String() string {
	return [...]string{"uint8 image", "float", "text"}[k]
}

// encoder turns records into rows of a model input tensor. Its plan is
// fixed by the first record: every later record must have the same kind
// and shape.
type encoder struct {
	pre   Preprocessing
	dtype DType
	input string  // model input name, for messages
	dims  []int64 // model input dims without the batch dimension; <0 dynamic

	// Fixed by plan.
	kind        recordKind
	recShape    []int   // the first record's shape, as given (or [len])
	sample      []int64 // per-record tensor shape, in the model's layout
	size        int     // values per record
	src         []int32 // src[i] is the record index of row element i; nil = identity
	chans       int     // channels of the record
	chanOf      []int32 // chanOf[i] is the channel of row element i; nil = all 0
	lut         []float32
	planar      bool      // src[ch*hw+p] = p*chans+ch: HWC pixels into channel planes
	interleaved bool      // src nil and chanOf[i] = i%chans: channels as the record has them
	a, b        []float64 // per channel: x = v*a[c] + b[c] for float records
	vocab       map[rune]int64
	ascii       [128]int64 // vocab of ASCII runes, -1 if absent
}

func newEncoder(pre Preprocessing, dtype DType, input string, dims []int64) *encoder {
	return &encoder{pre: pre, dtype: dtype, input: input, dims: dims}
}

// plan fixes the encoding from the first record r.
func (e *encoder) plan(r *data.Record) error {
	switch {
	case r.Text != "":
		e.kind = kindText
	case len(r.Image) > 0:
		e.kind = kindImage
	case len(r.Float) > 0:
		e.kind = kindFloat
	default:
		return fmt.Errorf("record has no image, float or text data")
	}
	if e.kind == kindText {
		return e.planText(r)
	}
	n := len(r.Image)
	if e.kind == kindFloat {
		n = len(r.Float)
	}
	shape := r.Shape
	if len(shape) == 0 {
		shape = []int{n}
	}
	if prod(shape) != n {
		return fmt.Errorf("record shape %v holds %d values but the record has %d", shape, prod(shape), n)
	}
	e.recShape = append([]int(nil), shape...)
	e.size = n

	layout := e.pre.Layout
	if layout == "" {
		if len(e.dims) != 1 {
			return fmt.Errorf("model input %q has rank %d: set %s (flag --layout) to NCHW, NHWC or NC", e.input, len(e.dims)+1, KeyLayout)
		}
		layout = NC
	}
	var h, w, c int
	switch len(shape) {
	case 1: // flat: already in the model's element order
		switch layout {
		case NC:
			e.sample = []int64{int64(n)}
			c = 1
		case NCHW, NHWC:
			if len(e.dims) != 3 || !fixed(e.dims) || prod64(e.dims) != int64(n) {
				return e.shapeError(fmt.Sprintf("flat records of %d values cannot fill %s input", n, layout))
			}
			e.sample = append([]int64(nil), e.dims...)
			if layout == NCHW {
				c = int(e.dims[0])
				e.chanOf = make([]int32, n)
				for i := range e.chanOf {
					e.chanOf[i] = int32(i / (n / c))
				}
			} else {
				c = int(e.dims[2])
				e.chanOf = make([]int32, n)
				for i := range e.chanOf {
					e.chanOf[i] = int32(i % c)
				}
			}
		}
	case 2, 3:
		h, w, c = shape[0], shape[1], 1
		if len(shape) == 3 {
			c = shape[2]
		}
		switch layout {
		case NC:
			e.sample = []int64{int64(n)}
		case NHWC:
			e.sample = []int64{int64(h), int64(w), int64(c)}
		case NCHW:
			e.sample = []int64{int64(c), int64(h), int64(w)}
			if c > 1 {
				e.src = make([]int32, n)
				for ch := range c {
					for p := range h * w {
						e.src[ch*h*w+p] = int32(p*c + ch)
					}
				}
			}
		}
		if c > 1 {
			e.chanOf = make([]int32, n)
			for i := range e.chanOf {
				s := i
				if e.src != nil {
					s = int(e.src[i])
				}
				e.chanOf[i] = int32(s % c)
			}
		}
	default:
		return fmt.Errorf("record shape %v: want height×width×channels, height×width or flat", shape)
	}
	e.chans = c
	e.planar, e.interleaved = false, false
	if c > 1 {
		e.planar, e.interleaved = e.src != nil && isPlanar(e.src, c), e.src == nil && isInterleaved(e.chanOf, c)
	}
	if err := e.checkShape(fmt.Sprintf("record shape %v", shape)); err != nil {
		return err
	}

	if e.dtype == Int64 {
		return nil // raw values become integers as they are
	}
	scale := e.pre.scale()
	e.a = make([]float64, c)
	e.b = make([]float64, c)
	if e.kind == kindImage {
		e.lut = make([]float32, 256*c)
	}
	for ch := range c {
		mean, std, err := e.pre.channel(ch, c)
		if err != nil {
			return err
		}
		e.a[ch], e.b[ch] = scale/std, -mean/std
		if e.lut != nil {
			for v := range 256 {
				e.lut[ch*256+v] = float32((float64(v)*scale - mean) / std)
			}
		}
	}
	return nil
}

func (e *encoder) planText(r *data.Record) error {
	if e.dtype != Int64 {
		return fmt.Errorf("records are text but model input %q is %s, not int64", e.input, e.dtype)
	}
	if e.pre.Vocab == "" {
		return fmt.Errorf("records are text but the model has no vocabulary: set %s (flag --vocab)", KeyVocab)
	}
	e.vocab = make(map[rune]int64)
	for i := range e.ascii {
		e.ascii[i] = -1
	}
	i := int64(0)
	for _, c := range e.pre.Vocab {
		e.vocab[c] = i
		if c < 128 {
			e.ascii[c] = i
		}
		i++
	}
	n := len([]rune(r.Text))
	e.recShape = []int{n}
	e.size = n
	e.sample = []int64{int64(n)}
	return e.checkShape(fmt.Sprintf("text of %d characters", n))
}

// checkShape compares e.sample with the model input dims.
func (e *encoder) checkShape(what string) error {
	ok := len(e.sample) == len(e.dims)
	for i := 0; ok && i < len(e.dims); i++ {
		ok = e.dims[i] < 0 || e.dims[i] == e.sample[i]
	}
	if !ok {
		return e.shapeError(what)
	}
	return nil
}

func (e *encoder) shapeError(what string) error {
	layout := e.pre.Layout
	if layout == "" {
		layout = NC
	}
	return fmt.Errorf("data does not fit the model: %s gives %s input %s, but model input %q is %s",
		what, layout, fmtShape(append([]int64{-1}, e.sample...)), e.input, fmtShape(append([]int64{-1}, e.dims...)))
}

// encode writes record r, of the kind and shape plan saw, as one row into f (float32 input) or n (int64
// input), each of length e.size.
func (e *encoder) encode(r *data.Record, f []float32, n []int64) error {
	switch e.kind {
	case kindText:
		return e.encodeText(r.Text, n)
	case kindImage:
		if err := e.sameShape(r, len(r.Image)); err != nil {
			return err
		}
		if n != nil {
			for i := range n {
				n[i] = int64(r.Image[e.at(i)])
			}
			return nil
		}
		e.encodeImage(f[:e.size], r.Image[:e.size])
	case kindFloat:
		if err := e.sameShape(r, len(r.Float)); err != nil {
			return err
		}
		if n != nil {
			for i := range n {
				v := r.Float[e.at(i)]
				if v != float32(math.Trunc(float64(v))) {
					return fmt.Errorf("value %v is not an integer, but model input %q is int64", v, e.input)
				}
				n[i] = int64(v)
			}
			return nil
		}
		for i := range f {
			c := 0
			if e.chanOf != nil {
				c = int(e.chanOf[i])
			}
			f[i] = float32(float64(r.Float[e.at(i)])*e.a[c] + e.b[c])
		}
	}
	return nil
}

// encodeImage writes the pixels src through the lookup tables into f
// (both of e.size values). Each value is e.lut[c*256+v] for the channel c
// and source pixel v of f's element, as reference (encode_test.go)
// computes them from e.src and e.chanOf one element at a time; the
// layouts met in practice take loops that know the layout instead of
// reading those tables.
func (e *encoder) encodeImage(f []float32, src []uint8) {
	c := e.chans
	switch {
	case c == 1:
		lutBytes(f, src, (*[256]float32)(e.lut))
	case e.planar:
		// HWC pixels into channel planes: f[ch*hw+p] = src[p*c+ch].
		hw := len(src) / c
		for ch := range c {
			lut := (*[256]float32)(e.lut[ch*256:])
			dst := f[ch*hw : (ch+1)*hw]
			for p := range dst {
				dst[p] = lut[src[p*c+ch]]
			}
		}
	case e.interleaved:
		// Channels in the record's order: element i is channel i%c.
		for ch := range c {
			lut := (*[256]float32)(e.lut[ch*256:])
			for i := ch; i < len(src); i += c {
				f[i] = lut[src[i]]
			}
		}
	default:
		reference(e, f, src)
	}
}

// lutBytes sets f[i] = lut[src[i]] for every i < len(src) (len(f) ≥
// len(src)), eight bytes at a time: one 8-byte load for eight lookups
// takes about half the time of a loop over single bytes.
func lutBytes(f []float32, src []uint8, lut *[256]float32) {
	f = f[:len(src)]
	i := 0
	for ; i+8 <= len(src); i += 8 {
		w := binary.LittleEndian.Uint64(src[i:])
		d := (*[8]float32)(f[i:])
		d[0] = lut[byte(w)]
		d[1] = lut[byte(w>>8)]
		d[2] = lut[byte(w>>16)]
		d[3] = lut[byte(w>>24)]
		d[4] = lut[byte(w>>32)]
		d[5] = lut[byte(w>>40)]
		d[6] = lut[byte(w>>48)]
		d[7] = lut[byte(w>>56)]
	}
	for ; i < len(src); i++ {
		f[i] = lut[src[i]]
	}
}

// reference is the definition of encodeImage: one element at a time,
// through e.src (nil: element i reads pixel i) and e.chanOf (nil: every
// element is channel 0).
func reference(e *encoder, f []float32, src []uint8) {
	for i := range f {
		ch := 0
		if e.chanOf != nil {
			ch = int(e.chanOf[i])
		}
		f[i] = e.lut[ch*256+int(src[e.at(i)])]
	}
}

func (e *encoder) at(i int) int {
	if e.src == nil {
		return i
	}
	return int(e.src[i])
}

func (e *encoder) sameShape(r *data.Record, n int) error {
	shape := r.Shape
	if len(shape) == 0 {
		shape = []int{n}
	}
	if n != e.size || !slices.Equal(shape, e.recShape) || (e.kind == kindImage) != (len(r.Image) > 0) {
		got := kindFloat
		if len(r.Image) > 0 {
			got = kindImage
		}
		hint := ""
		if got == kindImage && e.kind == kindImage && e.pre.Crop == nil {
			hint = " (images of different sizes need a crop: flags --resize and --crop, or --preprocess imagenet)"
		}
		return fmt.Errorf("record is %s of shape %v, but earlier records were %s of shape %v%s", got, shape, e.kind, e.recShape, hint)
	}
	return nil
}

func (e *encoder) encodeText(s string, dst []int64) error {
	i := 0
	for _, c := range s {
		if i == len(dst) {
			return fmt.Errorf("text has more than %d characters, the length of earlier records", len(dst))
		}
		var tok int64 = -1
		if c < 128 {
			tok = e.ascii[c]
		} else if t, ok := e.vocab[c]; ok {
			tok = t
		}
		if tok < 0 {
			return fmt.Errorf("text character %q is not in the model vocabulary (%s)", c, KeyVocab)
		}
		dst[i] = tok
		i++
	}
	if i != len(dst) {
		return fmt.Errorf("text has %d characters, but earlier records had %d", i, len(dst))
	}
	return nil
}

// isPlanar reports whether src maps channel planes to HWC pixels of c
// channels: src[ch*hw+p] = p*c+ch.
func isPlanar(src []int32, c int) bool {
	hw := len(src) / c
	for i, s := range src {
		if int(s) != (i%hw)*c+i/hw {
			return false
		}
	}
	return len(src) == hw*c
}

// isInterleaved reports whether chanOf gives element i channel i%c.
func isInterleaved(chanOf []int32, c int) bool {
	for i, ch := range chanOf {
		if int(ch) != i%c {
			return false
		}
	}
	return true
}

func fixed(dims []int64) bool {
	for _, d := range dims {
		if d < 0 {
			return false
		}
	}
	return true
}

func prod(s []int) int {
	p := 1
	for _, v := range s {
		p *= v
	}
	return p
}

func prod64(s []int64) int64 {
	p := int64(1)
	for _, v := range s {
		p *= v
	}
	return p
}

// fmtShape formats a tensor shape with "?" for dynamic dimensions.
func fmtShape(s []int64) string {
	parts := make([]string, len(s))
	for i, d := range s {
		if d < 0 {
			parts[i] = "?"
		} else {
			parts[i] = fmt.Sprint(d)
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}
