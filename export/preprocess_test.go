package export

import (
	"reflect"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/onnx"
)

// TestPreprocessMetadata checks the preprocessing keys Append writes:
// returned in key order, checked against the model's own keys merged
// with them, and refused when they are not infer's input keys.
func TestPreprocessMetadata(t *testing.T) {
	m, err := onnx.ReadFile("../infer/testdata/tiny.onnx") // layout NCHW, scale, mean, std, dtype
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		set     map[string]string
		want    []onnx.Prop
		wantErr string
	}{
		{set: nil},
		{
			set:  map[string]string{infer.KeyResize: "256", infer.KeyCrop: "224", infer.KeyInterpolation: "bicubic"},
			want: []onnx.Prop{{Key: infer.KeyCrop, Value: "224"}, {Key: infer.KeyInterpolation, Value: "bicubic"}, {Key: infer.KeyResize, Value: "256"}},
		},
		{set: map[string]string{infer.KeyLayout: "NCHW"}, want: []onnx.Prop{{Key: infer.KeyLayout, Value: "NCHW"}}},
		{set: map[string]string{infer.KeyClasses: "a,b"}, wantErr: "not one of the fedcalib.input.* keys"},
		{set: map[string]string{"fedcalib.calibration.method": "temp"}, wantErr: "not one of the fedcalib.input.* keys"},
		{set: map[string]string{infer.KeyCrop: "0"}, wantErr: infer.KeyCrop},
		{set: map[string]string{infer.KeyLayout: "CHWN"}, wantErr: infer.KeyLayout},
	} {
		got, err := preprocessMetadata(m, tc.set)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: error %v, want one naming %q", tc.set, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v: %v, %v; want %v", tc.set, got, err, tc.want)
		}
	}
}
