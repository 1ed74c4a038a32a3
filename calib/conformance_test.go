package calib_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

// The conformance suite runs every calibrator of the registry through the
// same properties, in the manner of gonum's stat/distuv distribution
// tests: TestConformance ranges over calib.Methods(), so a new method is
// covered as soon as it is registered, and fails until the method has a
// conformanceCase. Package export's conformance test covers the sidecar
// and the exported ONNX graph (calib cannot import export); package
// federation's covers the federated fit.

// conformanceClasses is the number of classes of the golden files.
const conformanceClasses = 4

// conformanceSizes are the numbers of classes the suite runs at: the
// binary case, the golden files' and CIFAR-10's.
var conformanceSizes = []int{2, conformanceClasses, 10}

// conformanceCase is how the suite builds one method's calibrator.
type conformanceCase struct {
	// settings are passed to calib.New.
	settings calib.Settings
}

// conformanceCases holds one case per method of the registry. A method
// without a case fails TestConformance.
var conformanceCases = map[string]conformanceCase{
	calib.MethodBin:       {settings: calib.Settings{Mexp: 4}},
	calib.MethodBBQ:       {settings: calib.Settings{Mexp: 4}},
	calib.MethodIsotonic:  {},
	calib.MethodTemp:      {},
	calib.MethodVector:    {},
	calib.MethodMatrix:    {},
	calib.MethodDirichlet: {settings: calib.Settings{Seed: 5}},
	calib.MethodOPVector:  {},
	calib.MethodFedCal:    {settings: calib.Settings{Seed: 5}},
	// Few fine bins, so that rows of the suite land on their edges.
	calib.MethodScalingBinning: {settings: calib.Settings{Mexp: 6}},
	// Few fine bins, so that rows of the suite land on their edges.
	calib.MethodEqualMass: {settings: calib.Settings{Mexp: 6}},
	calib.MethodPlatt:     {},
	calib.MethodBeta:      {},
}

// conformanceAlpha is the weighting of the weighted binning variants: a
// different weight per class, strictly inside (0, 1), so that both the
// calibrator and the base model contribute.
func conformanceAlpha(c int) []float64 {
	alpha := make([]float64, c)
	for j := range alpha {
		alpha[j] = 0.2 + 0.6*float64(j)/float64(c)
	}
	return alpha
}

// miscalibrated returns n labelled logits of c classes from an
// over-confident model: each row favours a random class by 4 on top of
// N(0, 2²) noise, but the label is drawn from softmax(z/3), so the
// softmax probabilities are far too confident (temperature ≈ 3 fixes
// them). The same (n, c, seed) always gives the same set.
func miscalibrated(n, c int, seed uint64) *calib.Set {
	rng := rand.New(rand.NewPCG(seed, 0x636f6e66)) // "conf"
	s := &calib.Set{Logits: make([]float64, n*c), Labels: make([]int, n), Classes: c}
	p := make([]float64, c)
	for i := range n {
		z := s.Row(i)
		for j := range z {
			z[j] = 2 * rng.NormFloat64()
		}
		z[rng.IntN(c)] += 4
		for j := range p {
			p[j] = z[j] / 3
		}
		calib.Softmax(p, p)
		u, acc := rng.Float64(), 0.0
		s.Labels[i] = c - 1
		for j, v := range p {
			if acc += v; u < acc {
				s.Labels[i] = j
				break
			}
		}
	}
	return s
}

// conformanceSet is the fit set of the suite for c classes.
func conformanceSet(c int) *calib.Set { return miscalibrated(800, c, 1) }

// hardLogits returns rows of c logits that stress a calibrator: ties
// (all equal, a tied top pair, a tied bottom), extreme values (±1e4,
// beyond exp's range, tiny), one class far ahead for each class, rows
// whose softmax lands exactly on bin edges (1/c, 1/2, 1), and random
// rows at scales from 0.01 to 100.
func hardLogits(c int, seed uint64) []float64 {
	var out []float64
	row := make([]float64, c)
	add := func() { out = append(out, row...) }
	fill := func(v float64) {
		for j := range row {
			row[j] = v
		}
	}
	for _, v := range []float64{0, 3, -50, 1e4, -1e4} { // all tied
		fill(v)
		add()
	}
	for j := range c { // one class far ahead, then far behind
		for _, v := range []float64{1e4, 800, 40, -40, -800, -1e4} {
			fill(0)
			row[j] = v
			add()
		}
	}
	fill(1) // tied top pair above the rest
	row[0], row[c-1] = 5, 5
	add()
	fill(-1e4) // tied top pair at the extremes: softmax (1/2, 1/2, 0, …)
	row[0], row[c-1] = 1e4, 1e4
	add()
	for j := range row { // distinct, the two smallest tied
		row[j] = float64(c - j)
	}
	row[c-1] = row[c-2]
	add()
	for j := range row { // tiny, distinct
		row[j] = float64(j) * 1e-300
	}
	add()
	for j := range row { // differences below the resolution of the top
		row[j] = 1e4 + float64(j)*1e-12
	}
	add()
	rng := rand.New(rand.NewPCG(seed, 0x68617264)) // "hard"
	for _, scale := range []float64{0.01, 1, 5, 20, 100} {
		for range 20 {
			for j := range row {
				row[j] = scale * rng.NormFloat64()
			}
			add()
		}
	}
	return out
}

