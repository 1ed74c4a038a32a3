package calib_test

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

func logit(p float64) float64 { return math.Log(p / (1 - p)) }

// TestPlattClosedForm fits Platt scaling without its prior where each
// class's decision value takes two values, so that the two-parameter
// sigmoid is saturated: σ(b) and σ(a + b) equal the mean Platt target of
// the rows at z = 0 and z = 1, a closed form.
func TestPlattClosedForm(t *testing.T) {
	// Rows (1, 0): 20 of class 0, 10 of class 1; rows (0, 1): 15 of class
	// 0, 35 of class 1.
	s := &calib.Set{Classes: 2}
	add := func(z0, z1 float64, label, n int) {
		for range n {
			s.Logits = append(s.Logits, z0, z1)
			s.Labels = append(s.Labels, label)
		}
	}
	add(1, 0, 0, 20)
	add(1, 0, 1, 10)
	add(0, 1, 0, 15)
	add(0, 1, 1, 35)
	p := &calib.Platt{Options: calib.FitOptions{Prior: -1, GradientTol: 1e-13}}
	if err := p.Fit(s); err != nil {
		t.Fatal(err)
	}
	// Class 0: N₊ = 35, N₋ = 45; class 1: N₊ = 45, N₋ = 35.
	tp0, tn0 := 36.0/37, 1.0/47
	tp1, tn1 := 46.0/47, 1.0/37
	// Class 0's z is 1 on the first 30 rows, 0 on the others; class 1's
	// the reverse.
	hi0, lo0 := (20*tp0+10*tn0)/30, (15*tp0+35*tn0)/50
	hi1, lo1 := (35*tp1+15*tn1)/50, (10*tp1+20*tn1)/30
	want := [][2]float64{{logit(hi0) - logit(lo0), logit(lo0)}, {logit(hi1) - logit(lo1), logit(lo1)}}
	for j, w := range want {
		if math.Abs(p.A[j]-w[0]) > 1e-9 || math.Abs(p.B[j]-w[1]) > 1e-9 {
			t.Errorf("class %d: (a, b) = (%.12g, %.12g), want (%.12g, %.12g)", j, p.A[j], p.B[j], w[0], w[1])
		}
	}
	if rep := p.LastFit(); !rep.Converged {
		t.Errorf("fit report %+v: want converged", rep)
	}
	// The prediction: σ(a_j z_j + b_j), normalised.
	dst := make([]float64, 2)
	p.Predict(dst, []float64{1, 0})
	g0, g1 := hi0, lo1
	if math.Abs(dst[0]-g0/(g0+g1)) > 1e-12 || math.Abs(dst[1]-g1/(g0+g1)) > 1e-12 {
		t.Errorf("Predict(1, 0) = %v, want %v", dst, []float64{g0 / (g0 + g1), g1 / (g0 + g1)})
	}
}

// TestBetaConstraint fits beta calibration where each class's label is
// more likely the lower its probability: the unconstrained coefficients of
// ln s and −ln(1 − s) are negative, so the constrained optimum without a
// prior has a = b = 0 and e^c/(1 + e^c) the class's rate, a closed form;
// the report must say it converged (its projected gradient is 0).
func TestBetaConstraint(t *testing.T) {
	s := &calib.Set{Classes: 2}
	for i := range 200 {
		z := float64(i%20) / 5 // p₀ increases with z
		label := 0
		if z >= 2 || i%7 == 0 {
			label = 1 // class 0 where p₀ is low, mostly
		}
		s.Logits = append(s.Logits, z, 0)
		s.Labels = append(s.Labels, label)
	}
	var ones float64
	for _, y := range s.Labels {
		ones += float64(y)
	}
	b := &calib.Beta{Options: calib.FitOptions{Prior: -1}}
	if err := b.Fit(s); err != nil {
		t.Fatal(err)
	}
	n := float64(s.Len())
	want := [][3]float64{{0, 0, logit((n - ones) / n)}, {0, 0, logit(ones / n)}}
	for j, w := range want {
		if b.A[j] != 0 || b.B[j] != 0 || math.Abs(b.C[j]-w[2]) > 1e-9 {
			t.Errorf("class %d: (a, b, c) = (%v, %v, %.12g), want (0, 0, %.12g)", j, b.A[j], b.B[j], b.C[j], w[2])
		}
	}
	if rep := b.LastFit(); !rep.Converged || rep.Warning() != "" {
		t.Errorf("fit report %+v: want converged without warning", rep)
	}
}

