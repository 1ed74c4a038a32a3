package calib

import (
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func TestDirichletNCGExplore(t *testing.T) {
	cs := os.Getenv("NCG_EXPLORE")
	if cs == "" {
		t.Skip()
	}
	c, _ := strconv.Atoi(cs)
	if v := os.Getenv("NCG_ETA"); v != "" {
		dirichletCGForcing, _ = strconv.ParseFloat(v, 64)
	}
	if v := os.Getenv("NCG_MEM"); v != "" {
		ncgMemory, _ = strconv.Atoi(v)
	}
	n := 1000
	if v := os.Getenv("NCG_ROWS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	s := dirBenchSet(rand.New(rand.NewPCG(uint64(c), 50)), n, c)
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	c0 := cpu()
	t0 := time.Now()
	fixed := &Dirichlet{Lambda: 1e-3, Mu: 1e-3}
	if err := fixed.Fit(s); err != nil {
		t.Fatal(err)
	}
	tf := time.Since(t0)
	cf := cpu() - c0
	t.Logf("fixed: %v, %d iterations", tf, fixed.LastFit().Iterations)
	d := &Dirichlet{Folds: 5}
	ls := logProbSet(s)
	lambdas, mus := d.grids(c)
	t0 = time.Now()
	sums, _, warm, err := d.heldOut(ls, 5, lambdas, mus, dirichletCVNewtonCG)
	if err != nil {
		t.Fatal(err)
	}
	th := time.Since(t0)
	q := warm.(*dirichletNewtonCG)
	b := bestPair(sums)
	t.Logf("heldOut NCG: %v (%.2f× fixed), %d evaluations, %d products, %d newton steps; best %d λ %g μ %g", th, th.Seconds()/tf.Seconds(), q.evaluations, q.products, q.newtonSteps, b, lambdas[b/len(mus)], mus[b%len(mus)])
	c0 = cpu()
	t0 = time.Now()
	if err := d.Fit(s); err != nil {
		t.Fatal(err)
	}
	tc := time.Since(t0)
	cc := cpu() - c0
	t.Logf("fixed CPU %v; CV CPU %v (%.2f×)", cf, cc, cc.Seconds()/cf.Seconds())
	t.Logf("whole CV Fit: %v (%.2f× fixed); final %d its %s", tc, tc.Seconds()/tf.Seconds(), d.LastFit().Iterations, d.LastFit().Stop)
	if os.Getenv("NCG_QN") != "" {
		t0 = time.Now()
		sq, _, wq, err := d.heldOut(ls, 5, lambdas, mus, dirichletCVKeptLBFGS)
		if err != nil {
			t.Fatal(err)
		}
		tq := time.Since(t0)
		qq := wq.(*dirichletQN)
		bq := bestPair(sq)
		var worst float64
		for p := range sq {
			worst = max(worst, (sq[p]-sums[p])/sums[p], (sums[p]-sq[p])/sums[p])
		}
		t.Logf("heldOut QN: %v, %d evaluations %d steps; best %d; worst rel diff %.2g", tq, qq.evaluations, qq.steps, bq, worst)
	}
}

func BenchmarkHessVec(b *testing.B) {
	c := 100
	s := logProbSet(dirBenchSet(rand.New(rand.NewPCG(1, 2)), 800, c))
	x := NewMatrix(c).Params()
	g := make([]float64, len(x))
	probs := make([]float64, 800*c)
	r := newRowSums(800)
	b.Run("grad", func(b *testing.B) {
		for b.Loop() {
			matrixNLLProbs(g, x, s, r, probs)
		}
	})
	v := make([]float64, len(x))
	for i := range v {
		v[i] = float64(i%7) - 3
	}
	hv := make([]float64, len(x))
	b.Run("hv", func(b *testing.B) {
		for b.Loop() {
			matrixHessVec(hv, v, probs, s, r)
		}
	})
}
