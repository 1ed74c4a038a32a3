package calib_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

// update rewrites the golden files: go test ./calib -run TestGolden -update.
var update = flag.Bool("update", false, "rewrite the golden files under testdata/sidecar")

// goldenDir holds one sidecar file (format v1) per method × weighting, the
// fixed logits they are applied to, and the probabilities each predicts.
// The files pin the sidecar format and every method's prediction: a
// change to either shows up as a failing test and, after -update, as a
// diff of these files.
const goldenDir = "testdata/sidecar"

// goldenLogitsFile holds the logits the golden calibrators are applied
// to: {"classes": c, "logits": [[…], …]}.
const goldenLogitsFile = "logits.json"

// goldenFitTol is how closely a calibrator fitted afresh must predict the
// stored probabilities. Binning fits are exact; the scaling fits (L-BFGS,
// SGD) may take a slightly different path where the compiler fuses
// multiply-adds (arm64, ppc64, s390x), which moves their optimum far
// below this but above the 1e-12 of a stored file.
const goldenFitTol = 1e-6

// goldenWeightings returns the weightings of method m that have golden
// files: none, all and changed for binning, none for scaling.
func goldenWeightings(m calib.Method) []calib.Weighting {
	if m.Family == calib.Binning {
		return []calib.Weighting{calib.WeightNone, calib.WeightAll, calib.WeightChanged}
	}
	return []calib.Weighting{calib.WeightNone}
}

// goldenName is the base name of the golden files of m under weighting w.
func goldenName(m calib.Method, w calib.Weighting) string { return m.Name + "-" + string(w) }

