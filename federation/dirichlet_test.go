package federation

import (
	"math"
	"reflect"
	"testing"
	"time"
)

// shareCounts returns counts[k][j], client k's examples of class j.
func shareCounts(shares [][]int, labels []int, classes int) [][]int {
	counts := make([][]int, len(shares))
	for k, s := range shares {
		counts[k] = make([]int, classes)
		for _, i := range s {
			counts[k][labels[i]]++
		}
	}
	return counts
}

// TestDirichletManyClients is issue #13's case: 10,000 clients at β = 0.1
// on 70,000 labels, where no draw of the paper's procedure gives every
// client an example, so Dirichlet repairs one.
func TestDirichletManyClients(t *testing.T) {
	const n, classes, clients, beta = 70000, 10, 10000, 0.1
	labels := balancedLabels(n, classes)
	for _, m := range []int{1, 3} {
		opt := PartitionOptions{Seed: 1, MinClientSize: m}
		start := time.Now()
		p, err := Dirichlet(labels, classes, clients, beta, opt)
		if err != nil {
			t.Fatalf("m = %d: %v", m, err)
		}
		// The early stop makes this a few draws; 1000 draws take about
		// 10 s here, so 20 s catches a return to unbounded redrawing
		// without failing on a slow machine.
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("m = %d: took %v", m, d)
		}
		assignedOnce(t, p, n)
		if err := p.Check(labels, classes); err != nil {
			t.Errorf("m = %d: Check: %v", m, err)
		}
		if p.MinClientSize != m || p.Len() != clients {
			t.Errorf("m = %d: MinClientSize %d, %d clients", m, p.MinClientSize, p.Len())
		}
		for k, c := range p.Clients {
			if c.Len() < m {
				t.Fatalf("m = %d: client %d has %d examples", m, k, c.Len())
			}
		}
		q, err := Dirichlet(labels, classes, clients, beta, opt)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(p, q) {
			t.Errorf("m = %d: two partitions with seed 1 differ", m)
		}
	}
}

// TestDirichletRepair checks the repair against the draw it repairs: it
// moves exactly the missing examples, each from a client that keeps at
// least the minimum to a client that was short, leaves every other
// example where the draw put it, and gives each short client the class
// its Dirichlet weight favours among the donor's classes.
func TestDirichletRepair(t *testing.T) {
	for _, tc := range []struct {
		n, classes, clients int
		beta                float64
		m                   int
		wantMoved           int // -1: the paper's procedure succeeds (no repair)
	}{
		{70000, 10, 10000, 0.1, 1, 805},
		{20000, 10, 2000, 0.05, 2, 883},
		{100, 10, 50, 0.001, 1, 34}, // before the repair: "after 1000 Dirichlet draws ..."
		{5000, 10, 100, 0.1, 1, -1},
	} {
		labels := balancedLabels(tc.n, tc.classes)
		byClass := make([][]int, tc.classes)
		for i, y := range labels {
			byClass[y] = append(byClass[y], i)
		}
		shares, draw, moved := allocateDirichlet(labels, byClass, tc.clients, tc.beta, tc.m, 5)
		raw, _ := dealDirichlet(byClass, tc.clients, tc.beta, 5, draw, true)
		short, missing := shortfall(raw, tc.m)
		if tc.wantMoved < 0 {
			if short != 0 || moved != 0 || !reflect.DeepEqual(shares, raw) {
				t.Errorf("%+v: draw %d has %d short clients, moved %d: want the paper's draw unchanged", tc, draw, short, moved)
			}
			continue
		}
		if moved != tc.wantMoved || moved != missing {
			t.Errorf("%+v: moved %d examples; the draw lacked %d, want %d", tc, moved, missing, tc.wantMoved)
		}
		before, after := shareCounts(raw, labels, tc.classes), shareCounts(shares, labels, tc.classes)
		diff := 0
		for k := range after {
			if len(shares[k]) < tc.m {
				t.Fatalf("%+v: client %d has %d examples after the repair", tc, k, len(shares[k]))
			}
			wasShort := len(raw[k]) < tc.m
			gained := len(shares[k]) - len(raw[k])
			switch {
			case wasShort && len(shares[k]) != tc.m:
				t.Errorf("%+v: short client %d of %d examples has %d after the repair, want %d", tc, k, len(raw[k]), len(shares[k]), tc.m)
			case !wasShort && gained > 0:
				t.Errorf("%+v: client %d of %d examples gained %d", tc, k, len(raw[k]), gained)
			}
			if wasShort && len(raw[k]) > 0 && !reflect.DeepEqual(shares[k][:len(raw[k])], raw[k]) {
				t.Errorf("%+v: short client %d lost its own examples", tc, k)
			}
			for j := range after[k] {
				diff += abs(after[k][j] - before[k][j])
			}
		}
		if diff != 2*moved {
			t.Errorf("%+v: class counts differ from the draw by %d, want 2·%d (only moved examples)", tc, diff, moved)
		}
	}
}

