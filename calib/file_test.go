package calib

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/dp"
)

func TestEncodeDecodeBinning(t *testing.T) {
	s := tinySet()
	hist := &Histogram{Bins: 4}
	bbq := &BBQ{Mexp: 3}
	for _, c := range []interface {
		Calibrator
		SetWeighting(Weighting, []float64) error
	}{hist, bbq} {
		if err := c.Fit(s); err != nil {
			t.Fatal(err)
		}
		if err := c.SetWeighting(WeightChanged, []float64{0.25, 1}); err != nil {
			t.Fatal(err)
		}
		priv := zcdpRecord(c.Method(), c.Classes(), 3.5, 10, 2)
		prov := Provenance{Protocol: "FedBBQ", Weighting: "changed", Seed: 42}
		var buf bytes.Buffer
		if err := Encode(&buf, c, priv, prov); err != nil {
			t.Fatal(err)
		}
		got, f, err := Decode(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.Method(), err, buf.Bytes())
		}
		if f.Format != FormatV1 || f.Method != c.Method() || f.Classes != 2 || *f.Privacy != *priv || !reflect.DeepEqual(f.Provenance, prov) {
			t.Errorf("%s: metadata %+v", c.Method(), f)
		}
		if !equalCalibrators(c, got) {
			t.Errorf("%s: decoded %+v, want %+v", c.Method(), got, c)
		}
		for _, key := range []string{`"weighting": "changed"`, `"alpha": [`, `"table": [`} {
			if !strings.Contains(buf.String(), key) {
				t.Errorf("%s: sidecar lacks %s:\n%s", c.Method(), key, buf.Bytes())
			}
		}
	}
}

func TestWriteReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.json")
	b := &BBQ{Mexp: 2}
	if err := b.Fit(tinySet()); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, b, nil, Provenance{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	c, f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Privacy != nil || !equalCalibrators(b, c) {
		t.Errorf("read back %+v, privacy %v", c, f.Privacy)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d files after WriteFile, want 1", len(entries))
	}
}

