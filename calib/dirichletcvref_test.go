package calib

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
)

// heldOutLBFGS is Dirichlet.heldOut by the reference path,
// crossValidateLBFGS.
func (d *Dirichlet) heldOutLBFGS(ls *Set, folds int, lambdas, mus []float64) ([]float64, error) {
	train, test := d.folds(ls, folds)
	nll := make([]float64, len(lambdas)*len(mus)*folds)
	if err := d.crossValidateLBFGS(train, test, lambdas, mus, snakeOrder(len(lambdas), len(mus)), d.cvOptions(), nll); err != nil {
		return nil, err
	}
	return foldSums(nll, folds), nil
}

// crossValidateLBFGS is crossValidateWarm's work by plain L-BFGS
// (dirichletFit), the cross-validation before issue #32, kept as the
// reference the warm-started paths are checked against: each fold fits
// every pair in turn, warm-started from its fit of the previous pair
// only, the first from the identity. The folds run in parallel and each
// writes its own held-out NLLs, so they do not depend on the number of
// goroutines.
func (d *Dirichlet) crossValidateLBFGS(train, test []*Set, lambdas, mus []float64, order [][2]int, cv FitOptions, nll []float64) error {
	folds := len(train)
	c := train[0].Classes
	pairs := len(order)
	errs := make([]error, folds)
	identity := NewMatrix(c).Params()
	v := d.variant()
	workers := min(runtime.GOMAXPROCS(0), folds)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			g := make([]float64, len(identity))
			for f := w; f < folds; f += workers {
				x := identity
				for k := range pairs {
					i, j := order[k][0], order[k][1]
					lambda, mu := lambdas[i], mus[j]
					var err error
					if x, _, err = dirichletFit(train[f], x, v, lambda, mu, cv); err != nil {
						errs[f] = fmt.Errorf("cross-validation fold %d, λ = %v, μ = %v: %w", f+1, lambda, mu, err)
						break
					}
					nll[(i*len(mus)+j)*folds+f] = matrixNLL(g, x, test[f], nil) * float64(test[f].Len())
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
