package calib

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
)

// The method names of the calibrators, as the command line, calibrator
// files and experiment configurations write them. This file is the one
// place that lists them: every other package asks the registry (Methods,
// LookupMethod, New).
const (
	MethodBin       = "bin"       // one-vs-all histogram binning (Histogram)
	MethodBBQ       = "bbq"       // Bayesian binning into quantiles (BBQ)
	MethodIsotonic  = "isotonic"  // one-vs-all isotonic regression (Isotonic)
	MethodTemp      = "temp"      // temperature scaling (Temperature)
	MethodVector    = "vector"    // vector scaling (Vector)
	MethodMatrix    = "matrix"    // matrix scaling (Matrix)
	MethodDirichlet = "dirichlet" // Dirichlet calibration with ODIR (Dirichlet)
	MethodOPVector  = "opvector"  // order-preserving vector scaling (OPVector)
	MethodFedCal    = "fedcal"    // the FedCal order-preserving MLP (FedCalMLP)

	MethodScalingBinning = "scalbin" // scaling-binning, Kumar et al. 2019 (ScalingBinning)

	MethodEqualMass = "eqmass" // one-vs-all histogram binning on equal-mass bins (EqualMass)
	MethodPlatt     = "platt"  // one-vs-rest Platt (sigmoid) scaling (Platt)
	MethodBeta      = "beta"   // one-vs-rest beta calibration, Kull et al. 2017 (Beta)
)

// Family says how a method is fitted, and so how it is federated.
type Family int

const (
	// Binning methods are formed from one-vs-all histograms of softmax
	// probabilities, which a federation sums (the paper's Algorithm 1).
	Binning Family = iota + 1
	// Scaling methods minimise the NLL over the parameters of a map on
	// the logits, which a federation averages (Algorithm 2, FedAvg).
	Scaling
	// Hybrid methods fit a scaling map and then bin its outputs
	// (scaling-binning): a federation runs the scaling protocol, then
	// sums one-vs-all histograms of the scaled probabilities.
	Hybrid
)

// String returns "binning", "scaling" or "hybrid".
func (f Family) String() string {
	switch f {
	case Binning:
		return "binning"
	case Scaling:
		return "scaling"
	case Hybrid:
		return "hybrid"
	}
	return fmt.Sprintf("Family(%d)", int(f))
}

// ErrUnknownMethod is returned (wrapped, with the known names) for a method
// name that is not in the registry.
var ErrUnknownMethod = errors.New("unknown calibrator method")

// Settings are the settings a calibrator takes at construction. The zero
// value means each method's defaults.
type Settings struct {
	// Mexp sets the bins of the binning methods: 2^Mexp equal-width bins
	// per class for bin and isotonic, the finest of BBQ's schemes for bbq,
	// the fine histograms scalbin and eqmass form their equal-mass bins
	// from. Zero means the method's default, Method.DefaultMexp
	// (DefaultMexp, ScalingBinningMexp for scalbin, EqualMassMexp for
	// eqmass), except for the methods whose central fit is exact
	// (Method.ExactCentral: isotonic), which New then fits without bins;
	// scaling methods ignore it.
	Mexp int
	// Seed seeds the methods whose fit is random (fedcal's initial
	// network and example order, dirichlet's cross-validation folds);
	// the others ignore it.
	Seed int64
	// ODIR, if not nil, fixes the ODIR regularisation of dirichlet,
	// which otherwise chooses it by cross-validation (New) or takes
	// DefaultDirichletLambda and DefaultDirichletMu (Method.ScalerFor).
	// The other methods refuse it.
	ODIR *ODIR
	// MaxIterations caps the iterations of the central fits of the
	// L-BFGS scalers (vector, matrix, dirichlet, opvector), the Newton
	// steps of each class of platt and beta, and the epochs of fedcal's; zero means DefaultMaxIterations and
	// DefaultFedCalMaxEpochs. Temperature's search, which always
	// converges, and the binning methods ignore it.
	MaxIterations int
	// Dirichlet sets the variant and cross-validation of a central
	// dirichlet fit; nil means the full variant cross-validated over
	// DefaultDirichletFolds folds of the default grids. The other
	// methods refuse it.
	Dirichlet *DirichletSettings
}

