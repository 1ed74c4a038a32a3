package calib

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/floats"
)

// FedCalHidden is the width of both hidden layers of FedCalMLP, as in
// Peng et al. 2024.
const FedCalHidden = 64

// Defaults of the local training of FedCalMLP.
const (
	// DefaultFedCalEpochs is the number of passes over the local data per
	// Fit: the FedCal paper's setting, 3.
	DefaultFedCalEpochs = 3
	// DefaultFedCalLearningRate is the SGD step size.
	DefaultFedCalLearningRate = 0.01
	// DefaultFedCalBatchSize is the SGD mini-batch size.
	DefaultFedCalBatchSize = 16
	// DefaultFedCalMaxGradNorm is the L2 norm each mini-batch gradient is
	// clipped to, which keeps SGD stable for unnormalised logits.
	DefaultFedCalMaxGradNorm = 1
	// DefaultFedCalTolerance is the Tolerance of a central fit (New):
	// training stops once an epoch lowers the full-batch mean NLL by less
	// than this fraction of it.
	DefaultFedCalTolerance = 1e-4
	// DefaultFedCalMaxEpochs is the cap on the epochs of a fit run to a
	// tolerance when MaxEpochs is zero.
	DefaultFedCalMaxEpochs = 500
)

// FedCalMLP is the post-hoc scaler of FedCal (Peng et al. 2024, "FedCal:
// Achieving Local and Global Calibration in Federated Learning via
// Aggregated Parameterized Scaler"), method MethodFedCal, the paper's FedCal
// baseline (SPEC §5): the order-preserving map of OPVector whose positive
// rank weights come from a multilayer perceptron, C → 64 → 64 → C, on the
// logits in class order,
//
//	m = softplus(W3·relu(W2·relu(W1·z + b1) + b2) + b3),
//
// where m_k scales the gap between the k-th and (k+1)-th largest logits
// (as in Rahimi et al.'s OrderPreservingModel, whose weight network sees
// the unsorted logits and whose outputs index sorted positions; m_C
// scales no gap). Like OPVector it never changes the most probable class,
// tied logits get equal probabilities, and the map is continuous.
//
// Fit trains the network from its current weights for Epochs passes of
// mini-batch SGD on the mean NLL (the FedCal paper's local training: 3
// epochs per round), visiting the examples in an order drawn from Seed;
// each mini-batch gradient is clipped to L2 norm MaxGradNorm. With
// Tolerance > 0 (a central fit) it instead runs epochs until one lowers
// the full-batch mean NLL by less than Tolerance relative to it, for at
// most MaxEpochs; LastFit reports whether it got there.
//
// As a Scaler its parameters are W1, b1, W2, b2, W3, b3 in that order,
// matrices row-major (output by input): 129·C + 4224 values.
//
// NewFedCalMLP initialises the hidden layers from a seed (He-uniform
// weights, zero biases) and the output layer to W3 = 0, b3 = log(e − 1),
// so every weight m_k = 1 and the initial map is the identity. The zero
// value has no classes; Fit initialises it that way from Seed. Predict
// panics on a FedCalMLP without classes.
type FedCalMLP struct {
	// W1 is the first layer's weights, FedCalHidden×C.
	W1 []float64 `json:"w1"`
	// B1 is the first layer's bias, FedCalHidden values.
	B1 []float64 `json:"b1"`
	// W2 is the second layer's weights, FedCalHidden×FedCalHidden.
	W2 []float64 `json:"w2"`
	// B2 is the second layer's bias, FedCalHidden values.
	B2 []float64 `json:"b2"`
	// W3 is the output layer's weights, C×FedCalHidden.
	W3 []float64 `json:"w3"`
	// B3 is the output layer's bias, C values.
	B3 []float64 `json:"b3"`

	// The fields below control Fit and are not part of the sidecar
	// parameters.

	// Epochs is the number of SGD passes per Fit; zero means
	// DefaultFedCalEpochs.
	Epochs int `json:"-"`
	// LearningRate is the SGD step size; zero means
	// DefaultFedCalLearningRate.
	LearningRate float64 `json:"-"`
	// BatchSize is the mini-batch size; zero means DefaultFedCalBatchSize.
	BatchSize int `json:"-"`
	// MaxGradNorm is the L2 norm each mini-batch gradient is clipped to;
	// zero means DefaultFedCalMaxGradNorm.
	MaxGradNorm float64 `json:"-"`
	// Seed seeds the example order of Fit and, for the zero value, the
	// initial weights.
	Seed int64 `json:"-"`
	// Tolerance, if positive, makes Fit train until an epoch lowers the
	// full-batch mean NLL by less than Tolerance (relative), instead of
	// for Epochs; zero trains for Epochs and reports the fit as not
	// converged unless its last epoch met DefaultFedCalTolerance.
	Tolerance float64 `json:"-"`
	// MaxEpochs caps the epochs of a fit with Tolerance > 0; zero means
	// DefaultFedCalMaxEpochs.
	MaxEpochs int `json:"-"`

	// fit is the report of the last Fit; nil before it.
	fit *FitReport
}