// TestFitMetricsRoundTrip writes a calibrator with the metrics of its
// calibration rows and reads them back unchanged; Encode refuses metrics
// of another number of classes.
func TestFitMetricsRoundTrip(t *testing.T) {
	s := tinySet()
	b := &BBQ{Mexp: 2}
	if err := b.Fit(s); err != nil {
		t.Fatal(err)
	}
	before, err := EvaluateSet(s, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	after, err := EvaluateSet(s, b, 0)
	if err != nil {
		t.Fatal(err)
	}
	fm := &FitMetrics{Rows: s.Len(), Before: before, After: after}
	path := filepath.Join(t.TempDir(), "c.json")
	if err := WriteFile(path, b, nil, Provenance{FitMetrics: fm}); err != nil {
		t.Fatal(err)
	}
	_, f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Provenance.FitMetrics; got == nil || *got != *fm {
		t.Errorf("read back %+v, want %+v", got, fm)
	}
	bad := *fm
	bad.After.Classes = 7
	if err := WriteFile(path, b, nil, Provenance{FitMetrics: &bad}); err == nil || !strings.Contains(err.Error(), "metrics of 7 classes") {
		t.Errorf("Encode of metrics of 7 classes: %v", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	const (
		head   = `{"format":"fedcalib.calibrator/v1","method":"bin","classes":2,"provenance":{"seed":0},"params":`
		bare   = `{"format":"fedcalib.calibrator/v1","method":"bin","classes":2,"params":` // without provenance
		bbqTop = `{"format":"fedcalib.calibrator/v1","method":"bbq","classes":2,"provenance":{"seed":0},"params":`
	)
	tests := []struct {
		name, in, want string
	}{
		{"not json", `hello`, "not a calibrator file"},
		{"future version", `{"format":"fedcalib.calibrator/v2","method":"bin"}`, `unsupported calibrator format "fedcalib.calibrator/v2"`},
		{"unknown method", `{"format":"fedcalib.calibrator/v1","method":"magic"}`, `unknown calibrator method "magic"`},
		{"no params", `{"format":"fedcalib.calibrator/v1","method":"bin","classes":2}`, `no "params"`},
		{"unknown field", head + `{"bins":1,"table":[0.5,0.5],"extra":1}}`, `unknown field "extra"`},
		{"string table", head + `{"bins":1,"table":"x"}}`, "bin parameters"},
		{"zero bins", head + `{"bins":0,"table":[0.5,0.5]}}`, "have 0 bins"},
		{"ragged table", head + `{"bins":2,"table":[0.5,0.5,0.5]}}`, "table has 3 entries"},
		{"one class", head + `{"bins":2,"table":[0.5,0.5]}}`, "at least 2 classes"},
		{"bad entry", head + `{"bins":1,"table":[0.5,1.5]}}`, "class 1, bin 0 is 1.5"},
		{"negative entry", head + `{"bins":1,"table":[-0.5,0.5]}}`, "is -0.5: want a probability in [0, 1] or -1"},
		{"class mismatch", head + `{"bins":1,"table":[0.5,0.5,0.5]}}`, "for 3 classes but the file declares 2"},
		{"bad weighting", head + `{"bins":1,"table":[0.5,0.5],"weighting":"most"}}`, `unknown weighting "most"`},
		{"weighting without alpha", head + `{"bins":1,"table":[0.5,0.5],"weighting":"all"}}`, "needs alpha"},
		{"short alpha", head + `{"bins":1,"table":[0.5,0.5],"weighting":"all","alpha":[1]}}`, "1 weights for 2 classes"},
		{"mexp 0", bbqTop + `{"mexp":0,"table":[0.5,0.5]}}`, "mexp is 0"},
		{"mexp 17", bbqTop + `{"mexp":17,"table":[0.5,0.5]}}`, "mexp is 17"},
		{"bbq empty marker", bbqTop + `{"mexp":1,"table":[0.5,-1,0.5,0.5]}}`, "class 0, bin 1 is -1: want a probability in [0, 1]"},
		{"unknown top-level key", head + `{"bins":1,"table":[0.5,0.5]},"privacy_verified":true}`, `calibrator file has unknown key "privacy_verified"`},
		{"unknown key before format", `{"x":1,"format":"fedcalib.calibrator/v1","method":"bin","classes":2,"params":{"bins":1,"table":[0.5,0.5]}}`, `unknown key "x"`},
		{"future version with new keys", `{"format":"fedcalib.calibrator/v2","method":"bin","calibration_set":"x"}`, `unsupported calibrator format "fedcalib.calibrator/v2"`},
		{"unknown privacy key", head + `{"bins":1,"table":[0.5,0.5]},"privacy":{"epsilon":1,"audited":true}}`, `calibrator file's privacy: json: unknown field "audited"`},
		{"unknown provenance key", bare + `{"bins":1,"table":[0.5,0.5]},"provenance":{"seed":0,"owner":"x"}}`, `calibrator file's provenance: json: unknown field "owner"`},
		{"duplicate top-level key", head + `{"bins":1,"table":[0.5,0.5]},"classes":3}`, `key "classes" appears twice in one object (classes)`},
		{"duplicate parameter", head + `{"bins":1,"table":[0.5,0.5],"table":[0.2,0.8]}}`, `key "table" appears twice in one object (params.table)`},
		{"duplicate provenance", head + `{"bins":1,"table":[0.5,0.5]},"provenance":{"seed":1}}`, `key "provenance" appears twice`},
		{"trailing object", head + `{"bins":1,"table":[0.5,0.5]}}{}`, "not a calibrator file"},
		{"fit metrics rows", bare + `{"bins":1,"table":[0.5,0.5]},"provenance":{"seed":0,"fit_metrics":{"rows":3,"before":{"n":4,"classes":2,"accuracy":0.5,"cwece":0.1,"ece":0.1,"nll":0.5,"brier":0.3},"after":{"n":4,"classes":2,"accuracy":0.5,"cwece":0.1,"ece":0.1,"nll":0.5,"brier":0.3}}}}`, "provenance.fit_metrics: rows 3 but metrics of 4 and 4 examples"},
		{"fit metrics accuracy", bare + `{"bins":1,"table":[0.5,0.5]},"provenance":{"seed":0,"fit_metrics":{"rows":4,"before":{"n":4,"classes":2,"accuracy":-1,"cwece":0.1,"ece":0.1,"nll":0.5,"brier":0.3},"after":{"n":4,"classes":2,"accuracy":0.5,"cwece":0.1,"ece":0.1,"nll":0.5,"brier":0.3}}}}`, "provenance.fit_metrics: accuracy -1 out of range"},
		{"fit metrics key", bare + `{"bins":1,"table":[0.5,0.5]},"provenance":{"seed":0,"fit_metrics":{"rows":1,"auc":1}}}`, `unknown field "auc"`},
		{"privacy without accountant", head + `{"bins":1,"table":[0.5,0.5]},"privacy":{"epsilon":1,"delta":1e-5}}`, "privacy.accountant is missing"},
		{"privacy with negative sigma", head + `{"bins":1,"table":[0.5,0.5]},"privacy":{"epsilon":1,"delta":1e-5,"rho":0.1,"sigma":-1,"accountant":"zcdp","rounds":1,"sample_rate":1,"clip_pos":10,"clip_neg":50}}`, "privacy.sigma is -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Decode(strings.NewReader(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans several lines: %q", err)
			}
		})
	}
}

