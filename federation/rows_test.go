package federation

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

// setRows is a RowSource over a calib.Set.
type setRows struct{ s *calib.Set }

func (r setRows) Len() int                 { return r.s.Len() }
func (r setRows) NumClasses() int          { return r.s.Classes }
func (r setRows) Label(i int) int          { return r.s.Labels[i] }
func (r setRows) Row(dst []float64, i int) { copy(dst, r.s.Row(i)) }

// TestRowPopulationEqualsSetPopulation checks that a RowPopulation hands
// out exactly the clients, and counts exactly the classes, of the
// SetPopulation of the same data and partition.
func TestRowPopulationEqualsSetPopulation(t *testing.T) {
	data := synthSet(600, 5, 3)
	client := make([]int32, data.Len())
	for i := range client {
		client[i] = int32(i*7%13) * 3 // 13 clients, ids 0, 3, …, 36
	}
	dir, err := Dirichlet(data.Labels, data.Classes, 9, 0.1, PartitionOptions{Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	iid, err := IID(data.Labels, data.Classes, 4, PartitionOptions{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	nat, err := Natural(data.Labels, data.Classes, client, nil, NaturalOptions{Seed: 6})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		part *Partition
	}{{"dirichlet", dir}, {"iid", iid}, {"natural", nat}} {
		for _, split := range []Split{Train, Calibration, Test} {
			t.Run(tc.name+"/"+split.String(), func(t *testing.T) {
				want, err := NewPopulation(data, tc.part, split)
				if err != nil {
					t.Fatal(err)
				}
				got, err := NewRowPopulation(setRows{data}, tc.part, split)
				if err != nil {
					t.Fatal(err)
				}
				if got.Len() != want.Len() || got.Classes() != want.Classes() {
					t.Fatalf("%d clients of %d classes, want %d of %d", got.Len(), got.Classes(), want.Len(), want.Classes())
				}
				rows := 0
				for k := range want.Len() {
					g, _ := got.Client(k)
					w, _ := want.Client(k)
					if !slices.Equal(g.Logits, w.Logits) || !slices.Equal(g.Labels, w.Labels) || g.Classes != w.Classes {
						t.Fatalf("client %d: %d rows differ from the SetPopulation's %d", k, g.Len(), w.Len())
					}
					rows += g.Len()
				}
				if rows != len(tc.part.Rows(split)) {
					t.Errorf("clients hold %d rows, the split has %d", rows, len(tc.part.Rows(split)))
				}
				if !slices.Equal(got.ClassCounts(), want.ClassCounts()) {
					t.Errorf("class counts %v, want %v", got.ClassCounts(), want.ClassCounts())
				}
			})
		}
	}
}

// TestRowPopulationFit checks that fits over a RowPopulation equal fits
// over the SetPopulation bit for bit, for a weighted binning protocol
// (which uses the class counts) and a private scaling one.
func TestRowPopulationFit(t *testing.T) {
	data := synthSet(3000, 4, 8)
	p, err := Dirichlet(data.Labels, data.Classes, 30, 0.5, PartitionOptions{Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	setPop, err := NewPopulation(data, p, Calibration)
	if err != nil {
		t.Fatal(err)
	}
	rowPop, err := NewRowPopulation(setRows{data}, p, Calibration)
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range []Spec{
		{Method: calib.MethodBBQ, Weighting: calib.WeightAll},
		{Method: calib.MethodTemp, Epsilon: 1},
	} {
		t.Run(spec.Method, func(t *testing.T) {
			fitter, err := spec.Fitter()
			if err != nil {
				t.Fatal(err)
			}
			r := Rounds{T: 3, SampleRate: 0.5, Seed: 10, Workers: 3}
			var out [2][]byte
			for i, pop := range []Population{setPop, rowPop} {
				res, err := fitter.Fit(context.Background(), pop, r)
				if err != nil {
					t.Fatal(err)
				}
				if out[i], err = json.Marshal(res.Calibrator); err != nil {
					t.Fatal(err)
				}
			}
			if string(out[0]) != string(out[1]) {
				t.Errorf("RowPopulation fit\n%s\nSetPopulation fit\n%s", out[1], out[0])
			}
		})
	}
}

// TestRowPopulationRefuses checks the errors of NewRowPopulation.
func TestRowPopulationRefuses(t *testing.T) {
	data := synthSet(200, 3, 1)
	p, err := Dirichlet(data.Labels, data.Classes, 4, 1, PartitionOptions{Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	other := &calib.Set{Logits: data.Logits, Labels: slices.Clone(data.Labels), Classes: data.Classes}
	other.Labels[0] = (other.Labels[0] + 1) % 3
	bad := &calib.Set{Logits: data.Logits, Labels: slices.Clone(data.Labels), Classes: data.Classes}
	bad.Labels[5] = 3
	short := data.Subset([]int{0, 1, 2})
	for _, tc := range []struct {
		name     string
		src      *calib.Set
		split    Split
		mismatch bool
	}{
		{"other labels", other, Calibration, true},
		{"fewer rows", short, Calibration, true},
		{"label out of range", bad, Calibration, false},
		{"unknown split", data, Test + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewRowPopulation(setRows{tc.src}, p, tc.split)
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, ErrMismatch) != tc.mismatch {
				t.Errorf("error %q: wraps ErrMismatch %t, want %t", err, !tc.mismatch, tc.mismatch)
			}
		})
	}
}

// TestRowFingerprint checks that the streaming fingerprint equals
// NewFingerprint's, also across its 512-label blocks.
func TestRowFingerprint(t *testing.T) {
	for _, n := range []int{0, 1, 511, 512, 513, 1500} {
		data := synthSet(n, 3, uint64(n))
		got, err := rowFingerprint(setRows{data})
		if err != nil {
			t.Fatal(err)
		}
		if want := NewFingerprint(data.Labels, 3); got != want {
			t.Errorf("n = %d: %+v, want %+v", n, got, want)
		}
	}
}
