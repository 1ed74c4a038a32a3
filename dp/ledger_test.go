package dp

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestLedgerSpendsWholeBudgetThenRefuses(t *testing.T) {
	for _, acc := range []Accountant{ZCDP, RDP} {
		budget := Budget{Epsilon: 1, Delta: 1e-5}
		const rounds, q, clip = 12, 0.2, 0.5
		plan := Plan{Epsilon: budget.Epsilon, Delta: budget.Delta, Rounds: rounds, SampleRate: q, Accountant: acc}
		z, err := plan.NoiseMultiplier()
		if err != nil {
			t.Fatal(err)
		}
		l, err := NewLedger(acc, budget)
		if err != nil {
			t.Fatal(err)
		}
		round := Release{Mechanism: "FedTemp", Noise: []Gaussian{{Sigma: clip * z, Sensitivity: clip}}, SampleRate: q, Rounds: 1}
		for i := range rounds {
			if err := l.Spend(round); err != nil {
				t.Fatalf("%v: round %d of %d refused: %v", acc, i+1, rounds, err)
			}
		}
		spent := l.Spent()
		if relErr(spent.Epsilon, 1) > 1e-9 || spent.Delta != 1e-5 {
			t.Errorf("%v: spent (%v, %v), want (1, 1e-5)", acc, spent.Epsilon, spent.Delta)
		}
		if want := rounds * GaussianRho(z); relErr(spent.Rho, want) > 1e-12 {
			t.Errorf("%v: spent ρ = %v, want %v", acc, spent.Rho, want)
		}
		err = l.Spend(round)
		if !errors.Is(err, ErrBudgetExceeded) {
			t.Fatalf("%v: round %d: error %v, want ErrBudgetExceeded", acc, rounds+1, err)
		}
		if !strings.Contains(err.Error(), "FedTemp") {
			t.Errorf("%v: error %q does not name the release", acc, err)
		}
		if got := len(l.Releases()); got != rounds {
			t.Errorf("%v: %d releases recorded after a refusal, want %d", acc, got, rounds)
		}
		if after := l.Spent(); after != spent {
			t.Errorf("%v: a refused release changed the spend: %+v -> %+v", acc, spent, after)
		}
	}
}

