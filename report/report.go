package report

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/calib/diagram"
	"github.com/fedcalib/fedcalib/dp"
)

// DefaultResamples is the number of bootstrap resamples of a report's
// intervals when Input.Resamples is 0: enough for 95% percentile
// intervals to settle to about a tenth of their width, and quick.
const DefaultResamples = 200

// Calibrated is one calibrator's probabilities on the report's rows, with
// the calibrator file they came from. The zero value is not usable: Label
// and Probs are required.
type Calibrated struct {
	// Label names the calibrator in the report: its file's base name,
	// say.
	Label string
	// Path is the calibrator file's path, or "" when the probabilities
	// came from elsewhere (a calibrated ONNX model).
	Path string
	// Probs holds the calibrated probabilities, n×classes row-major, of
	// the report's rows.
	Probs []float64
	// File is the calibrator file as read (method, parameters, privacy,
	// provenance); nil when there is none. Method is then the method.
	File *calib.File
	// Method is the calibrator's method when File is nil.
	Method string
}

// Input is what Build makes a report from. Set and at most one Verdict or
// Gate are all it needs; every other field is optional and its zero value
// leaves its part of the report saying what is missing.
type Input struct {
	// Title heads the report; "" means "Calibration report".
	Title string
	// Data describes the evaluated rows, e.g. "cifar10.npz, 10000 test
	// rows"; DataSHA256 is the logits file's sha256, "" when unknown.
	Data, DataSHA256 string
	// Set holds the evaluated rows' logits and labels (required).
	Set *calib.Set
	// ClassNames names the classes in label order; nil names them by
	// index.
	ClassNames []string
	// Calibrators are the calibrators compared with the uncalibrated
	// model, in order; the first is the one the gate judges and the
	// diagrams show first. None gives a report of the model alone.
	Calibrators []Calibrated
	// Bins is the number of bins of the metrics and diagrams; 0 means
	// calib.DefaultMetricBins.
	Bins int
	// Resamples is the number of bootstrap resamples of the intervals
	// and the smoothed diagram's band; 0 means DefaultResamples, a
	// negative number gives no intervals.
	Resamples int
	// Level is the intervals' confidence level; 0 means 0.95.
	Level float64
	// Seed seeds the resamples: the same seed gives the same report.
	Seed uint64
	// Gate is the bar the first calibrator is judged against; nil means
	// check's default, calib.Gate{MaxAccuracyDrop: calib.AccuracyDropMark}.
	// Ignored when Verdict is set.
	Gate *calib.Gate
	// Verdict is a verdict already reached (by `fedcalib check`), shown
	// as it is instead of judging Gate.
	Verdict *calib.Verdict
	// Ledger is the privacy ledger's state, LedgerPath its file; nil
	// when no ledger was given.
	Ledger     *dp.LedgerFile
	LedgerPath string
	// ModelSHA256 is the sha256 of the model the logits came from, when
	// known; "" takes it from the calibrators' provenance.
	ModelSHA256 string
	// Tool is the fedcalib version; Command the command line that made
	// the report. Generated is when, as text ("" leaves it out, so that
	// the same input gives the same bytes).
	Tool, Command, Generated string
	// MaxClasses caps the per-class small multiples; 0 means 16.
	MaxClasses int
}

// Report is a built report, ready for WriteHTML. Its fields are what the
// page shows; the zero value is an empty report.
type Report struct {
	// Title heads the page.
	Title string
	// Data describes the rows and DataSHA256 is the logits file's hash
	// ("" when unknown).
	Data, DataSHA256 string
	// N is the number of rows, Classes the number of classes, and
	// ClassNames their names (nil: by index).
	N, Classes int
	ClassNames []string
	// Bins is the number of bins of the metrics and diagrams.
	Bins int
	// Resamples is the number of bootstrap resamples (0: no intervals),
	// Level their confidence level and Seed their seed.
	Resamples int
	Level     float64
	Seed      uint64
	// Metrics holds the uncalibrated row, then one per calibrator.
	Metrics []MetricsRow
	// Gate is the verdict on the first calibrator; nil without one.
	Gate *GateView
	// Figures are the diagrams, in page order.
	Figures []Figure
	// Fits are the calibrators' records, in order.
	Fits []Fit
	// Ledger is the privacy ledger's state; nil without a ledger.
	Ledger *LedgerView
	// Model is the model's sha256; "" when not recorded.
	Model string
	// Tool, Command and Generated are Input's.
	Tool, Command, Generated string
}

