package infer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/fedcalib/fedcalib/infer/resize"
)

// ImageNet's per-channel pixel mean and standard deviation (RGB, pixels
// scaled to [0, 1]), as torchvision's and timm's ImageNet models expect.
var (
	imageNetMean = []float64{0.485, 0.456, 0.406}
	imageNetStd  = []float64{0.229, 0.224, 0.225}
)

// presets are the named preprocessing presets, as metadata props.
var presets = map[string]Preprocessing{
	// torchvision's ImageNet evaluation: Resize(256) + CenterCrop(224) +
	// ToTensor + Normalize(ImageNet mean and std), channel-first.
	"imagenet": {
		Resize: []int{256}, Crop: []int{224}, Interpolation: resize.Bilinear,
		Scale: 1.0 / 255, Mean: imageNetMean, Std: imageNetStd, Layout: NCHW,
	},
}

// PresetNames lists the preset names Preset knows, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Preset returns the metadata props of a named preprocessing preset, with
// defaults written out so that they override a model's own values:
// "imagenet" is torchvision's ImageNet evaluation transform, resize 256
// bilinear, crop 224, scale 1/255, ImageNet mean and std, NCHW.
func Preset(name string) (map[string]string, error) {
	p, ok := presets[strings.ToLower(strings.TrimSpace(name))]
	if !ok {
		return nil, fmt.Errorf("preprocessing preset %q: want one of %s", name, strings.Join(PresetNames(), ", "))
	}
	return imageProps(p), nil
}

// imageProps returns the props of an image preprocessing with its
// defaults written out (interpolation, scale, mean, std), so that, as
// overrides (Options.Preprocess), they replace a model's own values.
func imageProps(p Preprocessing) map[string]string {
	props := p.Props()
	props[KeyInterpolation] = p.Interpolation.String()
	for k, v := range map[string]string{KeyScale: "1", KeyMean: "0", KeyStd: "1"} {
		if _, ok := props[k]; !ok {
			props[k] = v
		}
	}
	return props
}

// Props returns p as the metadata props ParsePreprocessing reads back to
// p, omitting defaults (and the interpolation, when nothing is resized).
func (p Preprocessing) Props() map[string]string {
	props := map[string]string{}
	p.each(func(k, v string) { props[k] = v })
	return props
}

// ReadConfig reads the image preprocessing of a pretrained model's config
// file, as metadata props: a Hugging Face preprocessor_config.json or a
// timm pretrained_cfg (alone, or under "pretrained_cfg" in a model's
// config.json). See ParseConfig.
func ReadConfig(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	props, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return props, nil
}

// ParseConfig reads the image preprocessing of a pretrained model's
// config, as metadata props (layout NCHW; defaults written out, so that
// they override a model's own values):
//
//   - Hugging Face (an image_mean, size or do_resize key): size
//     {"shortest_edge": S} resizes the shorter side to S, {"height": H,
//     "width": W} to H×W, and a bare number S the shorter side when the
//     config center-crops, else to S×S; with crop_pct (ConvNeXT), a
//     shortest edge S < 384 is resized to ⌊S/crop_pct⌋ and cropped to S.
//     resample is PIL's filter number (default bilinear); do_center_crop
//     with crop_size crops; do_rescale with rescale_factor (default
//     1/255) scales; do_normalize with image_mean and image_std
//     normalises. A false do_* key turns its stage off.
//   - timm (an input_size key): input_size [C, H, W] with H = W, crop_pct
//     (default 0.875) and crop_mode center (the default) resize the
//     shorter side to ⌊H/crop_pct⌋ and crop H×H, as timm's evaluation
//     transform does; interpolation names the filter; mean and std
//     normalise pixels scaled by 1/255.
func ParseConfig(b []byte) (map[string]string, error) {
	var top map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&top); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if nested, ok := top["pretrained_cfg"]; ok {
		if err := json.Unmarshal(nested, &top); err != nil {
			return nil, fmt.Errorf("pretrained_cfg: %w", err)
		}
	}
	var (
		p   Preprocessing
		err error
	)
	switch {
	case has(top, "input_size"):
		err = timmConfig(top, &p)
	case has(top, "image_mean") || has(top, "size") || has(top, "do_resize"):
		err = hfConfig(top, &p)
	default:
		return nil, fmt.Errorf("neither a Hugging Face preprocessor config (image_mean, size) nor a timm pretrained_cfg (input_size)")
	}
	if err != nil {
		return nil, err
	}
	p.Layout = NCHW
	return imageProps(p), nil
}

func has(m map[string]json.RawMessage, k string) bool { _, ok := m[k]; return ok }

// field decodes m[k] into v when present, reporting whether it was.
func field(m map[string]json.RawMessage, k string, v any) (bool, error) {
	raw, ok := m[k]
	if !ok || string(raw) == "null" {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("%s: %w", k, err)
	}
	return true, nil
}

// enabled reads a do_* switch, true when absent.
func enabled(m map[string]json.RawMessage, k string) (bool, error) {
	on := true
	_, err := field(m, k, &on)
	return on, err
}

