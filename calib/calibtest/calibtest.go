package calibtest

import (
	"math"
	"math/rand/v2"

	"github.com/fedcalib/fedcalib/calib"
)

// Overconfident returns n labelled rows of c logits from a model that is
// overconfident by the temperature t: each logit is sigma times a
// standard normal draw from rng, truncated towards zero to a multiple of
// step when step > 0 (which makes many tied scores), and each row's
// label is drawn from softmax(z/t) with one more draw from rng, so that
// temperature scaling by t calibrates it exactly.
func Overconfident(rng *rand.Rand, n, c int, sigma, step, t float64) *calib.Set {
	s := &calib.Set{Logits: make([]float64, n*c), Labels: make([]int, n), Classes: c}
	p := make([]float64, c)
	for i := range n {
		z := s.Row(i)
		for j := range z {
			z[j] = sigma * rng.NormFloat64()
			if step > 0 {
				z[j] = math.Trunc(z[j]/step) * step
			}
			p[j] = z[j] / t
		}
		calib.Softmax(p, p)
		u, k := rng.Float64(), 0
		for k < c-1 && u > p[k] {
			u -= p[k]
			k++
		}
		s.Labels[i] = k
	}
	return s
}

// Margin returns n labelled rows of c logits from a model that is
// overconfident by construction: each row's label y is drawn uniformly
// from rng, then its logits are z_j = sharpen·(g_j + margin·1{j = y})
// with g_j standard normal draws from rng (margin 1.8 puts 61 % of the
// argmaxes right at c = 10, and sharpen 3 makes the probabilities far
// too sharp).
func Margin(rng *rand.Rand, n, c int, margin, sharpen float64) *calib.Set {
	s := &calib.Set{Logits: make([]float64, n*c), Labels: make([]int, n), Classes: c}
	for i := range n {
		y := rng.IntN(c)
		s.Labels[i] = y
		for j := range c {
			g := rng.NormFloat64()
			if j == y {
				g += margin
			}
			s.Logits[i*c+j] = sharpen * g
		}
	}
	return s
}
