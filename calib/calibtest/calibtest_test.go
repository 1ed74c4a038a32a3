package calibtest_test

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/calib/calibtest"
)

// TestOverconfident checks the promise of Overconfident: temperature
// scaling fitted on its rows finds the temperature t they were drawn
// at (within sampling error at 40,000 rows), rounded logits are
// multiples of step, labels are classes, and a seed fixes every value.
func TestOverconfident(t *testing.T) {
	for _, tc := range []struct {
		c                   int
		sigma, step, temper float64
	}{
		{2, 3, 0, 3},
		{10, 3, 0, 2},
		{4, 3, 0.5, 3},
	} {
		s := calibtest.Overconfident(rand.New(rand.NewPCG(1, 2)), 40000, tc.c, tc.sigma, tc.step, tc.temper)
		if again := calibtest.Overconfident(rand.New(rand.NewPCG(1, 2)), 40000, tc.c, tc.sigma, tc.step, tc.temper); !reflect.DeepEqual(s, again) {
			t.Errorf("%+v: the same seed gave different rows", tc)
		}
		for i, y := range s.Labels {
			if y < 0 || y >= tc.c {
				t.Fatalf("%+v: row %d has label %d", tc, i, y)
			}
		}
		if tc.step > 0 {
			for _, z := range s.Logits {
				if z/tc.step != math.Trunc(z/tc.step) {
					t.Fatalf("%+v: logit %v is not a multiple of %v", tc, z, tc.step)
				}
			}
			continue // rounding moves the temperature a little
		}
		var temp calib.Temperature
		if err := temp.Fit(s); err != nil {
			t.Fatal(err)
		}
		if math.Abs(temp.T/tc.temper-1) > 0.05 {
			t.Errorf("%+v: fitted temperature %.3f, want %.3f within 5%%", tc, temp.T, tc.temper)
		}
	}
}

// TestMargin checks Margin against its closed form: the true class's
// logit leads each other by sharpen·(margin + g_y − g_j), so a row is
// right with probability P(margin + g_y > max of c−1 other normals),
// 0.610 at c = 10 and margin 1.8 (integrated numerically below),
// and the labels are uniform.
func TestMargin(t *testing.T) {
	const n, c, margin = 40000, 10, 1.8
	s := calibtest.Margin(rand.New(rand.NewPCG(3, 7)), n, c, margin, 3)
	right := 0
	counts := make([]int, c)
	for i, y := range s.Labels {
		counts[y]++
		z := s.Logits[i*c : (i+1)*c]
		top := 0
		for j := range z {
			if z[j] > z[top] {
				top = j
			}
		}
		if top == y {
			right++
		}
	}
	// P(right) = ∫ φ(x) Φ(x + margin)^(c−1) dx, by the midpoint rule.
	want := 0.0
	const h = 1e-3
	for x := -8.0; x < 8; x += h {
		m := x + h/2
		phi := math.Exp(-m*m/2) / math.Sqrt(2*math.Pi)
		want += h * phi * math.Pow(0.5*math.Erfc(-(m+margin)/math.Sqrt2), c-1)
	}
	got := float64(right) / n
	if se := math.Sqrt(want * (1 - want) / n); math.Abs(got-want) > 4*se {
		t.Errorf("accuracy %.4f, want %.4f ± %.4f", got, want, 4*se)
	}
	for y, k := range counts {
		if math.Abs(float64(k)-n/c) > 4*math.Sqrt(n/c) {
			t.Errorf("label %d drawn %d times of %d, want about %d", y, k, n, n/c)
		}
	}
}