// hfSize is a Hugging Face size: a number, or an object.
type hfSize struct {
	n                                int
	shortest, longest, height, width int
}

func (s *hfSize) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &s.n); err == nil {
		return nil
	}
	var d struct {
		Shortest int `json:"shortest_edge"`
		Longest  int `json:"longest_edge"`
		Height   int `json:"height"`
		Width    int `json:"width"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("want a number or {shortest_edge} or {height, width}")
	}
	s.shortest, s.longest, s.height, s.width = d.Shortest, d.Longest, d.Height, d.Width
	return nil
}

func hfConfig(m map[string]json.RawMessage, p *Preprocessing) error {
	cropOn, err := enabled(m, "do_center_crop")
	if err != nil {
		return err
	}
	if _, ok := m["do_center_crop"]; !ok {
		cropOn = has(m, "crop_size")
	}
	if cropOn {
		var c hfSize
		ok, err := field(m, "crop_size", &c)
		if err != nil {
			return err
		}
		switch {
		case !ok:
			return fmt.Errorf("do_center_crop is true but crop_size is missing")
		case c.n > 0:
			p.Crop = []int{c.n}
		case c.height > 0 && c.width > 0:
			p.Crop = []int{c.height, c.width}
		default:
			return fmt.Errorf("crop_size: want a number or {height, width}")
		}
	}
	resizeOn, err := enabled(m, "do_resize")
	if err != nil {
		return err
	}
	var s hfSize
	if ok, err := field(m, "size", &s); err != nil {
		return err
	} else if resizeOn && ok {
		var cropPct float64
		if _, err := field(m, "crop_pct", &cropPct); err != nil {
			return err
		}
		switch {
		case s.longest > 0:
			return fmt.Errorf("size: longest_edge (aspect-preserving resizing without a crop) is not supported; give --resize and --crop")
		case s.shortest > 0 && cropPct > 0 && s.shortest < 384: // ConvNeXT
			p.Resize, p.Crop = []int{int(float64(s.shortest) / cropPct)}, []int{s.shortest}
		case s.shortest > 0 && cropPct > 0:
			p.Resize = []int{s.shortest, s.shortest}
		case s.shortest > 0:
			p.Resize = []int{s.shortest}
		case s.height > 0 && s.width > 0:
			p.Resize = []int{s.height, s.width}
		case s.n > 0 && cropOn:
			p.Resize = []int{s.n}
		case s.n > 0:
			p.Resize = []int{s.n, s.n}
		default:
			return fmt.Errorf("size: want a number, {shortest_edge} or {height, width}")
		}
		var code int
		if ok, err := field(m, "resample", &code); err != nil {
			return err
		} else if ok {
			if p.Interpolation, err = resize.PILFilter(code); err != nil {
				return fmt.Errorf("resample: %w", err)
			}
		}
	}
	if on, err := enabled(m, "do_rescale"); err != nil {
		return err
	} else if on {
		p.Scale = 1.0 / 255
		if _, err := field(m, "rescale_factor", &p.Scale); err != nil {
			return err
		}
	}
	if on, err := enabled(m, "do_normalize"); err != nil {
		return err
	} else if on {
		if _, err := field(m, "image_mean", &p.Mean); err != nil {
			return err
		}
		if _, err := field(m, "image_std", &p.Std); err != nil {
			return err
		}
	}
	return nil
}

func timmConfig(m map[string]json.RawMessage, p *Preprocessing) error {
	var size []int
	if _, err := field(m, "input_size", &size); err != nil {
		return err
	}
	if len(size) != 3 || size[1] <= 0 || size[2] <= 0 {
		return fmt.Errorf("input_size %v: want [channels, height, width]", size)
	}
	if size[1] != size[2] {
		return fmt.Errorf("input_size %v: timm resizes non-square inputs its own way (ResizeKeepRatio), which is not supported; give --resize and --crop", size)
	}
	mode := "center"
	if _, err := field(m, "crop_mode", &mode); err != nil {
		return err
	}
	if mode != "center" {
		return fmt.Errorf("crop_mode %q: only center is supported", mode)
	}
	cropPct := 0.875 // timm's DEFAULT_CROP_PCT
	if _, err := field(m, "crop_pct", &cropPct); err != nil {
		return err
	}
	if !(cropPct > 0 && cropPct <= 1) {
		return fmt.Errorf("crop_pct %v: want a fraction in (0, 1]", cropPct)
	}
	p.Resize = []int{int(math.Floor(float64(size[1]) / cropPct))}
	p.Crop = []int{size[1]}
	interp := "bilinear"
	if _, err := field(m, "interpolation", &interp); err != nil {
		return err
	}
	var err error
	if p.Interpolation, err = resize.ParseFilter(interp); err != nil {
		return err
	}
	p.Scale = 1.0 / 255
	if _, err := field(m, "mean", &p.Mean); err != nil {
		return err
	}
	_, err = field(m, "std", &p.Std)
	return err
}
