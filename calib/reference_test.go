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
