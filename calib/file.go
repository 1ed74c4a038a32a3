package calib

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/internal/fileio"
	"github.com/fedcalib/fedcalib/internal/strictjson"
)

// FormatV1 is the format tag of version 1 of the calibrator sidecar file.
const FormatV1 = "fedcalib.calibrator/v1"

// fileKeys returns the top-level keys of a version-1 file: the JSON names
// of File's fields, so that a field added to File is a known key.
func fileKeys() []string {
	t := reflect.TypeFor[File]()
	keys := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		keys = append(keys, name)
	}
	return keys
}

// File is the calibrator sidecar file (SPEC §3): versioned JSON holding the
// method, the number of classes, the method's parameters (numbers only),
// and how the calibrator was made.
type File struct {
	// Format is always FormatV1 for files this version writes.
	Format string `json:"format"`
	// Method is the calibrator's Method().
	Method string `json:"method"`
	// Classes is the number of classes.
	Classes int `json:"classes"`
	// Params holds the method's parameters as JSON; its schema is the
	// exported fields of the calibrator type.
	Params json.RawMessage `json:"params"`
	// Privacy describes the differential privacy of the fit; nil when the
	// fit was not private.
	Privacy *Privacy `json:"privacy,omitempty"`
	// Provenance records where the calibrator came from.
	Provenance Provenance `json:"provenance"`
	// Rounds records each round of a fit run by a network coordinator
	// ("fedcalib serve"): the clients sampled, those whose update was
	// aggregated and those that dropped out. It is nil (and absent from
	// the file) for other fits.
	Rounds []RoundRecord `json:"rounds,omitempty"`
}

// RoundRecord records one round of a networked federated fit. The zero
// value is an unrecorded round.
type RoundRecord struct {
	// Round is the round number t, 1 to T.
	Round int `json:"round"`
	// Sampled lists the clients sampled for the round, increasing; empty
	// for a skipped round.
	Sampled []int `json:"sampled"`
	// Participants lists the sampled clients whose update was
	// aggregated, increasing.
	Participants []int `json:"participants"`
	// Dropouts lists the sampled clients whose update did not arrive in
	// time or was refused, increasing.
	Dropouts []int `json:"dropouts"`
	// Attempts is the number of times the round was announced before it
	// closed (a round with too few updates is announced again); 0 for a
	// skipped round.
	Attempts int `json:"attempts"`
}

// Privacy records the differential-privacy parameters of a private fit:
// the (ε, δ) it spent and everything needed to recompute that ε, which
// Check does. A zero field is missing, and Check refuses a record with a
// missing field; a File without privacy has a nil *Privacy.
type Privacy struct {
	Epsilon    float64 `json:"epsilon"`               // ε spent
	Delta      float64 `json:"delta"`                 // δ
	Rho        float64 `json:"rho"`                   // zCDP ρ
	Sigma      float64 `json:"sigma"`                 // noise standard deviation per round
	Clip       float64 `json:"clip,omitempty"`        // L2 clip norm C (scaling)
	ClipPos    float64 `json:"clip_pos,omitempty"`    // C₊ (binning)
	ClipNeg    float64 `json:"clip_neg,omitempty"`    // C₋ (binning)
	Accountant string  `json:"accountant"`            // "zcdp" or "rdp"
	Rounds     int     `json:"rounds"`                // T
	SampleRate float64 `json:"sample_rate,omitempty"` // p
	// SecureAggregation records the secure aggregation of a networked
	// fit (fedcalib serve --secure-aggregation); nil without.
	SecureAggregation *SecureAggregation `json:"secure_aggregation,omitempty"`
	// Selection records the private selection that chose this
	// calibrator (calibrate --select): the run's total ε and its split;
	// the fields above are then those of the winning fit alone. Nil
	// without.
	Selection *Selection `json:"selection,omitempty"`
}

