package diagram

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

// update rewrites the golden SVGs: go test ./calib/diagram -run Golden -update
var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// fixedLogits reads testdata/logits.json and returns its softmax
// probabilities as they are ("uncalibrated") and at temperature 3
// ("temp T=3"), the labels and the class names.
func fixedLogits(t *testing.T) (before, after []float64, labels []int, names []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "logits.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		ClassNames []string    `json:"class_names"`
		Logits     [][]float64 `json:"logits"`
		Labels     []int       `json:"labels"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	c := len(f.ClassNames)
	before, after = make([]float64, len(f.Logits)*c), make([]float64, len(f.Logits)*c)
	z := make([]float64, c)
	for i, row := range f.Logits {
		calib.Softmax(before[i*c:(i+1)*c], row)
		for j, v := range row {
			z[j] = v / 3
		}
		calib.Softmax(after[i*c:(i+1)*c], z)
	}
	return before, after, f.Labels, f.ClassNames
}

// golden compares the SVG of fig with testdata/name, or rewrites it with
// -update. With $DIAGRAM_OUT set it also writes fig there as PNG and SVG,
// to look at.
func golden(t *testing.T, name string, fig Figure) {
	t.Helper()
	got, err := fig.SVG()
	if err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("DIAGRAM_OUT"); dir != "" {
		if _, err := fig.WriteFiles(filepath.Join(dir, strings.TrimSuffix(name, ".svg"))); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		out := filepath.Join(t.TempDir(), name)
		os.WriteFile(out, got, 0o644)
		t.Errorf("%s differs from the golden file (got written to %s; -update rewrites it after a deliberate change)", path, out)
	}
}

func TestGoldenDiagrams(t *testing.T) {
	before, after, labels, names := fixedLogits(t)
	c := len(names)
	opt := Options{ClassNames: names}
	for _, tc := range []struct {
		name    string
		binning Binning
		bins    int
	}{
		{"top_equal_width.svg", EqualWidth, 15},
		{"top_equal_mass.svg", EqualMass, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var curves []Curve
			for _, p := range []struct {
				label string
				probs []float64
			}{{"uncalibrated", before}, {"temp T=3", after}} {
				o, err := TopLabel(p.probs, labels, c)
				if err != nil {
					t.Fatal(err)
				}
				curves = append(curves, Curve{Label: p.label, Bins: o.Bins(tc.bins, tc.binning)})
			}
			fig, err := Reliability(curves, opt)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, fig)
		})
	}
	t.Run("classes.svg", func(t *testing.T) {
		var sets []CurveSet
		for _, p := range []struct {
			label string
			probs []float64
		}{{"uncalibrated", before}, {"temp T=3", after}} {
			s := CurveSet{Label: p.label}
			for j := range c {
				o, err := OneVsRest(p.probs, labels, c, j)
				if err != nil {
					t.Fatal(err)
				}
				s.Classes = append(s.Classes, o.Bins(10, EqualWidth))
			}
			sets = append(sets, s)
		}
		fig, err := Classes(sets, opt)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "classes.svg", fig)
	})
	t.Run("smooth.svg", func(t *testing.T) {
		var curves []SmoothCurve
		for _, p := range []struct {
			label string
			probs []float64
		}{{"uncalibrated", before}, {"temp T=3", after}} {
			o, err := TopLabel(p.probs, labels, c)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Smooth(o, SmoothOptions{Resamples: 50, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			curves = append(curves, SmoothCurve{Label: p.label, Smoothed: s})
		}
		fig, err := Smooths(curves, opt)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "smooth.svg", fig)
	})
}
