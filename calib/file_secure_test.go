package calib

import (
	"errors"
	"math"
	"testing"

	"github.com/fedcalib/fedcalib/dp"
)

// distributedRecord is a consistent privacy record of a FedTemp fit with
// distributed Skellam noise: v per client, survivors by round, each round
// charged with the s − 1 shares of the others (written out here, not
// through dp.SkellamShares).
func distributedRecord(t *testing.T, v float64, survivors []int) *Privacy {
	t.Helper()
	const scale, l2, l1 = 1 << 20, 1<<20 + 1, (1<<20 + 1) * 1
	var a dp.RDPAccountant
	rho := 0.0
	minS := 0
	for _, s := range survivors {
		if s == 0 {
			continue
		}
		if err := a.ComposeSkellam(dp.Skellam{Variance: float64(s-1) * v, L1: l1, L2: l2}, 1); err != nil {
			t.Fatal(err)
		}
		rho += l2 * l2 / (2 * float64(s-1) * v)
		if minS == 0 || s < minS {
			minS = s
		}
	}
	eps, _, err := a.Epsilon(1e-5)
	if err != nil {
		t.Fatal(err)
	}
	return &Privacy{
		Epsilon: eps, Delta: 1e-5, Rho: rho, Sigma: 0.5 * math.Sqrt(float64(minS-1)*v) / scale,
		Clip: 0.5, Accountant: "rdp", Rounds: len(survivors), SampleRate: 0.1,
		SecureAggregation: &SecureAggregation{Noise: NoiseDistributed, Bits: 40, Scale: scale, ClientVariance: v, L1: l1, L2: l2, Survivors: survivors},
	}
}

// TestPrivacyCheckDistributed: Check recomputes a distributed record's ε,
// ρ and σ from its Skellam noise and survivors, and refuses every edit
// that would misstate them.
func TestPrivacyCheckDistributed(t *testing.T) {
	const v = 2e12
	if err := distributedRecord(t, v, []int{5, 0, 4}).Check(MethodTemp, 3); err != nil {
		t.Fatalf("a consistent record: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(p *Privacy)
		want error // nil: any error
	}{
		{"more survivors claimed", func(p *Privacy) { p.SecureAggregation.Survivors = []int{5, 5, 4} }, nil},
		{"smaller epsilon", func(p *Privacy) { p.Epsilon *= 0.9 }, nil},
		{"rho", func(p *Privacy) { p.Rho *= 1.1 }, nil},
		{"sigma", func(p *Privacy) { p.Sigma *= 2 }, nil},
		{"zcdp", func(p *Privacy) { p.Accountant = "zcdp" }, dp.ErrInvalid},
		{"survivors of another run length", func(p *Privacy) { p.SecureAggregation.Survivors = []int{5, 4} }, dp.ErrInvalid},
		{"negative survivors", func(p *Privacy) { p.SecureAggregation.Survivors[1] = -1 }, dp.ErrInvalid},
		{"one survivor", func(p *Privacy) { p.SecureAggregation.Survivors[1] = 1 }, dp.ErrInvalid},
		{"sensitivity below the clip norm's", func(p *Privacy) { p.SecureAggregation.L2 = 10 }, dp.ErrInvalid},
		{"no variance", func(p *Privacy) { p.SecureAggregation.ClientVariance = 0 }, dp.ErrInvalid},
		{"unknown noise", func(p *Privacy) { p.SecureAggregation.Noise = "local" }, dp.ErrInvalid},
		{"central with survivors", func(p *Privacy) { p.SecureAggregation.Noise = NoiseCentral }, dp.ErrInvalid},
		{"65 bits", func(p *Privacy) { p.SecureAggregation.Bits = 65 }, dp.ErrInvalid},
		{"nothing released", func(p *Privacy) { p.SecureAggregation.Survivors = []int{0, 0, 0} }, dp.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := distributedRecord(t, v, []int{5, 0, 4})
			tc.edit(p)
			err := p.Check(MethodTemp, 3)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Errorf("Check of the edited record: %v; want an error (wrapping %v)", err, tc.want)
			}
		})
	}
}
