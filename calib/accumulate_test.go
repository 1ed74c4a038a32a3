package calib

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// TestAccumulatorMergeIsExact: statistics accumulated in chunks, in any
// grouping and order (clients of a federation), merge to exactly the
// statistics and metrics of the pooled examples, which match the naive
// float computation to 1e-12.
func TestAccumulatorMergeIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct{ n, c, bins int }{{500, 3, 15}, {1000, 10, 15}, {300, 7, 40}} {
		s := randomSet(rng, tc.n, tc.c, 3)
		p := make([]float64, len(s.Logits))
		SoftmaxRows(p, s.Logits, s.Classes)
		pooled, err := NewAccumulator(tc.c, tc.bins)
		if err != nil {
			t.Fatal(err)
		}
		if err := pooled.Add(p, s.Labels); err != nil {
			t.Fatal(err)
		}
		want, err := pooled.Metrics()
		if err != nil {
			t.Fatal(err)
		}
		assertMetrics(t, want, naiveMetrics(p, s.Labels, tc.c, tc.bins), 1e-12)

		// Random "clients", merged in reverse order of their rows.
		cuts := []int{0}
		for cuts[len(cuts)-1] < tc.n {
			cuts = append(cuts, min(tc.n, cuts[len(cuts)-1]+1+rng.IntN(tc.n/5)))
		}
		merged, _ := NewAccumulator(tc.c, tc.bins)
		for i := len(cuts) - 1; i > 0; i-- {
			client, _ := NewAccumulator(tc.c, tc.bins)
			lo, hi := cuts[i-1], cuts[i]
			if err := client.Add(p[lo*tc.c:hi*tc.c], s.Labels[lo:hi]); err != nil {
				t.Fatal(err)
			}
			if err := merged.Merge(client); err != nil {
				t.Fatal(err)
			}
		}
		got, err := merged.Metrics()
		if err != nil {
			t.Fatal(err)
		}
		if got != want || !reflect.DeepEqual(merged, pooled) {
			t.Errorf("n=%d c=%d: merged %+v, pooled %+v", tc.n, tc.c, got, want)
		}
		if !reflect.DeepEqual(merged.Reliability(), pooled.Reliability()) {
			t.Errorf("n=%d c=%d: reliability differs", tc.n, tc.c)
		}
	}
}