// conformanceLogits is what the suite predicts on: the first 200 rows of
// the fit set and hardLogits.
func conformanceLogits(s *calib.Set) []float64 {
	z := slices.Clone(s.Logits[:200*s.Classes])
	return append(z, hardLogits(s.Classes, 2)...)
}

// conformanceVariant is one calibrator of the suite: a method fitted on
// the conformance set, possibly with a weighting.
type conformanceVariant struct {
	name string
	cal  calib.Calibrator
}

// fitConformance returns the calibrator of method m fitted to s with
// case cc, and for binning methods also its weighted variants.
func fitConformance(t *testing.T, m calib.Method, cc conformanceCase, s *calib.Set) []conformanceVariant {
	t.Helper()
	c, err := calib.New(m.Name, cc.settings)
	if err != nil {
		t.Fatalf("calib.New(%q): %v", m.Name, err)
	}
	if err := c.Fit(s); err != nil {
		t.Fatalf("fit %s: %v", m.Name, err)
	}
	out := []conformanceVariant{{m.Name, c}}
	if m.Family != calib.Binning {
		return out
	}
	for _, mode := range []calib.Weighting{calib.WeightAll, calib.WeightChanged} {
		w, err := calib.New(m.Name, cc.settings)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Fit(s); err != nil {
			t.Fatal(err)
		}
		b, ok := w.(calib.Binner)
		if !ok {
			t.Fatalf("%s is a binning method but its calibrator %T is not a calib.Binner", m.Name, w)
		}
		if err := b.SetWeighting(mode, conformanceAlpha(s.Classes)); err != nil {
			t.Fatal(err)
		}
		out = append(out, conformanceVariant{m.Name + "-" + string(mode), w})
	}
	return out
}

func predict(c calib.Calibrator, logits []float64) []float64 {
	p := make([]float64, len(logits))
	c.Predict(p, logits)
	return p
}

// TestConformance runs every method of the registry through the
// properties every calibrator must have.
func TestConformance(t *testing.T) {
	for name := range conformanceCases {
		if _, err := calib.LookupMethod(name); err != nil {
			t.Errorf("conformance case for %q, which is not in the registry: %v", name, err)
		}
	}
	for _, m := range calib.Methods() {
		t.Run(m.Name, func(t *testing.T) {
			cc, ok := conformanceCases[m.Name]
			if !ok {
				t.Fatalf("method %q has no conformance case: add one to conformanceCases", m.Name)
			}
			if got := m.Family; got != calib.Binning && got != calib.Scaling && got != calib.Hybrid {
				t.Fatalf("family %v", got)
			}
			for _, k := range conformanceSizes {
				t.Run(fmt.Sprintf("C=%d", k), func(t *testing.T) { runConformance(t, m, cc, k) })
			}
		})
	}
}

// runConformance runs the properties for method m at k classes.
func runConformance(t *testing.T, m calib.Method, cc conformanceCase, k int) {
	s := conformanceSet(k)
	logits := conformanceLogits(s)
	for _, v := range fitConformance(t, m, cc, s) {
		t.Run(v.name, func(t *testing.T) {
			if v.cal.Method() != m.Name || v.cal.Classes() != k {
				t.Fatalf("fitted calibrator says method %q, %d classes: want %q, %d", v.cal.Method(), v.cal.Classes(), m.Name, k)
			}
			p := predict(v.cal, logits)
			t.Run("RowsSumToOne", func(t *testing.T) { checkRows(t, p, k) })
			t.Run("KeepsTopClass", func(t *testing.T) {
				if !m.KeepsTopClass {
					t.Skipf("%s does not claim to keep the top class", m.Name)
				}
				checkTopClass(t, logits, p, k)
			})
			t.Run("RoundTrip", func(t *testing.T) { checkRoundTrip(t, v.cal, logits, p) })
			t.Run("Improves", func(t *testing.T) { checkImproves(t, v.cal, s) })
		})
	}
	t.Run("Deterministic", func(t *testing.T) { checkDeterministic(t, m, cc, k) })
}

// checkRows checks that every row of p is a probability vector: entries
// in [0, 1] and a sum within 1e-12 of 1.
func checkRows(t *testing.T, p []float64, k int) {
	t.Helper()
	for i := 0; i < len(p); i += k {
		var sum float64
		for j, v := range p[i : i+k] {
			if !(v >= 0 && v <= 1) {
				t.Fatalf("row %d, class %d: probability %v outside [0, 1]", i/k, j, v)
			}
			sum += v
		}
		if math.Abs(sum-1) > 1e-12 {
			t.Fatalf("row %d sums to %.17g (off by %.3g)", i/k, sum, sum-1)
		}
	}
}

