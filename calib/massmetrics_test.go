package calib

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// TestClasswiseByHand: four examples of two classes whose equal-mass bins
// are worked out by hand (in the comments).
func TestClasswiseByHand(t *testing.T) {
	probs := []float64{
		0.9, 0.1, // y = 0
		0.8, 0.2, // y = 1
		0.3, 0.7, // y = 1
		0.4, 0.6, // y = 1
	}
	labels := []int{0, 1, 1, 1}
	for _, tc := range []struct {
		bins int
		want Classwise
	}{
		// 2 bins. Class 0 sorted: 0.3 ✗, 0.4 ✗ | 0.8 ✗, 0.9 ✓: gaps
		// |0 − 0.7| + |1 − 1.7| = 1.4; d_0 = ½(0.35² − 0) + ½(0.35² −
		// ½·½/1) = −0.0025 → 0; running Σ(p − a) 0.3, 0.7, 1.5, 1.4: KS
		// 1.5. Class 1 sorted: 0.1 ✗, 0.2 ✓ | 0.6 ✓, 0.7 ✓: gaps 0.7 +
		// 0.7; d_1 = −0.0025 → 0; running 0.1, −0.7, −1.1, −1.4: KS 1.4.
		{2, Classwise{AdaptiveCWECE: 2.8 / 4 / 2, DebiasedCWCE: 0, KS: 2.9 / 4 / 2}},
		// 1 bin. Class 0: acc 1/4, conf 0.6: |1 − 2.4| = 1.4, d_0 = 0.35²
		// − (¼·¾)/3 = 0.06. Class 1: acc ¾, conf 0.4: 1.4, d_1 = 0.06.
		{1, Classwise{AdaptiveCWECE: 2.8 / 4 / 2, DebiasedCWCE: math.Sqrt(0.06), KS: 2.9 / 4 / 2}},
	} {
		got, err := ClasswiseErrors(probs, labels, 2, tc.bins)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []struct {
			name      string
			got, want float64
		}{{"adaptive cwECE", got.AdaptiveCWECE, tc.want.AdaptiveCWECE}, {"debiased", got.DebiasedCWCE, tc.want.DebiasedCWCE}, {"KS", got.KS, tc.want.KS}} {
			if math.Abs(f.got-f.want) > 1e-12 {
				t.Errorf("%d bins: %s = %v, want %v", tc.bins, f.name, f.got, f.want)
			}
		}
	}
	if _, err := ClasswiseErrors(probs, labels[:3], 2, 2); err == nil {
		t.Error("ClasswiseErrors took 4 rows of probabilities for 3 labels")
	}
}

// TestEqualMassTies checks the tie rule of the equal-mass and KS errors:
// every probability 0.5, two labels of each class, in every order. Each
// class's two bins hold its two "not j" then its two "j" examples (gaps
// |0 − 1| + |2 − 1|, adaptive cwECE (2 + 2)/4/2 = 0.5), and the KS sums
// are read only at the end of the tied run, where Σ(p − a) = 2 − 2 = 0.
func TestEqualMassTies(t *testing.T) {
	probs := []float64{0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5}
	for _, labels := range [][]int{{0, 0, 1, 1}, {1, 1, 0, 0}, {0, 1, 0, 1}, {1, 0, 0, 1}} {
		cw, err := ClasswiseErrors(probs, labels, 2, 2)
		if err != nil {
			t.Fatal(err)
		}
		tl, _ := TopLabelErrors(probs, labels, 2, 2)
		if cw.AdaptiveCWECE != 0.5 || cw.KS != 0 || *tl.KS != 0 {
			t.Errorf("labels %v: adaptive cwECE %v, classwise KS %v, top-label KS %v; want 0.5, 0, 0", labels, cw.AdaptiveCWECE, cw.KS, *tl.KS)
		}
	}
}

