package calib

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// isotonicReference is isotonic_reference.json, written by
// testdata/reference/make_isotonic_reference.py with scikit-learn.
type isotonicReference struct {
	Sklearn string `json:"sklearn"`
	Scores  []struct {
		Name    string    `json:"name"`
		X       []float64 `json:"x"`
		Y       []float64 `json:"y"`
		BX      []float64 `json:"bx"`
		BY      []float64 `json:"by"`
		Query   []float64 `json:"query"`
		Predict []float64 `json:"predict"`
	} `json:"scores"`
	PAV []struct {
		Y   []float64 `json:"y"`
		W   []float64 `json:"w"`
		Fit []float64 `json:"fit"`
	} `json:"pav"`
	MNISTLike struct {
		Breakpoints       []int       `json:"breakpoints"`
		TestProbabilities [][]float64 `json:"test_probabilities"`
		TestNLL           float64     `json:"test_nll"`
	} `json:"mnistlike"`
}

func readIsotonicReference(t *testing.T) *isotonicReference {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "reference", "isotonic_reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref isotonicReference
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	return &ref
}

// fitScores runs one class's exact fit on scores x with 0/1 targets y,
// as a one-column set: class 0 is the positive one.
func fitScores(x, y []float64) (bx, by []float64) {
	labels := make([]int, len(y))
	for i, v := range y {
		if v == 0 {
			labels[i] = 1
		}
	}
	return new(exactWork).fit(x, labels, 0)
}

// TestIsotonicExactMatchesScikitLearn checks the exact fit of one class
// against scikit-learn's IsotonicRegression on the reference cases
// (distinct scores, ties, near-ties below the merge resolution, constant
// targets, one row, one pooled block, saturated scores): the same
// breakpoints, and the same predictions at points outside, on and
// between them. Both run the same operations in the same order on the
// same float64 inputs, so they agree to the last bit but for NumPy's and
// Go's division and interpolation rounding: within 1e-15.
func TestIsotonicExactMatchesScikitLearn(t *testing.T) {
	ref := readIsotonicReference(t)
	if len(ref.Scores) < 9 || len(ref.PAV) < 5 {
		t.Fatalf("reference has %d score cases and %d PAV cases", len(ref.Scores), len(ref.PAV))
	}
	const tol = 1e-15
	for _, tc := range ref.Scores {
		bx, by := fitScores(tc.X, tc.Y)
		if len(bx) != len(tc.BX) {
			t.Errorf("%s: %d breakpoints, scikit-learn %d:\n%v\n%v", tc.Name, len(bx), len(tc.BX), bx, tc.BX)
			continue
		}
		for i := range bx {
			if bx[i] != tc.BX[i] || math.Abs(by[i]-tc.BY[i]) > tol {
				t.Errorf("%s: breakpoint %d (%.17g, %.17g), scikit-learn (%.17g, %.17g)", tc.Name, i, bx[i], by[i], tc.BX[i], tc.BY[i])
			}
		}
		for i, q := range tc.Query {
			if got := interpolate(bx, by, q); math.Abs(got-tc.Predict[i]) > tol {
				t.Errorf("%s: g(%.17g) = %.17g, scikit-learn %.17g", tc.Name, q, got, tc.Predict[i])
			}
		}
	}
	for _, tc := range ref.PAV {
		y, w := append([]float64(nil), tc.Y...), append([]float64(nil), tc.W...)
		pavInPlace(y, w)
		for i := range y {
			if math.Abs(y[i]-tc.Fit[i]) > 1e-14 {
				t.Errorf("PAV of %d values: %v, scikit-learn %v", len(y), y, tc.Fit)
				break
			}
		}
	}
}

