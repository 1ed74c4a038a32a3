package calib_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
)

// TestSelectionRecordChecked: a selection record whose ε is that of its
// ρ at δ is kept through Encode and ReadFile's Decode; one edited to
// claim less ε, whose parts do not sum, or without one winner is
// refused.
func TestSelectionRecordChecked(t *testing.T) {
	_, f, err := calib.Decode(bytes.NewReader(privateFit(t, calib.MethodTemp, dp.ZCDP)))
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := calib.Decode(bytes.NewReader(privateFit(t, calib.MethodTemp, dp.ZCDP)))
	if err != nil {
		t.Fatal(err)
	}
	fitRho := 2 * f.Privacy.Rho
	eps, err := dp.ZCDPEpsilon(fitRho+0.5, f.Privacy.Delta)
	if err != nil {
		t.Fatal(err)
	}
	good := func() calib.Selection {
		return calib.Selection{Epsilon: eps, Rho: fitRho + 0.5, Share: 0.2, FitRho: fitRho, SelectRho: 0.5, HeldOut: 0.3, EvalSigma: 50, EvalClip: 100,
			Candidates: []calib.Candidate{{Name: "base", NoisyCWECE: 0.1}, {Name: "temp", NoisyCWECE: 0.05, Winner: true}}}
	}
	for _, tc := range []struct {
		name string
		edit func(*calib.Selection)
		want string
	}{
		{"consistent", func(*calib.Selection) {}, ""},
		{"less ε claimed", func(s *calib.Selection) { s.Epsilon /= 2 }, "privacy.selection.epsilon"},
		{"parts do not sum", func(s *calib.Selection) { s.SelectRho = 0.1 }, "fit_rho + select_rho"},
		{"fit above its share", func(s *calib.Selection) { s.FitRho, s.SelectRho = f.Privacy.Rho/2, s.Rho-f.Privacy.Rho/2 }, "exceeds"},
		{"two winners", func(s *calib.Selection) { s.Candidates[0].Winner = true }, "exactly one"},
		{"share", func(s *calib.Selection) { s.Share = 1 }, "share"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := *f.Privacy
			s := good()
			tc.edit(&s)
			p.Selection = &s
			var buf bytes.Buffer
			err := calib.Encode(&buf, c, &p, f.Provenance)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				_, g, err := calib.Decode(&buf)
				if err != nil || g.Privacy.Selection == nil || g.Privacy.Selection.Epsilon != eps {
					t.Fatalf("decoded %+v: %v", g.Privacy, err)
				}
				if g.Privacy.Total() != eps || f.Privacy.Total() != f.Privacy.Epsilon {
					t.Errorf("Total %v, want the selection's %v; without one %v, want %v", g.Privacy.Total(), eps, f.Privacy.Total(), f.Privacy.Epsilon)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Encode: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
