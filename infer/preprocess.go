package infer

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/fedcalib/fedcalib/infer/resize"
)

// Metadata keys: the contract between the model recipes, which write them
// into the ONNX model's metadata_props, and Session, which reads them.
// Options.Preprocess overrides them key by key.
const (
	// KeyScale multiplies each raw input value first (e.g.
	// "0.00392156862745098" = 1/255 for 8-bit pixels). Default 1.
	KeyScale = "fedcalib.input.scale"
	// KeyMean is subtracted after scaling: one number, or comma-separated
	// numbers, one per channel. Default 0.
	KeyMean = "fedcalib.input.mean"
	// KeyStd divides after subtracting the mean: one number, or one per
	// channel. Default 1.
	KeyStd = "fedcalib.input.std"
	// KeyLayout is the memory order of the model input: "NCHW", "NHWC" or
	// "NC" (flat). Default: NC for a rank-2 input; required otherwise.
	KeyLayout = "fedcalib.input.layout"
	// KeyDType is the element type of the model input: "float32" or
	// "int64". Default float32.
	KeyDType = "fedcalib.input.dtype"
	// KeyVocab is the text vocabulary: character i of the string (a
	// Unicode code point) is encoded as token i. It requires dtype int64.
	KeyVocab = "fedcalib.input.vocab"
	// KeyResize resizes image records before anything else: one number S
	// scales the shorter side to S and the longer to ⌊S·long/short⌋, as
	// torchvision's Resize(S) does; "H,W" scales to H×W. Default: no
	// resizing.
	KeyResize = "fedcalib.input.resize"
	// KeyCrop crops image records, after resizing, to their centred
	// S×S ("S") or H×W ("H,W") window, as torchvision's CenterCrop does,
	// padding with zeros where the image is smaller. Default: no crop.
	KeyCrop = "fedcalib.input.crop"
	// KeyInterpolation is the resizing filter: bilinear, bicubic, nearest,
	// box, hamming or lanczos (package resize). Default bilinear.
	KeyInterpolation = "fedcalib.input.interpolation"
	// KeyClasses is the comma-separated class names, in output order.
	// Optional.
	KeyClasses = "fedcalib.classes"
)

// inputKeys are the metadata keys that describe preprocessing.
var inputKeys = []string{KeyScale, KeyMean, KeyStd, KeyLayout, KeyDType, KeyVocab, KeyResize, KeyCrop, KeyInterpolation}

// IsInputKey reports whether key is one of the metadata keys that describe
// how records become model input (the fedcalib.input.* keys above; not
// KeyClasses).
func IsInputKey(key string) bool { return slices.Contains(inputKeys, key) }

// Layout is the memory order of a model's input tensor.
type Layout string

// Layouts.
const (
	NCHW Layout = "NCHW" // batch, channel, height, width (PyTorch)
	NHWC Layout = "NHWC" // batch, height, width, channel (TensorFlow)
	NC   Layout = "NC"   // batch, features: each record flattened in its own order
)

// DType is the element type of a model's input tensor.
type DType string

// Element types.
const (
	Float32 DType = "float32"
	Int64   DType = "int64"
)

// bytes returns the size of one element of type d.
func (d DType) bytes() int {
	if d == Int64 {
		return 8
	}
	return 4
}

// Preprocessing says how a record becomes one row of the model input: an
// image is first resized (Resize, Interpolation) and cropped (Crop); then
// each raw value v of channel c becomes (v*Scale - Mean[c]) / Std[c], laid
// out as Layout, or, for text, each character becomes its index in Vocab.
//
// It is the one description of preprocessing: model metadata
// (ParsePreprocessing), the infer command's flags, presets (Preset) and
// Hugging Face or timm configs (ReadConfig) all become the metadata keys
// it is parsed from.
type Preprocessing struct {
	// Resize is nil for no resizing, [S] to scale the shorter side to S,
	// or [H, W].
	Resize []int
	// Crop is nil for no crop, [S] for the centred S×S window, or [H, W].
	Crop []int
	// Interpolation is the resizing filter. The zero value is bilinear.
	Interpolation resize.Filter
	// Scale multiplies raw values. Zero means 1.
	Scale float64
	// Mean holds one value for all channels or one per channel. Nil means 0.
	Mean []float64
	// Std holds one value for all channels or one per channel. Nil means 1.
	Std []float64
	// Layout is the model input layout. Empty means NC, valid only for
	// rank-2 inputs.
	Layout Layout
	// DType is the model input element type. Empty means the type of the
	// model's input.
	DType DType
	// Vocab is the text vocabulary. Empty means records carry no text.
	Vocab string
}

