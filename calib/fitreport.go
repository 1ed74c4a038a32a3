package calib

import (
	"fmt"
	"math"
	"strings"
)

// FitReport says how an iterative fit ended: whether it reached its
// stopping tolerance, after how many iterations, at what value of the
// objective it minimised, and which parameters sit at a bound of their
// range. Every Scaler records one per Fit (FitReporter); calibrate writes
// it to the calibrator file (Provenance.Fit) and warns when Warning is not
// empty.
//
// The zero value is the report of no fit.
type FitReport struct {
	// Converged reports that the fit met its stopping tolerance: for the
	// L-BFGS fits (vector, matrix, dirichlet, opvector) the largest
	// absolute component of the objective's gradient is at most
	// Tolerance; for temp the last safeguarded Newton step in log T is
	// below Tolerance, or T is at a bound where the objective still
	// decreases outward; for platt and beta the largest absolute
	// component of any class's gradient (beta's projected onto
	// a, b ≥ 0) is at most Tolerance; for fedcal the full-batch
	// objective changed by less than Tolerance (relative) over the last
	// epoch; for a federated
	// fit (FedAvg) the server's last update moved the parameters by less
	// than Tolerance (L2 norm, relative).
	Converged bool `json:"converged"`
	// Iterations is the number of iterations run: L-BFGS major
	// iterations (over every restart), Newton steps (platt, beta: the
	// most any one class's run took), temp's steps on the whole set (each
	// a pass over its rows), SGD epochs, or federated rounds.
	Iterations int `json:"iterations"`
	// MaxIterations is the cap the fit ran under.
	MaxIterations int `json:"max_iterations"`
	// Tolerance is the stopping tolerance (see Converged).
	Tolerance float64 `json:"tolerance"`
	// Objective is the final value of what the fit minimised: the mean
	// NLL on the fitted rows plus any regularisation (the Gaussian prior
	// of FitOptions.Prior, dirichlet's ODIR penalty). A federated fit,
	// whose server sees no rows, records 0.
	Objective float64 `json:"objective"`
	// Gradient is the measure Converged compares with Tolerance, at the
	// end of the fit (see Converged).
	Gradient float64 `json:"gradient"`
	// AtBound names each parameter that ended at a bound of its range,
	// e.g. "t = 100 (upper bound)": the optimum may lie beyond it. Nil
	// when none did.
	AtBound []string `json:"at_bound,omitempty"`
	// Stop says why the fit stopped, in words (e.g. "gradient below
	// tolerance", "iteration limit").
	Stop string `json:"stop,omitempty"`
	// Dirichlet records the variant and regularisation of a Dirichlet
	// fit, and how they were chosen; nil for other methods.
	Dirichlet *DirichletChoice `json:"dirichlet,omitempty"`
}

// FitReporter is a calibrator that reports how its last Fit ended. Every
// Scaler of this package implements it; LastFit returns nil before the
// first Fit (and for a calibrator read from a file).
type FitReporter interface {
	LastFit() *FitReport
}

// Warning returns a one-line warning when the fit did not converge or
// ended with a parameter at a bound, and "" otherwise (and for a nil
// report).
func (r *FitReport) Warning() string {
	if r == nil {
		return ""
	}
	var parts []string
	if !r.Converged {
		parts = append(parts, fmt.Sprintf("the fit did not converge (%s after %d of at most %d iterations; %v > tolerance %v)",
			r.Stop, r.Iterations, r.MaxIterations, r.Gradient, r.Tolerance))
	}
	if len(r.AtBound) > 0 {
		parts = append(parts, "parameters at a bound of their range, where the optimum may lie beyond: "+strings.Join(r.AtBound, ", "))
	}
	return strings.Join(parts, "; ")
}

// check refuses a report that no fit writes.
func (r *FitReport) check() error {
	switch {
	case r.Iterations < 0 || r.MaxIterations < 0:
		return fmt.Errorf("iterations %d of at most %d: want ≥ 0", r.Iterations, r.MaxIterations)
	case !(r.Tolerance >= 0) || math.IsInf(r.Tolerance, 1):
		return fmt.Errorf("tolerance %v: want a finite number ≥ 0", r.Tolerance)
	case math.IsNaN(r.Objective) || math.IsInf(r.Objective, 0):
		return fmt.Errorf("objective %v: want a finite number", r.Objective)
	case math.IsNaN(r.Gradient) || r.Gradient < 0:
		return fmt.Errorf("gradient %v: want a number ≥ 0", r.Gradient)
	}
	return nil
}

// lastFit returns a copy of r, or nil.
func lastFit(r *FitReport) *FitReport {
	if r == nil {
		return nil
	}
	c := *r
	c.AtBound = append([]string(nil), r.AtBound...)
	if r.Dirichlet != nil {
		d := *r.Dirichlet
		c.Dirichlet = &d
	}
	return &c
}
