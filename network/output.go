package network

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/internal/fileio"
)

// WriteCalibrator writes the calibrator of a finished run to path as a
// calibrator file (calib.Encode) with its privacy record and, in the
// file's "rounds", the record of every round; atomically, so that a
// failed write leaves nothing behind.
func WriteCalibrator(path string, o *Outcome, prov calib.Provenance) error {
	var buf bytes.Buffer
	if err := calib.Encode(&buf, o.Result.Calibrator, o.Result.Privacy, prov); err != nil {
		return err
	}
	var f calib.File
	if err := json.Unmarshal(buf.Bytes(), &f); err != nil {
		return fmt.Errorf("re-reading the encoded calibrator: %w", err)
	}
	f.Rounds = o.Rounds
	b, err := json.MarshalIndent(&f, "", "  ")
	if err != nil {
		return err
	}
	return fileio.Write(path, append(b, '\n'))
}
