package calib_test

import (
	"path/filepath"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// TestDirichletCVZooLogits checks, on the committed logits of the
// networks of RESULTS.md's Tables 1 and 2 (every 40th row, 1,750), that
// the cross-validation by Newton's method chooses the pair the L-BFGS path
// chose (recorded: run live, that path takes minutes here; the live
// comparison on smaller sets is TestDirichletCVNewtonChoosesAsLBFGS).
// The L-BFGS path's held-out NLLs differed from Newton's by at most
// 3.7e-5 (mnist-cnn) and 1.2e-5 (fashion-cnn), relative.
func TestDirichletCVZooLogits(t *testing.T) {
	if testing.Short() {
		t.Skip("fits the default grid on two models' logits")
	}
	for _, tc := range []struct {
		model string
		pair  int // the pair L-BFGS chose (crossValidateLBFGS, seed 1)
	}{
		{"mnist-cnn", 11},  // λ = 0.9, μ = 0.001
		{"fashion-cnn", 5}, // λ = 0.009, μ = 0
	} {
		model := tc.model
		f, err := logits.Read(filepath.Join("..", "models", "logits", model+".npz"))
		if err != nil {
			t.Fatal(err)
		}
		s := &calib.Set{Classes: f.Classes}
		for i := 0; i < f.Len(); i += 40 {
			for _, v := range f.Logits[i*f.Classes : (i+1)*f.Classes] {
				s.Logits = append(s.Logits, float64(v))
			}
			s.Labels = append(s.Labels, int(f.Labels[i]))
		}
		d := &calib.Dirichlet{Seed: 1}
		newton, lambdas, mus, err := calib.DirichletHeldOut(d, s, calib.DefaultDirichletFolds, true)
		if err != nil {
			t.Fatal(err)
		}
		bn := calib.DirichletBestPair(newton)
		t.Logf("%s, %d rows: Newton chose λ = %g, μ = %g (pair %d, held-out NLL %.6f); L-BFGS chose pair %d",
			model, s.Len(), lambdas[bn/len(mus)], mus[bn%len(mus)], bn, newton[bn]/float64(s.Len()), tc.pair)
		if bn != tc.pair {
			t.Errorf("%s: Newton chose pair %d, L-BFGS pair %d", model, bn, tc.pair)
		}
	}
}
