package federation

import (
	"math/rand/v2"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

// synthSet returns n examples of c classes from a deliberately
// overconfident model: logits z_j = 3·(g_j + margin·1{j = y}) with
// g_j ~ N(0, 1), so about 60–70% of argmaxes are right for c = 10 and the
// probabilities are too sharp. Labels cycle through the classes.
func synthSet(n, c int, seed uint64) *calib.Set {
	const margin, sharpen = 1.8, 3
	rng := rand.New(rand.NewPCG(seed, 1))
	s := &calib.Set{Logits: make([]float64, n*c), Labels: make([]int, n), Classes: c}
	for i := range n {
		y := i % c
		s.Labels[i] = y
		for j := range c {
			v := rng.NormFloat64()
			if j == y {
				v += margin
			}
			s.Logits[i*c+j] = sharpen * v
		}
	}
	return s
}

// federation returns a population over a Dirichlet(β) partition of data
// into k clients, and the union of their calibration and test rows.
func federationOf(t testing.TB, data *calib.Set, k int, beta float64, seed uint64) (pop *SetPopulation, cal, test *calib.Set) {
	t.Helper()
	p, err := Dirichlet(data.Labels, data.Classes, k, beta, PartitionOptions{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	pop, err = NewPopulation(data, p, Calibration)
	if err != nil {
		t.Fatal(err)
	}
	return pop, data.Subset(p.Rows(Calibration)), data.Subset(p.Rows(Test))
}

// argmaxes returns the predicted class of each row of s under c.
func argmaxes(s *calib.Set, c calib.Calibrator) []int {
	probs := make([]float64, len(s.Logits))
	c.Predict(probs, s.Logits)
	out := make([]int, s.Len())
	for i := range out {
		row := probs[i*s.Classes : (i+1)*s.Classes]
		for j, v := range row {
			if v > row[out[i]] {
				out[i] = j
			}
		}
	}
	return out
}
