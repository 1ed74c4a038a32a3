package federation

import (
	"fmt"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
)

// Spec is a federated fit as a user states it — on the command line, in
// an experiment grid, or to a network coordinator — as one flat record:
// a method of the registry (calib.Methods) and its settings, whatever its
// family. Options and Fitter turn it into the protocol, so that every
// driver builds the same protocol from the same settings. The zero value
// of every field but Method means its default.
type Spec struct {
	// Method is the calibrator method, one of calib.MethodNames().
	Method string
	// Mexp sets the bins of a binning method: 2^Mexp bins per class (bin,
	// isotonic) or the finest of BBQ's schemes (bbq); for scalbin, its
	// 2^Mexp fine bins. Zero means the method's default,
	// calib.Method.DefaultMexp.
	Mexp int
	// Weighting is a binning method's server-side weighting; zero means
	// calib.WeightNone.
	Weighting calib.Weighting
	// ServerLR is a scaling method's server learning rate η_S; zero
	// means 1.
	ServerLR float64
	// Clip is a scaling method's L2 clip norm: with privacy, the C of
	// DP-FedAvg (zero means dp.DefaultClip); without, clipping of each
	// update without noise (zero means none).
	Clip float64
	// Epsilon, if positive, makes the fit (ε, δ) user-level
	// differentially private; zero means not private.
	Epsilon float64
	// Delta is δ of a private fit; zero means dp.DefaultDelta.
	Delta float64
	// ClipPos and ClipNeg are a private binning method's clip norms C₊
	// and C₋; zero means dp.DefaultClipPos and dp.DefaultClipNeg.
	ClipPos, ClipNeg float64
	// Accountant names the privacy accounting, "zcdp" or "rdp"; empty
	// means "zcdp".
	Accountant string
	// AlphaZ is Privacy.AlphaZ of a private, weighted binning fit; zero
	// means the paper's rule.
	AlphaZ float64
	// ODIR is dirichlet's fixed regularisation (Options.ODIR); nil means
	// calib.DefaultDirichletLambda and calib.DefaultDirichletMu.
	ODIR *calib.ODIR
}

// Private reports whether the spec asks for differential privacy.
func (s Spec) Private() bool { return s.Epsilon != 0 }

// Options returns the protocol options of the spec. It returns an error
// for an unknown method or accountant.
func (s Spec) Options() (Options, error) {
	m, err := calib.LookupMethod(s.Method)
	if err != nil {
		return Options{}, err
	}
	o := Options{ODIR: s.ODIR}
	if m.Family == calib.Binning {
		o.Weighting = s.Weighting
		switch {
		case m.BinExponent():
			o.Mexp = s.Mexp
		case s.Mexp != 0:
			o.Bins = 1 << s.Mexp
		}
	} else {
		o.ServerLR = s.ServerLR
		if !s.Private() {
			o.Clip = s.Clip
		}
	}
	if m.Family == calib.Hybrid { // scalbin: FedTemp, then its fine histograms
		o.Mexp, o.Weighting = s.Mexp, s.Weighting
	}
	if s.Private() {
		acc := dp.ZCDP
		if s.Accountant != "" {
			if acc, err = dp.ParseAccountant(s.Accountant); err != nil {
				return Options{}, fmt.Errorf("accountant: %w", err)
			}
		}
		delta := s.Delta
		if delta == 0 {
			delta = dp.DefaultDelta
		}
		o.Privacy = &Privacy{
			Epsilon: s.Epsilon, Delta: delta,
			Clip: s.Clip, ClipPos: s.ClipPos, ClipNeg: s.ClipNeg,
			Accountant: acc, AlphaZ: s.AlphaZ,
		}
	}
	return o, nil
}

// Fitter returns the protocol of the spec: New(s.Method, s.Options()).
func (s Spec) Fitter() (Fitter, error) {
	o, err := s.Options()
	if err != nil {
		return nil, err
	}
	return New(s.Method, o)
}