// SecureAggregation records how a fit's updates were securely aggregated
// (SecAgg+, package secagg) and, with distributed noise, the Skellam
// noise the clients added. The zero value is not a valid record: Noise,
// Bits and Scale are required.
type SecureAggregation struct {
	// Noise is "central" (the coordinator added the Gaussian noise of
	// the record's σ to the unmasked sum) or "distributed" (each client
	// added Skellam noise before masking).
	Noise string `json:"noise"`
	// Neighbours and Threshold are k and t as asked; 0 means the default
	// of each round (secagg.Parameters).
	Neighbours int `json:"neighbours,omitempty"`
	Threshold  int `json:"threshold,omitempty"`
	// Bits is the modulus exponent b; Scale the quantisation scale γ
	// (integer units per unit of an update divided by its clip norm).
	Bits  int     `json:"bits"`
	Scale float64 `json:"scale"`
	// ClientVariance is the variance v of the Skellam noise each client
	// added per coordinate, in quantised units (distributed noise only).
	ClientVariance float64 `json:"client_variance,omitempty"`
	// L1 and L2 are the sensitivities of a round's quantised sum
	// (distributed noise only).
	L1 float64 `json:"l1,omitempty"`
	L2 float64 `json:"l2,omitempty"`
	// Survivors counts, for each round, the clients whose noise reached
	// the sum: the round is charged as Skellam of variance
	// dp.SkellamShares(Survivors)·v = (Survivors − 1)·v, the shares of the
	// others (0: the round released nothing). Distributed noise only.
	Survivors []int `json:"survivors,omitempty"`
}

// Noise modes of SecureAggregation.Noise.
const (
	NoiseCentral     = "central"
	NoiseDistributed = "distributed"
)

// DistributedSigma returns the σ a privacy record with distributed noise
// holds: the standard deviation, in the units of an update block of clip
// norm clip (C₊ for binning, C for scaling), of the noise that protects a
// client in the round with the fewest survivors that released:
// clip·√(dp.SkellamShares(s_min)·v)/γ. It returns 0 when no round
// released.
func DistributedSigma(sa *SecureAggregation, clip float64) float64 {
	smin := 0
	for _, s := range sa.Survivors {
		if s > 0 && (smin == 0 || s < smin) {
			smin = s
		}
	}
	if smin < 2 || !(sa.Scale > 0) {
		return 0
	}
	return clip * math.Sqrt(float64(dp.SkellamShares(smin))*sa.ClientVariance) / sa.Scale
}

// PrivacyTolerance is the relative tolerance within which Check accepts a
// privacy record's ε and ρ as those its noise gives. It only absorbs
// rounding: the fit composes its rounds one at a time, Check all at once.
const PrivacyTolerance = 1e-9

