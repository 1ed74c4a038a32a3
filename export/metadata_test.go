package export

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/onnx"
)

// sha256Hex is the hex SHA-256 of s.
func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestParamsSHA256 hashes parameters whose canonical JSON is written out
// by hand: keys sorted (temperature's "t" comes after "classes", though Go
// encodes it first), no spaces, 1e-7 as ECMAScript writes it.
func TestParamsSHA256(t *testing.T) {
	temp := calib.NewTemperature(3)
	temp.T = 1.5
	bin := &calib.Histogram{Bins: 2, Table: []float64{0.25, -1, 1e-7, 0.5}}
	weighted := &calib.Histogram{Bins: 2, Table: []float64{0.25, -1, 1e-7, 0.5}}
	if err := weighted.SetWeighting(calib.WeightAll, []float64{0.5, 1}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c     calib.Calibrator
		canon string
	}{
		{temp, `{"classes":3,"t":1.5}`},
		{bin, `{"bins":2,"table":[0.25,-1,1e-7,0.5]}`},
		{weighted, `{"alpha":[0.5,1],"bins":2,"table":[0.25,-1,1e-7,0.5],"weighting":"all"}`},
	} {
		got, err := ParamsSHA256(tc.c)
		if err != nil {
			t.Fatal(err)
		}
		if want := sha256Hex(tc.canon); got != want {
			t.Errorf("%s: %s, want sha256(%s) = %s", tc.c.Method(), got, tc.canon, want)
		}
	}
}

