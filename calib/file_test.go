package calib

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
		priv := &Privacy{Epsilon: 1, Delta: 1e-5, Sigma: 3.5, ClipPos: 10, ClipNeg: 50, Accountant: "zcdp", Rounds: 2}
		prov := Provenance{Protocol: "FedBBQ", Weighting: "changed", Seed: 42}
		var buf bytes.Buffer
		if err := Encode(&buf, c, priv, prov); err != nil {
			t.Fatal(err)
		}
		got, f, err := Decode(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.Method(), err, buf.Bytes())
		}
		if f.Format != FormatV1 || f.Method != c.Method() || f.Classes != 2 || *f.Privacy != *priv || f.Provenance != prov {
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

func TestDecodeErrors(t *testing.T) {
	const (
		head   = `{"format":"fedcalib.calibrator/v1","method":"bin","classes":2,"provenance":{"seed":0},"params":`
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
		if err := Encode(&buf, c, &Privacy{Epsilon: 1}, Provenance{}); err != nil {
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
