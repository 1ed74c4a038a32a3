package infer

import (
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
	kind     recordKind
	recShape []int   // the first record's shape, as given (or [len])
	sample   []int64 // per-record tensor shape, in the model's layout
	size     int     // values per record
	src      []int32 // src[i] is the record index of row element i; nil = identity
	chans    int     // channels of the record
	chanOf   []int32 // chanOf[i] is the channel of row element i; nil = all 0
	lut      []float32
	a, b     []float64 // per channel: x = v*a[c] + b[c] for float records
	vocab    map[rune]int64
	ascii    [128]int64 // vocab of ASCII runes, -1 if absent
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
		src := r.Image[:e.size]
		switch {
		case e.chans == 1:
			lut := (*[256]float32)(e.lut) // a byte indexes it without a bounds check
			f = f[:len(src)]
			for i, v := range src {
				f[i] = lut[v]
			}
		case e.src == nil:
			for i, v := range src {
				f[i] = e.lut[int(e.chanOf[i])*256+int(v)]
			}
		default:
			for i, s := range e.src {
				f[i] = e.lut[int(e.chanOf[i])*256+int(src[s])]
			}
		}
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