// TestServingMetadata appends calibrators described by calibrator files
// of each kind of fit to the tiny model and reads the serving record
// back from the serialised model. Whether the top class can change is
// written out from the list (binning, vector and matrix can;
// temp, opvector and fedcal cannot unless the fit collapses), not taken
// from the registry.
func TestServingMetadata(t *testing.T) {
	cals := fitted(t, 3)
	priv := privacyRecord(t, "temp", 3)
	for _, tc := range []struct {
		name string
		c    calib.Calibrator
		file *calib.File
		want map[string]string // "" = absent
	}{
		{"no file", cals["matrix"], nil, map[string]string{
			KeyKeepsTopClass: "false", KeyProtocol: "", KeyClients: "", KeyRounds: "", KeyAccountant: ""}},
		{"central", cals["bbq"], &calib.File{Provenance: calib.Provenance{Protocol: "central"}}, map[string]string{
			KeyKeepsTopClass: "false", KeyProtocol: "central", KeyClients: "", KeyRounds: "", KeyAccountant: "", KeyFitMetrics: ""}},
		{"private federated", cals["temp"], &calib.File{Privacy: priv, Provenance: calib.Provenance{Protocol: "FedTemp", Clients: 100}}, map[string]string{
			KeyKeepsTopClass: "true", KeyProtocol: "FedTemp", KeyClients: "100", KeyRounds: "2", KeyAccountant: "zcdp",
			KeyEpsilon: fmt.Sprint(priv.Epsilon), KeyDelta: "1e-05"}},
		{"networked", cals["opvector"], &calib.File{Provenance: calib.Provenance{Protocol: "FedOPVector", Clients: 3},
			Rounds: []calib.RoundRecord{{Round: 1}, {Round: 2}, {Round: 3}}}, map[string]string{
			KeyKeepsTopClass: "true", KeyProtocol: "FedOPVector", KeyClients: "3", KeyRounds: "3", KeyAccountant: "", KeyEpsilon: ""}},
		{"fit metrics", cals["temp"], &calib.File{Provenance: calib.Provenance{Protocol: "central", FitMetrics: &calib.FitMetrics{Rows: 4,
			Before: calib.Metrics{N: 4, Classes: 3, Accuracy: 0.75, CWECE: 0.125, ECE: 0.25, NLL: 0.5, Brier: 0.375},
			After:  calib.Metrics{N: 4, Classes: 3, Accuracy: 0.75, CWECE: 0.0625, ECE: 0.125, NLL: 0.4375, Brier: 0.3125}}}}, map[string]string{
			KeyProtocol: "central", KeyFitMetrics: `{"rows":4,"before":{"n":4,"classes":3,"accuracy":0.75,"cwece":0.125,"ece":0.25,"nll":0.5,"brier":0.375},` +
				`"after":{"n":4,"classes":3,"accuracy":0.75,"cwece":0.0625,"ece":0.125,"nll":0.4375,"brier":0.3125}}`}},
		{"fedcal", orderKeeping(3), nil, map[string]string{KeyKeepsTopClass: "true"}},
		{"collapsed fedcal", collapsedFedCal(3), nil, map[string]string{KeyKeepsTopClass: "false"}},
		{"vector", cals["vector"], nil, map[string]string{KeyKeepsTopClass: "false"}},
		{"bin", cals["bin"], nil, map[string]string{KeyKeepsTopClass: "false"}},
	} {
		m, err := onnx.ReadFile("../infer/testdata/tiny.onnx")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := Append(m, tc.c, tc.file, Options{}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		back, err := onnx.Parse(m.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		sum, err := ParamsSHA256(tc.c)
		if err != nil {
			t.Fatal(err)
		}
		tc.want[KeyParamsSHA256] = sum
		for key, want := range tc.want {
			got, ok := back.MetadataValue(key)
			if got != want || ok != (want != "") {
				t.Errorf("%s: %s = %q (present %v), want %q", tc.name, key, got, ok, want)
			}
		}
	}
}

// orderKeeping returns a FedCal network of c classes whose every rank
// weight is softplus(1) ≈ 1.31 (only b3 = 1 set): it scales each gap of
// the sorted logits by 1.31, so it keeps every order.
func orderKeeping(c int) *calib.FedCalMLP {
	f := calib.NewFedCalMLP(c, 3)
	clear(f.W3)
	for j := range f.B3 {
		f.B3[j] = 1
	}
	return f
}

// collapsedFedCal returns a FedCal network whose rank weights underflow
// (b3 = −1000: softplus gives 0), so every calibrated logit equals the
// top one: what a private fit collapsed by its noise gives.
func collapsedFedCal(c int) *calib.FedCalMLP {
	f := orderKeeping(c)
	for j := range f.B3 {
		f.B3[j] = -1000
	}
	return f
}

// TestKeepsTopClassMeasured checks the measurement on the probe set: an
// order-keeping FedCal network keeps the top class; a collapsed one ties
// every row, from the first (random logits with a unique top); a
// temperature of 1e30 rounds every float32 probability to 1/C, a tie;
// a row whose top logit is tied has no top class to keep.
func TestKeepsTopClassMeasured(t *testing.T) {
	const c = 4
	hot := calib.NewTemperature(c)
	hot.T = 1e30
	warm := calib.NewTemperature(c)
	warm.T = 3
	for _, tc := range []struct {
		name string
		c    calib.Calibrator
		want int
	}{
		{"order-keeping fedcal", orderKeeping(c), -1},
		{"temp 3", warm, -1},
		{"collapsed fedcal", collapsedFedCal(c), 0},
		{"temp 1e30", hot, 0},
	} {
		if got := KeepsTopClass(tc.c, Probe(tc.c, 1)); got != tc.want {
			t.Errorf("%s: first changed row %d, want %d", tc.name, got, tc.want)
		}
	}
	if r := KeepsTopClass(collapsedFedCal(c), []float32{3, 3, 1, 0}); r != -1 {
		t.Errorf("collapsed fedcal on a row tied at the top: %d, want -1 (no top class)", r)
	}
	if r := KeepsTopClass(collapsedFedCal(c), []float32{3, 3, 1, 0, 0, 1, 2, 3}); r != 1 {
		t.Errorf("collapsed fedcal on a tied row, then a plain one: %d, want 1", r)
	}
}
