package calib

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestMethodSize checks Size against the parameters a scaler really has
// and the histograms a binning fit holds, and CheckSize's bound.
func TestMethodSize(t *testing.T) {
	for _, m := range Methods() {
		for _, c := range []int{2, 10, 37} {
			want := 2 * c * 16
			switch m.Family {
			case Scaling:
				want = len(m.NewScaler(c, rand.New(rand.NewPCG(1, 2))).Params())
			case Hybrid:
				want++ // the temperature
			}
			if got := m.Size(c, 16); got != float64(want) {
				t.Errorf("%s, %d classes: Size %v, want %d", m.Name, c, got, want)
			}
		}
	}
	for _, tc := range []struct {
		method       string
		classes, bin int
		want         string // "" for no error
	}{
		{MethodTemp, 1 << 30, 0, ""},
		{MethodMatrix, MaxFullClasses, 0, ""},
		{MethodDirichlet, MaxFullClasses, 0, ""},
		{MethodMatrix, 1000, 0, "matrix fits a full 1000×1000 matrix (1.001e+06 parameters) and is limited to 256 classes: use vector"},
		{MethodDirichlet, 257, 0, "dirichlet fits a full 257×257 matrix (6.631e+04 parameters) and is limited to 256 classes"},
		{MethodVector, 4096, 0, ""},
		{MethodMatrix, 4096, 0, "matrix with 4096 classes has 1.678e+07 parameters, more than the 16777216"},
		{MethodMatrix, 1_000_000_000, 0, "use a method with fewer parameters"},
		{MethodVector, 1_000_000_000, 0, "vector with 1000000000 classes"},
		{MethodBin, 100, MaxBins, ""},
		{MethodBBQ, 1000, 1 << 13, ""},
		{MethodBBQ, 1000, MaxBins, "bbq with 1000 classes and 65536 bins per class needs 2·1000·65536 = 1.311e+08 histogram counts"},
		{MethodBin, 1_000_000_000, 2, "use fewer bins"},
	} {
		m, err := LookupMethod(tc.method)
		if err != nil {
			t.Fatal(err)
		}
		err = m.CheckSize(tc.classes, tc.bin)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s, %d classes, %d bins: %v", tc.method, tc.classes, tc.bin, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s, %d classes, %d bins: error %v, want %q", tc.method, tc.classes, tc.bin, err, tc.want)
		}
	}
}