// Private reports whether a row of the metrics table spent privacy, so
// that the table has an ε column.
func (r *Report) Private() bool {
	for _, m := range r.Metrics {
		if m.Epsilon != nil {
			return true
		}
	}
	return false
}

// MetricsRow is one row of the metrics table: the uncalibrated model or
// a calibrator. The zero value is a row of no examples.
type MetricsRow struct {
	// Label names the row.
	Label string
	// Metrics are calib.Evaluate's.
	Metrics calib.Metrics
	// SmECE is the smooth ECE of the top label at relplot's bandwidth.
	SmECE float64
	// AdaptiveECE is the top-label ECE over equal-mass bins.
	AdaptiveECE float64
	// KS is the top-label Kolmogorov–Smirnov calibration error
	// (calib.TopLabel.KS).
	KS float64
	// Classwise holds the classwise errors over equal-mass bins.
	Classwise calib.Classwise
	// Intervals holds the bootstrap intervals by metric ("cwece", ...);
	// nil without resamples.
	Intervals calib.Bootstrap
	// Epsilon is the ε the fit spent; nil for a non-private fit.
	Epsilon *float64
	// Dropped marks an accuracy drop of more than 1 point
	// (calib.AccuracyDropped).
	Dropped bool
}

// GateView is the CI gate's verdict on the first calibrator, named by
// Calibrator.
type GateView struct {
	Calibrator string
	calib.Verdict
}

// Figure is one figure of the report: an inline SVG with its caption.
type Figure struct {
	// ID is the figure's section id (its link target); Title heads it
	// and Caption explains it.
	ID, Title, Caption string
	// SVG is the figure's markup, without the XML prologue.
	SVG template.HTML
	// MinWidth is the width in CSS pixels below which the figure scrolls
	// instead of shrinking further (a phone).
	MinWidth int
}

// Fit is one calibrator's fit record. The zero value records nothing.
type Fit struct {
	// Label names the calibrator, Path is its file ("" without one) and
	// Method its method.
	Label, Path, Method string
	// Classes is the number of classes the file declares.
	Classes int
	// Params summarises the parameters, one entry per field.
	Params []Param
	// Convergence says how the fit ended, where the file records it.
	Convergence string
	// Provenance is the file's provenance; nil without a file.
	Provenance *calib.Provenance
	// Rounds is the number of networked rounds recorded, Participants
	// the updates aggregated over them.
	Rounds, Participants int
	// Privacy is the file's privacy record; nil for a non-private fit.
	Privacy *calib.Privacy
}

// Param is one parameter field's summary: its JSON name and a short
// description of its value.
type Param struct{ Name, Value string }

// LedgerView is the privacy ledger's state: its file and each dataset's
// spend, by key.
type LedgerView struct {
	Path     string
	Datasets []LedgerDataset
}

// LedgerDataset is one dataset's spend in the ledger, under its key.
type LedgerDataset struct {
	Key string
	*dp.DatasetSpend
}