// TestIsotonicExactHand checks the fit and its predictions on cases
// worked by hand.
func TestIsotonicExactHand(t *testing.T) {
	for _, tc := range []struct {
		name         string
		x, y, bx, by []float64
		q, want      []float64 // g at q
	}{
		{
			// PAV pools (1, 0) at 0.2, 0.3 to 0.5; the value changes at
			// 0.2 and 1 holds from 0.4 on, so 0.5 is dropped.
			name: "one pool",
			x:    []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, y: []float64{0, 1, 0, 1, 1, 1},
			bx: []float64{0.1, 0.2, 0.3, 0.4, 0.6}, by: []float64{0, 0.5, 0.5, 1, 1},
			q: []float64{0, 0.1, 0.15, 0.25, 0.35, 0.5, 0.6, 1}, want: []float64{0, 0, 0.25, 0.5, 0.75, 1, 1, 1},
		},
		{
			// Given out of order: sorted first.
			name: "unsorted",
			x:    []float64{0.6, 0.3, 0.1, 0.5, 0.2, 0.4}, y: []float64{1, 0, 0, 1, 1, 1},
			bx: []float64{0.1, 0.2, 0.3, 0.4, 0.6}, by: []float64{0, 0.5, 0.5, 1, 1},
			q: []float64{0.25}, want: []float64{0.5},
		},
		{
			// 0.5 + 4e-16 is within 1e-15 of 0.5, so joins it (mean
			// 1/2, weight 2); 0.5 + 2e-15 is not.
			name: "near tie merged",
			x:    []float64{0.5, 0.5 + 4e-16, 0.5 + 2e-15}, y: []float64{0, 1, 1},
			bx: []float64{0.5, 0.5 + 2e-15}, by: []float64{0.5, 1},
			q: []float64{0.4, 0.5, 0.6}, want: []float64{0.5, 0.5, 1},
		},
		{
			// Targets decreasing in the score: one block at the mean.
			name: "decreasing",
			x:    []float64{0.2, 0.4, 0.6, 0.8}, y: []float64{1, 1, 0, 0},
			bx: []float64{0.2, 0.8}, by: []float64{0.5, 0.5},
			q: []float64{0, 0.5, 1}, want: []float64{0.5, 0.5, 0.5},
		},
		{
			name: "one row",
			x:    []float64{0.3}, y: []float64{1},
			bx: []float64{0.3}, by: []float64{1},
			q: []float64{0, 0.3, 1}, want: []float64{1, 1, 1},
		},
		{
			// Exact ties: 0.5 holds (0, 1, 1) → 2/3.
			name: "ties",
			x:    []float64{0.25, 0.5, 0.5, 0.5, 0.75}, y: []float64{0, 1, 0, 1, 1},
			bx: []float64{0.25, 0.5, 0.75}, by: []float64{0, 2.0 / 3, 1},
			q: []float64{0.375}, want: []float64{1.0 / 3},
		},
	} {
		bx, by := fitScores(tc.x, tc.y)
		if !equalWithin(bx, tc.bx, 0) || !equalWithin(by, tc.by, 1e-16) {
			t.Errorf("%s: breakpoints %v %v, want %v %v", tc.name, bx, by, tc.bx, tc.by)
			continue
		}
		for i, q := range tc.q {
			if got := interpolate(bx, by, q); math.Abs(got-tc.want[i]) > 1e-15 {
				t.Errorf("%s: g(%v) = %v, want %v", tc.name, q, got, tc.want[i])
			}
		}
	}
}

func equalWithin(a, b []float64, tol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !(math.Abs(a[i]-b[i]) <= tol) {
			return false
		}
	}
	return true
}

