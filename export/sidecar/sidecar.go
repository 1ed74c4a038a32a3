// Package sidecar applies a fedcalib calibrator file to logits at serving
// time, so a Go server can calibrate a model's outputs without ONNX.
//
// The file is the versioned JSON of package calib (SPEC §3; schema in
// docs/SIDECAR.md): "format" is "fedcalib.calibrator/v1", "method" names
// the calibrator, "classes" the number of classes, "params" its numbers,
// and "privacy" and "provenance" how it was made. Unknown future versions
// are refused. provenance.input says what Apply reads: the model's logits,
// or its probabilities (Calibrator.Input); Apply never returns a
// probability that is not finite. docs/sidecar_apply.py is the same
// applier in NumPy, written from docs/SIDECAR.md.
//
// A Calibrator is safe for concurrent use.
package sidecar

import (
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// Calibrator applies a calibrator file. The zero value is not usable; get
// one from Open or Load.
type Calibrator struct {
	c    calib.Calibrator
	file *calib.File
}

// Open reads the calibrator file at path.
func Open(path string) (*Calibrator, error) {
	c, f, err := calib.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return &Calibrator{c: c, file: f}, nil
}

// Load reads a calibrator file from r.
func Load(r io.Reader) (*Calibrator, error) {
	c, f, err := calib.Decode(r)
	if err != nil {
		return nil, err
	}
	return &Calibrator{c: c, file: f}, nil
}

// Classes returns the number of classes the calibrator expects.
func (s *Calibrator) Classes() int { return s.c.Classes() }

// Method returns the calibrator's method, e.g. "temp" or "bbq".
func (s *Calibrator) Method() string { return s.c.Method() }

// File returns the file's metadata (privacy, provenance). The caller must
// not modify it.
func (s *Calibrator) File() *calib.File { return s.file }

// Input returns what Apply reads: calib.InputLogits (the model's
// logits), or calib.InputProbabilities (the model's probabilities, of
// which the calibrator reads log max(p, 1e-12)), as the file's
// provenance.input records it; a file that records none reads logits.
func (s *Calibrator) Input() string {
	if s.file.Provenance.Input == calib.InputProbabilities {
		return calib.InputProbabilities
	}
	return calib.InputLogits
}

// Apply returns the calibrated probabilities of values, a batch of rows
// of Classes() float32 values each (row-major) holding what Input says:
// logits, or probabilities, each of which becomes log max(p, 1e-12) in
// float64 before the calibrator reads it. It returns an error when the
// length is not a multiple of Classes(), a logit is not finite, a row of
// probabilities is not a distribution (logits.ErrNotProbabilities), or
// a calibrated probability is not finite.
func (s *Calibrator) Apply(values []float32) ([]float32, error) {
	k := s.c.Classes()
	if len(values)%k != 0 {
		return nil, fmt.Errorf("sidecar: %d values do not make rows of %d classes", len(values), k)
	}
	z := make([]float64, len(values))
	for i, v := range values {
		z[i] = float64(v)
	}
	if s.Input() == calib.InputProbabilities {
		f := &logits.File{Classes: k, Logits: slices.Clone(values), Labels: make([]int32, len(values)/k)}
		if err := f.FromProbabilities(); err != nil {
			return nil, fmt.Errorf("sidecar: the calibrator reads probabilities: %w", err)
		}
		for i, p := range z {
			z[i] = math.Log(math.Max(p, logits.ProbabilityFloor))
		}
	}
	labels := make([]int, len(z)/k) // Validate checks the logits only
	if err := (&calib.Set{Logits: z, Labels: labels, Classes: k}).Validate(); err != nil {
		return nil, fmt.Errorf("sidecar: %w", err)
	}
	p := make([]float64, len(z))
	s.c.Predict(p, z)
	out := make([]float32, len(p))
	for i, v := range p {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("sidecar: the %s calibrator gives %v for row %d, class %d: the calibrator file is not usable", s.c.Method(), v, i/k, i%k)
		}
		out[i] = float32(v)
	}
	return out, nil
}