// FuzzDecode checks that Decode never panics, and that whatever it
// accepts encodes back to a file that decodes to the same calibrator and
// predicts finite probability rows.
func FuzzDecode(f *testing.F) {
	for _, c := range []Calibrator{&Histogram{Bins: 2}, &BBQ{Mexp: 1}} {
		if err := c.Fit(tinySet()); err != nil {
			f.Fatal(err)
		}
		var buf bytes.Buffer
		if err := Encode(&buf, c, zcdpRecord(c.Method(), c.Classes(), 3.5, 10, 2), Provenance{}); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	const head = `{"format":"fedcalib.calibrator/v1","classes":2,"provenance":{"seed":0},`
	f.Add([]byte(head + `"method":"bin","params":{"bins":1,"table":[-1,0.5],"weighting":"changed","alpha":[0,1]}}`))
	f.Add([]byte(head + `"method":"bbq","params":{"mexp":1,"table":[0.1,0.9,0.2,0.8],"weighting":"all","alpha":[0.5,0.5]}}`))
	for _, m := range []string{"temp", "vector", "matrix", "opvector", "fedcal"} {
		f.Add([]byte(head + `"method":"` + m + `","params":{}}`))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, file, err := Decode(bytes.NewReader(data))
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := Encode(&buf, c, file.Privacy, file.Provenance); err != nil {
			t.Fatalf("accepted %s calibrator does not encode: %v", c.Method(), err)
		}
		again, _, err := Decode(&buf)
		if err != nil {
			t.Fatalf("re-encoded %s calibrator does not decode: %v\n%s", c.Method(), err, buf.Bytes())
		}
		var buf2 bytes.Buffer
		if err := Encode(&buf2, again, file.Privacy, file.Provenance); err != nil {
			t.Fatal(err)
		}
		var first bytes.Buffer
		Encode(&first, c, file.Privacy, file.Provenance)
		if !bytes.Equal(first.Bytes(), buf2.Bytes()) {
			t.Fatalf("round trip changed the file:\n%s\n%s", first.Bytes(), buf2.Bytes())
		}
		if c.Classes() > 1000 {
			return
		}
		k := c.Classes()
		z := make([]float64, 3*k)
		for j := range z {
			z[j] = float64((j*7)%11-5) * []float64{1, 1e-3, 1e4}[j/k]
		}
		p := make([]float64, len(z))
		c.Predict(p, z)
		for i := 0; i < len(p); i += k {
			var sum float64
			for _, v := range p[i : i+k] {
				if math.IsNaN(v) || v < 0 || v > 1 {
					t.Fatalf("%s calibrator predicts %v", c.Method(), p[i:i+k])
				}
				sum += v
			}
			if math.Abs(sum-1) > 1e-9 {
				t.Fatalf("%s calibrator row sums to %v: %v", c.Method(), sum, slices.Clone(p[i:i+k]))
			}
		}
	})
}