// DirichletSettings are the settings of a central Dirichlet fit (see
// Dirichlet). The zero value is the full variant, DefaultDirichletFolds
// folds and the default grids.
type DirichletSettings struct {
	// Variant is DirichletFull, DirichletDiag or DirichletFixDiag; ""
	// means DirichletFull.
	Variant string
	// Folds is the number of cross-validation folds; zero means
	// DefaultDirichletFolds, 1 fixes λ and μ (Settings.ODIR, else 0).
	Folds int
	// LambdaGrid and MuGrid replace DirichletLambdaGrid and
	// DirichletMuGrid when not empty.
	LambdaGrid, MuGrid []float64
}

// Method describes one calibration method of the registry. Values are
// obtained from Methods or LookupMethod; the zero value is not a method.
type Method struct {
	// Name is the method's name (MethodBin, ...).
	Name string
	// Protocol is the name of its federated protocol, as the paper's
	// tables write it: "FedBin", "FedBBQ", "FedTemp", ...
	Protocol string
	// Family says whether it is a binning or a scaling method.
	Family Family
	// Summary is a one-line description for help texts.
	Summary string
	// KeepsTopClass reports that the method's map never changes the most
	// probable class in exact arithmetic (the order-preserving scalers and
	// temperature scaling). A fitted calibrator can still tie classes
	// that were not tied (a rank weight softplus(·) that underflows to 0,
	// a temperature so large that float32 probabilities round equal):
	// export measures it (export.KeepsTopClass).
	KeepsTopClass bool

	zero     func() Calibrator
	central  func(Settings) Calibrator
	scaler   func(classes int, rng *rand.Rand) Scaler
	binner   func(*Histograms) (Binner, error)
	exponent bool // the binning method's bins must be a power of two
	mexp     int  // the binning method's default bin exponent; 0: DefaultMexp
	odir     bool // the method takes Settings.ODIR
	size     func(classes, bins float64) float64
	// maxClasses is the most classes the method fits, for the methods
	// whose parameters grow as classes²; 0 means no limit but MaxSize.
	maxClasses int
	// exactCentral: the binning method's central fit without a bin
	// exponent is exact, on the rows themselves (ExactCentral).
	exactCentral bool
}

// MaxFullClasses is the most classes matrix scaling and Dirichlet
// calibration fit: their classes² + classes parameters (65,792 at 256
// classes) make each step of the fit cost rows·classes² multiply-adds and
// overfit the few thousand rows a calibration set holds; vector scaling
// is their diagonal form.
const MaxFullClasses = 256

// Binner is a binning calibrator formed from aggregated one-vs-all
// histograms, whose predictions a server can blend with the base model.
type Binner interface {
	Calibrator
	// SetWeighting blends the calibrator with the base model (SPEC §5):
	// class j by alpha[j].
	SetWeighting(mode Weighting, alpha []float64) error
}