// Check reports whether p is a consistent privacy record of a federated
// fit of the registry's method over classes classes (SPEC §7): every
// field present and in its domain, the clip norms those of the method's
// family, and ε and ρ equal, within PrivacyTolerance, to what the
// recorded noise spends. A record edited to advertise more privacy than
// its noise gives (or less) is refused.
//
// The recomputation follows the fit: each round releases Gaussian
// mechanisms with one noise multiplier z = Sigma/C — for a scaling method
// one clipped update of sensitivity C = Clip; for a binning method 2c
// histograms, c of sensitivity ClipPos (whose σ the record holds) and c
// of sensitivity ClipNeg (σ₋ = z·ClipNeg, so ClipNeg cannot change ε).
// One round acts on its sample as a single Gaussian mechanism of
// multiplier z/√m, m = 1 or 2c, so ρ = Rounds·m/(2z²), and ε at Delta is
// dp.SpentBy of Rounds such releases at SampleRate under Accountant. A
// scaling-binning fit runs Rounds rounds of each of its stages
// (checkHybrid).
//
// A record of secure aggregation with central noise is checked as above
// (the coordinator added the same Gaussian noise to the unmasked sum),
// plus the domain of its SecureAggregation fields; one with distributed
// noise is recomputed from its Skellam noise instead (checkDistributed).
//
// Errors name the field ("privacy.epsilon ...") and say what it should
// be; they wrap dp.ErrInvalid when a field is out of its domain.
func (p *Privacy) Check(method string, classes int) error {
	if err := p.Selection.check(p); err != nil {
		return err
	}
	m, err := LookupMethod(method)
	if err != nil {
		return err
	}
	acc, err := p.checkFields(m.Family)
	if err != nil {
		return err
	}
	if m.Family == Hybrid {
		return p.checkHybrid(acc, method, classes)
	}
	clip, mechs := p.Clip, 1.0
	if m.Family == Binning {
		if classes < 2 {
			return fmt.Errorf("privacy of a %s fit over %d classes: a binning method has at least 2", method, classes)
		}
		clip, mechs = p.ClipPos, 2*float64(classes)
	}
	if sa := p.SecureAggregation; sa != nil {
		if err := sa.checkFields(p.Rounds); err != nil {
			return err
		}
		if sa.Noise == NoiseDistributed {
			return p.checkDistributed(acc, clip, mechs)
		}
	}
	z := p.Sigma / clip
	perRound := z / math.Sqrt(mechs)
	spent, err := dp.SpentBy(acc, perRound, p.Rounds, p.SampleRate, p.Delta)
	if err != nil {
		return fmt.Errorf("privacy: σ %v over clip norm %v is noise multiplier %v per round: %w", p.Sigma, clip, perRound, err)
	}
	noise := fmt.Sprintf("σ %v for clip norm %v, %d Gaussian mechanism(s) per round, %d round(s)", p.Sigma, clip, int(mechs), p.Rounds)
	if rho := float64(p.Rounds) * dp.GaussianRho(perRound); !near(p.Rho, rho) {
		return fmt.Errorf("privacy.rho is %v but the recorded noise (%s) gives ρ = %v: the record was edited or comes from another fit; refit the calibrator", p.Rho, noise, rho)
	}
	if !near(p.Epsilon, spent.Epsilon) {
		return fmt.Errorf("privacy.epsilon is %v but the recorded noise (%s, sample rate %v) spends ε = %v at δ %v under %s: the record was edited or comes from another fit; refit the calibrator",
			p.Epsilon, noise, p.SampleRate, spent.Epsilon, p.Delta, acc)
	}
	return nil
}

// checkHybrid recomputes the privacy of a scaling-binning fit
// (federation.FedScalBin): Rounds rounds of one Gaussian mechanism of
// multiplier z = Sigma/Clip (the scaling stage), then Rounds rounds of
// 2c mechanisms of the same multiplier (the value histograms, σ₊ =
// z·ClipPos), all Poisson-sampled at SampleRate: ρ = Rounds·(1 + 2c)/(2z²),
// and ε composes both stages under Accountant.
func (p *Privacy) checkHybrid(acc dp.Accountant, method string, classes int) error {
	switch {
	case classes < 2:
		return fmt.Errorf("privacy of a %s fit over %d classes: it has at least 2", method, classes)
	case p.SecureAggregation != nil:
		return fmt.Errorf("%w: privacy.secure_aggregation is set, but %s has no fit under secure aggregation", dp.ErrInvalid, method)
	}
	z, m := p.Sigma/p.Clip, 2*float64(classes)
	noise := fmt.Sprintf("σ %v for clip norm %v, %d round(s) of 1 then of %d Gaussian mechanisms", p.Sigma, p.Clip, p.Rounds, int(m))
	rho := float64(p.Rounds) * (dp.GaussianRho(z) + dp.GaussianRho(z/math.Sqrt(m)))
	if !near(p.Rho, rho) {
		return fmt.Errorf("privacy.rho is %v but the recorded noise (%s) gives ρ = %v: the record was edited or comes from another fit; refit the calibrator", p.Rho, noise, rho)
	}
	var eps float64
	switch acc {
	case dp.ZCDP:
		e, err := dp.ZCDPEpsilon(rho, p.Delta)
		if err != nil {
			return fmt.Errorf("privacy: %w", err)
		}
		eps = e
	default:
		a, err := dp.NewRDPAccountant(nil)
		if err != nil {
			return err
		}
		if err := a.ComposePoissonGaussian(p.SampleRate, z, p.Rounds); err != nil {
			return fmt.Errorf("privacy: %w", err)
		}
		if err := a.ComposePoissonGaussian(p.SampleRate, z/math.Sqrt(m), p.Rounds); err != nil {
			return fmt.Errorf("privacy: %w", err)
		}
		if eps, _, err = a.Epsilon(p.Delta); err != nil {
			return fmt.Errorf("privacy: %w", err)
		}
	}
	if !near(p.Epsilon, eps) {
		return fmt.Errorf("privacy.epsilon is %v but the recorded noise (%s, sample rate %v) spends ε = %v at δ %v under %s: the record was edited or comes from another fit; refit the calibrator",
			p.Epsilon, noise, p.SampleRate, eps, p.Delta, acc)
	}
	return nil
}

