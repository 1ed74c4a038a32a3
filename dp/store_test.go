package dp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fedTemp returns the release of a FedTemp fit calibrated to (ε, 1e-5)
// over rounds rounds at sample rate q under acc, with clip norm 0.5.
func fedTemp(t testing.TB, acc Accountant, eps float64, rounds int, q float64) Release {
	t.Helper()
	z, err := Plan{Epsilon: eps, Delta: 1e-5, Rounds: rounds, SampleRate: q, Accountant: acc}.NoiseMultiplier()
	if err != nil {
		t.Fatal(err)
	}
	return Release{Mechanism: "FedTemp", Noise: []Gaussian{{Sigma: 0.5 * z, Sensitivity: 0.5}}, SampleRate: q, Rounds: rounds}
}

// fedBBQ returns the release of a FedBBQ fit over c classes (2c
// histograms a round) calibrated to (ε, 1e-5) under zcdp.
func fedBBQ(t testing.TB, eps float64, c, rounds int) Release {
	t.Helper()
	z, err := Plan{Epsilon: eps, Delta: 1e-5, Rounds: rounds, PerRound: 2 * c}.NoiseMultiplier()
	if err != nil {
		t.Fatal(err)
	}
	return Release{Mechanism: "FedBBQ", Noise: []Gaussian{{Sigma: 10 * z, Sensitivity: 10, Count: c}, {Sigma: 50 * z, Sensitivity: 50, Count: c}}, SampleRate: 1, Rounds: rounds}
}

func charge(acc Accountant, budget float64, r Release) Charge {
	return Charge{
		Dataset: "labels-a", Description: "a.npz: 100 examples, 4 classes",
		Accountant: acc, Delta: 1e-5, Budget: budget, Release: r,
		Method: strings.ToLower(strings.TrimPrefix(r.Mechanism, "Fed")), Calibrator: "out.json",
	}
}

// spendOnce reserves c on the ledger at path and commits it at a fixed
// time.
func spendOnce(path string, c Charge) error {
	r, err := Reserve(path, c)
	if err != nil {
		return err
	}
	return r.Commit(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC))
}