// methods is the registry, in the order of the paper's tables: binning
// first.
var methods = [...]Method{
	{
		Name: MethodBin, Protocol: "FedBin", Family: Binning,
		Summary: "one-vs-all histogram binning with 2^M equal-width bins per class",
		zero:    func() Calibrator { return new(Histogram) },
		central: func(s Settings) Calibrator { return &Histogram{Bins: 1 << s.mexp()} },
		binner:  func(h *Histograms) (Binner, error) { return NewHistogramBinning(h) },
		size:    histogramSize,
	},
	{
		Name: MethodBBQ, Protocol: "FedBBQ", Family: Binning,
		Summary:  "Bayesian binning into quantiles over 2, 4, …, 2^M bins",
		zero:     func() Calibrator { return new(BBQ) },
		central:  func(s Settings) Calibrator { return &BBQ{Mexp: s.mexp()} },
		binner:   func(h *Histograms) (Binner, error) { return NewBBQ(h) },
		exponent: true,
		size:     histogramSize,
	},
	{
		Name: MethodIsotonic, Protocol: "FedIsotonic", Family: Binning,
		Summary: "one-vs-all isotonic regression (PAV): exact on the scores centrally, on 2^M equal-width bins per class federated or with a bin exponent, M = 10 by default",
		zero:    func() Calibrator { return new(Isotonic) },
		// Exact (Bins 0) when s.Mexp is 0: New keeps it 0 for this
		// method (exactCentral).
		central: func(s Settings) Calibrator {
			if s.Mexp == 0 {
				return new(Isotonic)
			}
			return &Isotonic{Bins: 1 << s.Mexp}
		},
		binner:       func(h *Histograms) (Binner, error) { return NewIsotonic(h) },
		mexp:         IsotonicMexp,
		exactCentral: true,
		size:         histogramSize,
	},
	{
		Name: MethodEqualMass, Protocol: "FedEqMass", Family: Binning,
		Summary: "one-vs-all histogram binning on 100 equal-mass bins per class, formed from 2^M equal-width fine bins, M = 10 by default",
		zero:    func() Calibrator { return new(EqualMass) },
		central: func(s Settings) Calibrator { return &EqualMass{Bins: 1 << s.Mexp} }, // New sets s.Mexp
		binner: func(h *Histograms) (Binner, error) {
			return NewEqualMass(h, min(DefaultEqualMassBins(exponentOf(h.Bins)), h.Bins))
		},
		mexp: EqualMassMexp,
		size: histogramSize,
	},
	{
		Name: MethodTemp, Protocol: "FedTemp", Family: Scaling, KeepsTopClass: true,
		Summary: "temperature scaling, softmax(z/T)",
		zero:    func() Calibrator { return new(Temperature) },
		central: func(Settings) Calibrator { return new(Temperature) },
		scaler:  func(c int, _ *rand.Rand) Scaler { return NewTemperature(c) },
		size:    func(_, _ float64) float64 { return 1 },
	},
	{
		Name: MethodVector, Protocol: "FedVector", Family: Scaling,
		Summary: "vector scaling, softmax(a⊙z + b)",
		zero:    func() Calibrator { return new(Vector) },
		central: func(s Settings) Calibrator { return &Vector{Options: s.fitOptions()} },
		scaler:  func(c int, _ *rand.Rand) Scaler { return NewVector(c) },
		size:    func(c, _ float64) float64 { return 2 * c },
	},
	{
		Name: MethodMatrix, Protocol: "FedMatrix", Family: Scaling,
		Summary:    "matrix scaling, softmax(Az + b)",
		zero:       func() Calibrator { return new(Matrix) },
		central:    func(s Settings) Calibrator { return &Matrix{Options: s.fitOptions()} },
		scaler:     func(c int, _ *rand.Rand) Scaler { return NewMatrix(c) },
		size:       func(c, _ float64) float64 { return c*c + c },
		maxClasses: MaxFullClasses,
	},
	{
		Name: MethodDirichlet, Protocol: "FedDirichlet", Family: Scaling,
		Summary: "Dirichlet calibration, softmax(W·log softmax(z) + b) with ODIR regularisation",
		zero:    func() Calibrator { return new(Dirichlet) },
		// The central fit chooses the regularisation by cross-validation
		// on the calibration rows; a federation (NewScaler) cannot, and
		// fits the fixed DefaultDirichletLambda and DefaultDirichletMu.
		central: func(s Settings) Calibrator {
			d := &Dirichlet{Folds: DefaultDirichletFolds, Seed: s.Seed, Options: s.fitOptions()}
			if ds := s.Dirichlet; ds != nil {
				d.Variant, d.LambdaGrid, d.MuGrid = ds.Variant, ds.LambdaGrid, ds.MuGrid
				if ds.Folds != 0 {
					d.Folds = ds.Folds
				}
			}
			if s.ODIR != nil {
				d.Lambda, d.Mu, d.Folds = s.ODIR.Lambda, s.ODIR.Mu, 0
			}
			return d
		},
		scaler:     func(c int, _ *rand.Rand) Scaler { return NewDirichlet(c) },
		odir:       true,
		size:       func(c, _ float64) float64 { return c*c + c },
		maxClasses: MaxFullClasses,
	},
	{
		Name: MethodOPVector, Protocol: "FedOPVector", Family: Scaling, KeepsTopClass: true,
		Summary: "order-preserving vector scaling (keeps the order of the classes; a collapsed fit can tie them)",
		zero:    func() Calibrator { return new(OPVector) },
		central: func(s Settings) Calibrator { return &OPVector{Options: s.fitOptions()} },
		scaler:  func(c int, _ *rand.Rand) Scaler { return NewOPVector(c) },
		size:    func(c, _ float64) float64 { return 2 * c },
	},
	{
		Name: MethodFedCal, Protocol: "FedCal", Family: Scaling, KeepsTopClass: true,
		Summary: "the FedCal order-preserving MLP scaler (keeps the order of the classes; a collapsed fit can tie them)",
		zero:    func() Calibrator { return new(FedCalMLP) },
		central: func(s Settings) Calibrator {
			return &FedCalMLP{Seed: s.Seed, Tolerance: DefaultFedCalTolerance, MaxEpochs: s.MaxIterations}
		},
		// The server's initial network and each client's example order
		// come from the stream of whoever builds the scaler.
		scaler: func(c int, rng *rand.Rand) Scaler { return NewFedCalMLP(c, int64(rng.Uint64())) },
		// Two hidden layers of FedCalHidden units: c·h + h + h·h + h + h·c + c.
		size: func(c, _ float64) float64 { return (2*FedCalHidden+1)*c + FedCalHidden*FedCalHidden + 2*FedCalHidden },
	},
	{
		Name: MethodPlatt, Protocol: "FedPlatt", Family: Scaling,
		Summary: "one-vs-rest Platt (sigmoid) scaling σ(a_j·z_j + b_j), normalised (scikit-learn's method=\"sigmoid\")",
		zero:    func() Calibrator { return new(Platt) },
		central: func(s Settings) Calibrator { return &Platt{Options: s.fitOptions()} },
		scaler:  func(c int, _ *rand.Rand) Scaler { return NewPlatt(c) },
		size:    func(c, _ float64) float64 { return 2 * c },
	},
	{
		Name: MethodBeta, Protocol: "FedBeta", Family: Scaling,
		Summary: "one-vs-rest beta calibration σ(a_j·ln p_j − b_j·ln(1−p_j) + c_j), a, b ≥ 0, normalised (Kull et al. 2017)",
		zero:    func() Calibrator { return new(Beta) },
		central: func(s Settings) Calibrator { return &Beta{Options: s.fitOptions()} },
		scaler:  func(c int, _ *rand.Rand) Scaler { return NewBeta(c) },
		size:    func(c, _ float64) float64 { return 3 * c },
	},
	{
		Name: MethodScalingBinning, Protocol: "FedScalBin", Family: Hybrid,
		Summary: "scaling-binning: temperature scaling, then the mean scaled probability in max(100, C) equal-mass bins per class (from 2^M fine bins, M = 10 by default)",
		zero:    func() Calibrator { return new(ScalingBinning) },
		central: func(s Settings) Calibrator { return &ScalingBinning{Mexp: s.Mexp} }, // New sets s.Mexp
		mexp:    ScalingBinningMexp,
		// The temperature and the fine histograms.
		size: func(c, bins float64) float64 { return histogramSize(c, bins) + 1 },
	},
}