// TestIsotonicExactPredict checks Predict of an exact fit by hand: the
// class maps, then the normalisation, weighting and the fallback to p̂.
func TestIsotonicExactPredict(t *testing.T) {
	b := &Isotonic{X: [][]float64{{0, 1}, {0.2, 0.6}}, Y: [][]float64{{0, 1}, {0, 0.5}}}
	p := []float64{0.6, 0.4}
	z := []float64{math.Log(p[0]), math.Log(p[1])}
	got := make([]float64, 2)
	b.Predict(got, z)
	// g = (0.6, 0.25·… ) : class 1 at 0.4 is halfway on [0.2, 0.6] → 0.25.
	if math.Abs(got[0]-0.6/0.85) > 1e-15 || math.Abs(got[1]-0.25/0.85) > 1e-15 {
		t.Errorf("Predict = %v, want [0.6 0.25]/0.85", got)
	}
	// Both maps 0: p̂ itself. p = (0.1, 0.9) is outside class 1's range
	// on the right (0.5), so use p = (0, …) by a large gap instead.
	zero := &Isotonic{X: [][]float64{{0.5, 1}, {0.5, 1}}, Y: [][]float64{{0, 1}, {0, 1}}}
	zero.Predict(got, []float64{0, 0}) // p̂ = (0.5, 0.5): g = (0, 0)
	if got[0] != 0.5 || got[1] != 0.5 {
		t.Errorf("all-zero maps: %v, want p̂ = [0.5 0.5]", got)
	}
	if err := b.SetWeighting(WeightAll, []float64{0.5, 1}); err != nil {
		t.Fatal(err)
	}
	b.Predict(got, z)
	// g̃ = (0.5·0.6 + 0.5·0.6, 0.25) = (0.6, 0.25).
	if math.Abs(got[0]-0.6/0.85) > 1e-15 || math.Abs(got[1]-0.25/0.85) > 1e-15 {
		t.Errorf("weighted Predict = %v", got)
	}
	if b.Classes() != 2 || !b.Exact() || b.Breakpoints() != 4 {
		t.Errorf("classes %d, exact %v, %d breakpoints", b.Classes(), b.Exact(), b.Breakpoints())
	}
}

// TestIsotonicExactProperties checks on random sets that every class's
// fitted map is non-decreasing in the score and within [0, 1], that its
// breakpoints are as validate wants them, that the fit's squared error
// is the least among non-decreasing fits (against pav and the
// enumeration of bruteIsotonic on the merged scores), and that the file
// round-trips.
func TestIsotonicExactProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(32, 1))
	for trial := range 40 {
		c := 2 + rng.IntN(4)
		n := 1 + rng.IntN(60)
		s := &Set{Classes: c, Logits: make([]float64, n*c), Labels: make([]int, n)}
		for i := range s.Logits {
			s.Logits[i] = rng.NormFloat64() * 3
			if trial%4 == 0 {
				s.Logits[i] = math.Round(s.Logits[i]) // ties
			}
		}
		for i := range s.Labels {
			s.Labels[i] = rng.IntN(c)
		}
		b := new(Isotonic)
		if err := b.Fit(s); err != nil {
			t.Fatal(err)
		}
		if err := b.validate(); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		for j := range c {
			prev := -1.0
			for k := 0; k <= 1000; k++ {
				g := interpolate(b.X[j], b.Y[j], float64(k)/1000)
				if g < prev || g < 0 || g > 1 {
					t.Fatalf("trial %d, class %d: g(%v) = %v after %v", trial, j, float64(k)/1000, g, prev)
				}
				prev = g
			}
		}
		// The fit at the merged scores against PAV and enumeration.
		p := make([]float64, len(s.Logits))
		SoftmaxRows(p, s.Logits, c)
		w := &exactWork{}
		scores := make([]float64, n)
		for j := range c {
			for i := range scores {
				scores[i] = p[i*c+j]
			}
			w.fit(scores, s.Labels, j)
			xs, ys, ws := mergeTies(w.pts, nil, nil, nil)
			want := pav(ys, ws)
			if len(xs) <= 8 {
				brute := bruteIsotonic(ys, ws)
				for i := range want {
					if math.Abs(brute[i]-want[i]) > 1e-12 {
						t.Fatalf("trial %d: pav %v, enumeration %v", trial, want, brute)
					}
				}
			}
			for i, x := range xs {
				if got := interpolate(b.X[j], b.Y[j], x); math.Abs(got-want[i]) > 1e-12 {
					t.Fatalf("trial %d, class %d: g(%v) = %v, PAV %v", trial, j, x, got, want[i])
				}
			}
		}
		var buf bytes.Buffer
		if err := Encode(&buf, b, nil, Provenance{}); err != nil {
			t.Fatal(err)
		}
		got, _, err := Decode(&buf)
		if err != nil {
			t.Fatal(err)
		}
		d := got.(*Isotonic)
		for j := range c {
			if !equalWithin(d.X[j], b.X[j], 0) || !equalWithin(d.Y[j], b.Y[j], 0) {
				t.Fatalf("trial %d: round trip changed class %d", trial, j)
			}
		}
	}
}

