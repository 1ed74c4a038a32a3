package calib

// DirichletHeldOut exposes the cross-validation of d (Dirichlet.heldOut)
// to the external tests: the held-out NLL of each grid pair
// p = i·len(mus) + j over folds folds of s, by Newton's method or by
// Newton–CG, with the grids.
func DirichletHeldOut(d *Dirichlet, s *Set, folds int, newton bool) (sums, lambdas, mus []float64, err error) {
	lambdas, mus = d.grids(s.Classes)
	solver := dirichletCVNewtonCG
	if newton {
		solver = dirichletCVNewton
	}
	sums, _, _, err = d.heldOut(logProbSet(s), folds, lambdas, mus, solver)
	return sums, lambdas, mus, err
}

// DirichletBestPair exposes the cross-validation's choice among the grid
// pairs' held-out sums (bestPair) to the external tests.
func DirichletBestPair(sums []float64) int { return bestPair(sums) }
