package calib_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// referenceDir holds logits files and the optima of each central fit's
// objective there, computed by SciPy and PyTorch (make_reference.py,
// run once; CI needs no Python).
const referenceDir = "testdata/reference"

// referenceFiles are the logits files of referenceDir: MNIST-like logits,
// and the same with 0.5% of rows replaced by two tied top logits and the
// rest at −1e4.
var referenceFiles = []string{"mnistlike", "extreme"}

// referenceObjectiveTol is how close, relative, a converged Go fit's
// objective must come to the independent optimiser's.
const referenceObjectiveTol = 1e-6

type referenceFit struct {
	Objective float64 `json:"objective"`
	Gradient  float64 `json:"gradient"`
	T         float64 `json:"t"`
	Variant   string  `json:"variant"`
	Lambda    float64 `json:"lambda"`
	Mu        float64 `json:"mu"`
}

type referenceValues struct {
	Files map[string]struct {
		Temp      referenceFit   `json:"temp"`
		Vector    referenceFit   `json:"vector"`
		Matrix    referenceFit   `json:"matrix"`
		OPVector  referenceFit   `json:"opvector"`
		Dirichlet []referenceFit `json:"dirichlet"`
	} `json:"files"`
}

func readReference(t *testing.T) referenceValues {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(referenceDir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r referenceValues
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// referenceSet returns the rows of split split of the reference logits
// file name.
func referenceSet(t *testing.T, name string, split int) *calib.Set {
	t.Helper()
	f, err := logits.Read(filepath.Join(referenceDir, name+".npz"))
	if err != nil {
		t.Fatal(err)
	}
	return f.Set(f.Rows(split))
}

// TestFitsReachReferenceOptima checks that each central scaling fit
// converges, says so, and reaches the objective SciPy's L-BFGS-B (with
// PyTorch's float64 gradients) or bounded search reaches, within
// referenceObjectiveTol relative; on the extreme file temperature must
// also say that T sits at its upper bound.
func TestFitsReachReferenceOptima(t *testing.T) {
	if testing.Short() {
		t.Skip("fits 2000 rows to convergence")
	}
	ref := readReference(t)
	for _, name := range referenceFiles {
		s := referenceSet(t, name, logits.SplitCalibration)
		r := ref.Files[name]
		type tc struct {
			name string
			c    calib.Calibrator
			want referenceFit
		}
		cases := []tc{
			{"temp", new(calib.Temperature), r.Temp},
			{"vector", new(calib.Vector), r.Vector},
			{"matrix", new(calib.Matrix), r.Matrix},
			{"opvector", new(calib.OPVector), r.OPVector},
		}
		for _, d := range r.Dirichlet {
			cases = append(cases, tc{"dirichlet " + d.Variant, &calib.Dirichlet{Variant: d.Variant, Lambda: d.Lambda, Mu: d.Mu}, d})
		}
		for _, c := range cases {
			if err := c.c.Fit(s); err != nil {
				t.Fatalf("%s %s: %v", name, c.name, err)
			}
			rep := c.c.(calib.FitReporter).LastFit()
			rel := (rep.Objective - c.want.Objective) / c.want.Objective
			t.Logf("%-9s %-17s objective %.15g, reference %.15g (%+.2e relative); %d iterations, gradient %.2g, %s",
				name, c.name, rep.Objective, c.want.Objective, rel, rep.Iterations, rep.Gradient, rep.Stop)
			if !rep.Converged {
				t.Errorf("%s %s: did not converge: %+v", name, c.name, rep)
			}
			if math.Abs(rel) > referenceObjectiveTol {
				t.Errorf("%s %s: objective %.15g, reference %.15g: %.2e relative, want within %v",
					name, c.name, rep.Objective, c.want.Objective, rel, referenceObjectiveTol)
			}
		}
		tp := cases[0].c.(*calib.Temperature)
		atMax := c0(tp.LastFit().AtBound)
		if name == "extreme" {
			if tp.T != calib.MaxTemperature || atMax == "" || tp.LastFit().Warning() == "" {
				t.Errorf("extreme: T = %v, at bound %q, warning %q: want T at %v, said", tp.T, atMax, tp.LastFit().Warning(), calib.MaxTemperature)
			}
		} else if atMax != "" || math.Abs(tp.T-r.Temp.T) > 1e-7*r.Temp.T {
			// SciPy's bounded search, on an objective flat to 1e-16 near
			// its minimum, locates T to about 6e-9.
			t.Errorf("%s: T = %v (at bound %q), reference %v", name, tp.T, atMax, r.Temp.T)
		}
	}
}

func c0(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// referenceNew holds the references of platt, beta and eqmass
// (make_reference.py's new_calibrators).
type referenceNew struct {
	Files map[string]struct {
		Platt    referenceLogistic `json:"platt"`
		PlattMLE referenceLogistic `json:"platt_mle"`
		Beta     referenceLogistic `json:"beta"`
		BetaMLE  referenceLogistic `json:"beta_mle"`
		EqMass   struct {
			TestNLL   float64 `json:"test_nll"`
			TestBrier float64 `json:"test_brier"`
			Bins      int     `json:"bins"`
			FineBins  int     `json:"fine_bins"`
		} `json:"eqmass"`
	} `json:"files"`
}

type referenceLogistic struct {
	Objective float64   `json:"objective"`
	A         []float64 `json:"a"`
	B         []float64 `json:"b"`
	C         []float64 `json:"c"`
	SklearnA  []float64 `json:"sklearn_a"`
	SklearnB  []float64 `json:"sklearn_b"`
}

// TestNewCalibratorsMatchReference checks platt and beta (with calib's
// default prior and without, as scikit-learn and betacal fit) against
// SciPy's optimum of the same objective — platt's without the prior also
// against scikit-learn's own _sigmoid_calibration on the MNIST-like file
// (on the extreme file scikit-learn's BFGS stops far from the optimum) —
// and eqmass's test NLL and Brier score against a NumPy implementation.
func TestNewCalibratorsMatchReference(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(referenceDir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref referenceNew
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	near := func(got, want, tol float64) bool { return math.Abs(got-want) <= tol*max(1, math.Abs(want)) }
	for _, name := range referenceFiles {
		s := referenceSet(t, name, logits.SplitCalibration)
		test := referenceSet(t, name, logits.SplitTest)
		r := ref.Files[name]
		cases := []struct {
			name string
			c    calib.Calibrator
			want referenceLogistic
		}{
			{"platt", new(calib.Platt), r.Platt},
			{"platt mle", &calib.Platt{Options: calib.FitOptions{Prior: -1}}, r.PlattMLE},
			{"beta", new(calib.Beta), r.Beta},
			{"beta mle", &calib.Beta{Options: calib.FitOptions{Prior: -1}}, r.BetaMLE},
		}
		for _, c := range cases {
			if err := c.c.Fit(s); err != nil {
				t.Fatalf("%s %s: %v", name, c.name, err)
			}
			rep := c.c.(calib.FitReporter).LastFit()
			rel := (rep.Objective - c.want.Objective) / c.want.Objective
			t.Logf("%-9s %-9s objective %.15g, reference %.15g (%+.2e relative); %d Newton steps, gradient %.2g",
				name, c.name, rep.Objective, c.want.Objective, rel, rep.Iterations, rep.Gradient)
			if !rep.Converged || rep.Warning() != "" {
				t.Errorf("%s %s: %+v, warning %q: want converged", name, c.name, rep, rep.Warning())
			}
			if math.Abs(rel) > referenceObjectiveTol {
				t.Errorf("%s %s: objective %.15g, reference %.15g: %.2e relative, want within %v", name, c.name, rep.Objective, c.want.Objective, rel, referenceObjectiveTol)
			}
			var got [][]float64
			switch m := c.c.(type) {
			case *calib.Platt:
				got = [][]float64{m.A, m.B}
			case *calib.Beta:
				got = [][]float64{m.A, m.B, m.C}
			}
			for k, want := range [][]float64{c.want.A, c.want.B, c.want.C}[:len(got)] {
				for j := range want {
					if !near(got[k][j], want[j], 1e-5) {
						t.Errorf("%s %s: parameter %d of class %d is %.12g, reference %.12g", name, c.name, k, j, got[k][j], want[j])
					}
				}
			}
			if c.want.SklearnA != nil && name == "mnistlike" {
				// scikit-learn's fmin_bfgs stops at gradient 1e-5 of the
				// summed objective, about 4e-6 from the optimum here.
				m := c.c.(*calib.Platt)
				for j := range m.A {
					if !near(m.A[j], c.want.SklearnA[j], 2e-5) || !near(m.B[j], c.want.SklearnB[j], 2e-5) {
						t.Errorf("%s %s class %d: (a, b) = (%.10g, %.10g), scikit-learn (%.10g, %.10g)", name, c.name, j, m.A[j], m.B[j], c.want.SklearnA[j], c.want.SklearnB[j])
					}
				}
			}
		}
		em := &calib.EqualMass{Bins: r.EqMass.FineBins, MassBins: r.EqMass.Bins}
		if err := em.Fit(s); err != nil {
			t.Fatal(err)
		}
		p := make([]float64, len(test.Logits))
		em.Predict(p, test.Logits)
		m, err := calib.Evaluate(p, test.Labels, test.Classes, calib.DefaultMetricBins)
		if err != nil {
			t.Fatal(err)
		}
		if !near(m.NLL, r.EqMass.TestNLL, 1e-12) || !near(m.Brier, r.EqMass.TestBrier, 1e-12) {
			t.Errorf("%s eqmass: test NLL %.15g, Brier %.15g; NumPy %.15g, %.15g", name, m.NLL, m.Brier, r.EqMass.TestNLL, r.EqMass.TestBrier)
		}
	}
}
