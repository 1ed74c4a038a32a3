package federation

import (
	"bytes"
	"math"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

// TestPrivateNewMethods fits the calibrators added for issue #28 under
// strong privacy (ε = 0.1 over 10 clients, so the noise on each averaged
// update is of order 10): FedBeta's server must project a and b onto
// [0, ∞) after each noisy round — some end exactly at 0, which only the
// projection gives — and every result must be a valid calibrator file
// (FedEqMass's equal-mass edges are chosen from the noisy histograms)
// predicting finite distributions.
func TestPrivateNewMethods(t *testing.T) {
	data := synthSet(2000, 5, 5)
	pop, _, test := federationOf(t, data, 10, 0.5, 6)
	r := Rounds{T: 4, SampleRate: 1, Seed: 8}
	priv := &Privacy{Epsilon: 0.1, Delta: 1e-5}
	for _, method := range []string{calib.MethodPlatt, calib.MethodBeta, calib.MethodEqualMass} {
		f, err := New(method, Options{Privacy: priv})
		if err != nil {
			t.Fatal(err)
		}
		res, err := f.Fit(ctx, pop, r)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if res.Privacy == nil {
			t.Errorf("%s: no privacy recorded", method)
		}
		if b, ok := res.Calibrator.(*calib.Beta); ok {
			zeros := 0
			for j := range b.A {
				if b.A[j] < 0 || b.B[j] < 0 {
					t.Errorf("beta class %d: a = %v, b = %v: want ≥ 0", j, b.A[j], b.B[j])
				}
				if b.A[j] == 0 {
					zeros++
				}
				if b.B[j] == 0 {
					zeros++
				}
			}
			if zeros == 0 {
				t.Errorf("beta: no a or b at 0 under noise of σ ≈ 10 (a %v, b %v): was it projected?", b.A, b.B)
			}
		}
		var buf bytes.Buffer
		if err := calib.Encode(&buf, res.Calibrator, nil, calib.Provenance{}); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if _, _, err := calib.Decode(&buf); err != nil {
			t.Errorf("%s: the private calibrator does not read back: %v", method, err)
		}
		p := make([]float64, len(test.Logits))
		res.Calibrator.Predict(p, test.Logits)
		for i := 0; i < len(p); i += test.Classes {
			var sum float64
			for _, v := range p[i : i+test.Classes] {
				if !(v >= 0) || math.IsInf(v, 0) {
					t.Fatalf("%s: row %d: %v", method, i/test.Classes, p[i:i+test.Classes])
				}
				sum += v
			}
			if math.Abs(sum-1) > 1e-12 {
				t.Fatalf("%s: row %d sums to %v", method, i/test.Classes, sum)
			}
		}
	}
}