// checkTopClass checks that the largest logits of each row get the
// largest probability and that tied logits get equal probabilities (the
// first most probable class is then the first largest logit).
func checkTopClass(t *testing.T, logits, p []float64, k int) {
	t.Helper()
	for i := 0; i < len(p); i += k {
		z, q := logits[i:i+k], p[i:i+k]
		top := 0
		for j, v := range z {
			if v > z[top] {
				top = j
			}
		}
		for j := range z {
			if z[j] == z[top] && q[j] != q[top] {
				t.Fatalf("row %d %v: tied top logits %d and %d get %v and %v", i/k, z, top, j, q[top], q[j])
			}
			if q[j] > q[top] {
				t.Fatalf("row %d %v: class %d (probability %v) overtakes the top class %d (%v)", i/k, z, j, q[j], top, q[top])
			}
		}
	}
}

// checkRoundTrip checks that the calibrator read back from its sidecar
// encoding predicts bit for bit what it does, and encodes to the same
// bytes.
func checkRoundTrip(t *testing.T, c calib.Calibrator, logits, want []float64) {
	t.Helper()
	prov := calib.Provenance{Protocol: "central", Seed: 9, Data: "conformance"}
	priv := privacyRecord(t, c.Method(), c.Classes()) // a consistent record: Decode recomputes it
	var buf bytes.Buffer
	if err := calib.Encode(&buf, c, priv, prov); err != nil {
		t.Fatal(err)
	}
	enc := slices.Clone(buf.Bytes())
	back, f, err := calib.Decode(&buf)
	if err != nil {
		t.Fatalf("decode: %v\n%s", err, enc)
	}
	if f.Format != calib.FormatV1 || f.Method != c.Method() || f.Classes != c.Classes() {
		t.Errorf("file says format %q, method %q, %d classes", f.Format, f.Method, f.Classes)
	}
	if !reflect.DeepEqual(f.Provenance, prov) || (f.Privacy == nil) != (priv == nil) || priv != nil && *f.Privacy != *priv {
		t.Errorf("metadata did not survive: privacy %+v, provenance %+v", f.Privacy, f.Provenance)
	}
	got := predict(back, logits)
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			t.Fatalf("element %d: read back predicts %.17g, the original %.17g", i, got[i], want[i])
		}
	}
	var again bytes.Buffer
	if err := calib.Encode(&again, back, priv, prov); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), enc) {
		t.Errorf("re-encoding the decoded calibrator changes the file:\n%s\nthen\n%s", enc, again.Bytes())
	}
}

// checkImproves checks that the calibrator fitted on the miscalibrated
// set lowers its classwise ECE and NLL there: a fit that did nothing, or
// the wrong thing, fails.
func checkImproves(t *testing.T, c calib.Calibrator, s *calib.Set) {
	t.Helper()
	before, err := calib.EvaluateSet(s, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	after, err := calib.EvaluateSet(s, c, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cwECE %.4f → %.4f, NLL %.4f → %.4f", before.CWECE, after.CWECE, before.NLL, after.NLL)
	if !(after.CWECE < before.CWECE) || !(after.NLL < before.NLL) {
		t.Errorf("fitting on miscalibrated data does not help: cwECE %.4f → %.4f, NLL %.4f → %.4f", before.CWECE, after.CWECE, before.NLL, after.NLL)
	}
}

// checkDeterministic fits the method twice on equal copies of the set
// with the same settings and checks that the parameters are identical
// (through their encoding, which round-trips every float64) and that
// fitting leaves the set unchanged.
func checkDeterministic(t *testing.T, m calib.Method, cc conformanceCase, k int) {
	t.Helper()
	var files [2][]byte
	for r := range files {
		s := conformanceSet(k)
		orig := conformanceSet(k)
		c, err := calib.New(m.Name, cc.settings)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Fit(s); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(s.Labels, orig.Labels) || !slices.EqualFunc(s.Logits, orig.Logits, func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }) {
			t.Errorf("fit %d modified the set", r)
		}
		var buf bytes.Buffer
		if err := calib.Encode(&buf, c, nil, calib.Provenance{}); err != nil {
			t.Fatal(err)
		}
		files[r] = buf.Bytes()
		if sc, ok := c.(calib.Scaler); ok && len(sc.Params()) != sc.NumParams() {
			t.Errorf("scaler has %d parameters but NumParams says %d", len(sc.Params()), sc.NumParams())
		}
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Errorf("two fits on the same set with the same settings differ:\n%.2000s\nthen\n%.2000s", files[0], files[1])
	}
}
