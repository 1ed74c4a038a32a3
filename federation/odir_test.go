package federation_test

import (
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
)

// TestSpecODIR checks that a fixed ODIR regularisation reaches every
// client of FedDirichlet: with one client holding the whole set, p = 1,
// T = 1 and no noise, the fit equals the central fit with the same fixed
// regularisation, and differs from the fit with the defaults. Other
// methods, and negative values, are refused.
func TestSpecODIR(t *testing.T) {
	set := fedConformanceSet(400, 4, 3)
	r := federation.Rounds{T: 1, SampleRate: 1, Seed: fedSeed, Workers: 1}
	odir := &calib.ODIR{Lambda: 0.5, Mu: 0.2}
	f, err := federation.Spec{Method: calib.MethodDirichlet, ODIR: odir}.Fitter()
	if err != nil {
		t.Fatal(err)
	}
	fed := fedFit(t, f, set, r).(calib.Scaler).Params()
	c, err := calib.New(calib.MethodDirichlet, calib.Settings{ODIR: odir})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Fit(set); err != nil {
		t.Fatal(err)
	}
	compareParams(t, fed, c.(calib.Scaler).Params())
	f, err = federation.Spec{Method: calib.MethodDirichlet}.Fitter()
	if err != nil {
		t.Fatal(err)
	}
	if closeParams(fedFit(t, f, set, r).(calib.Scaler).Params(), fed) {
		t.Error("the fit with the default regularisation equals the fit with λ = 0.5, μ = 0.2")
	}

	for _, tc := range []struct {
		spec federation.Spec
		want string
	}{
		{federation.Spec{Method: calib.MethodMatrix, ODIR: &calib.ODIR{}}, "matrix takes no ODIR regularisation"},
		{federation.Spec{Method: calib.MethodBBQ, ODIR: &calib.ODIR{}}, "bbq takes no ODIR regularisation"},
		{federation.Spec{Method: calib.MethodDirichlet, ODIR: &calib.ODIR{Lambda: -1}}, "ODIR lambda is -1"},
		{federation.Spec{Method: calib.MethodDirichlet, ODIR: &calib.ODIR{Mu: -0.1}, Epsilon: 1}, "ODIR mu is -0.1"},
	} {
		if _, err := tc.spec.Fitter(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.spec, err, tc.want)
		}
	}
}
