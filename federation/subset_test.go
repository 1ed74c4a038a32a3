package federation

import (
	"errors"
	"slices"
	"testing"
)

// subsetFixture is a hand-made partition of 10 examples: client 0 holds
// rows 0–3, client 1 rows 4–6 (interleaved with client 2's on purpose:
// row 8 is client 1's), client 2 rows 7 and 9; nothing is dropped.
func subsetFixture() (*Partition, []int) {
	labels := []int{0, 1, 2, 0, 1, 2, 0, 1, 2, 0}
	p := &Partition{
		Format: PartitionFormatV1, Scheme: SchemeNatural, Seed: 7, MinSamples: 2,
		Rule: RuleFractions, Fractions: &Fractions{Train: 0.5, Calibration: 0.25, Test: 0.25},
		Data: NewFingerprint(labels, 3),
		Clients: []Client{
			{ID: 0, Name: "a", Train: []int32{0, 2}, Calibration: []int32{3}, Test: []int32{1}},
			{ID: 1, Name: "b", Train: []int32{5}, Calibration: []int32{4, 8}, Test: []int32{6}},
			{ID: 2, Name: "c", Train: []int32{}, Calibration: []int32{9}, Test: []int32{7}},
		},
	}
	return p, labels
}

func TestSubset(t *testing.T) {
	p, labels := subsetFixture()
	for _, tc := range []struct {
		name   string
		keep   []int
		splits []Split
		// Derived by hand from subsetFixture.
		rows               []int
		train, calib, test [][]int32
		names              []string
		subLabels          []int
	}{
		{
			name: "calibration and test of clients 1 and 2", keep: []int{1, 2}, splits: []Split{Calibration, Test},
			// Client 1's calibration and test rows 4, 6, 8 become 0, 1, 2;
			// client 2's 7, 9 become 3, 4.
			rows:  []int{4, 6, 8, 7, 9},
			train: [][]int32{{}, {}}, calib: [][]int32{{0, 2}, {4}}, test: [][]int32{{1}, {3}},
			names: []string{"b", "c"}, subLabels: []int{1, 0, 2, 1, 0},
		},
		{
			name: "every split of client 0", keep: []int{0}, splits: []Split{Train, Calibration, Test},
			rows:  []int{0, 1, 2, 3},
			train: [][]int32{{0, 2}}, calib: [][]int32{{3}}, test: [][]int32{{1}},
			names: []string{"a"}, subLabels: []int{0, 1, 2, 0},
		},
		{
			name: "test only of clients 0 and 2", keep: []int{0, 2}, splits: []Split{Test},
			rows:  []int{1, 7},
			train: [][]int32{{}, {}}, calib: [][]int32{{}, {}}, test: [][]int32{{0}, {1}},
			names: []string{"a", "c"}, subLabels: []int{1, 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub, rows, err := p.Subset(tc.keep, tc.splits, labels)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rows, tc.rows) {
				t.Errorf("rows %v, want %v", rows, tc.rows)
			}
			if want := NewFingerprint(tc.subLabels, 3); sub.Data != want {
				t.Errorf("fingerprint %+v, want %+v", sub.Data, want)
			}
			if sub.Len() != len(tc.keep) || sub.Dropped != nil {
				t.Fatalf("%d clients, dropped %v", sub.Len(), sub.Dropped)
			}
			for k := range sub.Clients {
				c := sub.Clients[k]
				if c.ID != int64(k) || c.Name != tc.names[k] ||
					!slices.Equal(c.Train, tc.train[k]) || !slices.Equal(c.Calibration, tc.calib[k]) || !slices.Equal(c.Test, tc.test[k]) {
					t.Errorf("client %d: %+v, want id %d %s train %v calibration %v test %v", k, c, k, tc.names[k], tc.train[k], tc.calib[k], tc.test[k])
				}
			}
			if sub.Scheme != p.Scheme || sub.Seed != p.Seed || sub.MinSamples != p.MinSamples || sub.Rule != p.Rule || *sub.Fractions != *p.Fractions {
				t.Errorf("header %+v does not carry the parent's", sub)
			}
			// A row keeps its label and its split.
			_, split := p.Columns()
			_, subSplit := sub.Columns()
			for j, i := range rows {
				if labels[i] != tc.subLabels[j] || split[i] != subSplit[j] {
					t.Errorf("subset row %d (row %d): label %d split %d, parent %d %d", j, i, tc.subLabels[j], subSplit[j], labels[i], split[i])
				}
			}
		})
	}
}

func TestSubsetErrors(t *testing.T) {
	p, labels := subsetFixture()
	other := slices.Clone(labels)
	other[0] = 1
	for _, tc := range []struct {
		name   string
		keep   []int
		splits []Split
		labels []int
	}{
		{"no clients", nil, []Split{Test}, labels},
		{"client out of range", []int{3}, []Split{Test}, labels},
		{"negative client", []int{-1}, []Split{Test}, labels},
		{"clients not increasing", []int{1, 0}, []Split{Test}, labels},
		{"repeated client", []int{1, 1}, []Split{Test}, labels},
		{"no splits", []int{0}, nil, labels},
		{"unknown split", []int{0}, []Split{3}, labels},
		{"other labels", []int{0}, []Split{Test}, other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := p.Subset(tc.keep, tc.splits, tc.labels); err == nil {
				t.Fatal("no error")
			} else if tc.name == "other labels" && !errors.Is(err, ErrMismatch) {
				t.Errorf("%v does not wrap ErrMismatch", err)
			}
		})
	}
}

func TestSampleClients(t *testing.T) {
	for _, tc := range []struct{ n, k int }{{1, 1}, {10, 3}, {510, 100}, {5, 5}} {
		got, err := SampleClients(tc.n, tc.k, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != tc.k || !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != tc.k || got[0] < 0 || got[tc.k-1] >= tc.n {
			t.Errorf("n=%d k=%d: %v is not k distinct sorted indices of [0, n)", tc.n, tc.k, got)
		}
		again, _ := SampleClients(tc.n, tc.k, 1)
		if !slices.Equal(got, again) {
			t.Errorf("n=%d k=%d: not deterministic", tc.n, tc.k)
		}
	}
	// Another seed draws other clients.
	a, _ := SampleClients(510, 100, 1)
	b, _ := SampleClients(510, 100, 2)
	if slices.Equal(a, b) {
		t.Error("seeds 1 and 2 draw the same clients")
	}
	// Uniform: over many seeds each of 10 clients is drawn about k/n of
	// the time (3 of 10: 0.3, binomial sd sqrt(0.3·0.7/4000) ≈ 0.0072).
	const seeds = 4000
	var count [10]int
	for s := range uint64(seeds) {
		got, _ := SampleClients(10, 3, s)
		for _, c := range got {
			count[c]++
		}
	}
	for c, n := range count {
		if f := float64(n) / seeds; f < 0.3-5*0.0072 || f > 0.3+5*0.0072 {
			t.Errorf("client %d drawn in %.3f of the seeds, want 0.3", c, f)
		}
	}
	for _, tc := range []struct{ n, k int }{{10, 0}, {10, 11}, {0, 1}, {3, -1}} {
		if _, err := SampleClients(tc.n, tc.k, 1); err == nil {
			t.Errorf("n=%d k=%d: no error", tc.n, tc.k)
		}
	}
}
