package infer

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/infer/resize"
)

func TestParsePreprocessing(t *testing.T) {
	for _, tc := range []struct {
		props map[string]string
		want  Preprocessing
	}{
		{nil, Preprocessing{}},
		{map[string]string{"other": "x"}, Preprocessing{}},
		{map[string]string{
			KeyScale: "0.00392156862745098", KeyMean: "0.485, 0.456,0.406", KeyStd: "0.229,0.224,0.225",
			KeyLayout: "nchw", KeyDType: "Float32",
		}, Preprocessing{Scale: 1.0 / 255, Mean: []float64{0.485, 0.456, 0.406}, Std: []float64{0.229, 0.224, 0.225}, Layout: NCHW, DType: Float32}},
		{map[string]string{KeyLayout: "NHWC", KeyMean: "-1"}, Preprocessing{Layout: NHWC, Mean: []float64{-1}}},
		{map[string]string{KeyDType: "int64", KeyVocab: " abc", KeyLayout: "NC"}, Preprocessing{DType: Int64, Vocab: " abc", Layout: NC}},
		{map[string]string{KeyVocab: "ab"}, Preprocessing{Vocab: "ab"}},
		{map[string]string{KeyResize: "256", KeyCrop: "224", KeyInterpolation: "BICUBIC"},
			Preprocessing{Resize: []int{256}, Crop: []int{224}, Interpolation: resize.Bicubic}},
		{map[string]string{KeyResize: " 300, 400", KeyCrop: "7,9", KeyInterpolation: "nearest"},
			Preprocessing{Resize: []int{300, 400}, Crop: []int{7, 9}, Interpolation: resize.Nearest}},
	} {
		got, err := ParsePreprocessing(tc.props)
		if err != nil {
			t.Errorf("ParsePreprocessing(%v): %v", tc.props, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParsePreprocessing(%v) = %+v, want %+v", tc.props, got, tc.want)
		}
	}
}

func TestParsePreprocessingErrors(t *testing.T) {
	for _, tc := range []struct {
		props map[string]string
		want  string
	}{
		{map[string]string{KeyScale: "0"}, `fedcalib.input.scale="0": want a finite non-zero number`},
		{map[string]string{KeyScale: "NaN"}, "fedcalib.input.scale"},
		{map[string]string{KeyScale: "1/255"}, "fedcalib.input.scale"},
		{map[string]string{KeyMean: "0.5,,0.5"}, `fedcalib.input.mean="0.5,,0.5": want comma-separated finite numbers`},
		{map[string]string{KeyStd: "0.5,0"}, `fedcalib.input.std="0.5,0": want comma-separated positive numbers`},
		{map[string]string{KeyStd: "Inf"}, "fedcalib.input.std"},
		{map[string]string{KeyLayout: "CHW"}, `fedcalib.input.layout="CHW": want NCHW, NHWC or NC`},
		{map[string]string{KeyDType: "float16"}, `fedcalib.input.dtype="float16": want float32 or int64`},
		{map[string]string{KeyVocab: "abc", KeyDType: "float32"}, "a vocabulary needs int64 input"},
		{map[string]string{KeyVocab: "aba", KeyDType: "int64"}, `character 'a' appears twice`},
		{map[string]string{KeyVocab: "", KeyDType: "int64"}, "fedcalib.input.vocab is empty"},
		{map[string]string{KeyResize: "0"}, `fedcalib.input.resize="0": want S or H,W, sizes from 1 to 16384`},
		{map[string]string{KeyResize: "1,2,3"}, `fedcalib.input.resize="1,2,3": want S or H,W`},
		{map[string]string{KeyCrop: "224x224"}, `fedcalib.input.crop="224x224"`},
		{map[string]string{KeyCrop: "99999"}, `fedcalib.input.crop="99999"`},
		{map[string]string{KeyInterpolation: "area"}, `fedcalib.input.interpolation: interpolation "area": want one of bilinear, nearest, bicubic, box, hamming, lanczos`},
	} {
		_, err := ParsePreprocessing(tc.props)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParsePreprocessing(%v) = %v, want an error containing %q", tc.props, err, tc.want)
		}
	}
}