// TestEqualMassOrderFree: the errors of a sample with many ties (values
// rounded to tenths) do not change when its rows are shuffled.
func TestEqualMassOrderFree(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const n, c = 300, 3
	probs, labels := make([]float64, n*c), make([]int, n)
	for i := range n {
		a := math.Round(rng.Float64()*10) / 20
		probs[i*c], probs[i*c+1], probs[i*c+2] = a, 0.5-a, 0.5
		labels[i] = rng.IntN(c)
	}
	cw0, _ := ClasswiseErrors(probs, labels, c, 15)
	tl0, _ := TopLabelErrors(probs, labels, c, 15)
	for range 5 {
		perm := rng.Perm(n)
		sp, sl := make([]float64, n*c), make([]int, n)
		for i, k := range perm {
			copy(sp[i*c:(i+1)*c], probs[k*c:(k+1)*c])
			sl[i] = labels[k]
		}
		cw, _ := ClasswiseErrors(sp, sl, c, 15)
		tl, _ := TopLabelErrors(sp, sl, c, 15)
		if cw != cw0 || *tl.KS != *tl0.KS || *tl.AdaptiveECE != *tl0.AdaptiveECE {
			t.Fatalf("shuffled rows: classwise %+v, KS %v, adaptive %v; unshuffled %+v, %v, %v", cw, *tl.KS, *tl.AdaptiveECE, cw0, *tl0.KS, *tl0.AdaptiveECE)
		}
	}
}

// TestBootstrapSortsOnce checks that BootstrapIntervals, which sorts the
// examples once and walks them with each resample's multiplicities,
// gives bit for bit the intervals of resampling the rows and computing
// every metric of the resample from scratch.
func TestBootstrapSortsOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	p, y := calibratedSample(rng, 150)
	for i := range 40 { // ties, and within rows too
		p[3*i], p[3*i+1], p[3*i+2] = 0.25, 0.25, 0.5
	}
	const c, bins, resamples, seed = 3, 7, 40, 11
	level := 0.9 // a float64, so that (1 − level)/2 rounds as BootstrapIntervals rounds it
	got, err := BootstrapIntervals(p, y, c, bins, resamples, level, seed)
	if err != nil {
		t.Fatal(err)
	}
	n := len(y)
	r := rand.New(rand.NewPCG(seed, 0x626f6f74))
	draws := map[string][]float64{}
	rp, rl := make([]float64, n*c), make([]int, n)
	for range resamples {
		for i := range n {
			k := r.IntN(n)
			copy(rp[i*c:(i+1)*c], p[k*c:(k+1)*c])
			rl[i] = y[k]
		}
		m, _ := Evaluate(rp, rl, c, bins)
		tl, _ := TopLabelErrors(rp, rl, c, bins)
		cw, _ := ClasswiseErrors(rp, rl, c, bins)
		for k, v := range metricValues(m, tl, cw) {
			draws[k] = append(draws[k], v)
		}
	}
	want := Bootstrap{}
	for k, v := range draws {
		slices.Sort(v)
		want[k] = Interval{quantile(v, (1-level)/2), quantile(v, (1+level)/2)}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("intervals\n%v\nwant\n%v", got, want)
	}
}

// TestSortPacked compares the radix sort with slices.Sort on keys that
// share bytes, tie, span the whole range, or crowd into a few buckets as
// a class's probabilities do (most of them tiny, spread over many
// exponents, a few near 1), at sizes that recurse.
func TestSortPacked(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 255, 256, 1000, 1024, 5000, 70000, 300000} {
		for kind := range 5 {
			s := make([]uint64, n)
			for i := range s {
				switch kind {
				case 0:
					s[i] = rng.Uint64()
				case 1:
					s[i] = packTop(rng.Float64(), rng.IntN(2) == 0)
				case 2:
					s[i] = 0xabcd_0000_0000_0000 | uint64(rng.IntN(40))<<8 // shared and tied bytes
				case 3:
					s[i] = packTop(math.Exp(-rng.ExpFloat64()*8), rng.IntN(10) == 0) // skewed
				case 4:
					s[i] = packTop(float64(rng.IntN(3000))/4096, rng.IntN(2) == 0) // many ties
				}
			}
			want := slices.Clone(s)
			slices.Sort(want)
			if got := sortPacked(s[:n/3], s[n/3:]); !slices.Equal(got, want) {
				t.Fatalf("n %d, kind %d: not sorted as slices.Sort sorts", n, kind)
			}
			// Into a reused buffer holding other keys, with room or not.
			for _, room := range []int{n / 2, n + 5} {
				buf := make([]uint64, room)
				for i := range buf {
					buf[i] = rng.Uint64()
				}
				if got := sortPackedInto(buf, s[:n/2], s[n/2:]); !slices.Equal(got, want) {
					t.Fatalf("n %d, kind %d, buffer of %d: not sorted as slices.Sort sorts", n, kind, room)
				}
			}
		}
	}
}