func TestLedgerFileComposesZCDP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.json")
	rho1, err := ZCDPRho(1, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	// ρ adds across runs: a FedTemp run and a FedBBQ run of ε = 1 each
	// spend 2ρ₁ together, whose ε is below 2.
	want2, _ := ZCDPEpsilon(2*rho1, 1e-5)
	want3, _ := ZCDPEpsilon(3*rho1, 1e-5)
	steps := []struct {
		release Release
		budget  float64
		wantEps float64 // the dataset's ε after the step; 0: refused
	}{
		{fedTemp(t, ZCDP, 1, 12, 0.1), 2, 1},
		{fedBBQ(t, 1, 10, 30), 2, want2},
		// zCDP composes below the sum of the ε (3ρ₁ is ε ≈ 1.82), but
		// not below 1.8.
		{fedTemp(t, ZCDP, 1, 12, 0.1), 1.8, 0},
		{fedTemp(t, ZCDP, 1, 12, 0.1), math.Inf(1), want3},
	}
	for i, s := range steps {
		err := spendOnce(path, charge(ZCDP, s.budget, s.release))
		if s.wantEps == 0 {
			if !errors.Is(err, ErrBudgetExceeded) || !strings.Contains(err.Error(), fmt.Sprintf("would bring it to %.6g, above the budget 1.8", want3)) {
				t.Fatalf("step %d: error %v, want the budget exceeded at %.6g", i, err, want3)
			}
			continue
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		f, err := ReadLedgerFile(path)
		if err != nil {
			t.Fatal(err)
		}
		d := f.Datasets["labels-a"]
		if math.Abs(d.Epsilon-s.wantEps) > 1e-9*s.wantEps {
			t.Errorf("step %d: ε spent %v, want %v", i, d.Epsilon, s.wantEps)
		}
	}
	f, err := ReadLedgerFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := f.Datasets["labels-a"]
	if len(d.Runs) != 3 || math.Abs(d.Rho-3*rho1) > 1e-12 || d.RDP != nil || d.Accountant != "zcdp" || d.Delta != 1e-5 {
		t.Fatalf("dataset %+v", d)
	}
	r := d.Runs[1]
	if r.Method != "bbq" || r.Calibrator != "out.json" || r.Rounds != 30 || math.Abs(r.Epsilon-1) > 1e-9 || !r.Time.Equal(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("run %+v", r)
	}
	// The run's noise multiplier is that of its 20 histograms combined.
	if z := fedBBQ(t, 1, 10, 30).NoiseMultiplier(); r.NoiseMultiplier != z {
		t.Errorf("noise multiplier %v, want %v", r.NoiseMultiplier, z)
	}
}

func TestLedgerFileComposesRDP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.json")
	a, b := fedTemp(t, RDP, 1, 12, 0.1), fedTemp(t, RDP, 0.5, 20, 0.05)
	for _, r := range []Release{a, b} {
		if err := spendOnce(path, charge(RDP, 10, r)); err != nil {
			t.Fatal(err)
		}
	}
	// The curves add: the same as one accountant composing both.
	var acc RDPAccountant
	for _, r := range []Release{a, b} {
		if err := acc.ComposePoissonGaussian(r.SampleRate, r.NoiseMultiplier(), r.Rounds); err != nil {
			t.Fatal(err)
		}
	}
	want, _, err := acc.Epsilon(1e-5)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ReadLedgerFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := f.Datasets["labels-a"]
	if math.Abs(d.Epsilon-want) > 1e-12*want || want >= 1.5 || want <= 1 {
		t.Errorf("ε spent %v, want %v, between 1 and 1.5", d.Epsilon, want)
	}
	curve := acc.RDP()
	for i := range curve {
		if math.Abs(d.RDP[i]-curve[i]) > 1e-12*curve[i] {
			t.Fatalf("rdp at order %v is %v, want %v", d.RDPOrders[i], d.RDP[i], curve[i])
		}
	}
	if math.Abs(d.Runs[0].Epsilon-1) > 1e-9 || math.Abs(d.Runs[1].Epsilon-0.5) > 1e-9 {
		t.Errorf("runs spent %v and %v, want 1 and 0.5", d.Runs[0].Epsilon, d.Runs[1].Epsilon)
	}
}

func TestLedgerFileRefusals(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.json")
	if err := spendOnce(path, charge(ZCDP, 5, fedTemp(t, ZCDP, 1, 12, 0.1))); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	otherDelta := charge(ZCDP, 5, fedTemp(t, ZCDP, 1, 12, 0.1))
	otherDelta.Delta = 1e-6
	otherData := charge(RDP, 1, fedTemp(t, RDP, 1, 12, 0.1))
	otherData.Dataset = "labels-b"
	tests := []struct {
		name    string
		c       Charge
		wantErr error
		want    string
	}{
		{"accountant", charge(RDP, 5, fedTemp(t, RDP, 1, 12, 0.1)), ErrInvalid, "is accounted under zcdp at delta 1e-05, this run under rdp at delta 1e-05"},
		{"delta", otherDelta, ErrInvalid, "this run under zcdp at delta 1e-06"},
		{"budget", charge(ZCDP, 1.2, fedTemp(t, ZCDP, 1, 12, 0.1)), ErrBudgetExceeded, "has spent epsilon 1 in 1 run(s)"},
		{"zero budget", charge(ZCDP, 0, fedTemp(t, ZCDP, 1, 12, 0.1)), ErrInvalid, "budget epsilon = 0"},
		{"no dataset", Charge{Accountant: ZCDP, Delta: 1e-5, Budget: 1, Release: fedTemp(t, ZCDP, 1, 1, 1)}, ErrInvalid, "without a dataset key"},
		{"bad release", charge(ZCDP, 5, Release{Mechanism: "x", Rounds: 1}), ErrInvalid, `release "x" has no`},
		{"skellam", charge(RDP, 5, Release{Mechanism: "SecAgg", Skellam: []Skellam{{}}, Rounds: 1}), ErrInvalid, "Gaussian releases only"},
		{"another dataset is separate", otherData, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := spendOnce(path, tt.c)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %v containing %q", err, tt.wantErr, tt.want)
			}
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Errorf("a refused run changed the ledger")
			}
		})
	}
	// A cancelled reservation records nothing and frees the lock.
	r, err := Reserve(path, charge(ZCDP, 5, fedTemp(t, ZCDP, 1, 12, 0.1)))
	if err != nil {
		t.Fatal(err)
	}
	r.Cancel()
	r.Cancel()
	if err := r.Commit(time.Now()); err == nil {
		t.Error("Commit after Cancel succeeded")
	}
	f, err := ReadLedgerFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(f.Datasets["labels-a"].Runs); n != 1 {
		t.Errorf("%d runs after a cancelled reservation, want 1", n)
	}
}