// TestIsotonicExactValidate checks the refusals of an exact fit's
// parameters as a file gives them.
func TestIsotonicExactValidate(t *testing.T) {
	for _, tc := range []struct {
		name, params string
		want         string // "" for valid
	}{
		{"valid", `{"x": [[0, 0.5, 1], [0.2]], "y": [[0, 0.5, 0.5], [1]]}`, ""},
		{"weighted", `{"x": [[0, 1], [0, 1]], "y": [[0, 1], [0, 1]], "weighting": "all", "alpha": [0.5, 0.5]}`, ""},
		{"no params", `{}`, "at least 2 classes"},
		{"one class", `{"x": [[0, 1]], "y": [[0, 1]]}`, "at least 2 classes"},
		{"classes differ", `{"x": [[0, 1], [0, 1]], "y": [[0, 1]]}`, "y of 1"},
		{"lengths differ", `{"x": [[0, 1], [0, 1]], "y": [[0, 1], [0]]}`, "class 1 has 2 breakpoints in x but 1 in y"},
		{"empty class", `{"x": [[0, 1], []], "y": [[0, 1], []]}`, "class 1 has no breakpoints"},
		{"x repeats", `{"x": [[0, 0], [0, 1]], "y": [[0, 1], [0, 1]]}`, "does not increase"},
		{"y decreases", `{"x": [[0, 1], [0, 1]], "y": [[0.5, 0.4], [0, 1]]}`, "decreases from 0.5"},
		{"x above 1", `{"x": [[0, 1.5], [0, 1]], "y": [[0, 1], [0, 1]]}`, "x of class 0, breakpoint 1 is 1.5"},
		{"y below 0", `{"x": [[0, 1], [0, 1]], "y": [[-0.1, 1], [0, 1]]}`, "y of class 0, breakpoint 0 is -0.1"},
		{"both forms", `{"bins": 2, "table": [0, 1, 0, 1], "x": [[0, 1], [0, 1]], "y": [[0, 1], [0, 1]]}`, "both a binned fit"},
		{"alpha count", `{"x": [[0, 1], [0, 1]], "y": [[0, 1], [0, 1]], "weighting": "all", "alpha": [0.5]}`, "alpha has 1 weights for 2 classes"},
	} {
		var b Isotonic
		if err := json.Unmarshal([]byte(tc.params), &b); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		err := b.validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestIsotonicExactRegistry checks that the registry's central isotonic
// fit is exact without a bin exponent and binned with one, and that a
// binned file of the earlier format (bins and table) still decodes.
func TestIsotonicExactRegistry(t *testing.T) {
	m, err := LookupMethod(MethodIsotonic)
	if err != nil {
		t.Fatal(err)
	}
	if !m.ExactCentral() || m.DefaultMexp() != IsotonicMexp {
		t.Errorf("isotonic: exact central %v, default M %d", m.ExactCentral(), m.DefaultMexp())
	}
	for _, other := range Methods() {
		if other.Name != MethodIsotonic && other.ExactCentral() {
			t.Errorf("%s claims an exact central fit", other.Name)
		}
	}
	s := &Set{Classes: 2, Logits: []float64{0, 1, 2, 0, 1, 1}, Labels: []int{1, 0, 0}}
	for _, tc := range []struct {
		mexp  int
		exact bool
	}{{0, true}, {3, false}} {
		c, err := New(MethodIsotonic, Settings{Mexp: tc.mexp})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Fit(s); err != nil {
			t.Fatal(err)
		}
		b := c.(*Isotonic)
		if b.Exact() != tc.exact || (b.Table == nil) != tc.exact || (b.X == nil) == tc.exact {
			t.Errorf("Mexp %d: exact %v, table %d, %d breakpoints", tc.mexp, b.Exact(), len(b.Table), b.Breakpoints())
		}
	}
	old := `{"format": "fedcalib.calibrator/v1", "method": "isotonic", "classes": 2,
		"params": {"bins": 2, "table": [0, 1, 0.25, 0.75]}, "provenance": {"seed": 1}}`
	c, _, err := Decode(strings.NewReader(old))
	if err != nil {
		t.Fatal(err)
	}
	if b := c.(*Isotonic); b.Exact() || b.Bins != 2 || b.Classes() != 2 {
		t.Errorf("binned file read as exact %v, %d bins, %d classes", b.Exact(), b.Bins, b.Classes())
	}
}

// TestIsotonicExactThreads checks that the exact fit is the same to the
// bit whether its classes are fitted on one goroutine or several.
func TestIsotonicExactThreads(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	const n, c = 500, 7
	s := &Set{Classes: c, Logits: make([]float64, n*c), Labels: make([]int, n)}
	for i := range s.Logits {
		s.Logits[i] = rng.NormFloat64() * 2
	}
	for i := range s.Labels {
		s.Labels[i] = rng.IntN(c)
	}
	var fits [2]*Isotonic
	for i, procs := range []int{1, 4} {
		old := runtime.GOMAXPROCS(procs)
		fits[i] = new(Isotonic)
		err := fits[i].Fit(s)
		runtime.GOMAXPROCS(old)
		if err != nil {
			t.Fatal(err)
		}
	}
	for j := range c {
		if !equalWithin(fits[0].X[j], fits[1].X[j], 0) || !equalWithin(fits[0].Y[j], fits[1].Y[j], 0) {
			t.Errorf("class %d: 1 and 4 threads differ", j)
		}
	}
}

// TestIsotonicFitFloat32 checks that FitFloat32 on a selection of float32
// rows gives, exact and binned, the calibrator that Fit gives on the
// selected rows converted to a Set, bit for bit, and refuses what Fit
// refuses.
func TestIsotonicFitFloat32(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	const n, c = 300, 4
	r := &Float32Rows{Logits: make([]float32, n*c), Labels: make([]int32, n), Classes: c}
	for i := range r.Logits {
		r.Logits[i] = float32(rng.NormFloat64() * 3)
	}
	for i := range r.Labels {
		r.Labels[i] = int32(rng.IntN(c))
	}
	for _, rows := range [][]int{nil, {5, 3, 3, 200, 17, 299, 0, 42, 8, 9, 10}} {
		r.Rows = rows
		s := &Set{Classes: c}
		for k := range r.Len() {
			i := k
			if rows != nil {
				i = rows[k]
			}
			for _, v := range r.Logits[i*c : (i+1)*c] {
				s.Logits = append(s.Logits, float64(v))
			}
			s.Labels = append(s.Labels, int(r.Labels[i]))
		}
		for _, bins := range []int{0, 16} {
			got, want := &Isotonic{Bins: bins}, &Isotonic{Bins: bins}
			if err := got.FitFloat32(r); err != nil {
				t.Fatal(err)
			}
			if err := want.Fit(s); err != nil {
				t.Fatal(err)
			}
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			if !bytes.Equal(g, w) || got.Exact() != (bins == 0) {
				t.Errorf("%d rows, %d bins: FitFloat32\n%s\nFit\n%s", r.Len(), bins, g, w)
			}
		}
	}
	r.Rows = []int{}
	if err := new(Isotonic).FitFloat32(r); err == nil || !strings.Contains(err.Error(), "no examples") {
		t.Errorf("no rows: %v", err)
	}
	r.Rows = []int{n}
	if err := new(Isotonic).FitFloat32(r); err == nil {
		t.Error("a row outside the block: no error")
	}
}