func TestAccumulatorErrors(t *testing.T) {
	a, err := NewAccumulator(3, 5)
	if err != nil {
		t.Fatal(err)
	}
	before := *a
	for _, tc := range []struct {
		name   string
		probs  []float64
		labels []int
	}{
		{"shape", []float64{0.5, 0.5}, []int{0}},
		{"label", []float64{0.2, 0.3, 0.5}, []int{3}},
		{"NaN", []float64{0.2, 0.3, 0.5, 0.1, 0.1, math.NaN()}, []int{0, 1}},
		{"not a probability", []float64{0.2, 0.3, 0.5, 2, -1, 0}, []int{0, 1}},
	} {
		if err := a.Add(tc.probs, tc.labels); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if !reflect.DeepEqual(*a, before) {
		t.Error("a refused Add changed the accumulator")
	}
	if _, err := a.Metrics(); err == nil {
		t.Error("metrics of no examples")
	}
	other, _ := NewAccumulator(3, 6)
	if err := a.Merge(other); err == nil {
		t.Error("merged statistics of other bins")
	}
	var zero Accumulator
	if err := zero.Add([]float64{0.5, 0.5}, []int{0}); err == nil {
		t.Error("the zero Accumulator accepted examples")
	}
	for _, tc := range []struct{ c, bins int }{{1, 15}, {3, -1}, {3, MaxMetricBins + 1}} {
		if _, err := NewAccumulator(tc.c, tc.bins); err == nil {
			t.Errorf("NewAccumulator(%d, %d): no error", tc.c, tc.bins)
		}
	}
}

// TestAddSoftmaxIsAdd: AddSoftmax, which takes the softmax a row at a
// time as it accumulates, leaves exactly the statistics (the exact
// encoding), records, metrics and equal-mass errors that Add of
// SoftmaxRows leaves, chunk by chunk; logits that are not finite give
// Add's error of the probabilities they make and change nothing.
func TestAddSoftmaxIsAdd(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct{ n, c, bins, chunk, scale int }{
		{700, 2, 15, 64, 3}, {2000, 10, 15, 512, 3}, {300, 100, 7, 100, 8}, {1500, 10, 1, 1500, 40},
	} {
		s := randomSet(rng, tc.n, tc.c, float64(tc.scale))
		s.Logits[3] = -1e300 // a probability that underflows to 0
		p := make([]float64, len(s.Logits))
		SoftmaxRows(p, s.Logits, s.Classes)
		var accs [2]*Accumulator
		for k := range accs {
			a, err := NewAccumulator(tc.c, tc.bins)
			if err != nil {
				t.Fatal(err)
			}
			a.KeepTopConfidences()
			a.KeepClassConfidences(1, tc.c, 0)
			for lo := 0; lo < tc.n; lo += tc.chunk {
				hi := min(lo+tc.chunk, tc.n)
				if k == 0 {
					err = a.Add(p[lo*tc.c:hi*tc.c], s.Labels[lo:hi])
				} else {
					err = a.AddSoftmax(s.Logits[lo*tc.c:hi*tc.c], s.Labels[lo:hi])
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			accs[k] = a
		}
		if want, got := accs[0].AppendEncoded(nil), accs[1].AppendEncoded(nil); !reflect.DeepEqual(got, want) {
			t.Errorf("%+v: AddSoftmax's statistics differ from Add's", tc)
		}
		if !reflect.DeepEqual(accs[1].tops, accs[0].tops) || !reflect.DeepEqual(accs[1].classKeys, accs[0].classKeys) {
			t.Errorf("%+v: AddSoftmax's records differ from Add's", tc)
		}
		want, got := accs[0].ClassErrors(0), accs[1].ClassErrors(0)
		if len(want) != tc.c-1 || !reflect.DeepEqual(got, want) {
			t.Errorf("%+v: class errors %v, want Add's %v", tc, got, want)
		}
		if again := accs[1].ClassErrors(0); again != nil {
			t.Errorf("%+v: ClassErrors again gave %v, want nil (the records are dropped)", tc, again)
		}
		if want, got := accs[0].TopLabel(), accs[1].TopLabel(); !reflect.DeepEqual(got, want) || got.KS == nil {
			t.Errorf("%+v: top label %+v, want Add's %+v", tc, got, want)
		}
	}
	a, err := NewAccumulator(3, 15)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1)} {
		logits := []float64{0, 1, 2, 0, bad, 1}
		p := make([]float64, len(logits))
		SoftmaxRows(p, logits, 3)
		want := a.Add(p, []int{0, 1})
		got := a.AddSoftmax(logits, []int{0, 1})
		if want == nil || got == nil || got.Error() != want.Error() || a.N() != 0 {
			t.Errorf("logit %v: AddSoftmax error %v, want Add's %v and no example added (have %d)", bad, got, want, a.N())
		}
	}
	if err := a.AddSoftmax([]float64{0, 1, 2}, []int{3}); err == nil || a.N() != 0 {
		t.Errorf("label 3 of 3 classes: error %v, %d examples added", err, a.N())
	}
	if err := a.AddSoftmax([]float64{0, 1}, []int{0}); err == nil || a.N() != 0 {
		t.Errorf("2 logits for 3 classes: error %v, %d examples added", err, a.N())
	}
}

// referenceAdd is what addRows accumulated before its inner loop was made
// branch-free (b6b0142), written plainly with Softmax, Bin and packTop:
// the second method TestAddRowsAsReference holds addRows to, bit for bit.
func referenceAdd(a *Accumulator, x []float64, labels []int, softmax bool) {
	c, bins := a.classes, a.bins
	p := make([]float64, c)
	for i, y := range labels {
		copy(p, x[i*c:(i+1)*c])
		if softmax {
			m := math.Inf(-1) // Softmax as it was: the first largest
			for _, v := range p {
				if v > m {
					m = v
				}
			}
			var sum float64
			for j, v := range p {
				p[j] = math.Exp(v - m)
				sum += p[j]
			}
			for j := range p {
				p[j] /= sum
			}
		}
		top, arg := math.Inf(-1), 0
		var sq float64
		for j, v := range p {
			v = min(max(v, 0), 1)
			k := j*bins + Bin(v, bins)
			a.conf[k].add(uint64(int64(v * probScale)))
			a.count[k]++
			d := v
			if j == y {
				a.freq[k]++
				d = v - 1
			}
			sq += d * d
			if v > top {
				top, arg = v, j
			}
		}
		if a.keepTops {
			a.tops[0] = append(a.tops[0], packTop(top, arg == y))
		}
		for k := range a.classKeys {
			j := a.keepLo + k
			a.classKeys[k][0] = append(a.classKeys[k][0], packTop(p[j], j == y))
		}
		m := Bin(top, bins)
		a.topConf[m].add(uint64(top * probScale))
		a.topCount[m]++
		if arg == y {
			a.topFreq[m]++
			a.correct++
		}
		a.nll.add(uint64(-math.Log(max(min(max(p[y], 0), 1), nllFloor)) * nllScale))
		a.brier.add(uint64(min(sq, 2) * brierScale))
	}
	a.n += int64(len(labels))
}

// TestAddRowsAsReference: Add and AddSoftmax leave the statistics and
// records that referenceAdd leaves, bit for bit, on rows with tied
// largest logits, signed zeros, probabilities that underflow to 0 or
// round to 1, and (for Add) probabilities just outside [0, 1].
func TestAddRowsAsReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct{ n, c, bins int }{{3000, 10, 15}, {500, 2, 1}, {400, 37, 10}, {2000, 3, 100}} {
		s := randomSet(rng, tc.n, tc.c, 4)
		z := s.Logits
		for i := 0; i < tc.n; i += 7 { // a tie for the largest logit
			m := slices.Max(z[i*tc.c : (i+1)*tc.c])
			z[i*tc.c+rng.IntN(tc.c)] = m
		}
		for i := 3; i < tc.n; i += 11 { // signed zeros, largest or not
			z[i*tc.c+rng.IntN(tc.c)] = math.Copysign(0, -1)
			z[i*tc.c+rng.IntN(tc.c)] = 0
		}
		for i := 5; i < tc.n; i += 13 { // a probability that underflows
			z[i*tc.c+rng.IntN(tc.c)] = -800
		}
		for i := 6; i < tc.n; i += 17 { // a probability of 1
			z[i*tc.c+rng.IntN(tc.c)] = 900
		}
		p := make([]float64, len(z))
		SoftmaxRows(p, z, tc.c)
		for k := 0; k < len(p); k += 19 { // rounding outside [0, 1], and exact ends
			p[k] = []float64{-1e-9, 1 + 1e-9, 0, 1, 0.5}[k%5]
		}
		for _, softmax := range []bool{false, true} {
			x := p
			if softmax {
				x = z
			}
			var accs [2]*Accumulator
			for r := range accs {
				a, err := NewAccumulator(tc.c, tc.bins)
				if err != nil {
					t.Fatal(err)
				}
				a.KeepTopConfidences()
				a.KeepClassConfidences(0, tc.c, tc.n)
				accs[r] = a
			}
			referenceAdd(accs[0], x, s.Labels, softmax)
			for lo := 0; lo < tc.n; lo += 256 {
				hi := min(lo+256, tc.n)
				var err error
				if softmax {
					err = accs[1].AddSoftmax(x[lo*tc.c:hi*tc.c], s.Labels[lo:hi])
				} else {
					err = accs[1].Add(x[lo*tc.c:hi*tc.c], s.Labels[lo:hi])
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			want, got := accs[0].AppendEncoded(nil), accs[1].AppendEncoded(nil)
			if !slices.Equal(got, want) {
				t.Errorf("%+v, softmax %v: statistics differ from the reference's", tc, softmax)
			}
			if !slices.Equal(slices.Concat(accs[1].tops...), accs[0].tops[0]) {
				t.Errorf("%+v, softmax %v: top records differ from the reference's", tc, softmax)
			}
			for k := range tc.c {
				if got, want := slices.Concat(accs[1].classKeys[k]...), accs[0].classKeys[k][0]; !slices.Equal(got, want) {
					t.Errorf("%+v, softmax %v: class %d's records differ from the reference's", tc, softmax, k)
				}
			}
		}
	}
}