func TestReadLedgerFileRefusesEdits(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.json")
	if err := spendOnce(path, charge(RDP, 5, fedTemp(t, RDP, 1, 12, 0.1))); err != nil {
		t.Fatal(err)
	}
	if err := spendOnce(path, charge(RDP, 5, fedTemp(t, RDP, 1, 12, 0.1))); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(top map[string]any, d map[string]any)) string {
		var top map[string]any
		if err := json.Unmarshal(orig, &top); err != nil {
			t.Fatal(err)
		}
		f(top, top["datasets"].(map[string]any)["labels-a"].(map[string]any))
		b, _ := json.Marshal(top)
		return string(b)
	}
	tests := []struct {
		name, file, want string
	}{
		{"epsilon halved", edit(func(_, d map[string]any) { d["epsilon"] = d["epsilon"].(float64) / 2 }), "epsilon is"},
		{"a run dropped", edit(func(_, d map[string]any) { d["runs"] = d["runs"].([]any)[:1] }), "rho is"},
		{"a curve value lowered", edit(func(_, d map[string]any) { d["rdp"].([]any)[40] = 0.0 }), "rdp at order 5.1 is 0"},
		{"a run's noise raised", edit(func(_, d map[string]any) {
			d["runs"].([]any)[0].(map[string]any)["noise_multiplier"] = 100.0
		}), "runs[0] records ε"},
		{"accountant", edit(func(_, d map[string]any) { d["accountant"] = "zcdp" }), "runs[0] records ε 1 and ρ 1.49842"},
		{"rdp curve on zcdp", edit(func(_, d map[string]any) {
			d["accountant"] = "zcdp"
			for _, r := range d["runs"].([]any) {
				r := r.(map[string]any)
				r["epsilon"], _ = ZCDPEpsilon(r["rho"].(float64), 1e-5)
			}
		}), "a zcdp dataset has an RDP curve"},
		{"no runs", edit(func(_, d map[string]any) { d["runs"] = []any{} }), "runs is empty"},
		{"unknown key", edit(func(top, _ map[string]any) { top["owner"] = "me" }), `unknown field "owner"`},
		{"format", edit(func(top, _ map[string]any) { top["format"] = "fedcalib.ledger/v2" }), `format "fedcalib.ledger/v2"`},
		{"not json", "{", "not a privacy ledger"},
		{"trailing data", string(orig) + "{}", "data after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, "edited.json")
			if err := os.WriteFile(p, []byte(tt.file), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadLedgerFile(p)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("error %v, want one naming %s and containing %q", err, p, tt.want)
			}
			// Nothing can be spent on an unreadable ledger.
			if _, err := Reserve(p, charge(RDP, 5, fedTemp(t, RDP, 1, 12, 0.1))); err == nil {
				t.Error("Reserve on an edited ledger succeeded")
			}
		})
	}
}

