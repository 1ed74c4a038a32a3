package export

import (
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

// TestVerifyRows checks the batch size of Verify by hand, and that an
// exact isotonic calibrator verifies in batches of 1 row, 7 rows, all
// rows but one (a last batch of one row) and VerifyRows: every row's
// probabilities must come back in their place, as the probe's rows
// differ.
func TestVerifyRows(t *testing.T) {
	temp := calib.NewTemperature(10)
	iso := &calib.Isotonic{X: [][]float64{{0, 0.5, 1}, {0.2, 0.4}, {0.1}}, Y: [][]float64{{0, 0.5, 1}, {0.1, 0.9}, {1}}}
	for _, tc := range []struct {
		c    calib.Calibrator
		want int
	}{
		{temp, (1 << 24) / 10},
		{iso, (1 << 24) / (3 * 4)}, // C = 3, K = 3 + 1
	} {
		if got := VerifyRows(tc.c); got != tc.want {
			t.Errorf("%s: VerifyRows %d, want %d", tc.c.Method(), got, tc.want)
		}
	}
	needRuntime(t)
	probe := Probe(iso, 1)
	if len(probe)/3 < 20 {
		t.Fatalf("probe of %d rows", len(probe)/3)
	}
	n := len(probe) / 3
	for _, rows := range []int{1, 7, n - 1, VerifyRows(iso)} {
		if err := verify(iso, probe, Options{}, rows); err != nil {
			t.Errorf("%d rows a batch: %v", rows, err)
		}
	}
}
