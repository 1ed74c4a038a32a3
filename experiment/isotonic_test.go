package experiment

import (
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

// TestCellsMethodDefaultMexp checks that a grid without mexp gives each
// binning method its own default bin exponent (calib.Method.DefaultMexp)
// and that an explicit mexp applies to every binning method.
func TestCellsMethodDefaultMexp(t *testing.T) {
	for _, tc := range []struct {
		grid string
		want map[string]int
	}{
		{"", map[string]int{"bin": calib.DefaultMexp, "bbq": calib.DefaultMexp, "isotonic": calib.IsotonicMexp, "temp": 0}},
		{"  mexp: [4]\n", map[string]int{"bin": 4, "bbq": 4, "isotonic": 4, "temp": 0}},
	} {
		cfg, err := ParseConfig([]byte(`
datasets:
  - {name: d, logits: x.npz, partition: {file: p.json}}
grid:
  method: [bin, bbq, isotonic, temp]
  rounds: [1]
  seed: 1
`+tc.grid), "")
		if err != nil {
			t.Fatal(err)
		}
		cells, err := cfg.Cells()
		if err != nil {
			t.Fatal(err)
		}
		if len(cells) != len(tc.want) {
			t.Fatalf("grid %q: %d cells, want %d", tc.grid, len(cells), len(tc.want))
		}
		for _, c := range cells {
			if want, ok := tc.want[c.Method]; !ok || c.Mexp != want {
				t.Errorf("grid %q: %s has M = %d, want %d", tc.grid, c.Method, c.Mexp, want)
			}
		}
	}
}
