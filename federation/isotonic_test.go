package federation_test

import (
	"bytes"
	"context"
	"math"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
)

// TestFedIsotonicDefaultBins checks that FedIsotonic without a bin
// exponent uses isotonic's own default, calib.IsotonicBins, and that
// several clients with p = 1, T = 1 give the central fit on their union
// exactly (the summed histograms are the union's).
func TestFedIsotonicDefaultBins(t *testing.T) {
	const classes = 3
	clients := federation.Slices{fedConformanceSet(200, classes, 4), fedConformanceSet(300, classes, 5), fedConformanceSet(100, classes, 6)}
	union := &calib.Set{Classes: classes}
	for _, s := range clients {
		union.Logits = append(union.Logits, s.Logits...)
		union.Labels = append(union.Labels, s.Labels...)
	}
	f, err := federation.Spec{Method: calib.MethodIsotonic}.Fitter()
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Fit(context.Background(), clients, federation.Rounds{T: 1, SampleRate: 1, Seed: fedSeed, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	fed, ok := res.Calibrator.(*calib.Isotonic)
	if !ok {
		t.Fatalf("calibrator %T, want *calib.Isotonic", res.Calibrator)
	}
	if res.Protocol != "FedIsotonic" || fed.Bins != calib.IsotonicBins || res.Histograms.Bins != calib.IsotonicBins {
		t.Errorf("protocol %q, %d bins, histograms of %d: want FedIsotonic, %d", res.Protocol, fed.Bins, res.Histograms.Bins, calib.IsotonicBins)
	}
	central, err := calib.New(calib.MethodIsotonic, calib.Settings{Mexp: calib.IsotonicMexp}) // binned, as the federation
	if err != nil {
		t.Fatal(err)
	}
	if err := central.Fit(union); err != nil {
		t.Fatal(err)
	}
	want := central.(*calib.Isotonic).Table
	for k := range want {
		if math.Float64bits(fed.Table[k]) != math.Float64bits(want[k]) {
			t.Fatalf("table entry %d: federated %.17g, central %.17g", k, fed.Table[k], want[k])
		}
	}
}

// TestFedIsotonicPrivate checks that DP-FedIsotonic, weighted and not,
// spends its budget and yields a valid calibrator (non-decreasing tables
// from noisy histograms) that round-trips through its sidecar file with
// the privacy record.
func TestFedIsotonicPrivate(t *testing.T) {
	const classes = 4
	var clients federation.Slices
	for k := range 20 {
		clients = append(clients, fedConformanceSet(100, classes, uint64(10+k)))
	}
	for _, w := range []calib.Weighting{calib.WeightNone, calib.WeightAll} {
		f, err := federation.Spec{Method: calib.MethodIsotonic, Mexp: 5, Weighting: w, Epsilon: 1}.Fitter()
		if err != nil {
			t.Fatal(err)
		}
		res, err := f.Fit(context.Background(), clients, federation.Rounds{T: 3, SampleRate: 0.5, Seed: fedSeed, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		if res.Privacy == nil || !(res.Privacy.Epsilon > 0 && res.Privacy.Epsilon <= 1+1e-9) {
			t.Fatalf("%s: privacy record %+v: want ε ≤ 1 spent", w, res.Privacy)
		}
		c := res.Calibrator.(*calib.Isotonic)
		for j := range classes {
			row := c.Table[j*c.Bins : (j+1)*c.Bins]
			for m := 1; m < len(row); m++ {
				if row[m] < row[m-1] {
					t.Fatalf("%s: class %d decreases at bin %d: %v", w, j, m, row)
				}
			}
		}
		var buf bytes.Buffer
		if err := calib.Encode(&buf, c, res.Privacy, calib.Provenance{Protocol: res.Protocol}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := calib.Decode(&buf); err != nil {
			t.Errorf("%s: the private calibrator's file does not decode: %v", w, err)
		}
	}
}
