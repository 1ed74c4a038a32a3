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
	// KeyKeepsTopClass is "true" when the method never changes the most
	// probable class (calib.Method.KeepsTopClass), "false" when it may.
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
func servingMetadata(c calib.Calibrator, file *calib.File) ([]onnx.Prop, error) {
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
		{Key: KeyKeepsTopClass, Value: strconv.FormatBool(method.KeepsTopClass)},
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
