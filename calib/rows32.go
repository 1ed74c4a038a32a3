package calib

import (
	"fmt"
	"math"
)

// Float32Rows are labelled float32 logits read in place — the block of a
// logits file — instead of copied into a Set's float64 rows: a fit that
// takes them needs no memory per row beyond the selection. The zero value
// holds no rows.
type Float32Rows struct {
	// Logits holds every row of the block, Classes values each,
	// row-major.
	Logits []float32
	// Labels holds the class of every row of the block, in [0, Classes).
	Labels []int32
	// Rows lists the rows to use, in order; nil means every row of the
	// block.
	Rows []int
	// Classes is the number of classes.
	Classes int
}

// Len returns the number of rows used.
func (r *Float32Rows) Len() int {
	if r.Rows != nil {
		return len(r.Rows)
	}
	return len(r.Labels)
}

// Validate reports the first problem that Set.Validate would report of
// the used rows: fewer than 2 classes, lengths that do not match, a row
// index outside the block, a logit that is not finite or a label outside
// [0, Classes).
func (r *Float32Rows) Validate() error {
	c := r.Classes
	if c < 2 {
		return fmt.Errorf("need at least 2 classes, have %d", c)
	}
	if len(r.Logits) != len(r.Labels)*c {
		return fmt.Errorf("have %d logits for %d labels and %d classes: lengths do not match", len(r.Logits), len(r.Labels), c)
	}
	for k := range r.Len() {
		i := k
		if r.Rows != nil {
			i = r.Rows[k]
			if i < 0 || i >= len(r.Labels) {
				return fmt.Errorf("row %d of the selection is %d, outside the %d rows", k, i, len(r.Labels))
			}
		}
		for j, v := range r.Logits[i*c : (i+1)*c] {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("logit of example %d, class %d is %v: logits must be finite", i, j, v)
			}
		}
		if y := r.Labels[i]; y < 0 || int(y) >= c {
			return fmt.Errorf("label of example %d is %d, outside [0, %d)", i, y, c)
		}
	}
	return nil
}

// Float32Fitter is the optional capability of a calibrator that fits
// Float32Rows in place. FitFloat32 gives the calibrator that Fit gives on
// the Set holding the same rows converted to float64, bit for bit.
// Temperature, ScalingBinning and Isotonic implement it.
type Float32Fitter interface {
	FitFloat32(r *Float32Rows) error
}
