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
}

// Fitter is a federated calibration protocol: FedBin, FedBBQ or FedAvg.
type Fitter interface {
	// Fit runs the protocol over the clients of pop for r's rounds.
	Fit(ctx context.Context, pop Population, r Rounds) (*Result, error)
}

// Options are the settings of the protocol New makes. The zero value
// means each protocol's defaults, without privacy.
type Options struct {
	// Bins is FedBin's number of bins; zero means calib.DefaultBins.
	Bins int
	// Mexp is FedBBQ's bin exponent; zero means calib.DefaultMexp.
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
}

// Methods lists the calibrator methods New accepts, in the order of the
// paper's tables: binning first.
func Methods() []string {
	return []string{"bin", "bbq", "temp", "vector", "matrix", "opvector", "fedcal"}
}

// New returns the federated protocol of a calibrator method: "bin"
// (FedBin), "bbq" (FedBBQ), "temp" (FedTemp), "vector" (FedVector),
// "matrix" (FedMatrix), "opvector" (FedOPVector) or "fedcal" (FedCal). It
// returns an error for an unknown method, or for options that the method
// does not take (binning options for scaling and vice versa).
func New(method string, o Options) (Fitter, error) {
	binOpts := o.Bins != 0 || o.Mexp != 0 || (o.Weighting != "" && o.Weighting != calib.WeightNone)
	scaleOpts := o.ServerLR != 0 || o.Clip != 0
	switch method {
	case "bin", "bbq":
		if scaleOpts {
			return nil, fmt.Errorf("method %q is binning: server learning rate and update clipping apply to scaling methods", method)
		}
		if method == "bin" {
			if o.Mexp != 0 {
				return nil, fmt.Errorf("method \"bin\" takes a number of bins, not the BBQ bin exponent")
			}
			return &FedBin{Bins: o.Bins, Weighting: o.Weighting, Privacy: o.Privacy}, nil
		}
		if o.Bins != 0 {
			return nil, fmt.Errorf("method \"bbq\" takes the bin exponent Mexp (2^Mexp bins), not a number of bins")
		}
		return &FedBBQ{Mexp: o.Mexp, Weighting: o.Weighting, Privacy: o.Privacy}, nil
	}
	var f *FedAvg
	switch method {
	case "temp":
		f = FedTemp()
	case "vector":
		f = FedVector()
	case "matrix":
		f = FedMatrix()
	case "opvector":
		f = FedOPVector()
	case "fedcal":
		f = FedCal()
	default:
		return nil, fmt.Errorf("unknown method %q: want one of %v", method, Methods())
	}
	if binOpts {
		return nil, fmt.Errorf("method %q is scaling: bins, bin exponent and weighting apply to binning methods", method)
	}
	f.ServerLR, f.Clip, f.Privacy = o.ServerLR, o.Clip, o.Privacy
	return f, nil
}