// TestPreprocessingStringRoundTrip checks that String writes values that
// ParsePreprocessing reads back to the same Preprocessing.
func TestPreprocessingStringRoundTrip(t *testing.T) {
	for _, in := range []Preprocessing{
		{Scale: 1.0 / 255, Mean: []float64{0.1307}, Std: []float64{0.3081, 2}, Layout: NHWC, DType: Float32},
		{Resize: []int{232}, Crop: []int{224, 200}, Interpolation: resize.Lanczos, Layout: NCHW},
		{Vocab: "a b", DType: Int64},
	} {
		fromProps, err := ParsePreprocessing(in.Props())
		if err != nil || !reflect.DeepEqual(in, fromProps) {
			t.Errorf("Props round trip of %v gave %+v, %v", in, fromProps, err)
		}
		if in.Vocab != "" {
			continue // String quotes it
		}
		props := map[string]string{}
		for _, kv := range strings.Fields(in.String()) {
			k, v, _ := strings.Cut(kv, "=")
			props[k] = v
		}
		out, err := ParsePreprocessing(props)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(in, out) {
			t.Errorf("round trip of %v gave %+v", in, out)
		}
	}
}

func FuzzParsePreprocessing(f *testing.F) {
	f.Add("0.00392156862745098", "0.5", "0.25", "NCHW", "float32", "", "256", "224", "bilinear")
	f.Add("1", "0.485,0.456,0.406", "0.229,0.224,0.225", "NHWC", "", "", "300,400", "7,9", "Lanczos")
	f.Add("", "", "", "NC", "int64", " abc", "", "", "")
	f.Fuzz(func(t *testing.T, scale, mean, std, layout, dtype, vocab, rs, crop, interp string) {
		props := map[string]string{}
		for k, v := range map[string]string{KeyScale: scale, KeyMean: mean, KeyStd: std, KeyLayout: layout, KeyDType: dtype, KeyVocab: vocab,
			KeyResize: rs, KeyCrop: crop, KeyInterpolation: interp} {
			if v != "" {
				props[k] = v
			}
		}
		p, err := ParsePreprocessing(props)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("multi-line error %q", err)
			}
			return
		}
		for _, s := range p.Std {
			if !(s > 0) {
				t.Errorf("accepted std %v", s)
			}
		}
		switch p.Layout {
		case "", NCHW, NHWC, NC:
		default:
			t.Errorf("accepted layout %q", p.Layout)
		}
		if p.Vocab != "" && p.DType == Float32 {
			t.Errorf("accepted vocabulary with dtype %q", p.DType)
		}
		for _, size := range [][]int{p.Resize, p.Crop} {
			if len(size) > 2 || slices.ContainsFunc(size, func(n int) bool { return n < 1 || n > maxSide }) {
				t.Errorf("accepted size %v", size)
			}
		}
		if back, err := ParsePreprocessing(p.Props()); err != nil || !reflect.DeepEqual(back.Resize, p.Resize) || back.Interpolation != p.Interpolation && p.Resize != nil {
			t.Errorf("Props of %+v read back as %+v, %v", p, back, err)
		}
	})
}

func ExampleParsePreprocessing() {
	p, err := ParsePreprocessing(map[string]string{
		"fedcalib.input.scale":  "0.00392156862745098",
		"fedcalib.input.mean":   "0.1307",
		"fedcalib.input.std":    "0.3081",
		"fedcalib.input.layout": "NCHW",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// A pixel of value 255 in channel 0 becomes:
	fmt.Printf("%.4f\n", (255*p.Scale-p.Mean[0])/p.Std[0])
	fmt.Println(p.Layout, p.DType == "")
	// Output:
	// 2.8215
	// NCHW true
}
