package export

import (
	"fmt"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/onnx"
)

// classNamesMetadata checks the class names of the calibrator file (its
// provenance.class_names; file may be nil) against model m's
// fedcalib.classes, when both name the classes: a difference in number
// or order is an error wrapping calib.ErrClassNames. It returns the
// fedcalib.classes entry that Append adds when the calibrator names the
// classes and the model does not, and the names fit a comma list
// (infer.JoinClassNames); otherwise none.
func classNamesMetadata(m *onnx.Model, file *calib.File) ([]onnx.Prop, error) {
	if file == nil || len(file.Provenance.ClassNames) == 0 {
		return nil, nil
	}
	names := file.Provenance.ClassNames
	v, _ := m.MetadataValue(infer.KeyClasses)
	if model := infer.SplitClassNames(v); model != nil {
		return nil, calib.MatchClassNames("the model's "+infer.KeyClasses, model, "the calibrator file", names)
	}
	if v, ok := infer.JoinClassNames(names); ok {
		return []onnx.Prop{{Key: infer.KeyClasses, Value: v}}, nil
	}
	return nil, nil
}

// CheckClassNames reports whether the class names of the calibrator file
// (provenance.class_names; file may be nil) agree with the
// fedcalib.classes of the model at modelPath, as Append checks them: for
// a sidecar, which leaves the model as it is. The error wraps
// calib.ErrClassNames when both name the classes differently.
func CheckClassNames(modelPath string, file *calib.File) error {
	m, err := onnx.ReadFile(modelPath)
	if err != nil {
		return err
	}
	if _, err := classNamesMetadata(m, file); err != nil {
		return fmt.Errorf("%s: %w", modelPath, err)
	}
	return nil
}