// goldenFixture fits the calibrator of m with weighting w that the golden
// files hold, with the metadata its file records.
func goldenFixture(t *testing.T, m calib.Method, w calib.Weighting) (calib.Calibrator, *calib.Privacy, calib.Provenance) {
	t.Helper()
	s := miscalibrated(400, conformanceClasses, 3)
	c, err := calib.New(m.Name, calib.Settings{Mexp: 3, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Fit(s); err != nil {
		t.Fatal(err)
	}
	if w != calib.WeightNone {
		if err := c.(calib.Binner).SetWeighting(w, conformanceAlpha(s.Classes)); err != nil {
			t.Fatal(err)
		}
	}
	prov := calib.Provenance{
		ModelSHA256: strings.Repeat("0123456789abcdef", 4),
		Data:        "calib golden set: 400 miscalibrated rows, 4 classes, seed 3",
		Protocol:    "central",
		Weighting:   string(w),
		Seed:        5,
		Tool:        "golden",
	}
	var priv *calib.Privacy
	if w == calib.WeightAll || m.Family != calib.Binning {
		// Some files record privacy, to pin that block too: the record
		// of a real plan, which Decode checks (scalbin's holds clip and
		// clip_pos).
		priv = privacyRecord(t, m.Name, s.Classes)
	}
	return c, priv, prov
}

// goldenLogits returns the logits of the golden files: the stress rows of
// the conformance suite and 40 rows of the fit set.
func goldenLogits() [][]float64 {
	k := conformanceClasses
	z := append(hardLogits(k, 7), miscalibrated(40, k, 3).Logits...)
	rows := make([][]float64, len(z)/k)
	for i := range rows {
		rows[i] = z[i*k : (i+1)*k]
	}
	return rows
}

// encodeRows writes rows as a JSON array with one row per line, so that
// a change shows as a readable diff.
func encodeRows(rows [][]float64) []byte {
	var b bytes.Buffer
	b.WriteString("[\n")
	for i, r := range rows {
		line, err := json.Marshal(r)
		if err != nil {
			panic(err)
		}
		b.WriteString("  ")
		b.Write(line)
		if i < len(rows)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("]\n")
	return b.Bytes()
}

func writeGolden(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(goldenDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(goldenDir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readGolden(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(goldenDir, name))
	if err != nil {
		t.Fatalf("%v (write the golden files with: go test ./calib -run TestGolden -update)", err)
	}
	return data
}

// loadGoldenLogits reads the stored logits as rows and as one flat slice.
func loadGoldenLogits(t *testing.T) (flat []float64, classes int) {
	t.Helper()
	var f struct {
		Classes int         `json:"classes"`
		Logits  [][]float64 `json:"logits"`
	}
	if err := json.Unmarshal(readGolden(t, goldenLogitsFile), &f); err != nil {
		t.Fatalf("%s: %v", goldenLogitsFile, err)
	}
	for i, r := range f.Logits {
		if len(r) != f.Classes {
			t.Fatalf("%s: row %d has %d logits for %d classes", goldenLogitsFile, i, len(r), f.Classes)
		}
		flat = append(flat, r...)
	}
	return flat, f.Classes
}

// TestGoldenSidecar reads the sidecar file of every method × weighting
// under testdata/sidecar, applies it to the stored logits and compares
// with the stored probabilities to 1e-12. It also checks that writing the
// calibrator read back gives the stored bytes (the writer's format is
// pinned), that the file decodes to the method and weighting its name
// says, and that a fresh fit of the same calibrator still predicts the
// stored probabilities (goldenFitTol). With -update it rewrites them all.
func TestGoldenSidecar(t *testing.T) {
	if *update {
		lj := fmt.Sprintf("{\n\"classes\": %d,\n\"logits\": %s}\n", conformanceClasses, encodeRows(goldenLogits()))
		writeGolden(t, goldenLogitsFile, []byte(lj))
	}
	logits, k := loadGoldenLogits(t)
	if k != conformanceClasses {
		t.Fatalf("%s has %d classes, want %d", goldenLogitsFile, k, conformanceClasses)
	}
	want := map[string]bool{goldenLogitsFile: true}
	for _, m := range calib.Methods() {
		for _, w := range goldenWeightings(m) {
			name := goldenName(m, w)
			want[name+".json"], want[name+".golden"] = true, true
			t.Run(name, func(t *testing.T) {
				if *update {
					c, priv, prov := goldenFixture(t, m, w)
					var buf bytes.Buffer
					if err := calib.Encode(&buf, c, priv, prov); err != nil {
						t.Fatal(err)
					}
					writeGolden(t, name+".json", buf.Bytes())
					writeGolden(t, name+".golden", encodeRows(rowsOf(predict(c, logits), k)))
				}
				checkGolden(t, m, w, name, logits, k)
			})
		}
	}
	// Files of a method or weighting that no longer exists are stale.
	entries, err := os.ReadDir(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !want[e.Name()] {
			t.Errorf("%s: stale golden file, of no method × weighting of the registry", filepath.Join(goldenDir, e.Name()))
		}
	}
}

func checkGolden(t *testing.T, m calib.Method, w calib.Weighting, name string, logits []float64, k int) {
	t.Helper()
	stored := readGolden(t, name+".json")
	c, f, err := calib.Decode(bytes.NewReader(stored))
	if err != nil {
		t.Fatalf("%s.json: %v", name, err)
	}
	if c.Method() != m.Name || f.Method != m.Name || f.Classes != k || c.Classes() != k || f.Format != calib.FormatV1 {
		t.Fatalf("%s.json decodes to method %q (file %q), %d classes (file %d), format %q", name, c.Method(), f.Method, c.Classes(), f.Classes, f.Format)
	}
	if f.Provenance.Weighting != string(w) {
		t.Errorf("%s.json: provenance weighting %q", name, f.Provenance.Weighting)
	}
	// The weighting of a binning calibrator is in its parameters.
	var params struct {
		Weighting calib.Weighting `json:"weighting"`
		Alpha     []float64       `json:"alpha"`
	}
	if err := json.Unmarshal(f.Params, &params); err != nil {
		t.Fatal(err)
	}
	wantMode, wantAlpha := calib.Weighting(""), []float64(nil)
	if w != calib.WeightNone {
		wantMode, wantAlpha = w, conformanceAlpha(k)
	}
	if params.Weighting != wantMode || !floatsEqual(params.Alpha, wantAlpha) {
		t.Errorf("%s.json: params weighting %q, alpha %v: want %q, %v", name, params.Weighting, params.Alpha, wantMode, wantAlpha)
	}

	var rewritten bytes.Buffer
	if err := calib.Encode(&rewritten, c, f.Privacy, f.Provenance); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rewritten.Bytes(), stored) {
		t.Errorf("%s.json: writing the calibrator read from it gives other bytes: the sidecar format changed\n%s", name, firstDiff(stored, rewritten.Bytes()))
	}

	var golden [][]float64
	if err := json.Unmarshal(readGolden(t, name+".golden"), &golden); err != nil {
		t.Fatalf("%s.golden: %v", name, err)
	}
	got := predict(c, logits)
	if len(golden)*k != len(got) {
		t.Fatalf("%s.golden has %d rows, the logits %d", name, len(golden), len(got)/k)
	}
	compareRows(t, name+".json applied to "+goldenLogitsFile, got, golden, k, 1e-12)

	t.Run("FreshFit", func(t *testing.T) {
		c, _, _ := goldenFixture(t, m, w)
		compareRows(t, "fresh fit", predict(c, logits), golden, k, goldenFitTol)
	})
}

func compareRows(t *testing.T, what string, got []float64, want [][]float64, k int, tol float64) {
	t.Helper()
	bad := 0
	for i, row := range want {
		if len(row) != k {
			t.Fatalf("golden row %d has %d values for %d classes", i, len(row), k)
		}
		for j, v := range row {
			if g := got[i*k+j]; !(math.Abs(g-v) <= tol) {
				if bad++; bad <= 5 {
					t.Errorf("%s: row %d, class %d: %.17g, golden %.17g (difference %.3g > %g)", what, i, j, g, v, g-v, tol)
				}
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d values differ in all", what, bad)
	}
}

func rowsOf(flat []float64, k int) [][]float64 {
	rows := make([][]float64, len(flat)/k)
	for i := range rows {
		rows[i] = flat[i*k : (i+1)*k]
	}
	return rows
}

func floatsEqual(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

// firstDiff describes the first line where a and b differ.
func firstDiff(a, b []byte) string {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := 0; i < max(len(la), len(lb)); i++ {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return fmt.Sprintf("line %d: stored %q, written %q", i+1, x, y)
		}
	}
	return "no line differs"
}