// fitOptions returns the L-BFGS options of s.
func (s Settings) fitOptions() FitOptions { return FitOptions{MaxIterations: s.MaxIterations} }

func (s Settings) mexp() int {
	if s.Mexp == 0 {
		return DefaultMexp
	}
	return s.Mexp
}

// Methods returns every method of the registry, in the order of the
// paper's tables: binning first.
func Methods() []Method { return methods[:] }

// MethodNames returns the names of every method, in the order of Methods.
func MethodNames() []string {
	names := make([]string, len(methods))
	for i, m := range methods {
		names[i] = m.Name
	}
	return names
}

// MethodsOf returns the names of the methods of family f, in registry
// order.
func MethodsOf(f Family) []string {
	var names []string
	for _, m := range methods {
		if m.Family == f {
			names = append(names, m.Name)
		}
	}
	return names
}

// LookupMethod returns the method called name. For an unknown name it
// returns an error wrapping ErrUnknownMethod that lists the known ones.
func LookupMethod(name string) (Method, error) {
	for _, m := range methods {
		if m.Name == name {
			return m, nil
		}
	}
	return Method{}, fmt.Errorf("%w %q: want one of %s", ErrUnknownMethod, name, strings.Join(MethodNames(), ", "))
}

// New returns an unfitted calibrator of the named method for a central
// fit, with s's settings (a zero Mexp meaning m.DefaultMexp(), or the
// exact fit without bins of a method whose m.ExactCentral()). It returns
// an error for an unknown method, a bin exponent outside [1, MaxMexp] of a
// binning method, or an ODIR regularisation that CheckODIR refuses.
func New(name string, s Settings) (Calibrator, error) {
	m, err := LookupMethod(name)
	if err != nil {
		return nil, err
	}
	if err := m.CheckODIR(s.ODIR); err != nil {
		return nil, err
	}
	if err := m.checkDirichlet(s); err != nil {
		return nil, err
	}
	if m.HasBins() {
		if s.Mexp == 0 && m.exactCentral {
			return m.central(s), nil
		}
		if s.Mexp == 0 {
			s.Mexp = m.DefaultMexp()
		}
		if s.Mexp < 1 || s.Mexp > MaxMexp {
			return nil, fmt.Errorf("%s: bin exponent %d: want M in [1, %d] (2^M bins)", name, s.Mexp, MaxMexp)
		}
	}
	return m.central(s), nil
}