// NewFedCalMLP returns a FedCal scaler for the given number of classes
// whose hidden layers are drawn from seed and whose map is the identity
// (see FedCalMLP). It panics if classes < 2.
func NewFedCalMLP(classes int, seed int64) *FedCalMLP {
	if classes < 2 {
		panic("calib: NewFedCalMLP needs at least 2 classes")
	}
	f := &FedCalMLP{Seed: seed}
	f.setNet(newMLPNet(classes, make([]float64, mlpNumParams(classes))))
	f.initWeights(classes, seed)
	return f
}

// initWeights draws the hidden layers of a fresh network from seed and sets
// the output layer to the identity.
func (f *FedCalMLP) initWeights(classes int, seed int64) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x66656463616c)) // "fedcal"
	heUniform(rng, f.W1, classes)
	heUniform(rng, f.W2, FedCalHidden)
	clear(f.B1)
	clear(f.B2)
	clear(f.W3)
	for j := range f.B3 {
		f.B3[j] = softplusOne
	}
}

// heUniform fills w with draws from U(−√(6/fanIn), √(6/fanIn)).
func heUniform(rng *rand.Rand, w []float64, fanIn int) {
	bound := math.Sqrt(6 / float64(fanIn))
	for i := range w {
		w[i] = (2*rng.Float64() - 1) * bound
	}
}

// mlpNumParams is the number of parameters of the FedCal network for c
// classes.
func mlpNumParams(c int) int {
	h := FedCalHidden
	return h*c + h + h*h + h + c*h + c
}

// Method returns MethodFedCal.
func (f *FedCalMLP) Method() string { return MethodFedCal }

// LastFit returns a copy of the report of the last Fit, or nil: its
// Iterations are epochs, its Gradient the relative change of the
// full-batch mean NLL over the last epoch.
func (f *FedCalMLP) LastFit() *FitReport { return lastFit(f.fit) }

// Classes returns the number of classes, len(B3).
func (f *FedCalMLP) Classes() int { return len(f.B3) }

// NumParams returns 129·C + 4224, or 0 without classes.
func (f *FedCalMLP) NumParams() int {
	if f.Classes() == 0 {
		return 0
	}
	return mlpNumParams(f.Classes())
}

// Params returns a copy of W1, b1, W2, b2, W3, b3 as one vector.
func (f *FedCalMLP) Params() []float64 {
	w := make([]float64, 0, f.NumParams())
	for _, p := range [][]float64{f.W1, f.B1, f.W2, f.B2, f.W3, f.B3} {
		w = append(w, p...)
	}
	return w
}

// SetParams sets the weights from w (layout as Params). It returns an
// error unless w holds 129·C + 4224 finite values.
func (f *FedCalMLP) SetParams(w []float64) error {
	if err := checkParamLen(f.Method(), f.NumParams(), w); err != nil {
		return err
	}
	if err := checkFinite("fedcal parameter", w); err != nil {
		return err
	}
	f.setNet(newMLPNet(f.Classes(), append([]float64(nil), w...)))
	return nil
}

// setNet points the weight fields at the slices of n.
func (f *FedCalMLP) setNet(n *mlpNet) {
	f.W1, f.B1, f.W2, f.B2, f.W3, f.B3 = n.w1, n.b1, n.w2, n.b2, n.w3, n.b3
}

