package infer

import (
	"maps"
	"strings"
	"testing"
)

func TestPreset(t *testing.T) {
	got, err := Preset("ImageNet")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		KeyResize: "256", KeyCrop: "224", KeyScale: "0.00392156862745098",
		KeyMean: "0.485,0.456,0.406", KeyStd: "0.229,0.224,0.225", KeyLayout: "NCHW",
		KeyInterpolation: "bilinear",
	}
	if !maps.Equal(got, want) {
		t.Errorf("Preset(imagenet) = %v, want %v", got, want)
	}
	if _, err := Preset("cifar"); err == nil || !strings.Contains(err.Error(), `preset "cifar": want one of imagenet`) {
		t.Errorf("Preset(cifar) = %v", err)
	}
}

func TestParseConfig(t *testing.T) {
	const imagenet = KeyMean + "=0.485,0.456,0.406 " + KeyStd + "=0.229,0.224,0.225 "
	for _, tc := range []struct {
		name, json string
		want       string // metadata props, space-separated k=v
	}{
		{"hf resnet", `{"crop_pct": 0.875, "do_normalize": true, "do_rescale": true, "do_resize": true,
			"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225],
			"image_processor_type": "ConvNextImageProcessor", "resample": 3, "rescale_factor": 0.00392156862745098,
			"size": {"shortest_edge": 224}}`,
			// ConvNeXT: ⌊224/0.875⌋ = 256, then the 224 crop.
			KeyResize + "=256 " + KeyCrop + "=224 " + KeyInterpolation + "=bicubic " + imagenet},
		{"hf vit", `{"do_normalize": true, "do_resize": true, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
			"resample": 2, "rescale_factor": 0.00392156862745098, "size": {"height": 224, "width": 224}}`,
			KeyResize + "=224,224 " + KeyMean + "=0.5,0.5,0.5 " + KeyStd + "=0.5,0.5,0.5"},
		{"hf clip", `{"crop_size": {"height": 224, "width": 224}, "do_center_crop": true, "resample": 3,
			"size": {"shortest_edge": 224}, "image_mean": [0.4815, 0.4578, 0.4082], "image_std": [0.2686, 0.2613, 0.2758]}`,
			KeyResize + "=224 " + KeyCrop + "=224,224 " + KeyInterpolation + "=bicubic " + KeyMean + "=0.4815,0.4578,0.4082 " + KeyStd + "=0.2686,0.2613,0.2758"},
		{"hf old ints", `{"size": 256, "crop_size": 224, "do_center_crop": true, "do_normalize": false, "resample": 0}`,
			KeyResize + "=256 " + KeyCrop + "=224 " + KeyInterpolation + "=nearest"},
		{"hf no rescale", `{"size": 32, "do_rescale": false, "image_mean": [0.5], "image_std": [0.25]}`,
			KeyResize + "=32,32 " + KeyMean + "=0.5 " + KeyStd + "=0.25 " + KeyScale + "=1"},
		{"timm resnet50", `{"input_size": [3, 224, 224], "interpolation": "bicubic", "crop_pct": 0.95, "crop_mode": "center",
			"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "num_classes": 1000}`,
			// ⌊224/0.95⌋ = ⌊235.79⌋ = 235.
			KeyResize + "=235 " + KeyCrop + "=224 " + KeyInterpolation + "=bicubic " + imagenet},
		{"timm nested, defaults", `{"architecture": "resnet18", "pretrained_cfg": {"input_size": [3, 288, 288],
			"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}}`,
			// crop_pct 0.875: ⌊288/0.875⌋ = 329.
			KeyResize + "=329 " + KeyCrop + "=288 " + KeyMean + "=0.5,0.5,0.5 " + KeyStd + "=0.5,0.5,0.5"},
	} {
		got, err := ParseConfig([]byte(tc.json))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		want := map[string]string{KeyLayout: "NCHW", KeyScale: "0.00392156862745098",
			KeyInterpolation: "bilinear", KeyMean: "0", KeyStd: "1"}
		for _, kv := range strings.Fields(tc.want) {
			k, v, _ := strings.Cut(kv, "=")
			want[k] = v
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: %v, want %v", tc.name, got, want)
		}
		if _, err := ParsePreprocessing(got); err != nil {
			t.Errorf("%s: props do not parse: %v", tc.name, err)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`[1]`, "not a JSON object"},
		{`{"num_labels": 3}`, "neither a Hugging Face preprocessor config"},
		{`{"size": {"shortest_edge": 800, "longest_edge": 1333}}`, "longest_edge"},
		{`{"size": 224, "resample": 9}`, "resample: PIL resampling filter 9"},
		{`{"do_center_crop": true, "size": 256}`, "crop_size is missing"},
		{`{"input_size": [3, 224, 320]}`, "ResizeKeepRatio"},
		{`{"input_size": [3, 224, 224], "crop_mode": "squash"}`, `crop_mode "squash"`},
		{`{"input_size": [3, 224, 224], "crop_pct": 1.5}`, "crop_pct 1.5"},
		{`{"input_size": [3, 224, 224], "interpolation": "random"}`, `interpolation "random"`},
		{`{"input_size": "224"}`, "input_size"},
	} {
		_, err := ParseConfig([]byte(tc.json))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%s) = %v, want an error containing %q", tc.json, err, tc.want)
		}
	}
}
