package report

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
)

// testInput returns a report input on n seeded rows of 4 classes of an
// over-confident model, with a temperature calibrator (T = 2.5) read back
// from its file, a privacy record and a ledger, and a class name that
// needs escaping.
func testInput(t testing.TB, n int) Input {
	t.Helper()
	const c = 4
	rng := rand.New(rand.NewPCG(5, 7))
	s := &calib.Set{Classes: c, Logits: make([]float64, n*c), Labels: make([]int, n)}
	for i := range n {
		y := rng.IntN(c)
		s.Labels[i] = y
		for j := range c {
			v := rng.NormFloat64()
			if j == y {
				v += 1.5
			}
			s.Logits[i*c+j] = 3 * v
		}
	}
	temp := &calib.Temperature{T: 2.5, C: c}
	var buf bytes.Buffer
	names := []string{"cat", "dog", `<b>"bird"&`, "fish"}
	prov := calib.Provenance{ModelSHA256: strings.Repeat("ab", 32), Data: "test.npz: 100 calibration rows", Protocol: "central", Seed: 9, Tool: "v1.2.3", ClassNames: names}
	if err := calib.Encode(&buf, temp, nil, prov); err != nil {
		t.Fatal(err)
	}
	_, file, err := calib.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	file.Privacy = &calib.Privacy{Epsilon: 1, Delta: 1e-5, Rho: 0.02, Sigma: 3, Clip: 1, Accountant: "zcdp", Rounds: 12, SampleRate: 0.1}
	probs, err := calib.Probabilities(s, temp)
	if err != nil {
		t.Fatal(err)
	}
	ledger := &dp.LedgerFile{Format: dp.LedgerFormatV1, Datasets: map[string]*dp.DatasetSpend{
		"abc123": {Description: "test.npz: 600 examples", Accountant: "zcdp", Delta: 1e-5, Epsilon: 1, Rho: 0.02,
			Runs: []dp.LedgerRun{{Time: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), Method: "temp", Calibrator: "temp.json", Epsilon: 1, Rho: 0.02, Rounds: 12, SampleRate: 0.1}}}}}
	return Input{
		Data: "test.npz, all rows", DataSHA256: strings.Repeat("cd", 32), Set: s, ClassNames: names,
		Calibrators: []Calibrated{{Label: "temp", Path: "temp.json", Probs: probs, File: file}},
		Resamples:   50, Seed: 1, Ledger: ledger, LedgerPath: "ledger.json",
		Tool: "v1.2.3", Command: "fedcalib report --logits test.npz --calibrator temp.json --out r.html",
	}
}