// Build computes everything a report shows from in: the metrics with
// their bootstrap intervals, the diagrams, the gate's verdict and the
// records. It returns an error for a missing or malformed input, and the
// errors of calib.Evaluate on the probabilities.
func Build(in Input) (*Report, error) {
	s := in.Set
	if s == nil || s.Len() == 0 {
		return nil, fmt.Errorf("report: %w", calib.ErrEmpty)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	bins := in.Bins
	if bins == 0 {
		bins = calib.DefaultMetricBins
	}
	if bins < 1 {
		return nil, fmt.Errorf("report: %d bins: want at least 1", bins)
	}
	resamples := in.Resamples
	if resamples == 0 {
		resamples = DefaultResamples
	}
	level := in.Level
	if level == 0 {
		level = calib.DefaultBootstrapLevel
	}
	if !(level > 0 && level < 1) {
		return nil, fmt.Errorf("report: confidence level %v: want a fraction in (0, 1)", level)
	}
	if resamples > calib.MaxBootstrap {
		return nil, fmt.Errorf("report: %d resamples: want at most %d", resamples, calib.MaxBootstrap)
	}
	if len(in.ClassNames) != 0 && len(in.ClassNames) != s.Classes {
		return nil, fmt.Errorf("report: %d class names for %d classes", len(in.ClassNames), s.Classes)
	}
	title := in.Title
	if title == "" {
		title = "Calibration report"
	}
	if in.ClassNames != nil {
		names := make([]string, len(in.ClassNames))
		for j, n := range in.ClassNames {
			names[j] = displayName(n)
		}
		in.ClassNames = names
	}
	r := &Report{Title: title, Data: in.Data, DataSHA256: in.DataSHA256, N: s.Len(), Classes: s.Classes,
		ClassNames: in.ClassNames, Bins: bins, Level: level, Seed: in.Seed,
		Tool: in.Tool, Command: in.Command, Generated: in.Generated}
	if resamples > 0 {
		r.Resamples = resamples
	}
	base, err := calib.Probabilities(s, nil)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	type curve struct {
		label string
		probs []float64
	}
	curves := []curve{{"uncalibrated", base}}
	for i, c := range in.Calibrators {
		if c.Label == "" {
			return nil, fmt.Errorf("report: calibrator %d has no label", i+1)
		}
		if len(c.Probs) != len(base) {
			return nil, fmt.Errorf("report: %s: %d probabilities for %d rows of %d classes", c.Label, len(c.Probs), s.Len(), s.Classes)
		}
		curves = append(curves, curve{c.Label, c.Probs})
	}

	// The metrics table.
	var smooth []diagram.SmoothCurve
	for i, c := range curves {
		m, err := calib.Evaluate(c.probs, s.Labels, s.Classes, bins)
		if err != nil {
			return nil, fmt.Errorf("report: %s: %w", c.label, err)
		}
		tl, err := calib.TopLabelErrors(c.probs, s.Labels, s.Classes, bins)
		if err != nil {
			return nil, fmt.Errorf("report: %s: %w", c.label, err)
		}
		row := MetricsRow{Label: c.label, Metrics: m}
		row.AdaptiveECE, row.KS = *tl.AdaptiveECE, *tl.KS // TopLabelErrors computes both
		if row.Classwise, err = calib.ClasswiseErrors(c.probs, s.Labels, s.Classes, bins); err != nil {
			return nil, fmt.Errorf("report: %s: %w", c.label, err)
		}
		if resamples > 0 {
			if row.Intervals, err = calib.BootstrapIntervals(c.probs, s.Labels, s.Classes, bins, resamples, level, in.Seed); err != nil {
				return nil, fmt.Errorf("report: %s: %w", c.label, err)
			}
		}
		if i > 0 {
			row.Dropped = calib.AccuracyDropped(r.Metrics[0].Metrics, m)
			if f := in.Calibrators[i-1].File; f != nil && f.Privacy != nil {
				eps := f.Privacy.Total() // with a selection, its total
				row.Epsilon = &eps
			}
		}
		top, err := diagram.TopLabel(c.probs, s.Labels, s.Classes)
		if err != nil {
			return nil, fmt.Errorf("report: %s: %w", c.label, err)
		}
		sm, err := diagram.Smooth(top, diagram.SmoothOptions{Resamples: max(resamples, -1), Level: level, Seed: in.Seed})
		if err != nil {
			return nil, fmt.Errorf("report: %s: %w", c.label, err)
		}
		row.SmECE = sm.SmECE
		smooth = append(smooth, diagram.SmoothCurve{Label: c.label, Smoothed: sm})
		r.Metrics = append(r.Metrics, row)
	}

	// The gate.
	if len(in.Calibrators) > 0 {
		v := in.Verdict
		if v == nil {
			g := calib.Gate{MaxAccuracyDrop: calib.AccuracyDropMark}
			if in.Gate != nil {
				g = *in.Gate
			}
			if err := g.Validate(); err != nil {
				return nil, fmt.Errorf("report: %w", err)
			}
			judged := g.Judge(r.Metrics[0].Metrics, r.Metrics[1].Metrics)
			v = &judged
		}
		r.Gate = &GateView{Calibrator: in.Calibrators[0].Label, Verdict: *v}
	} else if in.Verdict != nil {
		return nil, errors.New("report: a verdict without a calibrator")
	}

	// The figures.
	opt := diagram.Options{ClassNames: in.ClassNames, MaxClasses: in.MaxClasses}
	var top, mass []diagram.Curve
	var sets []diagram.CurveSet
	for _, c := range curves {
		o, _ := diagram.TopLabel(c.probs, s.Labels, s.Classes) // checked above
		top = append(top, diagram.Curve{Label: c.label, Bins: o.Bins(bins, diagram.EqualWidth)})
		mass = append(mass, diagram.Curve{Label: c.label, Bins: o.Bins(bins, diagram.EqualMass)})
		set := diagram.CurveSet{Label: c.label}
		for j := range s.Classes {
			oj, _ := diagram.OneVsRest(c.probs, s.Labels, s.Classes, j)
			set.Classes = append(set.Classes, oj.Bins(bins, diagram.EqualWidth))
		}
		sets = append(sets, set)
	}
	panels := len(curves)
	perRow := max(1, 4/panels) // classes per row of the small multiples
	classCols := min(perRow, s.Classes) * panels
	figs := []struct {
		id, title, caption string
		make               func() (diagram.Figure, error)
		minWidth           int
	}{
		{"reliability", "Reliability, top label", fmt.Sprintf(
			"%d equal-width bins of the top-label confidence. Bars: accuracy; red: the gap to the bin's mean confidence (its top edge); faint dashed bars hold too few examples to trust; beneath, the examples per bin.", bins),
			func() (diagram.Figure, error) { return diagram.Reliability(top, opt) }, 300 * panels},
		{"smooth", "Smoothed reliability, top label", fmt.Sprintf(
			"Kernel-smoothed accuracy (Błasiok & Nakkiran 2023, relplot): a Gaussian kernel reflected at 0 and 1, its bandwidth σ where the smooth ECE equals σ; the line's thickness and the grey area beneath show the density of confidences%s.", bandCaption(resamples, level)),
			func() (diagram.Figure, error) { return diagram.Smooths(smooth, opt) }, 300 * panels},
		{"equal-mass", "Reliability, equal-mass bins", fmt.Sprintf(
			"%d bins of equal counts (the adaptive ECE's), so that every bar is equally sure; bar widths show where the confidences lie.", bins),
			func() (diagram.Figure, error) { return diagram.Reliability(mass, opt) }, 300 * panels},
		{"classes", "Reliability per class", fmt.Sprintf(
			"One-vs-rest: each class's probability against whether the label is that class, %d equal-width bins; the mean of these ECEs is the cwECE.", bins),
			func() (diagram.Figure, error) { return diagram.Classes(sets, opt) }, 160 * classCols},
	}
	for _, f := range figs {
		fig, err := f.make()
		if err != nil {
			return nil, fmt.Errorf("report: %s: %w", f.id, err)
		}
		svg, err := fig.SVG()
		if err != nil {
			return nil, fmt.Errorf("report: %s: %w", f.id, err)
		}
		r.Figures = append(r.Figures, Figure{ID: f.id, Title: f.title, Caption: f.caption, SVG: inlineSVG(svg, f.title), MinWidth: f.minWidth})
	}
	if maxC := cmp.Or(max(in.MaxClasses, 0), 16); s.Classes > maxC {
		r.Figures[len(r.Figures)-1].Caption += fmt.Sprintf(" The first %d of %d classes.", maxC, s.Classes)
	}

	// The records.
	for _, c := range in.Calibrators {
		r.Fits = append(r.Fits, fitOf(c))
	}
	if in.Ledger != nil {
		lv := &LedgerView{Path: in.LedgerPath}
		keys := make([]string, 0, len(in.Ledger.Datasets))
		for k := range in.Ledger.Datasets {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			lv.Datasets = append(lv.Datasets, LedgerDataset{Key: k, DatasetSpend: in.Ledger.Datasets[k]})
		}
		r.Ledger = lv
	}
	r.Model = in.ModelSHA256
	if r.Model == "" {
		for _, c := range in.Calibrators {
			if c.File != nil && c.File.Provenance.ModelSHA256 != "" {
				r.Model = c.File.Provenance.ModelSHA256
				break
			}
		}
	}
	return r, nil
}

func bandCaption(resamples int, level float64) string {
	if resamples <= 0 {
		return ""
	}
	return fmt.Sprintf("; the grey band is the pointwise %g%% bootstrap band of %d resamples", 100*level, resamples)
}

// displayName returns a class name as the report shows it: as it is, or
// quoted with Go's escapes when it holds a control character or only
// white space (the Shakespeare data name a class "\n"), so that it is
// seen.
func displayName(s string) string {
	if strings.TrimSpace(s) == "" || strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// prologue matches what precedes an SVG document's root element.
var prologue = regexp.MustCompile(`(?s)^.*?<svg`)

// inlineSVG returns svg ready to be placed in HTML: without its XML
// prologue, labelled for screen readers. svg is diagram's output, whose
// text is escaped.
func inlineSVG(svg []byte, label string) template.HTML {
	s := prologue.ReplaceAllString(string(svg), `<svg role="img" aria-label="`+template.HTMLEscapeString(label)+`"`)
	return template.HTML(strings.TrimSpace(s)) // generated markup whose text svgo escaped
}

// fitOf returns c's fit record.
func fitOf(c Calibrated) Fit {
	f := Fit{Label: c.Label, Path: c.Path, Method: c.Method}
	if c.File == nil {
		f.Convergence = "no calibrator file: nothing recorded"
		return f
	}
	file := c.File
	f.Method, f.Classes, f.Privacy = file.Method, file.Classes, file.Privacy
	prov := file.Provenance
	f.Provenance = &prov
	f.Params = summarise(file.Params)
	f.Rounds = len(file.Rounds)
	for _, r := range file.Rounds {
		f.Participants += len(r.Participants)
	}
	f.Convergence = convergence(file)
	return f
}

// convergence says what the file records of how the fit ended.
func convergence(f *calib.File) string {
	if r := f.Provenance.Fit; r != nil {
		how := "converged"
		if !r.Converged {
			how = "did not converge"
		}
		s := fmt.Sprintf("%s after %d of at most %d iterations (%s; objective %.6g, gradient %.3g against tolerance %.3g)",
			how, r.Iterations, r.MaxIterations, r.Stop, r.Objective, r.Gradient, r.Tolerance)
		if len(r.AtBound) > 0 {
			s += "; at a bound: " + strings.Join(r.AtBound, ", ")
		}
		return s
	}
	var keys map[string]json.RawMessage
	if json.Unmarshal(f.Params, &keys) == nil {
		for _, k := range []string{"converged", "iterations", "status"} {
			if v, ok := keys[k]; ok {
				return fmt.Sprintf("%s: %s", k, v)
			}
		}
	}
	if len(f.Rounds) > 0 {
		return fmt.Sprintf("%d federated rounds run", len(f.Rounds))
	}
	return "not recorded in the calibrator file"
}

// summarise returns one entry per parameter field of params (a JSON
// object): a number as it is, an array of numbers as its count and range,
// anything else by its JSON, shortened.
func summarise(params json.RawMessage) []Param {
	var fields map[string]json.RawMessage
	if json.Unmarshal(params, &fields) != nil {
		return []Param{{Name: "params", Value: shorten(string(params))}}
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []Param
	for _, k := range names {
		out = append(out, Param{Name: k, Value: summariseValue(fields[k])})
	}
	return out
}

func summariseValue(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return shorten(string(raw))
	}
	var nums []float64
	var walk func(any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case float64:
			nums = append(nums, x)
			return true
		case []any:
			for _, e := range x {
				if !walk(e) {
					return false
				}
			}
			return true
		}
		return false
	}
	if walk(v) {
		if x, ok := v.(float64); ok {
			return strconv.FormatFloat(x, 'g', 6, 64)
		}
		if len(nums) == 0 {
			return "empty"
		}
		lo, hi := slices.Min(nums), slices.Max(nums)
		var mean float64
		for _, x := range nums {
			mean += x
		}
		mean /= float64(len(nums))
		if len(nums) <= 4 {
			parts := make([]string, len(nums))
			for i, x := range nums {
				parts[i] = strconv.FormatFloat(x, 'g', 5, 64)
			}
			return strings.Join(parts, ", ")
		}
		return fmt.Sprintf("%d numbers in [%s, %s], mean %s", len(nums), g4(lo), g4(hi), g4(mean))
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return shorten(string(raw))
	}
	return shorten(buf.String())
}

func g4(x float64) string {
	if math.Abs(x) < 1e-4 && x != 0 {
		return strconv.FormatFloat(x, 'e', 3, 64)
	}
	return strconv.FormatFloat(x, 'g', 4, 64)
}

func shorten(s string) string {
	if r := []rune(s); len(r) > 120 {
		return string(r[:117]) + "…"
	}
	return s
}
