package export

import (
	"errors"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/onnx"
)

// TestAppendClassNames checks the fedcalib.classes of a calibrated model:
// the calibrator file's names are written into a model without any
// (tiny_nometa.onnx), kept in one that agrees (tiny.onnx names
// zero,one,two), and refused with calib.ErrClassNames where they differ.
func TestAppendClassNames(t *testing.T) {
	for _, tt := range []struct {
		model string
		names []string
		want  string // the fedcalib.classes after Append; "" none
		err   string
	}{
		{"../infer/testdata/tiny_nometa.onnx", []string{"cat", "dog", "bird"}, "cat,dog,bird", ""},
		{"../infer/testdata/tiny_nometa.onnx", nil, "", ""},
		{"../infer/testdata/tiny_nometa.onnx", []string{"cat", "dog, wild", "bird"}, "", ""}, // no comma list holds them
		{"../infer/testdata/tiny.onnx", []string{"zero", "one", "two"}, "zero,one,two", ""},
		{"../infer/testdata/tiny.onnx", nil, "zero,one,two", ""},
		{"../infer/testdata/tiny.onnx", []string{"zero", "two", "one"}, "", `class names do not match: class 1 is "one" in the model's fedcalib.classes but "two" in the calibrator file`},
	} {
		m, err := onnx.ReadFile(tt.model)
		if err != nil {
			t.Fatal(err)
		}
		file := &calib.File{Provenance: calib.Provenance{ClassNames: tt.names}}
		_, _, err = Append(m, calib.NewTemperature(3), file, Options{})
		if tt.err != "" {
			if !errors.Is(err, calib.ErrClassNames) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s with %q: error %v, want calib.ErrClassNames and %q", tt.model, tt.names, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s with %q: %v", tt.model, tt.names, err)
		}
		if got, _ := m.MetadataValue(infer.KeyClasses); got != tt.want {
			t.Errorf("%s with %q: fedcalib.classes %q, want %q", tt.model, tt.names, got, tt.want)
		}
	}
}