func TestBuild(t *testing.T) {
	in := testInput(t, 600)
	r, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	// The metrics are calib.Evaluate's, computed here a second time.
	base, _ := calib.Probabilities(in.Set, nil)
	want0, _ := calib.Evaluate(base, in.Set.Labels, 4, calib.DefaultMetricBins)
	want1, _ := calib.Evaluate(in.Calibrators[0].Probs, in.Set.Labels, 4, calib.DefaultMetricBins)
	if len(r.Metrics) != 2 || r.Metrics[0].Metrics != want0 || r.Metrics[1].Metrics != want1 {
		t.Fatalf("metrics %+v, want %+v and %+v", r.Metrics, want0, want1)
	}
	// Temperature scaling of an over-confident model lowers cwECE and
	// keeps the argmax, so the default gate passes.
	if !(want1.CWECE < want0.CWECE) || want1.Accuracy != want0.Accuracy {
		t.Fatalf("the test model is not what it should be: %+v → %+v", want0, want1)
	}
	wantV := calib.Gate{MaxAccuracyDrop: calib.AccuracyDropMark}.Judge(want0, want1)
	if r.Gate == nil || !r.Gate.Pass || r.Gate.CWECEImprovement != wantV.CWECEImprovement {
		t.Errorf("gate %+v, want %+v", r.Gate, wantV)
	}
	for i, row := range r.Metrics {
		p := [][]float64{base, in.Calibrators[0].Probs}[i]
		want, _ := calib.BootstrapIntervals(p, in.Set.Labels, 4, calib.DefaultMetricBins, 50, 0.95, 1)
		if iv := row.Intervals["cwece"]; iv != want["cwece"] || !(iv.Lo < iv.Hi) {
			t.Errorf("%s: cwECE interval %+v, want %+v", row.Label, iv, want["cwece"])
		}
		if !(row.SmECE > 0 && row.SmECE < 1) {
			t.Errorf("%s: smECE %v", row.Label, row.SmECE)
		}
		tl, _ := calib.TopLabelErrors(p, in.Set.Labels, 4, calib.DefaultMetricBins)
		cw, _ := calib.ClasswiseErrors(p, in.Set.Labels, 4, calib.DefaultMetricBins)
		if row.KS != *tl.KS || row.Classwise != cw || !(cw.AdaptiveCWECE > 0) {
			t.Errorf("%s: KS %v, classwise %+v; want %v, %+v", row.Label, row.KS, row.Classwise, *tl.KS, cw)
		}
	}
	if e := r.Metrics[1].Epsilon; e == nil || *e != 1 {
		t.Errorf("ε of the private fit: %v", e)
	}
	if r.Model != strings.Repeat("ab", 32) {
		t.Errorf("model sha256 %q: want the calibrator's provenance", r.Model)
	}
	ids := []string{}
	for _, f := range r.Figures {
		ids = append(ids, f.ID)
	}
	if got := strings.Join(ids, " "); got != "reliability smooth equal-mass classes" {
		t.Errorf("figures %s", got)
	}
	fit := r.Fits[0]
	if fit.Method != "temp" || len(fit.Params) != 2 || fit.Params[1].Name != "t" || fit.Params[1].Value != "2.5" {
		t.Errorf("fit record %+v", fit)
	}
	// A verdict given is shown as it is.
	failed := calib.Verdict{Pass: false, Failures: []string{"made up"}}
	in.Verdict = &failed
	r, err = Build(in)
	if err != nil || r.Gate.Pass || r.Gate.Failures[0] != "made up" {
		t.Errorf("given verdict: %+v, %v", r.Gate, err)
	}
}

func TestWriteHTML(t *testing.T) {
	in := testInput(t, 600)
	r, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	var page bytes.Buffer
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("REPORT_OUT"); dir != "" {
		os.WriteFile(filepath.Join(dir, "report.html"), page.Bytes(), 0o644)
	}
	if err := Check(page.Bytes()); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	for _, want := range []string{
		`<section id="reliability">`, `<section id="smooth">`, `<section id="equal-mass">`, `<section id="classes">`,
		">PASS<", "ε = 1 at δ = 1e-05", "abc123", "temp.json", strings.Repeat("ab", 32), strings.Repeat("cd", 32),
		"fedcalib v1.2.3", "@media print", "<th>ε</th>", "@media (max-width: 40rem)", "Content-Security-Policy",
		"&lt;b&gt;&#34;bird&#34;&amp;", // the class name, escaped in the table
	} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(html, "<svg "); n != 4 {
		t.Errorf("%d inline SVGs, want 4", n)
	}
	if strings.Contains(html, `<b>"bird"`) || strings.Contains(html, "<?xml") {
		t.Error("unescaped class name or an XML prologue in the page")
	}
	// The same input gives the same bytes.
	r2, _ := Build(in)
	var again bytes.Buffer
	r2.WriteHTML(&again)
	if !bytes.Equal(page.Bytes(), again.Bytes()) {
		t.Error("the same input gave another page")
	}
}

