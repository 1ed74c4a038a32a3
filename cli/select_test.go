package cli

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// calibratedLogitsFile writes n rows of c classes over clients clients
// whose labels are drawn from the softmax of their logits: the base
// model is calibrated by construction.
func calibratedLogitsFile(t *testing.T, n, c, clients int) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	f := &logits.File{Classes: c, Logits: make([]float32, n*c), Labels: make([]int32, n)}
	p := make([]float64, c)
	for i := range n {
		row := f.Logits[i*c : (i+1)*c]
		for j := range row {
			row[j] = float32(2 * rng.NormFloat64())
		}
		for j := range p {
			p[j] = float64(row[j])
		}
		calib.SoftmaxRows(p, p, c)
		u, y := rng.Float64(), c-1
		for j, q := range p {
			if u -= q; u < 0 {
				y = j
				break
			}
		}
		f.Labels[i] = int32(y)
		f.Client = append(f.Client, int32(i%clients))
		f.Split = append(f.Split, uint8(1+(i/clients)%2)) // calibration and test
	}
	path := filepath.Join(t.TempDir(), "calibrated.npz")
	if err := logits.Write(path, f); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCalibrateSelectAccounting: the one ledger entry of a selection is
// the sum of its fits' and evaluations' releases, planned here
// independently with the dp and federation planners, and the file's
// record says the same.
func TestCalibrateSelectAccounting(t *testing.T) {
	in, _ := fedLogitsFile(t, 20000, 4, 200)
	dir := t.TempDir()
	out, ledger := filepath.Join(dir, "sel.json"), filepath.Join(dir, "ledger.json")
	const eps, delta, share, rounds = 8.0, 1e-5, 0.25, 3
	code, stdout, stderr := fedcalib("calibrate", "--method", "bin", "--logits", in, "--rounds", "3",
		"--epsilon", "8", "--select", "--select-share", "0.25", "--select-bins-exp", "2,4", "--select-clip", "25",
		"--seed", "5", "--ledger", ledger, "--quiet", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// Independently: ρ = ZCDPRho(ε, δ); 2 fits share 75% of it, 3
	// evaluations 25%; each fit's noise and each evaluation's as planned.
	rho, _ := dp.ZCDPRho(eps, delta)
	fitEps, _ := dp.ZCDPEpsilon(0.75*rho/2, delta)
	evalEps, _ := dp.ZCDPEpsilon(0.25*rho/3, delta)
	var want float64
	for _, m := range []int{2, 4} {
		_ = m // the bins do not change a binning fit's noise multiplier
		np, err := federation.PlanNoise("bin", 4, &federation.Privacy{Epsilon: fitEps, Delta: delta,
			ClipPos: dp.DefaultClipPos, ClipNeg: dp.DefaultClipNeg, Accountant: dp.ZCDP}, rounds, 1)
		if err != nil {
			t.Fatal(err)
		}
		want += dp.Release{Noise: np.Mechanisms, SampleRate: 1, Rounds: rounds}.Rho()
	}
	ep, err := federation.PlanEvalNoise(&federation.Privacy{Epsilon: evalEps, Delta: delta, Clip: 25, Accountant: dp.ZCDP})
	if err != nil {
		t.Fatal(err)
	}
	want += 3 * federation.EvalRelease(ep).Rho()
	if math.Abs(want-rho) > 1e-6*rho {
		t.Errorf("the planned releases sum to ρ %v, the budget is %v", want, rho)
	}
	lf, err := dp.ReadLedgerFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	if len(lf.Datasets) != 1 {
		t.Fatalf("%d datasets in the ledger", len(lf.Datasets))
	}
	for _, d := range lf.Datasets {
		if len(d.Runs) != 1 {
			t.Fatalf("%d ledger entries, want one", len(d.Runs))
		}
		r := d.Runs[0]
		if math.Abs(r.Rho-want) > 1e-9*want {
			t.Errorf("ledger entry ρ %v, want the sum of the releases %v", r.Rho, want)
		}
		wantEps, _ := dp.ZCDPEpsilon(want, delta)
		if math.Abs(r.Epsilon-wantEps) > 1e-9 || math.Abs(r.Epsilon-eps) > 1e-6 {
			t.Errorf("ledger entry ε %v, want %v ≈ %v", r.Epsilon, wantEps, eps)
		}
	}
	_, file, err := calib.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s := file.Privacy.Selection
	if s == nil || math.Abs(s.Rho-want) > 1e-9*want || math.Abs(s.Epsilon-eps) > 1e-6 || s.Share != share || len(s.Candidates) != 3 {
		t.Errorf("selection record %+v", s)
	}
	if !strings.Contains(stdout, "won a private selection among 3 candidates") {
		t.Errorf("summary %q", stdout)
	}
	// eval reports what the calibrator cost: the run's total, not its
	// fit's share.
	code, stdout, stderr = fedcalib("eval", "--logits", in, "--calibrator", out, "--calibrator", out, "--json") // a comparison shows each ε
	if code != 0 {
		t.Fatalf("eval: exit %d: %s", code, stderr)
	}
	var rep struct {
		Calibrators []struct{ Epsilon float64 }
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || len(rep.Calibrators) != 2 || math.Abs(rep.Calibrators[0].Epsilon-eps) > 1e-6 {
		t.Errorf("eval reports %+v (%v), want ε %v", rep, err, eps)
	}
}

// TestCalibrateSelectDeterministic: a seed fixes the held-out rows, the
// fits, the noise and so the file.
func TestCalibrateSelectDeterministic(t *testing.T) {
	in, _ := fedLogitsFile(t, 20000, 3, 200)
	out := filepath.Join(t.TempDir(), "sel.json")
	var runs [3]string
	for i, seed := range []string{"9", "9", "10"} {
		os.Remove(out)
		code, stdout, stderr := fedcalib("calibrate", "--method", "bin", "--logits", in, "--rounds", "2",
			"--epsilon", "8", "--select", "--select-clip", "25", "--seed", seed, "--quiet", "--out", out)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		runs[i] = stdout + stderr + string(b)
	}
	if runs[0] != runs[1] {
		t.Errorf("two runs with one seed differ:\n%s\n%s", runs[0], runs[1])
	}
	if runs[0] == runs[2] {
		t.Error("two seeds made the same run")
	}
}

// TestCalibrateSelectBaseWins: on calibrated logits, binning fits at a
// tiny fit budget are noise; the evaluation (most of the budget) sees it
// and keeps the base model, writing nothing.
func TestCalibrateSelectBaseWins(t *testing.T) {
	in := calibratedLogitsFile(t, 60000, 3, 300)
	for _, seed := range []string{"1", "2", "3", "4", "5", "6"} {
		dir := t.TempDir()
		out, ledger := filepath.Join(dir, "sel.json"), filepath.Join(dir, "ledger.json")
		code, _, stderr := fedcalib("calibrate", "--method", "bin", "--logits", in, "--rounds", "2",
			"--epsilon", "8", "--select", "--select-share", "0.99", "--select-clip", "70", "--select-bins-exp", "6,8",
			"--seed", seed, "--ledger", ledger, "--quiet", "--out", out)
		if code != ExitFailed || !strings.Contains(stderr, ErrBaseWins.Error()) || !strings.Contains(stderr, "← chosen") {
			t.Fatalf("seed %s: exit %d: %s", seed, code, stderr)
		}
		if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("seed %s: %s written though the base model won: %v", seed, out, err)
		}
		lf, err := dp.ReadLedgerFile(ledger)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range lf.Datasets {
			if len(d.Runs) != 1 || math.Abs(d.Runs[0].Epsilon-8) > 1e-6 {
				t.Errorf("seed %s: ledger %+v: the spend is recorded all the same", seed, d.Runs)
			}
		}
	}
}

func TestCalibrateSelectErrors(t *testing.T) {
	in, _ := fedLogitsFile(t, 300, 3, 5)
	out := filepath.Join(t.TempDir(), "c.json")
	base := []string{"calibrate", "--method", "bin", "--logits", in, "--out", out}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--select"}, "add --epsilon"},
		{[]string{"--select-share", "0.3"}, "add --select"},
		{[]string{"--select", "--epsilon", "1", "--select-share", "1"}, "--select-share is 1"},
		{[]string{"--select", "--epsilon", "1", "--select-holdout", "0"}, "--select-holdout is 0"},
		{[]string{"--select", "--epsilon", "1", "--accountant", "rdp"}, "use --accountant zcdp"},
		{[]string{"--select", "--epsilon", "1", "--select-bins-exp", "0"}, "--select-bins-exp 0"},
		{[]string{"--select", "--epsilon", "1", "--bins-exp", "4"}, "--bins-exp does not apply"},
		{[]string{"--select", "--epsilon", "1", "--central"}, "drop --central"},
		{[]string{"--select", "--epsilon", "1", "--select-clip", "-1"}, "--select-clip"},
	} {
		code, _, stderr := fedcalib(append(base, tc.args...)...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q; want %q", tc.args, code, stderr, tc.want)
		}
	}
}
