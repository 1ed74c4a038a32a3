package calib

import (
	"math/rand/v2"
	"testing"
)

// imagenetSet returns n rows of generated logits over c classes of an
// overconfident classifier (right 70% of the time, logits scaled ×3),
// as integration's TestImageNetClasses writes them.
func imagenetSet(n, c int) *Set {
	rng := rand.New(rand.NewPCG(29, uint64(c)))
	s := &Set{Logits: make([]float64, n*c), Labels: make([]int, n), Classes: c}
	for i := range n {
		y := rng.IntN(c)
		s.Labels[i] = y
		top := y
		if rng.Float64() >= 0.7 {
			top = rng.IntN(c)
		}
		row := s.Row(i)
		for j := range row {
			row[j] = float64(float32(3 * rng.NormFloat64()))
		}
		row[top] += 15
	}
	return s
}

// BenchmarkCentralFit1000 times the central fit (New's settings) of every
// method that fits 1,000 classes, on 2,000 generated rows. Profile one
// method with -cpuprofile:
//
//	go test ./calib -run '^$' -bench 'CentralFit1000/fedcal' -benchtime 1x -cpuprofile cpu.out
func BenchmarkCentralFit1000(b *testing.B) {
	const c = 1000
	s := imagenetSet(2000, c)
	for _, m := range Methods() {
		if m.CheckSize(c, 1<<m.DefaultMexp()) != nil {
			continue
		}
		b.Run(m.Name, func(b *testing.B) {
			for b.Loop() {
				cal, err := New(m.Name, Settings{Seed: 1})
				if err != nil {
					b.Fatal(err)
				}
				if err := cal.Fit(s); err != nil {
					b.Fatal(err)
				}
				if r, ok := cal.(interface{ LastFit() *FitReport }); ok {
					if rep := r.LastFit(); rep != nil {
						b.Logf("%+v", *rep)
					}
				}
			}
		})
	}
}