// TestLedgerConcurrentGoroutines runs eight runs at once, each within the
// budget alone, on a budget with room for exactly three: the lock lets
// exactly three through.
func TestLedgerConcurrentGoroutines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.json")
	rho1, _ := ZCDPRho(1, 1e-5)
	budget, _ := ZCDPEpsilon(3.5*rho1, 1e-5)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := Reserve(path, charge(ZCDP, budget, fedTemp(t, ZCDP, 1, 12, 0.1)))
			if err != nil {
				errs[i] = err
				return
			}
			time.Sleep(5 * time.Millisecond) // the fit
			errs[i] = r.Commit(time.Now())
		}()
	}
	wg.Wait()
	var ok, exceeded int
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrBudgetExceeded):
			exceeded++
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	f, err := ReadLedgerFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if ok != 3 || exceeded != 5 || len(f.Datasets["labels-a"].Runs) != 3 {
		t.Errorf("%d runs admitted, %d refused, %d recorded; want 3, 5, 3", ok, exceeded, len(f.Datasets["labels-a"].Runs))
	}
}

// TestLedgerConcurrentProcesses is TestLedgerConcurrentGoroutines across
// processes: the test binary runs itself as six spenders.
func TestLedgerConcurrentProcesses(t *testing.T) {
	if path := os.Getenv("FEDCALIB_LEDGER_SPENDER"); path != "" {
		budget, _ := strconv.ParseFloat(os.Getenv("FEDCALIB_LEDGER_BUDGET"), 64)
		r, err := Reserve(path, charge(ZCDP, budget, fedTemp(t, ZCDP, 1, 12, 0.1)))
		if errors.Is(err, ErrBudgetExceeded) {
			os.Exit(3)
		}
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		if err := r.Commit(time.Now()); err != nil {
			t.Fatal(err)
		}
		return
	}
	if testing.Short() {
		t.Skip("starts processes")
	}
	path := filepath.Join(t.TempDir(), "ledger.json")
	rho1, _ := ZCDPRho(1, 1e-5)
	budget, _ := ZCDPEpsilon(2.5*rho1, 1e-5)
	cmds := make([]*exec.Cmd, 6)
	for i := range cmds {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^TestLedgerConcurrentProcesses$")
		cmds[i].Env = append(os.Environ(), "FEDCALIB_LEDGER_SPENDER="+path, "FEDCALIB_LEDGER_BUDGET="+strconv.FormatFloat(budget, 'g', -1, 64))
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	var ok, exceeded int
	for _, c := range cmds {
		err := c.Wait()
		var exit *exec.ExitError
		switch {
		case err == nil:
			ok++
		case errors.As(err, &exit) && exit.ExitCode() == 3:
			exceeded++
		default:
			t.Errorf("spender: %v", err)
		}
	}
	f, err := ReadLedgerFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if ok != 2 || exceeded != 4 || len(f.Datasets["labels-a"].Runs) != 2 {
		t.Errorf("%d runs admitted, %d refused, %d recorded; want 2, 4, 2", ok, exceeded, len(f.Datasets["labels-a"].Runs))
	}
}

func TestLedgerFileWriteText(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.json")
	var b bytes.Buffer
	f, err := ReadLedgerFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WriteText(&b); err != nil || b.String() != "no privacy spent: the ledger records no run\n" {
		t.Fatalf("empty ledger: %q, %v", b.String(), err)
	}
	if err := spendOnce(path, charge(ZCDP, 5, fedTemp(t, ZCDP, 1, 12, 0.1))); err != nil {
		t.Fatal(err)
	}
	if f, err = ReadLedgerFile(path); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := f.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := "dataset labels-a (a.npz: 100 examples, 4 classes)\n" +
		"spent                   epsilon 1 at delta 1e-05 (zcdp, rho 0.0305566) over 1 run(s)\n" +
		"  2026-05-01T10:00:00Z  temp  epsilon 1  12 rounds, sample rate 0.1  out.json\n"
	if b.String() != want {
		t.Errorf("text\n%s\nwant\n%s", b.String(), want)
	}
}

// TestLedgerEvaluationRun checks that an evaluation is recorded with its
// kind, spends from the dataset's budget with the fits, and reads as one.
func TestLedgerEvaluationRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.json")
	if err := spendOnce(path, charge(ZCDP, 1.5, fedTemp(t, ZCDP, 1, 12, 0.1))); err != nil {
		t.Fatal(err)
	}
	z, err := Plan{Epsilon: 1, Delta: 1e-5, Rounds: 1, PerRound: 1}.NoiseMultiplier()
	if err != nil {
		t.Fatal(err)
	}
	eval := Charge{
		Dataset: "labels-a", Accountant: ZCDP, Delta: 1e-5, Budget: 1.5, Kind: KindEvaluation,
		Release: Release{Mechanism: "evaluation", Noise: []Gaussian{{Sigma: 100 * z, Sensitivity: 100}}, Rounds: 1},
		Method:  "temp", Calibrator: "out.json",
	}
	if err := spendOnce(path, eval); err != nil {
		t.Fatal(err)
	}
	f, err := ReadLedgerFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := f.Datasets["labels-a"]
	rho1, _ := ZCDPRho(1, 1e-5)
	if len(d.Runs) != 2 || d.Runs[0].Kind != "" || d.Runs[1].Kind != KindEvaluation || math.Abs(d.Rho-2*rho1) > 1e-9*rho1 {
		t.Fatalf("runs %+v, ρ %v: want a fit then an evaluation, ρ 2·%v", d.Runs, d.Rho, rho1)
	}
	var b bytes.Buffer
	if err := f.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(b.String()), " "), "evaluation of temp epsilon 1 1 rounds, sample rate 1 out.json") {
		t.Errorf("text does not show the evaluation:\n%s", b.String())
	}
	// The two spent ε 1.46 under zcdp; a third would exceed 1.5.
	if err := spendOnce(path, eval); !errors.Is(err, ErrBudgetExceeded) {
		t.Errorf("a third run of ε 1 under a budget of 1.5: %v, want ErrBudgetExceeded", err)
	}
}