// newByMethod returns a zero calibrator of the named method, ready to
// receive its parameters from JSON.
func newByMethod(name string) (Calibrator, error) {
	m, err := LookupMethod(name)
	if err != nil {
		return nil, err
	}
	return m.zero(), nil
}

// NewScaler returns the scaler of a Scaling method for classes classes at
// its initial (identity) parameters; rng is the stream of whoever will
// fit it, for scalers whose construction or fit is random. It panics for
// a Binning method.
func (m Method) NewScaler(classes int, rng *rand.Rand) Scaler {
	if m.scaler == nil {
		panic(fmt.Sprintf("calib: %s is not a scaling method", m.Name))
	}
	return m.scaler(classes, rng)
}

// ScalerFor returns the constructor of the Scaling method's scaler under
// s, like NewScaler, with s.ODIR's regularisation where it is not nil. It
// returns an error for an ODIR regularisation that CheckODIR refuses, and
// panics for a Binning method. (Scalers take no other settings.)
func (m Method) ScalerFor(s Settings) (func(classes int, rng *rand.Rand) Scaler, error) {
	if m.scaler == nil {
		panic(fmt.Sprintf("calib: %s is not a scaling method", m.Name))
	}
	if err := m.CheckODIR(s.ODIR); err != nil {
		return nil, err
	}
	if s.ODIR == nil {
		return m.scaler, nil
	}
	r := *s.ODIR
	return func(classes int, rng *rand.Rand) Scaler {
		sc := m.scaler(classes, rng)
		sc.(*Dirichlet).Lambda, sc.(*Dirichlet).Mu = r.Lambda, r.Mu
		return sc
	}, nil
}

// CheckODIR returns an error when r is not nil and m does not take an ODIR
// regularisation (only dirichlet does) or r.Check refuses it.
func (m Method) CheckODIR(r *ODIR) error {
	switch {
	case r == nil:
		return nil
	case !m.odir:
		return fmt.Errorf("%s takes no ODIR regularisation (λ, μ): only %s does", m.Name, MethodDirichlet)
	}
	return r.Check()
}

// checkDirichlet returns an error when s sets a negative MaxIterations,
// or Dirichlet settings that m does not take or Dirichlet.Fit would
// refuse.
func (m Method) checkDirichlet(s Settings) error {
	if s.MaxIterations < 0 {
		return fmt.Errorf("%s: max iterations %d: want ≥ 0 (0: the default)", m.Name, s.MaxIterations)
	}
	ds := s.Dirichlet
	switch {
	case ds == nil:
		return nil
	case !m.odir:
		return fmt.Errorf("%s takes no Dirichlet settings (variant, folds, grids): only %s does", m.Name, MethodDirichlet)
	case ds.Folds < 0:
		return fmt.Errorf("%s: %d cross-validation folds: want ≥ 1 (1: none; 0: %d)", m.Name, ds.Folds, DefaultDirichletFolds)
	}
	d := &Dirichlet{Variant: ds.Variant, LambdaGrid: ds.LambdaGrid, MuGrid: ds.MuGrid}
	if err := d.check(); err != nil {
		return fmt.Errorf("%s: %w", m.Name, err)
	}
	return nil
}

