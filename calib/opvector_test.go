package calib

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// scSoftplusInv returns the x with softplus(x) = m.
func scSoftplusInv(m float64) float64 { return math.Log(math.Expm1(m)) }

func TestOPVectorHandComputed(t *testing.T) {
	// z = (1, 3, 2): ranks are class 1, class 2, class 0; both gaps are 1.
	z := []float64{1, 3, 2}
	for _, tc := range []struct {
		name string
		a, b []float64
		m0   float64 // weight of the gap between ranks 0 and 1
		m1   float64 // weight of the gap between ranks 1 and 2
	}{
		{"constant weights", []float64{0, 0, 0}, []float64{scSoftplusInv(0.5), scSoftplusInv(1), 9}, 0.5, 1},
		{"scaled weights", []float64{0.1, -0.2, 5}, []float64{0, 0.3, 0}, math.Log1p(math.Exp(0.1 * 3)), math.Log1p(math.Exp(-0.2*2 + 0.3))},
	} {
		o := &OPVector{A: tc.a, B: tc.b}
		got := make([]float64, 3)
		o.Predict(got, z)
		// Calibrated logits from the bottom: class 0 → 0, class 2 → m1,
		// class 1 → m1 + m0.
		zh := []float64{0, tc.m0 + tc.m1, tc.m1}
		want := make([]float64, 3)
		Softmax(want, zh)
		for j := range got {
			if math.Abs(got[j]-want[j]) > 1e-15 {
				t.Errorf("%s: p = %v, want %v", tc.name, got, want)
				break
			}
		}
	}
}

// TestOPVectorGeneralisesTemperature checks that a = 0 and every weight
// 1/T gives temperature scaling.
func TestOPVectorGeneralisesTemperature(t *testing.T) {
	s := scOverconfident(rand.New(rand.NewPCG(13, 13)), 100, 6, 4, 2)
	const T = 2.7
	o := NewOPVector(6)
	for k := range o.B {
		o.B[k] = scSoftplusInv(1 / T)
	}
	got, want := make([]float64, len(s.Logits)), make([]float64, len(s.Logits))
	o.Predict(got, s.Logits)
	(&Temperature{T: T, C: 6}).Predict(want, s.Logits)
	for k := range got {
		if math.Abs(got[k]-want[k]) > 1e-13 {
			t.Fatalf("p[%d] = %v, temperature scaling gives %v", k, got[k], want[k])
		}
	}
}

// TestOPVectorTies checks that tied logits get equal probabilities and that
// the sort order of ties does not matter.
func TestOPVectorTies(t *testing.T) {
	o := &OPVector{A: []float64{0.3, -0.1, 0.2, 0.5}, B: []float64{-1, 2, 0.4, 1}}
	rows := [][]float64{
		{2, 2, 1, 0},
		{1, 2, 2, 0},
		{0, 1, 2, 2},
		{5, 5, 5, 5},
		{3, 1, 3, 1},
	}
	for _, z := range rows {
		p := make([]float64, 4)
		o.Predict(p, z)
		for i := range z {
			for j := range z {
				if z[i] == z[j] && p[i] != p[j] {
					t.Errorf("z = %v: tied classes %d and %d get %v and %v", z, i, j, p[i], p[j])
				}
			}
		}
	}
	// Permuting the classes of z permutes the output, ties included:
	// rows 0 and 1 are permutations of each other (swap classes 0 and 2).
	p0, p1 := make([]float64, 4), make([]float64, 4)
	o.Predict(p0, rows[0])
	o.Predict(p1, rows[1])
	if p0[0] != p1[2] || p0[2] != p1[0] || p0[3] != p1[3] {
		t.Errorf("permuted rows give %v and %v", p0, p1)
	}
}

func TestOrderPreservingScalersKeepAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 14))
	for range 5 {
		c := 2 + rng.IntN(9)
		// Labels from a shifted softmax, so that bias terms would help and
		// a non-order-preserving fit would move some top classes.
		s := &Set{Logits: make([]float64, 400*c), Labels: make([]int, 400), Classes: c}
		shift := make([]float64, c)
		for j := range shift {
			shift[j] = 2 * rng.NormFloat64()
		}
		p := make([]float64, c)
		for i := range s.Labels {
			z := s.Row(i)
			for j := range z {
				z[j] = 3 * rng.NormFloat64()
				p[j] = z[j]/2 + shift[j]
			}
			Softmax(p, p)
			s.Labels[i] = scDraw(rng, p)
		}
		for _, sc := range []Scaler{new(OPVector), &FedCalMLP{Seed: 3}} {
			if err := sc.Fit(s); err != nil {
				t.Fatal(err)
			}
			got := make([]float64, len(s.Logits))
			sc.Predict(got, s.Logits)
			for i := range s.Labels {
				if a, b := scFirstMax(got[i*c:(i+1)*c]), scFirstMax(s.Row(i)); a != b {
					t.Fatalf("%s moved the top class of row %d from %d to %d", sc.Method(), i, b, a)
				}
			}
		}
	}
}

// scFuzzRow decodes a fuzz input into classes, logits with many ties at
// one of three scales, and bounded OPVector parameters, so that every
// weight m_k ≥ softplus(−16) and every gap ≥ 0.5·scale. It reports false
// when data is too short.
func scFuzzRow(data []byte) (z []float64, o *OPVector, seed uint64, ok bool) {
	if len(data) < 2 {
		return nil, nil, 0, false
	}
	c := 2 + int(data[0])%11
	scale := []float64{1, 100, 1e4}[int(data[1])%3]
	data = data[2:]
	if len(data) < 3*c+8 {
		return nil, nil, 0, false
	}
	z = make([]float64, c)
	o = &OPVector{A: make([]float64, c), B: make([]float64, c)}
	for j := range c {
		z[j] = scale * float64(int(data[j])%33-16) / 2 // |z| ≤ 8·scale
		o.A[j] = float64(int(data[c+j])-128) / 128 / scale
		o.B[j] = float64(int(data[2*c+j])-128) / 16
	}
	return z, o, binary.LittleEndian.Uint64(data[3*c:]), true
}

// FuzzOPVector checks the order-preserving scalers on fuzzed logits with
// ties: rows sum to 1, z_i ≥ z_j gives p_i ≥ p_j, ties give equal
// probabilities, and the most probable class is the first top logit.
func FuzzOPVector(f *testing.F) {
	f.Add([]byte{3, 0, 10, 10, 4, 200, 1, 128, 0, 255, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Add([]byte{0, 2, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{10, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49})
	f.Fuzz(func(t *testing.T, data []byte) {
		z, o, seed, ok := scFuzzRow(data)
		if !ok {
			return
		}
		c := len(z)
		fc := NewFedCalMLP(c, int64(seed))
		rng := rand.New(rand.NewPCG(seed, 1))
		for k := range fc.W3 {
			fc.W3[k] = 0.1 * rng.NormFloat64()
		}
		top := scFirstMax(z)
		for _, sc := range []Calibrator{o, fc} {
			p := make([]float64, c)
			sc.Predict(p, z)
			scCheckRows(t, sc.Method(), p, c)
			for i := range z {
				for j := range z {
					switch {
					case z[i] == z[j] && p[i] != p[j]:
						t.Fatalf("%s: z = %v: tied classes %d, %d get p = %v, %v", sc.Method(), z, i, j, p[i], p[j])
					case z[i] > z[j] && p[i] < p[j]:
						t.Fatalf("%s: z = %v: order of classes %d, %d reversed: p = %v", sc.Method(), z, i, j, p)
					}
				}
			}
			// OPVector's weights are bounded below, so the top class stays
			// strictly ahead; FedCal's may underflow and only tie.
			if sc == Calibrator(o) {
				if got := scFirstMax(p); got != top {
					t.Fatalf("opvector: z = %v: top class %d became %d: p = %v", z, top, got, p)
				}
			}
		}
	})
}