// checkFields checks that every field of p is present and in its domain
// for a fit of family fam, and returns the accountant.
func (p *Privacy) checkFields(fam Family) (dp.Accountant, error) {
	if p.Accountant == "" {
		return 0, fmt.Errorf("%w: privacy.accountant is missing: want \"zcdp\" or \"rdp\"", dp.ErrInvalid)
	}
	acc, err := dp.ParseAccountant(p.Accountant)
	if err != nil {
		return 0, fmt.Errorf("privacy.accountant: %w", err)
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	// A hybrid (scalbin) fit records the clip C of its scaling stage and
	// C₊ of its value histograms.
	scaling, binning, hybrid := fam == Scaling, fam == Binning, fam == Hybrid
	for _, f := range []struct {
		name string
		v    float64
		ok   bool
		want string
	}{
		{"epsilon", p.Epsilon, finite(p.Epsilon) && p.Epsilon >= 0, "finite and ≥ 0"},
		{"delta", p.Delta, p.Delta > 0 && p.Delta < 1, "in (0, 1)"},
		{"rho", p.Rho, finite(p.Rho) && p.Rho > 0, "finite and > 0"},
		{"sigma", p.Sigma, finite(p.Sigma) && p.Sigma > 0, "finite and > 0"},
		{"sample_rate", p.SampleRate, p.SampleRate > 0 && p.SampleRate <= 1, "in (0, 1]"},
		{"clip", p.Clip, !scaling || finite(p.Clip) && p.Clip > 0, "finite and > 0 for a scaling method"},
		{"clip", p.Clip, !hybrid || finite(p.Clip) && p.Clip > 0, "finite and > 0 for scaling-binning (its scaling stage)"},
		{"clip", p.Clip, !binning || p.Clip == 0, "absent for a binning method, which records clip_pos and clip_neg"},
		{"clip_pos", p.ClipPos, !binning || finite(p.ClipPos) && p.ClipPos > 0, "finite and > 0 for a binning method"},
		{"clip_pos", p.ClipPos, !hybrid || finite(p.ClipPos) && p.ClipPos > 0, "finite and > 0 for scaling-binning (its value histograms)"},
		{"clip_neg", p.ClipNeg, !binning || finite(p.ClipNeg) && p.ClipNeg > 0, "finite and > 0 for a binning method"},
		{"clip_pos", p.ClipPos, !scaling || p.ClipPos == 0, "absent for a scaling method, which records clip"},
		{"clip_neg", p.ClipNeg, !scaling || p.ClipNeg == 0, "absent for a scaling method, which records clip"},
		{"clip_neg", p.ClipNeg, !hybrid || p.ClipNeg == 0, "absent for scaling-binning, which records clip and clip_pos"},
	} {
		switch {
		case !f.ok && f.v == 0:
			return 0, fmt.Errorf("%w: privacy.%s is missing or 0: want it %s", dp.ErrInvalid, f.name, f.want)
		case !f.ok:
			return 0, fmt.Errorf("%w: privacy.%s is %v: want it %s", dp.ErrInvalid, f.name, f.v, f.want)
		}
	}
	if p.Rounds < 1 {
		return 0, fmt.Errorf("%w: privacy.rounds is %d: want the number of rounds T ≥ 1", dp.ErrInvalid, p.Rounds)
	}
	return acc, nil
}

// checkFields checks the fields of a secure-aggregation record of a fit
// of rounds rounds.
func (sa *SecureAggregation) checkFields(rounds int) error {
	switch {
	case sa.Noise != NoiseCentral && sa.Noise != NoiseDistributed:
		return fmt.Errorf("%w: privacy.secure_aggregation.noise is %q: want %q or %q", dp.ErrInvalid, sa.Noise, NoiseCentral, NoiseDistributed)
	case sa.Bits < 2 || sa.Bits > 64:
		return fmt.Errorf("%w: privacy.secure_aggregation.bits is %d: want 2 to 64", dp.ErrInvalid, sa.Bits)
	case !(sa.Scale > 0) || math.IsInf(sa.Scale, 1):
		return fmt.Errorf("%w: privacy.secure_aggregation.scale is %v: want finite and > 0", dp.ErrInvalid, sa.Scale)
	case sa.Neighbours < 0 || sa.Threshold < 0 || (sa.Neighbours > 0 && sa.Threshold > sa.Neighbours):
		return fmt.Errorf("%w: privacy.secure_aggregation: %d neighbours, threshold %d: want 0 ≤ threshold ≤ neighbours (0: the default)", dp.ErrInvalid, sa.Neighbours, sa.Threshold)
	case sa.Noise == NoiseCentral:
		if sa.ClientVariance != 0 || sa.L1 != 0 || sa.L2 != 0 || sa.Survivors != nil {
			return fmt.Errorf("%w: privacy.secure_aggregation with central noise records no client_variance, l1, l2 or survivors", dp.ErrInvalid)
		}
		return nil
	}
	finite := func(v float64) bool { return v > 0 && !math.IsInf(v, 1) }
	switch {
	case !finite(sa.ClientVariance) || !finite(sa.L1) || !finite(sa.L2):
		return fmt.Errorf("%w: privacy.secure_aggregation: client_variance %v, l1 %v, l2 %v: want each finite and > 0 with distributed noise", dp.ErrInvalid, sa.ClientVariance, sa.L1, sa.L2)
	case len(sa.Survivors) != rounds:
		return fmt.Errorf("%w: privacy.secure_aggregation.survivors has %d rounds, privacy.rounds is %d", dp.ErrInvalid, len(sa.Survivors), rounds)
	}
	for t, s := range sa.Survivors {
		if s < 0 || s == 1 {
			return fmt.Errorf("%w: privacy.secure_aggregation.survivors[%d] is %d: want 0 or ≥ 2", dp.ErrInvalid, t, s)
		}
	}
	return nil
}

// checkDistributed checks a record of distributed Skellam noise: the
// accountant is RDP (the Skellam bound holds at integer orders only);
// the L2 sensitivity is at least that of an update of mechs blocks, each
// of norm at most its clip norm, at scale γ (√mechs·γ; the record does
// not hold the update's length, so the rounding term √dim of
// dp.RoundedL2Bound, and L1, are checked only as lower bounds); ε is the
// RDP accountant's over the rounds that released, each a Skellam of
// variance dp.SkellamShares(Survivors[t])·v (dp.RDPAccountant.ComposeSkellam,
// no credit for sampling), converted at Delta; ρ is Σ_t L2²/(2·that), the
// Gaussian-equivalent term dp.Release.Rho records; and σ is
// DistributedSigma.
func (p *Privacy) checkDistributed(acc dp.Accountant, clip, mechs float64) error {
	sa := p.SecureAggregation
	if acc != dp.RDP {
		return fmt.Errorf("%w: privacy.accountant is %s, but distributed Skellam noise is accounted by rdp only", dp.ErrInvalid, acc)
	}
	if minL2 := math.Sqrt(mechs) * sa.Scale; sa.L2 < minL2*(1-PrivacyTolerance) || sa.L1 < sa.L2*(1-PrivacyTolerance) {
		return fmt.Errorf("%w: privacy.secure_aggregation: l2 %v and l1 %v: want l2 ≥ √%v·scale = %v and l1 ≥ l2", dp.ErrInvalid, sa.L2, sa.L1, mechs, minL2)
	}
	var a dp.RDPAccountant
	rho := 0.0
	released := false
	for _, s := range sa.Survivors {
		if s == 0 {
			continue
		}
		k := dp.Skellam{Variance: float64(dp.SkellamShares(s)) * sa.ClientVariance, L1: sa.L1, L2: sa.L2}
		if err := a.ComposeSkellam(k, 1); err != nil {
			return fmt.Errorf("privacy.secure_aggregation: %w", err)
		}
		rho += sa.L2 * sa.L2 / (2 * k.Variance)
		released = true
	}
	if !released {
		return fmt.Errorf("%w: privacy.secure_aggregation.survivors: no round released anything", dp.ErrInvalid)
	}
	eps, _, err := a.Epsilon(p.Delta)
	if err != nil {
		return fmt.Errorf("privacy.secure_aggregation: %w", err)
	}
	noise := fmt.Sprintf("Skellam of variance (survivors − 1) × %v per round, survivors %v, L1 %v, L2 %v", sa.ClientVariance, sa.Survivors, sa.L1, sa.L2)
	if !near(p.Rho, rho) {
		return fmt.Errorf("privacy.rho is %v but the recorded distributed noise (%s) gives ρ = %v: the record was edited or comes from another fit; refit the calibrator", p.Rho, noise, rho)
	}
	if !near(p.Epsilon, eps) {
		return fmt.Errorf("privacy.epsilon is %v but the recorded distributed noise (%s) spends ε = %v at δ %v under rdp: the record was edited or comes from another fit; refit the calibrator", p.Epsilon, noise, eps, p.Delta)
	}
	if sigma := DistributedSigma(sa, clip); !near(p.Sigma, sigma) {
		return fmt.Errorf("privacy.sigma is %v but the recorded distributed noise (%s) has σ = %v for clip norm %v: the record was edited; refit the calibrator", p.Sigma, noise, sigma, clip)
	}
	return nil
}

// near reports whether got equals want within PrivacyTolerance,
// relative to the larger of the two.
func near(got, want float64) bool {
	return math.Abs(got-want) <= PrivacyTolerance*math.Max(math.Abs(got), math.Abs(want))
}

// Provenance records how a calibrator was made. Every field is optional.
type Provenance struct {
	ModelSHA256 string `json:"model_sha256,omitempty"` // of the ONNX model
	Data        string `json:"data,omitempty"`         // description of the data
	Protocol    string `json:"protocol,omitempty"`     // e.g. "central", "FedBBQ"
	Weighting   string `json:"weighting,omitempty"`    // none, all or changed
	Clients     int    `json:"clients,omitempty"`      // K
	Seed        Seed   `json:"seed"`                   // random seed
	Tool        string `json:"tool,omitempty"`         // fedcalib version
	// ClassNames names the classes of the logits the calibrator was
	// fitted on, in label order (the logits file's "classes"); nil when
	// they had none. Encode and Decode check it with CheckClassNames.
	ClassNames []string `json:"class_names,omitempty"`
	// FitMetrics holds the metrics of the calibration rows before and
	// after calibration, as calibrate measured them; nil when they were
	// not measured (a networked fit, whose coordinator holds no data).
	FitMetrics *FitMetrics `json:"fit_metrics,omitempty"`
	// Input is what the rows the calibrator was fitted on held: InputLogits,
	// or InputProbabilities (a model ending in a softmax, whose log
	// max(p, 1e-12) the calibrator read). Whoever applies the calibrator
	// must feed it the same kind. Empty (files written before it was
	// recorded) means unknown.
	Input string `json:"input,omitempty"`
	// Fit reports how the calibrator's iterative fit ended (FitReport):
	// converged or not, iterations, final objective, parameters at a
	// bound, and dirichlet's chosen variant, λ and μ; nil for a method
	// without an iterative fit, or a file written before it was
	// recorded.
	Fit *FitReport `json:"fit,omitempty"`
}

// Input kinds of Provenance.Input: what a calibrator reads.
const (
	InputLogits        = "logits"        // logits
	InputProbabilities = "probabilities" // probabilities, read as log max(p, 1e-12)
)

// checkInput refuses an input kind other than "", InputLogits and
// InputProbabilities.
func checkInput(kind string) error {
	switch kind {
	case "", InputLogits, InputProbabilities:
		return nil
	}
	return fmt.Errorf("input %q: want %q or %q", kind, InputLogits, InputProbabilities)
}

// FitMetrics are the metrics of the calibration rows a calibrator was
// fitted on, before (the model's softmax) and after calibration, as
// Evaluate computes them with DefaultMetricBins: in-sample, so they say
// what the fit achieved, not what it will achieve on new data. The zero
// value records no rows.
type FitMetrics struct {
	// Rows is the number of calibration rows measured.
	Rows int `json:"rows"`
	// Before and After are their metrics without and with the
	// calibrator.
	Before Metrics `json:"before"`
	After  Metrics `json:"after"`
}

// check refuses fit metrics that no measurement gives: rows that do not
// match the metrics' counts, and metrics that are not finite or out of
// their ranges.
func (m *FitMetrics) check(classes int) error {
	if m.Rows < 1 || m.Before.N != m.Rows || m.After.N != m.Rows {
		return fmt.Errorf("rows %d but metrics of %d and %d examples", m.Rows, m.Before.N, m.After.N)
	}
	for _, x := range []Metrics{m.Before, m.After} {
		if x.Classes != classes {
			return fmt.Errorf("metrics of %d classes in a file of %d", x.Classes, classes)
		}
		for name, v := range map[string]float64{"accuracy": x.Accuracy, "cwece": x.CWECE, "ece": x.ECE, "brier": x.Brier} {
			if !(v >= 0 && v <= 2) {
				return fmt.Errorf("%s %v out of range", name, v)
			}
		}
		if !(x.NLL >= 0 && !math.IsInf(x.NLL, 1)) {
			return fmt.Errorf("nll %v out of range", x.NLL)
		}
	}
	return nil
}

// Encode writes c as a version-1 sidecar file to w. It refuses a privacy
// record that Check refuses, and class names (prov.ClassNames) that
// CheckClassNames refuses, so that Decode reads whatever Encode writes.
func Encode(w io.Writer, c Calibrator, priv *Privacy, prov Provenance) error {
	if priv != nil {
		if err := priv.Check(c.Method(), c.Classes()); err != nil {
			return fmt.Errorf("encode %s calibrator: %w", c.Method(), err)
		}
	}
	if err := CheckClassNames(prov.ClassNames, c.Classes()); err != nil {
		return fmt.Errorf("encode %s calibrator: provenance.class_names: %w", c.Method(), err)
	}
	if err := checkInput(prov.Input); err != nil {
		return fmt.Errorf("encode %s calibrator: provenance.%w", c.Method(), err)
	}
	if m := prov.FitMetrics; m != nil {
		if err := m.check(c.Classes()); err != nil {
			return fmt.Errorf("encode %s calibrator: provenance.fit_metrics: %w", c.Method(), err)
		}
	}
	if r := prov.Fit; r != nil {
		if err := r.check(); err != nil {
			return fmt.Errorf("encode %s calibrator: provenance.fit: %w", c.Method(), err)
		}
	}
	params, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode %s calibrator: %w", c.Method(), err)
	}
	f := File{Format: FormatV1, Method: c.Method(), Classes: c.Classes(), Params: params, Privacy: priv, Provenance: prov}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(&f)
}

