package calib_test

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// referenceMetrics are the equal-mass and KS metrics that NumPy computes
// from the reference logits files (make_metrics_reference.py, run once).
type referenceMetrics struct {
	AdaptiveECE   float64 `json:"adaptive_ece"`
	KS            float64 `json:"ks"`
	AdaptiveCWECE float64 `json:"adaptive_cwece"`
	DebiasedCWCE  float64 `json:"debiased_cwce"`
	CWKS          float64 `json:"cw_ks"`
}

// referenceMetricsTol is how far the Go metrics may stray from NumPy's:
// the two softmaxes may differ in the last bit of a probability, and
// the sums are added in other orders.
const referenceMetricsTol = 1e-13

// TestMetricsMatchNumPy checks the adaptive ECE, the KS error and the
// classwise equal-mass errors of the softmax of each reference file (its
// test rows and all rows, 15, 10 and 7 bins) against NumPy's, both from
// the whole matrix (TopLabelErrors, ClasswiseErrors) and streamed in
// shuffled chunks through accumulators merged in another order.
func TestMetricsMatchNumPy(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(referenceDir, "metrics_reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Files map[string]map[string]map[string]referenceMetrics `json:"files"`
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range referenceFiles {
		f, err := logits.Read(filepath.Join(referenceDir, name+".npz"))
		if err != nil {
			t.Fatal(err)
		}
		for split, rows := range map[string][]int{"test": f.Rows(logits.SplitTest), "all": f.Rows(logits.AllRows)} {
			s := f.Set(rows)
			p := make([]float64, len(s.Logits))
			calib.SoftmaxRows(p, s.Logits, s.Classes)
			for bins, want := range ref.Files[name][split] {
				nb, _ := strconv.Atoi(bins)
				tl, err := calib.TopLabelErrors(p, s.Labels, s.Classes, nb)
				if err != nil {
					t.Fatal(err)
				}
				cw, err := calib.ClasswiseErrors(p, s.Labels, s.Classes, nb)
				if err != nil {
					t.Fatal(err)
				}
				stl, scw := streamed(t, p, s.Labels, s.Classes, nb)
				for _, g := range []struct {
					how string
					tl  calib.TopLabel
					cw  calib.Classwise
				}{{"whole", tl, cw}, {"streamed", stl, scw}} {
					got := referenceMetrics{*g.tl.AdaptiveECE, *g.tl.KS, g.cw.AdaptiveCWECE, g.cw.DebiasedCWCE, g.cw.KS}
					gv, wv := []float64{got.AdaptiveECE, got.KS, got.AdaptiveCWECE, got.DebiasedCWCE, got.CWKS},
						[]float64{want.AdaptiveECE, want.KS, want.AdaptiveCWECE, want.DebiasedCWCE, want.CWKS}
					for k, key := range []string{"adaptive_ece", "ks", "adaptive_cwece", "debiased_cwce", "cw_ks"} {
						if math.Abs(gv[k]-wv[k]) > referenceMetricsTol {
							t.Errorf("%s %s, %s bins, %s: %s = %.17g, NumPy %.17g", name, split, bins, g.how, key, gv[k], wv[k])
						}
						checked++
					}
				}
				if g, w := scw, cw; g != w || *stl.AdaptiveECE != *tl.AdaptiveECE || *stl.KS != *tl.KS {
					t.Errorf("%s %s, %s bins: streamed %+v %v %v differs from whole %+v %v %v", name, split, bins, g, *stl.AdaptiveECE, *stl.KS, w, *tl.AdaptiveECE, *tl.KS)
				}
			}
		}
	}
	if checked != 2*2*3*2*5 {
		t.Errorf("checked %d values, want %d: the reference lacks a case", checked, 2*2*3*2*5)
	}
}

// streamed computes the top-label and classwise errors of probs by
// adding the rows, shuffled, in chunks of 97 to three accumulators that
// keep the classes in two groups and the top confidences, merged in
// reverse order.
func streamed(t *testing.T, probs []float64, labels []int, c, bins int) (calib.TopLabel, calib.Classwise) {
	t.Helper()
	n := len(labels)
	perm := rand.New(rand.NewPCG(3, 4)).Perm(n)
	sp, sl := make([]float64, n*c), make([]int, n)
	for i, k := range perm {
		copy(sp[i*c:(i+1)*c], probs[k*c:(k+1)*c])
		sl[i] = labels[k]
	}
	groups := [][2]int{{0, c / 2}, {c / 2, c}}
	var parts []calib.ClassErrors
	var tl calib.TopLabel
	for g, gr := range groups {
		accs := make([]*calib.Accumulator, 3)
		for i := range accs {
			accs[i], _ = calib.NewAccumulator(c, bins)
			accs[i].KeepClassConfidences(gr[0], gr[1], 7*i) // no guess, a small one, and more
			if g == 0 {
				accs[i].KeepTopConfidences()
			}
		}
		for lo, k := 0, 0; lo < n; lo, k = lo+97, k+1 {
			hi := min(lo+97, n)
			if err := accs[k%3].Add(sp[lo*c:hi*c], sl[lo:hi]); err != nil {
				t.Fatal(err)
			}
		}
		total, _ := calib.NewAccumulator(c, bins)
		total.KeepClassConfidences(gr[0], gr[1], 0)
		if g == 0 {
			total.KeepTopConfidences()
		}
		for i := len(accs) - 1; i >= 0; i-- {
			if err := total.Merge(accs[i]); err != nil {
				t.Fatal(err)
			}
		}
		parts = append(parts, total.ClassErrors(0)...)
		if g == 0 {
			tl = total.TopLabel()
		}
	}
	if len(parts) != c {
		t.Fatalf("%d class parts for %d classes", len(parts), c)
	}
	return tl, calib.CombineClasswise(parts)
}