// TestLedgerThroughLinks spends on one ledger by its path and through a
// symbolic link, concurrently: the runs take turns on one lock, the link
// stays a link, no lock file is left, and a hard-linked ledger is
// refused.
func TestLedgerThroughLinks(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "shared"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "shared", "ledger.json")
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(filepath.Join("shared", "ledger.json"), link); err != nil {
		t.Fatal(err)
	}
	rho1, _ := ZCDPRho(1, 1e-5)
	budget, _ := ZCDPEpsilon(3.5*rho1, 1e-5) // three runs of ε 1, not four
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := path
			if i%2 == 0 {
				p = link
			}
			r, err := Reserve(p, charge(ZCDP, budget, fedTemp(t, ZCDP, 1, 12, 0.1)))
			if err != nil {
				errs[i] = err
				return
			}
			time.Sleep(5 * time.Millisecond)
			errs[i] = r.Commit(time.Now())
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else if !errors.Is(err, ErrBudgetExceeded) {
			t.Errorf("unexpected error: %v", err)
		}
	}
	f, err := ReadLedgerFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if ok != 3 || len(f.Datasets["labels-a"].Runs) != 3 {
		t.Errorf("%d runs admitted, %d recorded; want 3 and 3", ok, len(f.Datasets["labels-a"].Runs))
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v", err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "shared")} {
		if locks, _ := filepath.Glob(filepath.Join(d, "*.lock")); len(locks) > 0 {
			t.Errorf("lock files left: %v", locks)
		}
	}
	hard := filepath.Join(dir, "hard.json")
	if err := os.Link(path, hard); err != nil {
		t.Fatal(err)
	}
	if _, err := Reserve(hard, charge(ZCDP, math.Inf(1), fedTemp(t, ZCDP, 1, 12, 0.1))); err == nil || !strings.Contains(err.Error(), "2 hard links") {
		t.Errorf("Reserve of a hard-linked ledger: %v", err)
	}
}