// ParsePreprocessing reads Preprocessing from metadata props (the Key*
// constants). Keys it does not know are ignored. Errors name the key and
// its bad value.
func ParsePreprocessing(props map[string]string) (Preprocessing, error) {
	var p Preprocessing
	if v, ok := props[KeyScale]; ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || f == 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return p, fmt.Errorf("%s=%q: want a finite non-zero number", KeyScale, v)
		}
		p.Scale = f
	}
	var err error
	if p.Mean, err = parseFloats(props, KeyMean, false); err != nil {
		return p, err
	}
	if p.Std, err = parseFloats(props, KeyStd, true); err != nil {
		return p, err
	}
	if v, ok := props[KeyLayout]; ok {
		switch l := Layout(strings.ToUpper(strings.TrimSpace(v))); l {
		case NCHW, NHWC, NC:
			p.Layout = l
		default:
			return p, fmt.Errorf("%s=%q: want NCHW, NHWC or NC", KeyLayout, v)
		}
	}
	if v, ok := props[KeyDType]; ok {
		switch d := DType(strings.ToLower(strings.TrimSpace(v))); d {
		case Float32, Int64:
			p.DType = d
		default:
			return p, fmt.Errorf("%s=%q: want float32 or int64", KeyDType, v)
		}
	}
	if p.Resize, err = parseSize(props, KeyResize); err != nil {
		return p, err
	}
	if p.Crop, err = parseSize(props, KeyCrop); err != nil {
		return p, err
	}
	if v, ok := props[KeyInterpolation]; ok {
		if p.Interpolation, err = resize.ParseFilter(v); err != nil {
			return p, fmt.Errorf("%s: %w", KeyInterpolation, err)
		}
	}
	if v, ok := props[KeyVocab]; ok {
		if v == "" {
			return p, fmt.Errorf("%s is empty", KeyVocab)
		}
		seen := make(map[rune]bool)
		for _, r := range v {
			if seen[r] {
				return p, fmt.Errorf("%s: character %q appears twice", KeyVocab, r)
			}
			seen[r] = true
		}
		if p.DType == Float32 {
			return p, fmt.Errorf("%s is set but %s is float32: a vocabulary needs int64 input", KeyVocab, KeyDType)
		}
		p.Vocab = v
	}
	return p, nil
}

// maxSide bounds resize and crop sizes: larger values are typing mistakes
// that would allocate gigabytes per image.
const maxSide = 16384

// parseSize reads "S" or "H,W" (positive sizes up to maxSide) from key.
func parseSize(props map[string]string, key string) ([]int, error) {
	v, ok := props[key]
	if !ok {
		return nil, nil
	}
	fields := strings.Split(v, ",")
	if len(fields) > 2 {
		return nil, fmt.Errorf("%s=%q: want S or H,W", key, v)
	}
	out := make([]int, len(fields))
	for i, f := range fields {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || n > maxSide {
			return nil, fmt.Errorf("%s=%q: want S or H,W, sizes from 1 to %d", key, v, maxSide)
		}
		out[i] = n
	}
	return out, nil
}

// sizeString formats a size as parseSize reads it.
func sizeString(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func parseFloats(props map[string]string, key string, positive bool) ([]float64, error) {
	v, ok := props[key]
	if !ok {
		return nil, nil
	}
	fields := strings.Split(v, ",")
	out := make([]float64, len(fields))
	for i, f := range fields {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || math.IsInf(x, 0) || math.IsNaN(x) || (positive && x <= 0) {
			want := "finite numbers"
			if positive {
				want = "positive numbers"
			}
			return nil, fmt.Errorf("%s=%q: want comma-separated %s", key, v, want)
		}
		out[i] = x
	}
	return out, nil
}

func (p *Preprocessing) scale() float64 {
	if p.Scale == 0 {
		return 1
	}
	return p.Scale
}

// channel returns the mean and std of channel c of channels.
func (p *Preprocessing) channel(c, channels int) (mean, std float64, err error) {
	pick := func(v []float64, key string, def float64) (float64, error) {
		switch len(v) {
		case 0:
			return def, nil
		case 1:
			return v[0], nil
		case channels:
			return v[c], nil
		}
		return 0, fmt.Errorf("%s has %d values but the data has %d channels: give 1 or %d", key, len(v), channels, channels)
	}
	if mean, err = pick(p.Mean, KeyMean, 0); err != nil {
		return 0, 0, err
	}
	std, err = pick(p.Std, KeyStd, 1)
	return mean, std, err
}

// String formats p as its metadata props, in key order, omitting defaults;
// the vocabulary is quoted.
func (p Preprocessing) String() string {
	var b strings.Builder
	p.each(func(k, v string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		if k == KeyVocab {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(&b, "%s=%s", k, v)
	})
	return b.String()
}

// each calls f with each metadata key and value that describes p, in key
// order, omitting defaults (and the interpolation when nothing is
// resized).
func (p Preprocessing) each(f func(k, v string)) {
	floats := func(v []float64) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = strconv.FormatFloat(x, 'g', -1, 64)
		}
		return strings.Join(s, ",")
	}
	if p.Resize != nil {
		f(KeyResize, sizeString(p.Resize))
	}
	if p.Crop != nil {
		f(KeyCrop, sizeString(p.Crop))
	}
	if p.Resize != nil && p.Interpolation != resize.Bilinear {
		f(KeyInterpolation, p.Interpolation.String())
	}
	if p.Scale != 0 {
		f(KeyScale, strconv.FormatFloat(p.Scale, 'g', -1, 64))
	}
	if p.Mean != nil {
		f(KeyMean, floats(p.Mean))
	}
	if p.Std != nil {
		f(KeyStd, floats(p.Std))
	}
	if p.Layout != "" {
		f(KeyLayout, string(p.Layout))
	}
	if p.DType != "" {
		f(KeyDType, string(p.DType))
	}
	if p.Vocab != "" {
		f(KeyVocab, p.Vocab)
	}
}

// hasInputKeys reports whether props hold any preprocessing key.
func hasInputKeys(props map[string]string) bool {
	return slices.ContainsFunc(inputKeys, func(k string) bool { _, ok := props[k]; return ok })
}