func TestLedgerBinningRelease(t *testing.T) {
	// c = 10 classes, T = 5: each round noises 10 positive histograms
	// (σ₊ = C₊·z) and 10 negative ones (σ₋ = C₋·z); as one release it must
	// cost what 2cT Gaussian mechanisms with multiplier z cost.
	const c, T = 10, 5
	z, err := Plan{Epsilon: 4, Delta: 1e-6, Rounds: T, PerRound: 2 * c}.NoiseMultiplier()
	if err != nil {
		t.Fatal(err)
	}
	r := Release{
		Mechanism: "FedBBQ",
		Noise: []Gaussian{
			{Sigma: DefaultClipPos * z, Sensitivity: DefaultClipPos, Count: c},
			{Sigma: DefaultClipNeg * z, Sensitivity: DefaultClipNeg, Count: c},
		},
		Rounds: T,
	}
	if got, want := r.NoiseMultiplier(), z/math.Sqrt(2*c); relErr(got, want) > 1e-14 {
		t.Errorf("effective multiplier %v, want z/√(2c) = %v", got, want)
	}
	if got, want := r.Rho(), 2*c*T*GaussianRho(z); relErr(got, want) > 1e-14 {
		t.Errorf("ρ = %v, want 2cT/(2z²) = %v", got, want)
	}
	l, err := NewLedger(ZCDP, Budget{Epsilon: 4, Delta: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Spend(r); err != nil {
		t.Fatalf("a release calibrated to the budget was refused: %v", err)
	}
	if eps := l.Spent().Epsilon; relErr(eps, 4) > 1e-9 {
		t.Errorf("spent ε = %v, want 4", eps)
	}
	// The record is a copy: changing the caller's slice changes nothing.
	r.Noise[0].Sigma = 1
	if got := l.Releases()[0].Noise[0].Sigma; got != DefaultClipPos*z {
		t.Errorf("recorded σ₊ changed to %v", got)
	}
	rel := l.Releases()
	rel[0].Noise[0].Sigma = 2
	if got := l.Releases()[0].Noise[0].Sigma; got != DefaultClipPos*z {
		t.Errorf("Releases exposes the ledger's records: σ₊ now %v", got)
	}
}

func TestLedgerUnlimited(t *testing.T) {
	l, err := NewLedger(RDP, Budget{Epsilon: math.Inf(1), Delta: 1e-5})
	if err != nil {
		t.Fatal(err)
	}
	if s := l.Spent(); s.Epsilon != 0 || s.Rho != 0 {
		t.Errorf("empty ledger spent %+v", s)
	}
	for range 3 {
		if err := l.Spend(Release{Mechanism: "big", Noise: []Gaussian{{Sigma: 0.1, Sensitivity: 1}}, Rounds: 100}); err != nil {
			t.Fatal(err)
		}
	}
	if s := l.Spent(); !(s.Epsilon > 100) {
		t.Errorf("300 rounds at z = 0.1 spent only ε = %v", s.Epsilon)
	}
	if l.Accountant() != RDP || l.Budget().Delta != 1e-5 {
		t.Errorf("ledger reports %v, %+v", l.Accountant(), l.Budget())
	}
}

func TestLedgerBadInput(t *testing.T) {
	for name, b := range map[string]Budget{
		"eps=0":   {Epsilon: 0, Delta: 1e-5},
		"eps<0":   {Epsilon: -1, Delta: 1e-5},
		"delta=0": {Epsilon: 1},
		"delta=1": {Epsilon: 1, Delta: 1},
	} {
		if _, err := NewLedger(ZCDP, b); !errors.Is(err, ErrInvalid) {
			t.Errorf("budget %s: error %v, want ErrInvalid", name, err)
		}
	}
	if _, err := NewLedger(Accountant(5), Budget{Epsilon: 1, Delta: 1e-5}); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown accountant: error %v, want ErrInvalid", err)
	}
	l, err := NewLedger(ZCDP, Budget{Epsilon: 1, Delta: 1e-5})
	if err != nil {
		t.Fatal(err)
	}
	g := Gaussian{Sigma: 1, Sensitivity: 0.5}
	for name, r := range map[string]Release{
		"no noise":   {Mechanism: "x", Rounds: 1},
		"sigma=0":    {Mechanism: "x", Noise: []Gaussian{{Sigma: 0, Sensitivity: 1}}, Rounds: 1},
		"sens=0":     {Mechanism: "x", Noise: []Gaussian{{Sigma: 1}}, Rounds: 1},
		"count<0":    {Mechanism: "x", Noise: []Gaussian{{Sigma: 1, Sensitivity: 1, Count: -1}}, Rounds: 1},
		"rounds=0":   {Mechanism: "x", Noise: []Gaussian{g}},
		"q>1":        {Mechanism: "x", Noise: []Gaussian{g}, Rounds: 1, SampleRate: 2},
		"sigma=NaN":  {Mechanism: "x", Noise: []Gaussian{{Sigma: math.NaN(), Sensitivity: 1}}, Rounds: 1},
		"sens=+Inf":  {Mechanism: "x", Noise: []Gaussian{{Sigma: 1, Sensitivity: math.Inf(1)}}, Rounds: 1},
		"negative q": {Mechanism: "x", Noise: []Gaussian{g}, Rounds: 1, SampleRate: -0.5},
		"sigma=+Inf": {Mechanism: "x", Noise: []Gaussian{{Sigma: math.Inf(1), Sensitivity: 1}}, Rounds: 1},
	} {
		if err := l.Spend(r); !errors.Is(err, ErrInvalid) {
			t.Errorf("release %s: error %v, want ErrInvalid", name, err)
		}
	}
	if n := len(l.Releases()); n != 0 {
		t.Errorf("invalid releases were recorded: %d", n)
	}
	var zero Ledger
	if err := zero.Spend(Release{Mechanism: "x", Noise: []Gaussian{g}, Rounds: 1}); !errors.Is(err, ErrBudgetExceeded) {
		t.Errorf("the zero Ledger accepted a release: %v", err)
	}
}