// Fit trains the network on s from its current weights (see FedCalMLP).
// It returns an error, leaving f unchanged, for an invalid or empty set,
// one whose number of classes differs from f's, or invalid training
// settings.
func (f *FedCalMLP) Fit(s *Set) error {
	if err := fitClasses(f.Method(), f.Classes(), s); err != nil {
		return err
	}
	epochs, lr, batch, clip, err := f.settings()
	if err != nil {
		return fmt.Errorf("fedcal scaler: %w", err)
	}
	c := s.Classes
	var w []float64
	if f.Classes() == 0 {
		w = NewFedCalMLP(c, f.Seed).Params()
	} else {
		w = f.Params()
	}
	net := newMLPNet(c, w)
	grad := make([]float64, len(w))
	gnet := newMLPNet(c, grad)
	d := newOPData(s)
	work := newMLPWork(c)
	order := make([]int, s.Len())
	for i := range order {
		order[i] = i
	}
	rng := rand.New(rand.NewPCG(uint64(f.Seed), 0x73687566)) // stream "shuf", apart from the initialisation's
	tol, maxEpochs := f.Tolerance, epochs
	if tol > 0 {
		maxEpochs = f.MaxEpochs
		if maxEpochs == 0 {
			maxEpochs = DefaultFedCalMaxEpochs
		}
	}
	rep := &FitReport{MaxIterations: maxEpochs, Tolerance: tol, Stop: "fixed number of epochs"}
	if tol == 0 {
		rep.Tolerance = DefaultFedCalTolerance
	}
	// The full-batch mean NLL, before the last fixed epoch (to report on
	// it) or every epoch (to stop on it): a forward pass over all rows,
	// summed in parallel.
	sums := newRowSums(s.Len())
	prev := math.NaN()
	if tol > 0 || maxEpochs == 1 {
		prev = net.loss(s, d, sums)
	}
	for e := range maxEpochs {
		if tol == 0 && e == maxEpochs-1 && e > 0 {
			prev = net.loss(s, d, sums)
		}
		rep.Iterations++
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for lo := 0; lo < len(order); lo += batch {
			rows := order[lo:min(lo+batch, len(order))]
			net.lossGrad(gnet, s, d, rows, work)
			scale := lr
			if norm := math.Sqrt(floats.Dot(grad, grad)); norm > clip {
				scale *= clip / norm
			}
			for k, g := range grad {
				w[k] -= scale * g
			}
		}
		if tol > 0 || e == maxEpochs-1 {
			cur := net.loss(s, d, sums)
			rep.Objective = cur
			rep.Gradient = math.Abs(prev-cur) / math.Max(math.Abs(cur), math.SmallestNonzeroFloat64)
			rep.Converged = rep.Gradient < rep.Tolerance
			prev = cur
			if tol > 0 && rep.Converged {
				rep.Stop = "epoch's change below tolerance"
				break
			}
			if tol > 0 {
				rep.Stop = "epoch limit"
			}
		}
	}
	if err := checkFinite("fedcal parameter", w); err != nil {
		return fmt.Errorf("fedcal scaler: training diverged: %w", err)
	}
	if math.IsNaN(rep.Gradient) || math.IsInf(rep.Gradient, 0) || math.IsNaN(rep.Objective) || math.IsInf(rep.Objective, 0) {
		rep.Gradient, rep.Converged = 0, false
	}
	f.setNet(net)
	f.fit = rep
	return nil
}

