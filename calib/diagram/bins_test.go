package diagram

import (
	"math"
	"reflect"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func binsNear(got, want []Bin) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Count != w.Count || !near(g.Lo, w.Lo, 1e-12) || !near(g.Hi, w.Hi, 1e-12) ||
			!near(g.Confidence, w.Confidence, 1e-12) || !near(g.Accuracy, w.Accuracy, 1e-12) {
			return false
		}
	}
	return true
}

func TestBins(t *testing.T) {
	o := Outcomes{Conf: []float64{0.05, 0.15, 0.12, 0.95}, Hit: []float64{0, 1, 0, 1}}
	width := make([]Bin, 10)
	for m := range width {
		width[m] = Bin{Lo: float64(m) / 10, Hi: float64(m+1) / 10}
	}
	width[0] = Bin{Lo: 0, Hi: 0.1, Confidence: 0.05, Accuracy: 0, Count: 1}
	width[1] = Bin{Lo: 0.1, Hi: 0.2, Confidence: 0.135, Accuracy: 0.5, Count: 2}
	width[9] = Bin{Lo: 0.9, Hi: 1, Confidence: 0.95, Accuracy: 1, Count: 1}
	for _, tc := range []struct {
		name    string
		bins    int
		binning Binning
		want    []Bin
	}{
		{"equal width", 10, EqualWidth, width},
		// Sorted: 0.05 (miss), 0.12 (miss) | 0.15 (hit), 0.95 (hit); the
		// edge is the midpoint of 0.12 and 0.15, the ends the extremes.
		{"equal mass", 2, EqualMass, []Bin{
			{Lo: 0.05, Hi: 0.135, Confidence: 0.085, Accuracy: 0, Count: 2},
			{Lo: 0.135, Hi: 0.95, Confidence: 0.55, Accuracy: 1, Count: 2}}},
		// 3 bins of 4: the first holds 4/3 rounded down = 1.
		{"equal mass, uneven", 3, EqualMass, []Bin{
			{Lo: 0.05, Hi: 0.085, Confidence: 0.05, Count: 1},
			{Lo: 0.085, Hi: 0.135, Confidence: 0.12, Count: 1},
			{Lo: 0.135, Hi: 0.95, Confidence: 0.55, Accuracy: 1, Count: 2}}},
		{"equal mass, more bins than examples", 9, EqualMass, []Bin{
			{Lo: 0.05, Hi: 0.085, Confidence: 0.05, Count: 1},
			{Lo: 0.085, Hi: 0.135, Confidence: 0.12, Count: 1},
			{Lo: 0.135, Hi: 0.55, Confidence: 0.15, Accuracy: 1, Count: 1},
			{Lo: 0.55, Hi: 0.95, Confidence: 0.95, Accuracy: 1, Count: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := o.Bins(tc.bins, tc.binning); !binsNear(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	// ECE by hand: (1·0.05 + 2·0.365 + 1·0.05)/4.
	if got, want := ECE(width), (0.05+2*0.365+0.05)/4; !near(got, want, 1e-12) {
		t.Errorf("ECE = %v, want %v", got, want)
	}
}

func TestOutcomes(t *testing.T) {
	probs := []float64{
		0.5, 0.5, 0, // a tie: the first class is the top label
		0.2, 0.1, 0.7,
	}
	labels := []int{1, 2}
	top, err := TopLabel(probs, labels, 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Outcomes{Conf: []float64{0.5, 0.7}, Hit: []float64{0, 1}}); !reflect.DeepEqual(top, want) {
		t.Errorf("TopLabel = %+v, want %+v", top, want)
	}
	one, err := OneVsRest(probs, labels, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Outcomes{Conf: []float64{0.5, 0.1}, Hit: []float64{1, 0}}); !reflect.DeepEqual(one, want) {
		t.Errorf("OneVsRest = %+v, want %+v", one, want)
	}
	for name, f := range map[string]func() error{
		"shape":     func() error { _, err := TopLabel(probs[:5], labels, 3); return err },
		"empty":     func() error { _, err := TopLabel(nil, nil, 3); return err },
		"NaN":       func() error { _, err := TopLabel([]float64{math.NaN(), 1}, []int{0}, 2); return err },
		"bad class": func() error { _, err := OneVsRest(probs, labels, 3, 3); return err },
	} {
		if f() == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestBinsAgreeWithCalib checks the equal-width bins against calib's, a
// second implementation: the same bins as calib.NewReliability and the
// ECE of calib.Evaluate, top label and class by class.
func TestBinsAgreeWithCalib(t *testing.T) {
	before, after, labels, names := fixedLogits(t)
	c := len(names)
	for _, probs := range [][]float64{before, after} {
		rel, err := calib.NewReliability(probs, labels, c, 15)
		if err != nil {
			t.Fatal(err)
		}
		m, err := calib.Evaluate(probs, labels, c, 15)
		if err != nil {
			t.Fatal(err)
		}
		top, _ := TopLabel(probs, labels, c)
		bins := top.Bins(15, EqualWidth)
		if !binsNear(bins, FromReliability(rel.Top)) {
			t.Errorf("top-label bins differ from calib's:\n%+v\n%+v", bins, FromReliability(rel.Top))
		}
		if got := ECE(bins); !near(got, m.ECE, 1e-12) {
			t.Errorf("ECE %v, calib.Evaluate %v", got, m.ECE)
		}
		var cw float64
		for j := range c {
			o, _ := OneVsRest(probs, labels, c, j)
			b := o.Bins(15, EqualWidth)
			if !binsNear(b, FromReliability(rel.Class[j])) {
				t.Errorf("class %d bins differ from calib's", j)
			}
			cw += ECE(b) / float64(c)
		}
		if !near(cw, m.CWECE, 1e-12) {
			t.Errorf("mean classwise ECE %v, calib's cwECE %v", cw, m.CWECE)
		}
	}
}

func TestSmooth(t *testing.T) {
	const n = 400
	half := Outcomes{Conf: make([]float64, n), Hit: make([]float64, n)}
	ones := Outcomes{Conf: make([]float64, n), Hit: make([]float64, n)}
	for i := range n {
		half.Conf[i], half.Hit[i] = 0.5, float64(i%2)
		ones.Conf[i], ones.Hit[i] = 0.5, 1
	}
	// Every example at 0.5: the Nadaraya–Watson curve is the mean outcome
	// everywhere, and smECE = |mean residual|·∫₀¹K(t, 0.5)dt, where the
	// reflected kernel integrates to 1 up to tails of 5σ.
	for _, tc := range []struct {
		name     string
		o        Outcomes
		curve    float64
		smECE    float64
		tolSmECE float64
	}{
		{"calibrated", half, 0.5, 0, 1e-12},
		{"always right", ones, 1, 0.5, 1e-4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Smooth(tc.o, SmoothOptions{Sigma: 0.1, Resamples: -1})
			if err != nil {
				t.Fatal(err)
			}
			for g, y := range s.Y {
				if !near(y, tc.curve, 1e-9) {
					t.Fatalf("curve at %v = %v, want %v", s.T[g], y, tc.curve)
				}
			}
			if !near(s.SmECE, tc.smECE, tc.tolSmECE) {
				t.Errorf("smECE %v, want %v", s.SmECE, tc.smECE)
			}
			if s.Lo != nil || s.Level != 0 {
				t.Error("a band without resamples")
			}
			// The density integrates to 1 (trapezoid on 201 points).
			var area float64
			for g := 1; g < len(s.T); g++ {
				area += (s.Density[g] + s.Density[g-1]) / 2 * (s.T[g] - s.T[g-1])
			}
			if !near(area, 1, 1e-3) {
				t.Errorf("density integrates to %v", area)
			}
		})
	}
	// The band of the calibrated data: the resampled mean outcome is a
	// binomial proportion, so the 95% band at 0.5 is about 0.5 ± 1.96·√(¼/n)
	// = 0.5 ± 0.049.
	s, err := Smooth(half, SmoothOptions{Sigma: 0.1, Resamples: 400, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	mid := len(s.T) / 2
	if w := s.Hi[mid] - s.Lo[mid]; !(s.Lo[mid] < 0.5 && s.Hi[mid] > 0.5 && w > 0.07 && w < 0.13) {
		t.Errorf("band at 0.5 = [%v, %v], want about 0.5 ± 0.049", s.Lo[mid], s.Hi[mid])
	}
	again, _ := Smooth(half, SmoothOptions{Sigma: 0.1, Resamples: 400, Seed: 3})
	if !reflect.DeepEqual(s.Lo, again.Lo) || !reflect.DeepEqual(s.Hi, again.Hi) {
		t.Error("the same seed gave another band")
	}
	// relplot's bandwidth: smECE at σ* equals σ*.
	before, _, labels, names := fixedLogits(t)
	top, _ := TopLabel(before, labels, len(names))
	s, err = Smooth(top, SmoothOptions{Resamples: -1})
	if err != nil {
		t.Fatal(err)
	}
	if !near(s.SmECE, s.Sigma, 1e-6) || s.Sigma <= 0.001 {
		t.Errorf("σ* = %v but smECE at it = %v", s.Sigma, s.SmECE)
	}
	for name, o := range map[string]SmoothOptions{"σ": {Sigma: -1}, "σ>1": {Sigma: 2}, "level": {Level: 1}} {
		if _, err := Smooth(half, o); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := Smooth(Outcomes{Conf: []float64{0.5}, Hit: []float64{0.5}}, SmoothOptions{}); err == nil {
		t.Error("an outcome of 0.5: no error")
	}
	if _, err := Smooth(Outcomes{}, SmoothOptions{}); err == nil {
		t.Error("no examples: no error")
	}
}
