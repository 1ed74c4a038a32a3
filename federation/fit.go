package federation

import (
	"context"
	"fmt"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
)

// Result is the outcome of a federated fit.
type Result struct {
	// Protocol names the protocol, e.g. "FedBBQ" or "FedTemp".
	Protocol string
	// Calibrator is the calibrator the server holds after the last round.
	Calibrator calib.Calibrator
	// Rounds holds each round's telemetry.
	Rounds []RoundStats
	// Histograms holds the server's running sums of the binning
	// protocols (noisy under privacy); nil for scaling.
	Histograms *calib.Histograms
	// Privacy records the privacy of the fit for the sidecar file; nil
	// when the fit was not private (no Privacy, or an infinite ε).
	Privacy *calib.Privacy
	// Ledger holds every noisy release; nil when Privacy is.
	Ledger *dp.Ledger
	// Fit reports how a scaling fit (FedAvg) ended: its rounds, whether
	// the last round's update was below FedAvgTolerance, and T at a
	// bound; nil for the binning protocols, which are not iterative.
	Fit *calib.FitReport
}

// Fitter is a federated calibration protocol: FedBin, FedBBQ or FedAvg.
type Fitter interface {
	// Fit runs the protocol over the clients of pop for r's rounds.
	Fit(ctx context.Context, pop Population, r Rounds) (*Result, error)
}

// Options are the settings of the protocol New makes. The zero value
// means each protocol's defaults, without privacy.
type Options struct {
	// Bins is the number of bins of FedBin and of the other binning
	// methods that are not BBQ-like (calib.Method.BinExponent); zero
	// means the method's default, 2^calib.Method.DefaultMexp
	// (calib.DefaultBins for FedBin).
	Bins int
	// Mexp is FedBBQ's bin exponent, or FedScalBin's (its 2^Mexp fine
	// bins); zero means the method's calib.Method.DefaultMexp.
	Mexp int
	// Weighting is the binning protocols' weighting; zero means none.
	Weighting calib.Weighting
	// ServerLR is the scaling protocols' server learning rate; zero
	// means 1.
	ServerLR float64
	// Clip clips scaling updates without noise; zero means no clipping.
	Clip float64
	// Privacy, if not nil, makes the fit differentially private.
	Privacy *Privacy
	// ODIR, if not nil, is the regularisation every client of FedDirichlet
	// fits; nil means calib.DefaultDirichletLambda and
	// calib.DefaultDirichletMu. The other methods refuse it.
	ODIR *calib.ODIR
}

// New returns the federated protocol of a calibrator method of the
// registry (calib.Methods): binning methods run Algorithm 1 (FedBin,
// FedBBQ, FedIsotonic), scaling methods FedAvg over their scaler (FedTemp, FedVector,
// FedMatrix, FedDirichlet, FedOPVector, FedCal), the hybrid scalbin both
// in turn (FedScalBin). It returns an error for
// an unknown method, or for options that the method does not take
// (binning options for scaling and vice versa, ODIR for any method but
// dirichlet).
func New(method string, o Options) (Fitter, error) {
	m, err := calib.LookupMethod(method)
	if err != nil {
		return nil, err
	}
	if err := m.CheckODIR(o.ODIR); err != nil {
		return nil, err
	}
	binOpts := o.Bins != 0 || o.Mexp != 0 || (o.Weighting != "" && o.Weighting != calib.WeightNone)
	scaleOpts := o.ServerLR != 0 || o.Clip != 0
	switch m.Family {
	case calib.Binning:
		if scaleOpts {
			return nil, fmt.Errorf("method %q is binning: server learning rate and update clipping apply to scaling methods", method)
		}
		spec := binSpec{name: m.Protocol, build: m.FromHistograms, defaultMexp: m.DefaultMexp(), weighting: o.Weighting, privacy: o.Privacy}
		if m.BinExponent() {
			if o.Bins != 0 {
				return nil, fmt.Errorf("method %q takes the bin exponent Mexp (2^Mexp bins), not a number of bins", method)
			}
			spec.mexp = o.Mexp
		} else {
			if o.Mexp != 0 {
				return nil, fmt.Errorf("method %q takes a number of bins, not a bin exponent", method)
			}
			spec.bins = o.Bins
		}
		return &fedBinning{spec: spec}, nil
	case calib.Hybrid:
		return newFedScalBin(m, o)
	default:
		if binOpts {
			return nil, fmt.Errorf("method %q is scaling: bins, bin exponent and weighting apply to binning methods", method)
		}
		f := newFedAvg(m)
		f.ServerLR, f.Clip, f.Privacy = o.ServerLR, o.Clip, o.Privacy
		if f.Scaler, err = m.ScalerFor(calib.Settings{ODIR: o.ODIR}); err != nil {
			return nil, err
		}
		return f, nil
	}
}