// settings returns the training settings with defaults applied.
func (f *FedCalMLP) settings() (epochs int, lr float64, batch int, clip float64, err error) {
	epochs, lr, batch, clip = f.Epochs, f.LearningRate, f.BatchSize, f.MaxGradNorm
	switch {
	case epochs < 0:
		return 0, 0, 0, 0, fmt.Errorf("epochs is %d: want ≥ 0 (0 means %d)", epochs, DefaultFedCalEpochs)
	case lr < 0 || math.IsNaN(lr) || math.IsInf(lr, 0):
		return 0, 0, 0, 0, fmt.Errorf("learning rate is %v: want a finite value ≥ 0 (0 means %v)", lr, DefaultFedCalLearningRate)
	case batch < 0:
		return 0, 0, 0, 0, fmt.Errorf("batch size is %d: want ≥ 0 (0 means %d)", batch, DefaultFedCalBatchSize)
	case clip < 0 || math.IsNaN(clip):
		return 0, 0, 0, 0, fmt.Errorf("max gradient norm is %v: want ≥ 0 (0 means %v)", clip, DefaultFedCalMaxGradNorm)
	case !(f.Tolerance >= 0) || math.IsInf(f.Tolerance, 1):
		return 0, 0, 0, 0, fmt.Errorf("tolerance is %v: want a finite value ≥ 0 (0: a fixed number of epochs)", f.Tolerance)
	case f.MaxEpochs < 0:
		return 0, 0, 0, 0, fmt.Errorf("max epochs is %d: want ≥ 0 (0 means %d)", f.MaxEpochs, DefaultFedCalMaxEpochs)
	}
	if epochs == 0 {
		epochs = DefaultFedCalEpochs
	}
	if lr == 0 {
		lr = DefaultFedCalLearningRate
	}
	if batch == 0 {
		batch = DefaultFedCalBatchSize
	}
	if clip == 0 {
		clip = DefaultFedCalMaxGradNorm
	}
	return epochs, lr, batch, clip, nil
}

// Predict writes the order-preserving calibrated probabilities of each row
// of logits into dst.
func (f *FedCalMLP) Predict(dst, logits []float64) {
	c := f.Classes()
	checkPredict(f.Method(), c, dst, logits)
	net := &mlpNet{c: c, w1: f.W1, b1: f.B1, w2: f.W2, b2: f.B2, w3: f.W3, b3: f.B3}
	work := newMLPWork(c)
	op := newOPWork(c)
	for i := 0; i < len(logits); i += c {
		z := logits[i : i+c]
		net.forward(work, z)
		for k, u := range work.u {
			op.m[k] = softplus(u)
		}
		op.sort(z)
		op.finish(dst[i : i+c])
	}
}

func (f *FedCalMLP) validate() error {
	c, h := len(f.B3), FedCalHidden
	if c < 2 {
		return fmt.Errorf("b3 has %d values: want one per class, at least 2", c)
	}
	for _, p := range []struct {
		name string
		v    []float64
		n    int
	}{
		{"w1", f.W1, h * c}, {"b1", f.B1, h}, {"w2", f.W2, h * h},
		{"b2", f.B2, h}, {"w3", f.W3, c * h}, {"b3", f.B3, c},
	} {
		if len(p.v) != p.n {
			return fmt.Errorf("%s has %d values: want %d for %d classes and %d hidden units", p.name, len(p.v), p.n, c, h)
		}
		if err := checkFinite(p.name, p.v); err != nil {
			return err
		}
	}
	return nil
}

// mlpNet views a flat vector of the FedCal network's parameters (or of
// their gradients) as its layers.
type mlpNet struct {
	c                      int
	w1, b1, w2, b2, w3, b3 []float64
}

// newMLPNet returns the layers of w, which must have mlpNumParams(c)
// values; the layers alias w.
func newMLPNet(c int, w []float64) *mlpNet {
	h := FedCalHidden
	n := &mlpNet{c: c}
	for _, p := range []struct {
		dst  *[]float64
		size int
	}{
		{&n.w1, h * c}, {&n.b1, h}, {&n.w2, h * h}, {&n.b2, h}, {&n.w3, c * h}, {&n.b3, c},
	} {
		*p.dst, w = w[:p.size:p.size], w[p.size:]
	}
	return n
}

// mlpWork is the scratch space of the FedCal network for one example.
type mlpWork struct {
	h1, h2, u     []float64 // activations and output pre-activation
	dh1, dh2, du  []float64 // their gradients
	m, sig, dm, o []float64 // weights, their derivative, gradient, OP scratch
}

func newMLPWork(c int) *mlpWork {
	h := FedCalHidden
	return &mlpWork{
		h1: make([]float64, h), h2: make([]float64, h), u: make([]float64, c),
		dh1: make([]float64, h), dh2: make([]float64, h), du: make([]float64, c),
		m: make([]float64, c), sig: make([]float64, c), dm: make([]float64, c), o: make([]float64, c),
	}
}