func TestBuildErrors(t *testing.T) {
	for name, mod := range map[string]func(*Input){
		"no set":               func(in *Input) { in.Set = nil },
		"short probabilities":  func(in *Input) { in.Calibrators[0].Probs = in.Calibrators[0].Probs[:8] },
		"no label":             func(in *Input) { in.Calibrators[0].Label = "" },
		"class names":          func(in *Input) { in.ClassNames = in.ClassNames[:2] },
		"verdict, no calibrtr": func(in *Input) { in.Verdict, in.Calibrators = &calib.Verdict{}, nil },
		"level":                func(in *Input) { in.Level = 1 },
		"bins":                 func(in *Input) { in.Bins = -1 },
		"gate":                 func(in *Input) { in.Gate = &calib.Gate{MaxAccuracyDrop: math.NaN()} },
		"resamples":            func(in *Input) { in.Resamples = calib.MaxBootstrap + 1 },
	} {
		in := testInput(t, 40)
		mod(&in)
		if _, err := Build(in); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestCheck(t *testing.T) {
	ok := `<!DOCTYPE html><html><head><style>p{color:red}</style></head><body><a href="#x">x</a><p id="x">y</p></body></html>`
	if err := Check([]byte(ok)); err != nil {
		t.Fatalf("a good page: %v", err)
	}
	for name, page := range map[string]string{
		"unclosed":      `<html><body><p>x</body></html>`,
		"script":        `<html><script>alert(1)</script></html>`,
		"external href": `<html><a href="http://example.invalid/">x</a></html>`,
		"img":           `<html><img src="data:x" /></html>`,
		"handler":       `<html><p onclick="x()">x</p></html>`,
		"css url":       `<html><style>body{background:url(http://example.invalid/x.png)}</style></html>`,
		"css import":    `<html><style>@import "x.css";</style></html>`,
		"inline url":    `<html><p style="background: url('x.png')">x</p></html>`,
		"dangling #":    `<html><a href="#nowhere">x</a></html>`,
		"duplicate id":  `<html><p id="a">x</p><p id="a">y</p></html>`,
		"refused value": `<html><a href="#ZgotmplZ">x</a></html>`,
	} {
		if err := Check([]byte(page)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestHostileNames: class names and labels with characters XML forbids or
// markup of their own still give a page that checks, with the names seen.
func TestHostileNames(t *testing.T) {
	in := testInput(t, 200)
	in.ClassNames = []string{"\n", "a\x01b", "<script>x</script>", "]]><!--"}
	in.Calibrators[0].Label = "temp\x02<i>"
	in.Data = "data\x0b.npz"
	r, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	var page bytes.Buffer
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	if err := Check(page.Bytes()); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	for _, want := range []string{`&#34;\n&#34;`, `&#34;a\x01b&#34;`, "&lt;script&gt;x&lt;/script&gt;", "temp\uFFFD&lt;i&gt;", "data\uFFFD.npz"} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(html, "<script>") || strings.Contains(html, "<i>") {
		t.Error("a name's markup reached the page")
	}
}

func TestConvergenceFromFitReport(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    *calib.File
		want string
	}{
		{"recorded, at a bound", &calib.File{Provenance: calib.Provenance{Fit: &calib.FitReport{
			Iterations: 2000, MaxIterations: 2000, Stop: "iteration limit", Objective: 0.5,
			Gradient: 1e-3, Tolerance: 1e-7, AtBound: []string{"t = 100 (upper bound)"}}}},
			"did not converge after 2000 of at most 2000 iterations (iteration limit; objective 0.5, gradient 0.001 against tolerance 1e-07); at a bound: t = 100 (upper bound)"},
		{"recorded, converged", &calib.File{Provenance: calib.Provenance{Fit: &calib.FitReport{
			Converged: true, Iterations: 12, MaxIterations: 2000, Stop: "gradient below tolerance",
			Objective: 0.125, Gradient: 5e-8, Tolerance: 1e-7}}},
			"converged after 12 of at most 2000 iterations (gradient below tolerance; objective 0.125, gradient 5e-08 against tolerance 1e-07)"},
		{"not recorded", &calib.File{}, "not recorded in the calibrator file"},
	} {
		if got := convergence(tc.f); got != tc.want {
			t.Errorf("%s: convergence = %q, want %q", tc.name, got, tc.want)
		}
	}
}