// WriteFile writes c as a sidecar file at path atomically: it writes a
// temporary file in the same directory and renames it.
func WriteFile(path string, c Calibrator, priv *Privacy, prov Provenance) error {
	var buf bytes.Buffer
	if err := Encode(&buf, c, priv, prov); err != nil {
		return err
	}
	return fileio.Write(path, buf.Bytes())
}

// Decode reads a sidecar file from r and returns the calibrator it holds,
// with the file's metadata. It is strict: it refuses unknown format
// versions and methods, unknown keys at any level, a key given twice in
// one object (strictjson.DuplicateKeys), data after the JSON
// object, parameters that do not fit the declared number of classes, and
// a privacy record that Privacy.Check refuses.
func Decode(r io.Reader) (Calibrator, *File, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, nil, err
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return nil, nil, fmt.Errorf("not a calibrator file: %w", err)
	}
	if err := strictjson.DuplicateKeys(b); err != nil {
		return nil, nil, fmt.Errorf("calibrator file: %w", err)
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, nil, fmt.Errorf("not a calibrator file: %w", err)
	}
	if f.Format != FormatV1 {
		return nil, nil, fmt.Errorf("unsupported calibrator format %q: this fedcalib reads %q; upgrade fedcalib or refit the calibrator", f.Format, FormatV1)
	}
	known := fileKeys()
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if !slices.Contains(known, k) {
			return nil, nil, fmt.Errorf("calibrator file has unknown key %q: a %s file holds only %s (docs/SIDECAR.md); remove it", k, FormatV1, strings.Join(known, ", "))
		}
	}
	for _, part := range []struct {
		key string
		v   any
	}{{"privacy", new(Privacy)}, {"provenance", new(Provenance)}} {
		raw, ok := keys[part.key]
		if !ok || string(raw) == "null" {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(part.v); err != nil {
			return nil, nil, fmt.Errorf("calibrator file's %s: %w (docs/SIDECAR.md lists its keys)", part.key, err)
		}
	}
	c, err := newByMethod(f.Method)
	if err != nil {
		return nil, nil, err
	}
	if len(f.Params) == 0 {
		return nil, nil, fmt.Errorf("calibrator file has no \"params\"")
	}
	pdec := json.NewDecoder(bytes.NewReader(f.Params))
	pdec.DisallowUnknownFields()
	if err := pdec.Decode(c); err != nil {
		return nil, nil, fmt.Errorf("%s parameters: %w", f.Method, err)
	}
	if v, ok := c.(interface{ validate() error }); ok {
		if err := v.validate(); err != nil {
			return nil, nil, fmt.Errorf("%s parameters: %w", f.Method, err)
		}
	}
	if c.Classes() != f.Classes {
		return nil, nil, fmt.Errorf("%s parameters are for %d classes but the file declares %d", f.Method, c.Classes(), f.Classes)
	}
	if err := CheckClassNames(f.Provenance.ClassNames, f.Classes); err != nil {
		return nil, nil, fmt.Errorf("calibrator file's provenance.class_names: %w", err)
	}
	if err := checkInput(f.Provenance.Input); err != nil {
		return nil, nil, fmt.Errorf("calibrator file's provenance.%w", err)
	}
	if m := f.Provenance.FitMetrics; m != nil {
		if err := m.check(f.Classes); err != nil {
			return nil, nil, fmt.Errorf("calibrator file's provenance.fit_metrics: %w", err)
		}
	}
	if r := f.Provenance.Fit; r != nil {
		if err := r.check(); err != nil {
			return nil, nil, fmt.Errorf("calibrator file's provenance.fit: %w", err)
		}
	}
	if f.Privacy != nil {
		if err := f.Privacy.Check(f.Method, f.Classes); err != nil {
			return nil, nil, err
		}
	}
	return c, &f, nil
}

// MaxFileBytes is the largest calibrator file ReadFile reads: 1 GiB,
// far above the parameters of any method at MaxClasses classes.
const MaxFileBytes = 1 << 30

// ReadFile reads the sidecar file at path; see Decode. It refuses a path
// that is not a regular file (such as /dev/zero or a FIFO) and a file of
// more than MaxFileBytes before reading it.
func ReadFile(path string) (Calibrator, *File, error) {
	b, err := fileio.ReadLimited(path, MaxFileBytes)
	if err != nil {
		return nil, nil, err
	}
	c, f, err := Decode(bytes.NewReader(b))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, f, nil
}

// EncodeFile is Encode keeping every record of f beside c's parameters:
// its privacy, provenance and rounds (and whatever else File holds).
// Format, method, classes and params come from c.
func EncodeFile(w io.Writer, c Calibrator, f *File) error {
	if err := Encode(io.Discard, c, f.Privacy, f.Provenance); err != nil {
		return err
	}
	params, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode %s calibrator: %w", c.Method(), err)
	}
	g := *f
	g.Format, g.Method, g.Classes, g.Params = FormatV1, c.Method(), c.Classes(), params
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(&g)
}
