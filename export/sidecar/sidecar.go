// Package sidecar applies a fedcalib calibrator file to logits at serving
// time, so a Go server can calibrate a model's outputs without ONNX.
//
// The file is the versioned JSON of package calib (SPEC §3; schema in
// docs/SIDECAR.md): "format" is "fedcalib.calibrator/v1", "method" names
// the calibrator, "classes" the number of classes, "params" its numbers,
// and "privacy" and "provenance" how it was made. Unknown future versions
// are refused.
//
// A Calibrator is safe for concurrent use.
package sidecar

import (
	"fmt"
	"io"

	"github.com/fedcalib/fedcalib/calib"
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

// Apply returns the calibrated probabilities of logits, a batch of rows of
// Classes() float32 values each (row-major), as float32. It returns an
// error when the length is not a multiple of Classes() or a logit is not
// finite.
func (s *Calibrator) Apply(logits []float32) ([]float32, error) {
	k := s.c.Classes()
	if len(logits)%k != 0 {
		return nil, fmt.Errorf("sidecar: %d logits do not make rows of %d classes", len(logits), k)
	}
	z := make([]float64, len(logits))
	for i, v := range logits {
		z[i] = float64(v)
	}
	labels := make([]int, len(z)/k) // Validate checks the logits only
	if err := (&calib.Set{Logits: z, Labels: labels, Classes: k}).Validate(); err != nil {
		return nil, fmt.Errorf("sidecar: %w", err)
	}
	p := make([]float64, len(z))
	s.c.Predict(p, z)
	out := make([]float32, len(p))
	for i, v := range p {
		out[i] = float32(v)
	}
	return out, nil
}