// TestRepairShortfallByHand follows the repair on a hand-made draw.
// Labels: examples 0–5 are class 0, 6–11 class 1, 12–13 class 2.
func TestRepairShortfallByHand(t *testing.T) {
	labels := []int{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2}
	for _, tc := range []struct {
		name   string
		shares [][]int
		q      [][]float64 // q[j][k]
		m      int
		want   [][]int
	}{
		{
			// Client 1 is empty; client 0 (6 examples) is the largest
			// donor and holds classes 0 and 1; client 1 weighs class 1
			// more, so it gets client 0's last class-1 example.
			"largest donor, favoured class",
			[][]int{{0, 1, 2, 6, 7, 8}, {}, {3, 4, 5, 9, 10}, {11, 12, 13}},
			[][]float64{{0.5, 0.1, 0.2, 0.2}, {0.2, 0.3, 0.3, 0.2}, {0.1, 0.2, 0.3, 0.4}},
			1,
			[][]int{{0, 1, 2, 6, 7}, {8}, {3, 4, 5, 9, 10}, {11, 12, 13}},
		},
		{
			// m = 3: client 1 needs three, client 3 one. Client 1 favours
			// class 0 and takes it from client 2 (7, then 6 examples);
			// then clients 0 and 2 tie at 5 and the lower index gives.
			// Client 3 favours class 2, which no donor holds, so it takes
			// the best class the largest donor (client 2) does hold.
			"ties and a missing class",
			[][]int{{0, 1, 6, 7, 11}, {}, {2, 3, 4, 5, 8, 9, 10}, {12, 13}},
			[][]float64{{0.4, 0.9, 0.4, 0.1}, {0.3, 0.05, 0.3, 0.3}, {0.3, 0.05, 0.3, 0.6}},
			3,
			[][]int{{0, 6, 7, 11}, {5, 4, 1}, {2, 3, 8, 9}, {12, 13, 10}},
		},
	} {
		shares := make([][]int, len(tc.shares))
		for k, s := range tc.shares {
			shares[k] = append([]int(nil), s...)
		}
		repairShortfall(shares, tc.q, labels, tc.m)
		if !reflect.DeepEqual(shares, tc.want) {
			t.Errorf("%s: repaired shares %v, want %v", tc.name, shares, tc.want)
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// TestDirichletProportionsFollowDraw is a property test: even after the
// repair, each class's shares over the clients follow Dirichlet(β·1_K).
// For q ~ Dirichlet(β·1_K), E Σ_k q_k² = (1+β)/(Kβ+1); the mean of
// Σ_k (n_jk/n_j)² over classes and seeds must match it.
func TestDirichletProportionsFollowDraw(t *testing.T) {
	for _, tc := range []struct {
		n, classes, clients int
		beta                float64
		repaired            bool
	}{
		{70000, 10, 10000, 0.1, true},
		{20000, 10, 2000, 0.05, true},
		{20000, 10, 100, 0.5, false},
		{20000, 10, 20, 0.1, false},
	} {
		labels := balancedLabels(tc.n, tc.classes)
		byClass := make([][]int, tc.classes)
		for i, y := range labels {
			byClass[y] = append(byClass[y], i)
		}
		const seeds = 4
		var sum float64
		for seed := range uint64(seeds) {
			shares, _, moved := allocateDirichlet(labels, byClass, tc.clients, tc.beta, 1, seed)
			if (moved > 0) != tc.repaired {
				t.Fatalf("%+v: seed %d moved %d examples", tc, seed, moved)
			}
			counts := shareCounts(shares, labels, tc.classes)
			for j := range tc.classes {
				nj := float64(len(byClass[j]))
				for k := range counts {
					f := float64(counts[k][j]) / nj
					sum += f * f
				}
			}
		}
		got := sum / float64(seeds*tc.classes)
		want := (1 + tc.beta) / (float64(tc.clients)*tc.beta + 1)
		t.Logf("%+v: mean Σ_k (n_jk/n_j)² = %.5g, Dirichlet %.5g", tc, got, want)
		if math.Abs(got-want) > 0.15*want {
			t.Errorf("%+v: mean Σ_k (n_jk/n_j)² = %.5g, want %.5g ± 15%%", tc, got, want)
		}
	}
}