// zcdpRecord returns the consistent zCDP privacy record of a fit of
// method over classes classes with per-round noise σ for clip norm clip
// (C, or C₊ with C₋ = 5·C₊ for binning), rounds rounds, δ = 1e-5 and
// sample rate 1: ρ = T·m·clip²/(2σ²) with m = 1 or 2c, and its ε.
func zcdpRecord(method string, classes int, sigma, clip float64, rounds int) *Privacy {
	p := &Privacy{Delta: 1e-5, Sigma: sigma, Accountant: "zcdp", Rounds: rounds, SampleRate: 1}
	m := 1.0
	if method == MethodBin || method == MethodBBQ {
		p.ClipPos, p.ClipNeg, m = clip, 5*clip, 2*float64(classes)
	} else {
		p.Clip = clip
	}
	p.Rho = float64(rounds) * m * clip * clip / (2 * sigma * sigma)
	eps, err := dp.ZCDPEpsilon(p.Rho, p.Delta)
	if err != nil {
		panic(err)
	}
	p.Epsilon = eps
	return p
}

func TestPrivacyCheck(t *testing.T) {
	// A scaling record: z = 2/0.5 = 4, T = 3, so ρ = 3/(2·16) = 3/32.
	temp := zcdpRecord(MethodTemp, 4, 2, 0.5, 3)
	if temp.Rho != 3.0/32 {
		t.Fatalf("ρ = %v, want 3/32", temp.Rho)
	}
	// A binning record with 3 classes: m = 6, z = 30/10 = 3, T = 2, so
	// ρ = 2·6/(2·9) = 2/3.
	bbq := zcdpRecord(MethodBBQ, 3, 30, 10, 2)
	if math.Abs(bbq.Rho-2.0/3) > 1e-15 {
		t.Fatalf("ρ = %v, want 2/3", bbq.Rho)
	}
	edit := func(p *Privacy, f func(*Privacy)) *Privacy {
		q := *p
		f(&q)
		return &q
	}
	tests := []struct {
		name    string
		method  string
		classes int
		p       *Privacy
		want    string // "" for accepted
	}{
		{"scaling", MethodTemp, 4, temp, ""},
		{"binning", MethodBBQ, 3, bbq, ""},
		{"scaling ignores classes", MethodTemp, 7, temp, ""},
		// ρ and ε agree to 1e-9 relative, not exactly.
		{"within tolerance", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Epsilon *= 1 + 1e-11 }), ""},
		{"epsilon halved", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Epsilon /= 2 }), "privacy.epsilon is"},
		{"epsilon doubled", MethodBBQ, 3, edit(bbq, func(p *Privacy) { p.Epsilon *= 2 }), "privacy.epsilon is"},
		{"epsilon off by 1e-8", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Epsilon *= 1 + 1e-8 }), "privacy.epsilon is"},
		{"sigma doubled", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Sigma *= 2 }), "privacy.rho is 0.09375 but the recorded noise (σ 4 for clip norm 0.5, 1 Gaussian mechanism(s) per round, 3 round(s)) gives ρ = 0.0234375"},
		{"sigma doubled, rho too", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Sigma *= 2; p.Rho /= 4 }), "privacy.epsilon is"},
		{"more classes than the noise allows", MethodBBQ, 4, bbq, "privacy.rho is"},
		{"clip doubled", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Clip *= 2 }), "privacy.rho is"},
		{"rounds", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Rounds = 2 }), "privacy.rho is"},
		{"delta", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Delta = 1e-6 }), "privacy.epsilon is"},
		{"accountant", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Accountant = "rdp" }), "privacy.epsilon is"},
		{"no accountant", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Accountant = "" }), "privacy.accountant is missing"},
		{"unknown accountant", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Accountant = "pld" }), `privacy.accountant: invalid privacy parameter: accountant "pld"`},
		{"negative epsilon", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Epsilon = -1 }), "privacy.epsilon is -1: want it finite and ≥ 0"},
		{"NaN epsilon", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Epsilon = math.NaN() }), "privacy.epsilon is NaN"},
		{"infinite epsilon", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Epsilon = math.Inf(1) }), "privacy.epsilon is +Inf"},
		{"no delta", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Delta = 0 }), "privacy.delta is missing or 0: want it in (0, 1)"},
		{"delta 1", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Delta = 1 }), "privacy.delta is 1"},
		{"NaN rho", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Rho = math.NaN() }), "privacy.rho is NaN"},
		{"no rho", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Rho = 0 }), "privacy.rho is missing or 0"},
		{"negative sigma", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Sigma = -2 }), "privacy.sigma is -2"},
		{"infinite sigma", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Sigma = math.Inf(1) }), "privacy.sigma is +Inf"},
		{"no sample rate", MethodTemp, 4, edit(temp, func(p *Privacy) { p.SampleRate = 0 }), "privacy.sample_rate is missing or 0: want it in (0, 1]"},
		{"sample rate 2", MethodTemp, 4, edit(temp, func(p *Privacy) { p.SampleRate = 2 }), "privacy.sample_rate is 2"},
		{"no rounds", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Rounds = 0 }), "privacy.rounds is 0"},
		{"negative rounds", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Rounds = -3 }), "privacy.rounds is -3"},
		{"scaling without clip", MethodTemp, 4, edit(temp, func(p *Privacy) { p.Clip = 0 }), "privacy.clip is missing or 0: want it finite and > 0 for a scaling method"},
		{"scaling with clip_pos", MethodTemp, 4, edit(temp, func(p *Privacy) { p.ClipPos = 10 }), "privacy.clip_pos is 10: want it absent for a scaling method"},
		{"binning with clip", MethodBBQ, 3, edit(bbq, func(p *Privacy) { p.Clip = 0.5 }), "privacy.clip is 0.5: want it absent for a binning method"},
		{"binning without clip_neg", MethodBBQ, 3, edit(bbq, func(p *Privacy) { p.ClipNeg = 0 }), "privacy.clip_neg is missing or 0"},
		{"negative clip_pos", MethodBBQ, 3, edit(bbq, func(p *Privacy) { p.ClipPos = -10 }), "privacy.clip_pos is -10"},
		{"binning over 1 class", MethodBBQ, 1, bbq, "a binning method has at least 2"},
		{"unknown method", "magic", 3, bbq, `unknown calibrator method "magic"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Check(tt.method, tt.classes)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want == "":
				return
			case err == nil:
				t.Fatalf("accepted %+v, want an error containing %q", *tt.p, tt.want)
			case !strings.Contains(err.Error(), tt.want):
				t.Fatalf("error %q, want one containing %q", err, tt.want)
			case strings.Contains(err.Error(), "\n"):
				t.Errorf("error spans several lines: %q", err)
			}
		})
	}
}

// TestEncodeRefusesInconsistentPrivacy checks that Encode never writes a
// file that Decode would refuse.
func TestEncodeRefusesInconsistentPrivacy(t *testing.T) {
	c := NewTemperature(4)
	priv := zcdpRecord(MethodTemp, 4, 2, 0.5, 3)
	priv.Epsilon /= 2
	var buf bytes.Buffer
	err := Encode(&buf, c, priv, Provenance{})
	if err == nil || !strings.Contains(err.Error(), "privacy.epsilon is") {
		t.Fatalf("Encode of a halved ε: %v", err)
	}
	if buf.Len() != 0 {
		t.Errorf("Encode wrote %d bytes before refusing", buf.Len())
	}
}
