package export

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/onnx"
)

// Metadata keys of the serving record that Append writes beside KeyMethod
// and the others (docs/SERVING.md lists them all). A key whose value is
// unknown, such as the rounds of a central fit, is not written.
const (
	// KeyParamsSHA256 is the hex SHA-256 of the calibrator's parameters
	// in canonical JSON (see ParamsSHA256).
	KeyParamsSHA256 = "fedcalib.calibration.params_sha256"
	// KeyKeepsTopClass is "true" when the calibrator keeps the most
	// probable class: its method never changes it
	// (calib.Method.KeepsTopClass) and, measured on the probe set (see
	// KeepsTopClass), this calibrator's float32 probabilities keep it on
	// every row; "false" otherwise.
	KeyKeepsTopClass = "fedcalib.calibration.keeps_top_class"
	// KeyProtocol is the protocol of the fit (provenance.protocol of the
	// calibrator file): "central", "FedBBQ", ...
	KeyProtocol = "fedcalib.calibration.protocol"
	// KeyClients is the number of clients K of a federated fit
	// (provenance.clients).
	KeyClients = "fedcalib.calibration.clients"
	// KeyRounds is the number of rounds T of a federated fit: privacy.rounds
	// of a private fit, else the rounds a network coordinator recorded.
	KeyRounds = "fedcalib.calibration.rounds"
	// KeyAccountant is the privacy accountant of a private fit, "zcdp" or
	// "rdp" (privacy.accountant), beside KeyEpsilon and KeyDelta.
	KeyAccountant = "fedcalib.calibration.accountant"
	// KeyFitMetrics holds, as compact JSON, the calibration rows' metrics
	// before and after calibration that calibrate recorded
	// (provenance.fit_metrics: {"rows", "before", "after"}, each metric
	// set as `fedcalib eval --json` names it).
	KeyFitMetrics = "fedcalib.calibration.fit_metrics"
)

// ParamsSHA256 returns the hex SHA-256 of c's parameters (the "params"
// object of its calibrator file) in canonical JSON: keys sorted, no
// white space, numbers in their shortest round-trip form, as RFC 8785
// (JCS) writes them. Two calibrators with the same parameters have the
// same hash, whatever file or model holds them.
func ParamsSHA256(c calib.Calibrator) (string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("%s calibrator parameters: %w", c.Method(), err)
	}
	canon, err := canonicalJSON(b)
	if err != nil {
		return "", fmt.Errorf("%s calibrator parameters: %w", c.Method(), err)
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// canonicalJSON re-encodes the JSON value b with object keys sorted, no
// white space and no HTML escaping; numbers keep the text encoding/json
// gave them, which for float64 values is ECMAScript's shortest form.
func canonicalJSON(b []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// servingMetadata returns the serving record of calibrator c, described
// by file (which may be nil): the Key* entries other than those Append
// writes itself, in a fixed order, each only when known.
func servingMetadata(c calib.Calibrator, file *calib.File, seed uint64) ([]onnx.Prop, error) {
	method, err := calib.LookupMethod(c.Method())
	if err != nil {
		return nil, err
	}
	sum, err := ParamsSHA256(c)
	if err != nil {
		return nil, err
	}
	props := []onnx.Prop{
		{Key: KeyParamsSHA256, Value: sum},
		{Key: KeyKeepsTopClass, Value: strconv.FormatBool(method.KeepsTopClass && KeepsTopClass(c, Probe(c, seed)) < 0)},
	}
	if file == nil {
		return props, nil
	}
	add := func(key, value string, known bool) {
		if known {
			props = append(props, onnx.Prop{Key: key, Value: value})
		}
	}
	prov, priv := file.Provenance, file.Privacy
	add(KeyProtocol, prov.Protocol, prov.Protocol != "")
	add(KeyClients, strconv.Itoa(prov.Clients), prov.Clients > 0)
	switch {
	case priv != nil:
		add(KeyRounds, strconv.Itoa(priv.Rounds), true)
	default:
		add(KeyRounds, strconv.Itoa(len(file.Rounds)), len(file.Rounds) > 0)
	}
	if priv != nil {
		add(KeyAccountant, priv.Accountant, true)
	}
	if fm := prov.FitMetrics; fm != nil {
		b, err := json.Marshal(fm)
		if err != nil {
			return nil, err
		}
		add(KeyFitMetrics, string(b), true)
	}
	return props, nil
}

// KeepsTopClass applies c to the rows of logits z and returns the first
// row whose top class its probabilities, rounded to float32 as a served
// model gives them, do not keep, or −1 when every row keeps it. A row
// keeps its top class when the calibrated probability of the logits'
// largest class is strictly larger than every other: a tie at the top
// counts as a change (a reader taking the first maximum may pick
// another class). Rows whose largest logit is itself tied have no top
// class and are skipped.
func KeepsTopClass(c calib.Calibrator, z []float32) int {
	k := c.Classes()
	zz := make([]float64, len(z))
	for i, v := range z {
		zz[i] = float64(v)
	}
	p := make([]float64, len(zz))
	c.Predict(p, zz)
	for r := 0; r < len(z)/k; r++ {
		top, tied := 0, false
		row := z[r*k : (r+1)*k]
		for j, v := range row {
			switch {
			case v > row[top]:
				top, tied = j, false
			case j != top && v == row[top]:
				tied = true
			}
		}
		if tied {
			continue
		}
		pt := float32(p[r*k+top])
		for j := range k {
			if j != top && !(float32(p[r*k+j]) < pt) {
				return r
			}
		}
	}
	return -1
}