// forward computes the network on z into w.h1, w.h2 and the output
// pre-activation w.u.
func (n *mlpNet) forward(w *mlpWork, z []float64) {
	mlpAffine(w.h1, n.w1, n.b1, z)
	mlpRelu(w.h1)
	mlpAffine(w.h2, n.w2, n.b2, w.h1)
	mlpRelu(w.h2)
	mlpAffine(w.u, n.w3, n.b3, w.h2)
}

// loss returns the mean NLL of the rows of s (sorted as d), summing
// them by r: the forward pass of lossGrad without its gradient.
func (n *mlpNet) loss(s *Set, d *opData, r *rowSums) float64 {
	f := r.sum(nil, func(lo, hi int, _ []float64) float64 {
		w := newMLPWork(n.c)
		var f float64
		for i := lo; i < hi; i++ {
			n.forward(w, s.Row(i))
			for j, u := range w.u {
				w.m[j] = softplus(u)
			}
			f += d.rowNLL(i, w.m, w.o, w.dm)
		}
		return f
	})
	return f / float64(s.Len())
}

// lossGrad writes into g (a view of the gradient vector) the gradient of
// the mean NLL of the rows of s, and returns that mean NLL.
func (n *mlpNet) lossGrad(g *mlpNet, s *Set, d *opData, rows []int, w *mlpWork) float64 {
	for _, p := range [][]float64{g.w1, g.b1, g.w2, g.b2, g.w3, g.b3} {
		clear(p)
	}
	var f float64
	for _, i := range rows {
		z := s.Row(i)
		n.forward(w, z)
		for j, u := range w.u {
			w.m[j], w.sig[j] = softplusAndLogistic(u)
		}
		f += d.rowNLL(i, w.m, w.o, w.dm)
		for j := range w.du {
			w.du[j] = w.dm[j] * w.sig[j]
		}
		// Output layer.
		mlpOuter(g.w3, w.du, w.h2)
		floats.AddScaled(g.b3, 1, w.du)
		mlpTransposeMul(w.dh2, n.w3, w.du)
		mlpReluBack(w.dh2, w.h2)
		// Second layer.
		mlpOuter(g.w2, w.dh2, w.h1)
		floats.AddScaled(g.b2, 1, w.dh2)
		mlpTransposeMul(w.dh1, n.w2, w.dh2)
		mlpReluBack(w.dh1, w.h1)
		// First layer.
		mlpOuter(g.w1, w.dh1, z)
		floats.AddScaled(g.b1, 1, w.dh1)
	}
	inv := 1 / float64(len(rows))
	for _, p := range [][]float64{g.w1, g.b1, g.w2, g.b2, g.w3, g.b3} {
		for k := range p {
			p[k] *= inv
		}
	}
	return f * inv
}

// mlpAffine writes W·x + b into dst, W row-major len(dst)×len(x).
func mlpAffine(dst, w, b, x []float64) {
	k := len(x)
	for i := range dst {
		dst[i] = b[i] + floats.Dot(w[i*k:(i+1)*k], x)
	}
}

// mlpTransposeMul writes Wᵀ·v into dst, W row-major len(v)×len(dst).
func mlpTransposeMul(dst, w, v []float64) {
	k := len(dst)
	clear(dst)
	for i, vi := range v {
		if vi != 0 {
			floats.AddScaled(dst, vi, w[i*k:(i+1)*k])
		}
	}
}

// mlpOuter adds u·vᵀ to the row-major len(u)×len(v) matrix g.
func mlpOuter(g, u, v []float64) {
	k := len(v)
	for i, ui := range u {
		if ui != 0 {
			floats.AddScaled(g[i*k:(i+1)*k], ui, v)
		}
	}
}

// mlpRelu applies max(·, 0) in place.
func mlpRelu(x []float64) {
	for i, v := range x {
		if v < 0 {
			x[i] = 0
		}
	}
}

// mlpReluBack zeroes the gradient dx where the ReLU output h is not positive.
func mlpReluBack(dx, h []float64) {
	for i, v := range h {
		if !(v > 0) {
			dx[i] = 0
		}
	}
}
