package calib

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/fedcalib/fedcalib/internal/fileio"
)

// FormatV1 is the format tag of version 1 of the calibrator sidecar file.
const FormatV1 = "fedcalib.calibrator/v1"

// File is the calibrator sidecar file (SPEC §3): versioned JSON holding the
// method, the number of classes, the method's parameters (numbers only),
// and how the calibrator was made.
type File struct {
	// Format is always FormatV1 for files this version writes.
	Format string `json:"format"`
	// Method is the calibrator's Method().
	Method string `json:"method"`
	// Classes is the number of classes.
	Classes int `json:"classes"`
	// Params holds the method's parameters as JSON; its schema is the
	// exported fields of the calibrator type.
	Params json.RawMessage `json:"params"`
	// Privacy describes the differential privacy of the fit; nil when the
	// fit was not private.
	Privacy *Privacy `json:"privacy,omitempty"`
	// Provenance records where the calibrator came from.
	Provenance Provenance `json:"provenance"`
}

// Privacy records the differential-privacy parameters of a private fit.
// The zero value means "not recorded".
type Privacy struct {
	Epsilon    float64 `json:"epsilon"`               // ε spent
	Delta      float64 `json:"delta"`                 // δ
	Rho        float64 `json:"rho"`                   // zCDP ρ
	Sigma      float64 `json:"sigma"`                 // noise standard deviation per round
	Clip       float64 `json:"clip,omitempty"`        // L2 clip norm C (scaling)
	ClipPos    float64 `json:"clip_pos,omitempty"`    // C₊ (binning)
	ClipNeg    float64 `json:"clip_neg,omitempty"`    // C₋ (binning)
	Accountant string  `json:"accountant"`            // "zcdp" or "rdp"
	Rounds     int     `json:"rounds"`                // T
	SampleRate float64 `json:"sample_rate,omitempty"` // p
}

// Provenance records how a calibrator was made. Every field is optional.
type Provenance struct {
	ModelSHA256 string `json:"model_sha256,omitempty"` // of the ONNX model
	Data        string `json:"data,omitempty"`         // description of the data
	Protocol    string `json:"protocol,omitempty"`     // e.g. "central", "FedBBQ"
	Weighting   string `json:"weighting,omitempty"`    // none, all or changed
	Clients     int    `json:"clients,omitempty"`      // K
	Seed        int64  `json:"seed"`                   // random seed
	Tool        string `json:"tool,omitempty"`         // fedcalib version
}

// Encode writes c as a version-1 sidecar file to w.
func Encode(w io.Writer, c Calibrator, priv *Privacy, prov Provenance) error {
	params, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode %s calibrator: %w", c.Method(), err)
	}
	f := File{Format: FormatV1, Method: c.Method(), Classes: c.Classes(), Params: params, Privacy: priv, Provenance: prov}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(&f)
}

// WriteFile writes c as a sidecar file at path atomically: it writes a
// temporary file in the same directory and renames it.
func WriteFile(path string, c Calibrator, priv *Privacy, prov Provenance) error {
	var buf bytes.Buffer
	if err := Encode(&buf, c, priv, prov); err != nil {
		return err
	}
	return fileio.Write(path, buf.Bytes())
}

// Decode reads a sidecar file from r and returns the calibrator it holds,
// with the file's metadata. It refuses unknown format versions and methods,
// and parameters that do not fit the declared number of classes.
func Decode(r io.Reader) (Calibrator, *File, error) {
	var f File
	dec := json.NewDecoder(r)
	if err := dec.Decode(&f); err != nil {
		return nil, nil, fmt.Errorf("not a calibrator file: %w", err)
	}
	if f.Format != FormatV1 {
		return nil, nil, fmt.Errorf("unsupported calibrator format %q: this fedcalib reads %q; upgrade fedcalib or refit the calibrator", f.Format, FormatV1)
	}
	c, err := newByMethod(f.Method)
	if err != nil {
		return nil, nil, err
	}
	if len(f.Params) == 0 {
		return nil, nil, fmt.Errorf("calibrator file has no \"params\"")
	}
	pdec := json.NewDecoder(bytes.NewReader(f.Params))
	pdec.DisallowUnknownFields()
	if err := pdec.Decode(c); err != nil {
		return nil, nil, fmt.Errorf("%s parameters: %w", f.Method, err)
	}
	if v, ok := c.(interface{ validate() error }); ok {
		if err := v.validate(); err != nil {
			return nil, nil, fmt.Errorf("%s parameters: %w", f.Method, err)
		}
	}
	if c.Classes() != f.Classes {
		return nil, nil, fmt.Errorf("%s parameters are for %d classes but the file declares %d", f.Method, c.Classes(), f.Classes)
	}
	return c, &f, nil
}

// ReadFile reads the sidecar file at path; see Decode.
func ReadFile(path string) (Calibrator, *File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer fh.Close()
	c, f, err := Decode(fh)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, f, nil
}