// TestBetaIdentity checks that the identity beta map (a = b = 1, c = 0)
// is g_j(s) = s, so that it predicts the softmax probabilities.
func TestBetaIdentity(t *testing.T) {
	b := calib.NewBeta(3)
	z := []float64{1, -2, 0.5, 3, 3, -40}
	got, want := make([]float64, len(z)), make([]float64, len(z))
	b.Predict(got, z)
	calib.SoftmaxRows(want, z, 3)
	for i := range got {
		if math.Abs(got[i]-want[i]) > 1e-14 {
			t.Errorf("identity beta: %v, want the softmax %v", got, want)
			break
		}
	}
}

// TestBetaProject checks that Project moves negative a and b to 0 and
// leaves c, and that SetParams refuses negative a or b.
func TestBetaProject(t *testing.T) {
	b := calib.NewBeta(2)
	w := []float64{-1, 2, 0.5, -0.25, -3, -4}
	b.Project(w)
	if want := []float64{0, 2, 0.5, 0, -3, -4}; !slices.Equal(w, want) {
		t.Errorf("Project: %v, want %v", w, want)
	}
	if err := b.SetParams([]float64{1, 1, -0.1, 1, 0, 0}); err == nil {
		t.Error("SetParams took b < 0")
	}
	if err := b.SetParams(w); err != nil {
		t.Errorf("SetParams of a projected vector: %v", err)
	}
}

// TestEqualMassByHand forms equal-mass bins from histograms worked out by
// hand, noisy counts included.
func TestEqualMassByHand(t *testing.T) {
	h := calib.NewHistograms(2, 4)
	// Class 0: four fine bins of 4 examples each; two equal-mass bins
	// split at fine bin 2 (the largest e with Σ_{m<e} c_m ≤ 8):
	// values (0+1)/8 and (2+3)/8.
	copy(h.Pos[:4], []float64{0, 1, 2, 3})
	copy(h.Neg[:4], []float64{4, 3, 2, 1})
	// Class 1: 10 negatives in fine bin 0, a noisy −3 taken as 0: the
	// first equal-mass bin is empty (edge 0), the second holds all.
	copy(h.Neg[4:], []float64{10, 0, 0, -3})
	b, err := calib.NewEqualMass(h, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 2, 4, 0, 0, 4}; !slices.Equal(b.Edges, want) {
		t.Errorf("edges %v, want %v", b.Edges, want)
	}
	if want := []float64{0.125, 0.125, 0.625, 0.625, 0, 0, 0, 0}; !slices.Equal(b.Table, want) {
		t.Errorf("table %v, want %v", b.Table, want)
	}
	// Round trip through a calibrator file, and a file whose table is
	// not constant on an equal-mass bin is refused.
	var buf bytes.Buffer
	if err := calib.Encode(&buf, b, nil, calib.Provenance{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := calib.Decode(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatalf("decoding the written file: %v", err)
	}
	bad := strings.Replace(buf.String(), "0.625", "0.5", 1)
	if _, _, err := calib.Decode(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "one value per equal-mass bin") {
		t.Errorf("a table that varies within an equal-mass bin: error %v", err)
	}
	if _, err := calib.NewEqualMass(h, 5); err == nil {
		t.Error("NewEqualMass took 5 equal-mass bins of 4 fine bins")
	}
}