// FromHistograms forms the calibrator of a Binning method from aggregated
// histograms. It panics for a Scaling method.
func (m Method) FromHistograms(h *Histograms) (Binner, error) {
	if m.binner == nil {
		panic(fmt.Sprintf("calib: %s is not a binning method", m.Name))
	}
	return m.binner(h)
}

// MaxSize is the largest number of values a calibrator may hold: the
// parameters of a scaling method, the 2·C·B histogram counts of a binning
// method with C classes and B bins per class. A fit keeps several copies
// of them (L-BFGS's history, a federation's running sums and each
// worker's histograms), so 2^24 values, 128 MiB of float64 each, already
// make a fit of several gigabytes. It admits matrix scaling of up to
// 4095 classes, binning of 1000 classes with 2^13 bins (100 classes with
// the largest, 2^16), and temperature scaling of any number.
const MaxSize = 1 << 24

// Size returns the number of values the calibrator of m holds for classes
// classes: its parameters for a scaling method, its 2·classes·bins
// histogram counts for a binning method with bins bins per class, and
// those counts and the temperature for scalbin (bins is ignored for
// scaling). It is a float64 so that it cannot overflow.
func (m Method) Size(classes, bins int) float64 {
	return m.size(float64(classes), float64(bins))
}

// CheckSize returns an error when the calibrator of m for classes classes
// and bins bins per class (see Size) would hold more than MaxSize values,
// or when m is matrix or Dirichlet and classes exceed MaxFullClasses,
// saying what to lower.
func (m Method) CheckSize(classes, bins int) error {
	n := m.Size(classes, bins)
	if n <= MaxSize {
		return m.checkClasses(classes)
	}
	if m.HasBins() {
		return fmt.Errorf("%s with %d classes and %d bins per class needs 2·%d·%d = %.4g histogram counts, more than the %d a calibrator may hold: use fewer bins", m.Name, classes, bins, classes, bins, n, MaxSize)
	}
	return fmt.Errorf("%s with %d classes has %.4g parameters, more than the %d a calibrator may hold: use a method with fewer parameters, such as temp or vector", m.Name, classes, n, MaxSize)
}

// checkClasses is CheckSize's limit on the classes of the methods whose
// parameters grow as classes².
func (m Method) checkClasses(classes int) error {
	if m.maxClasses == 0 || classes <= m.maxClasses {
		return nil
	}
	return fmt.Errorf("%s fits a full %d×%d matrix (%.4g parameters) and is limited to %d classes: use vector, its diagonal form, or temp", m.Name, classes, classes, m.Size(classes, 0), m.maxClasses)
}

// histogramSize is the Size of a binning method.
func histogramSize(classes, bins float64) float64 { return 2 * classes * bins }

// DefaultMexp returns the bin exponent M (2^M bins per class) a Binning
// or Hybrid method uses when Settings.Mexp is zero: IsotonicMexp for
// isotonic, ScalingBinningMexp for scalbin, EqualMassMexp for eqmass,
// DefaultMexp for the others.
// It returns 0 for a Scaling method.
func (m Method) DefaultMexp() int {
	switch {
	case !m.HasBins():
		return 0
	case m.mexp != 0:
		return m.mexp
	}
	return DefaultMexp
}

// HasBins reports whether the method's calibrator is formed from
// one-vs-all histograms of 2^M bins per class, so takes a bin exponent
// (Settings.Mexp): the Binning methods and the Hybrid scalbin.
func (m Method) HasBins() bool { return m.Family == Binning || m.Family == Hybrid }

// ExactCentral reports whether the Binning method's central fit without
// a bin exponent (Settings.Mexp zero, calibrate without --bins-exp) is
// exact, fitted on the rows themselves rather than on histograms
// (isotonic). Its federated fits, and central fits given an exponent,
// still form it from histograms of 2^M bins, M = DefaultMexp by default.
func (m Method) ExactCentral() bool { return m.exactCentral }

// BinExponent reports whether the Binning method's number of bins must be
// a power of two 2^M, set by its exponent M (BBQ); otherwise any number
// of bins in [1, MaxBins] is allowed.
func (m Method) BinExponent() bool { return m.exponent }
