package federation

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// balancedLabels returns n labels cycling through classes classes.
func balancedLabels(n, classes int) []int {
	labels := make([]int, n)
	for i := range labels {
		labels[i] = i % classes
	}
	return labels
}

// assignedOnce checks, independently of Validate, that every example of
// an n-example data set appears exactly once in p.
func assignedOnce(t *testing.T, p *Partition, n int) {
	t.Helper()
	count := make([]int, n)
	for _, c := range p.Clients {
		for _, idx := range [][]int32{c.Train, c.Calibration, c.Test} {
			for _, i := range idx {
				count[i]++
			}
		}
	}
	for _, i := range p.Dropped {
		count[i]++
	}
	for i, c := range count {
		if c != 1 {
			t.Fatalf("example %d assigned %d times", i, c)
		}
	}
}

func TestDirichletAssignsEachExampleOnce(t *testing.T) {
	for _, tc := range []struct {
		n, classes, clients int
		beta                float64
	}{
		{1000, 10, 10, 0.1},
		{1000, 10, 10, 100},
		{997, 3, 7, 0.5},
		{500, 2, 1, 0.01},
		{5000, 10, 100, 1},
	} {
		labels := balancedLabels(tc.n, tc.classes)
		p, err := Dirichlet(labels, tc.classes, tc.clients, tc.beta, PartitionOptions{Seed: 7})
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		assignedOnce(t, p, tc.n)
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: Validate: %v", tc, err)
		}
		if err := p.Check(labels, tc.classes); err != nil {
			t.Errorf("%+v: Check: %v", tc, err)
		}
		if p.Len() != tc.clients {
			t.Errorf("%+v: %d clients", tc, p.Len())
		}
		for k, c := range p.Clients {
			if c.Len() < DefaultMinClientSize || len(c.Calibration) == 0 {
				t.Errorf("%+v: client %d has %d examples, %d calibration", tc, k, c.Len(), len(c.Calibration))
			}
			wantCal, wantTest := int(math.Ceil(0.1*float64(c.Len())-1e-9)), int(math.Round(0.1*float64(c.Len())))
			if wantCal+wantTest > c.Len() {
				wantTest = c.Len() - wantCal
			}
			if len(c.Calibration) != wantCal || len(c.Test) != wantTest {
				t.Errorf("%+v: client %d of %d examples has %d calibration, %d test; want %d, %d", tc, k, c.Len(), len(c.Calibration), len(c.Test), wantCal, wantTest)
			}
		}
	}
}

func TestIIDBalanced(t *testing.T) {
	labels := balancedLabels(1003, 10)
	p, err := IID(labels, 10, 10, PartitionOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	assignedOnce(t, p, len(labels))
	for k, c := range p.Clients {
		if c.Len() != 100 && c.Len() != 101 {
			t.Errorf("client %d has %d examples, want 100 or 101", k, c.Len())
		}
	}
}

// TestSkewDecreasesWithBeta measures the mean total-variation distance of
// client label distributions to the global one, averaged over seeds; it
// must fall as β grows, be large for β = 0.05 and small for β = 1000, and
// IID must be closer than any moderate β.
func TestSkewDecreasesWithBeta(t *testing.T) {
	const classes, clients, seeds = 10, 20, 8
	labels := balancedLabels(10000, classes)
	skew := func(beta float64) float64 {
		var sum float64
		for s := range uint64(seeds) {
			p, err := Dirichlet(labels, classes, clients, beta, PartitionOptions{Seed: s})
			if err != nil {
				t.Fatal(err)
			}
			sum += p.LabelSkew(labels)
		}
		return sum / seeds
	}
	betas := []float64{0.05, 0.1, 0.3, 1, 3, 10, 1000}
	prev := math.Inf(1)
	for _, b := range betas {
		s := skew(b)
		t.Logf("β = %-6v mean TV = %.4f", b, s)
		if !(s < prev) {
			t.Errorf("mean TV at β = %v is %.4f, not below %.4f at the previous β", b, s, prev)
		}
		prev = s
	}
	if s := skew(0.05); s < 0.6 {
		t.Errorf("β = 0.05: mean TV %.3f, want strong skew > 0.6", s)
	}
	if prev > 0.05 {
		t.Errorf("β = 1000: mean TV %.3f, want < 0.05", prev)
	}
	iid, err := IID(labels, classes, clients, PartitionOptions{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if s := iid.LabelSkew(labels); s > skew(10) {
		t.Errorf("IID mean TV %.4f exceeds β = 10's %.4f", s, skew(10))
	}
}

func TestLabelSkewByHand(t *testing.T) {
	// Global distribution over assigned examples: 3 of class 0, 1 of class 1
	// → (0.75, 0.25). Client 0 holds {0,0}: TV = ½(0.25+0.25) = 0.25.
	// Client 1 holds {0,1}: (0.5,0.5), TV = ½(0.25+0.25) = 0.25.
	// Example 4 is dropped and does not count.
	labels := []int{0, 0, 0, 1, 1}
	p := &Partition{
		Data: Fingerprint{Examples: 5, Classes: 2},
		Clients: []Client{
			{Calibration: []int32{0}, Test: []int32{1}},
			{Train: []int32{2}, Calibration: []int32{3}},
		},
		Dropped: []int32{4},
	}
	if got := p.LabelSkew(labels); math.Abs(got-0.25) > 1e-15 {
		t.Errorf("LabelSkew = %v, want 0.25", got)
	}
}

func TestPartitionReproducible(t *testing.T) {
	labels := balancedLabels(2000, 10)
	for name, make := range map[string]func(seed uint64) (*Partition, error){
		"dirichlet": func(s uint64) (*Partition, error) { return Dirichlet(labels, 10, 17, 0.3, PartitionOptions{Seed: s}) },
		"iid":       func(s uint64) (*Partition, error) { return IID(labels, 10, 17, PartitionOptions{Seed: s}) },
	} {
		a, err := make(42)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := make(42)
		c, _ := make(43)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: two partitions with seed 42 differ", name)
		}
		if reflect.DeepEqual(a, c) {
			t.Errorf("%s: seeds 42 and 43 give the same partition", name)
		}
	}
}

func TestFractionsCounts(t *testing.T) {
	f := DefaultFractions()
	for _, tc := range []struct{ n, cal, test int }{
		{1, 1, 0}, {4, 1, 0}, {5, 1, 1}, {10, 1, 1}, {30, 3, 3}, {605, 61, 61}, {600, 60, 60},
	} {
		cal, test := f.counts(tc.n)
		if cal != tc.cal || test != tc.test {
			t.Errorf("n = %d: calibration %d, test %d; want %d, %d", tc.n, cal, test, tc.cal, tc.test)
		}
	}
	half := Fractions{Calibration: 0.5, Test: 0.5}
	for _, tc := range []struct{ n, cal, test int }{{1, 1, 0}, {3, 2, 1}, {4, 2, 2}} {
		cal, test := half.counts(tc.n)
		if cal != tc.cal || test != tc.test {
			t.Errorf("50/50, n = %d: calibration %d, test %d; want %d, %d", tc.n, cal, test, tc.cal, tc.test)
		}
	}
}

func TestDrawDirichletMoments(t *testing.T) {
	// Dirichlet(β·1_K): E q_k = 1/K, Var q_k = (1/K)(1−1/K)/(Kβ+1).
	for _, beta := range []float64{0.05, 0.5, 2} {
		const k, draws = 4, 40000
		q := make([]float64, k)
		src := newPCG(1, 99, 0, 0)
		var sum, sumsq float64
		for range draws {
			drawDirichlet(q, beta, src)
			var tot float64
			for _, v := range q {
				if !(v >= 0 && v <= 1) {
					t.Fatalf("β = %v: q = %v", beta, q)
				}
				tot += v
			}
			if math.Abs(tot-1) > 1e-12 {
				t.Fatalf("β = %v: q sums to %v", beta, tot)
			}
			sum += q[0]
			sumsq += q[0] * q[0]
		}
		mean := sum / draws
		variance := sumsq/draws - mean*mean
		wantVar := (1.0 / k) * (1 - 1.0/k) / (k*beta + 1)
		if math.Abs(mean-1.0/k) > 0.01 {
			t.Errorf("β = %v: mean %v, want %v", beta, mean, 1.0/k)
		}
		if math.Abs(variance-wantVar) > 0.05*wantVar {
			t.Errorf("β = %v: variance %v, want %v", beta, variance, wantVar)
		}
	}
	// Far below Gamma's underflow: still a distribution, with one share near 1.
	q := make([]float64, 10)
	drawDirichlet(q, 1e-4, newPCG(3, 99, 0, 0))
	if m := max(q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9]); !(m > 0.99) {
		t.Errorf("β = 1e-4: largest share %v, want ≈ 1", m)
	}
}

func TestPartitionBadInput(t *testing.T) {
	labels := balancedLabels(100, 10)
	for _, tc := range []struct {
		name string
		run  func() error
		want string
	}{
		{"beta 0", func() error { _, err := Dirichlet(labels, 10, 5, 0, PartitionOptions{}); return err }, "β is 0"},
		{"beta negative", func() error { _, err := Dirichlet(labels, 10, 5, -1, PartitionOptions{}); return err }, "β is -1"},
		{"beta NaN", func() error { _, err := Dirichlet(labels, 10, 5, math.NaN(), PartitionOptions{}); return err }, "β is NaN"},
		{"beta Inf", func() error { _, err := Dirichlet(labels, 10, 5, math.Inf(1), PartitionOptions{}); return err }, "β is +Inf"},
		{"K 0", func() error { _, err := Dirichlet(labels, 10, 0, 1, PartitionOptions{}); return err }, "number of clients is 0"},
		{"K 0 iid", func() error { _, err := IID(labels, 10, 0, PartitionOptions{}); return err }, "number of clients is 0"},
		{"too many clients", func() error { _, err := IID(labels, 10, 101, PartitionOptions{}); return err }, "cannot give 101 clients"},
		{"min size", func() error { _, err := Dirichlet(labels, 10, 10, 1, PartitionOptions{MinClientSize: 11}); return err }, "cannot give 10 clients 11"},
		{"label", func() error { _, err := IID([]int{0, 1, 2}, 2, 1, PartitionOptions{}); return err }, "label of example 2 is 2"},
		{"fractions", func() error {
			_, err := IID(labels, 10, 1, PartitionOptions{Fractions: Fractions{Train: 0.5, Calibration: 0.1}})
			return err
		}, "sum to"},
		{"no calibration", func() error {
			_, err := IID(labels, 10, 1, PartitionOptions{Fractions: Fractions{Train: 0.5, Test: 0.5}})
			return err
		}, "no calibration"},
	} {
		err := tc.run()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}

func TestNatural(t *testing.T) {
	// User 5: 3 train, 7 test. User 2: 2 train, 2 test. User 9: 1 test.
	client := []int32{5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 2, 2, 2, 2, 9}
	split := []uint8{0, 2, 0, 2, 2, 2, 0, 2, 2, 2, 0, 0, 2, 2, 2}
	labels := make([]int, len(client))
	t.Run("leaf-sample", func(t *testing.T) {
		p, err := Natural(labels, 2, client, split, NaturalOptions{Seed: 1, Rule: RuleLEAFSample, MinSamples: 2})
		if err != nil {
			t.Fatal(err)
		}
		assignedOnce(t, p, len(labels))
		if p.Len() != 2 || p.Clients[0].ID != 2 || p.Clients[1].ID != 5 {
			t.Fatalf("clients %+v, want ids 2 and 5", p.Clients)
		}
		if !reflect.DeepEqual(p.Dropped, []int32{14}) {
			t.Errorf("dropped %v, want [14]", p.Dropped)
		}
		u5 := p.Clients[1]
		if !reflect.DeepEqual(u5.Train, []int32{0, 2, 6}) || len(u5.Calibration) != 4 || len(u5.Test) != 3 {
			t.Errorf("user 5: %+v; want train [0 2 6], 4 calibration, 3 test", u5)
		}
		u2 := p.Clients[0]
		if !reflect.DeepEqual(u2.Train, []int32{10, 11}) || len(u2.Calibration) != 1 || len(u2.Test) != 1 {
			t.Errorf("user 2: %+v", u2)
		}
		// The helper makes the same choice.
		col, err := leafSample(client, split, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range u5.Calibration {
			if col[i] != uint8(Calibration) {
				t.Errorf("leafSample: row %d is %d, Natural put it in calibration", i, col[i])
			}
		}
		if col[14] != uint8(Calibration) {
			t.Errorf("leafSample: user 9's only test row should become calibration")
		}
	})
	t.Run("given without calibration", func(t *testing.T) {
		_, err := Natural(labels, 2, client, split, NaturalOptions{})
		if err == nil || !strings.Contains(err.Error(), "client 2 has 4 examples and none in its calibration split") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("fractions", func(t *testing.T) {
		p, err := Natural(labels, 2, client, nil, NaturalOptions{Seed: 4})
		if err != nil {
			t.Fatal(err)
		}
		assignedOnce(t, p, len(labels))
		if p.Rule != RuleFractions || p.Len() != 3 {
			t.Errorf("rule %q, %d clients", p.Rule, p.Len())
		}
	})
	t.Run("min samples drops all", func(t *testing.T) {
		_, err := Natural(labels, 2, client, split, NaturalOptions{MinSamples: 100, Rule: RuleLEAFSample})
		if err == nil || !strings.Contains(err.Error(), "no client has at least 100") {
			t.Errorf("error %v", err)
		}
	})
}

func TestPartitionJSONRoundTrip(t *testing.T) {
	labels := balancedLabels(300, 3)
	client := make([]int32, 300)
	split := make([]uint8, 300)
	for i := range client {
		client[i] = int32(i % 7)
		split[i] = uint8(i % 3)
	}
	nat, err := Natural(labels, 3, client, split, NaturalOptions{Rule: RuleLEAFSample, MinSamples: 43})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := Dirichlet(labels, 3, 5, 0.2, PartitionOptions{Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Partition{nat, dir} {
		path := filepath.Join(t.TempDir(), "p.json")
		if err := WritePartition(path, p); err != nil {
			t.Fatal(err)
		}
		q, err := ReadPartition(path)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(p, q) {
			t.Errorf("%s partition changed in a JSON round trip", p.Scheme)
		}
	}
}

func TestPartitionCheck(t *testing.T) {
	labels := balancedLabels(100, 4)
	p, err := IID(labels, 4, 3, PartitionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := balancedLabels(100, 4)
	other[0], other[1] = other[1], other[0]
	for _, tc := range []struct {
		labels  []int
		classes int
		want    string
	}{
		{labels[:99], 4, "made for 100 examples, the data has 99"},
		{labels, 5, "made for 4 classes, the data has 5"},
		{other, 4, "different labels"},
	} {
		err := p.Check(tc.labels, tc.classes)
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check: %v, want ErrMismatch containing %q", err, tc.want)
		}
	}
}

func TestDecodePartitionErrors(t *testing.T) {
	labels := balancedLabels(6, 2)
	p, err := IID(labels, 2, 2, PartitionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := p.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.String()
	edit := func(f func(q *Partition)) string {
		q, err := DecodePartition(strings.NewReader(good))
		if err != nil {
			t.Fatal(err)
		}
		f(q)
		var b bytes.Buffer
		q.Encode(&b)
		return b.String()
	}
	for _, tc := range []struct{ name, in, want string }{
		{"version", strings.Replace(good, PartitionFormatV1, "fedcalib.partition/v9", 1), "unsupported partition format"},
		{"unknown field", strings.Replace(good, `"scheme"`, `"extra": 1, "scheme"`, 1), "unknown field"},
		{"truncated", good[:len(good)/2], "not a partition file"},
		{"duplicate", edit(func(q *Partition) { q.Clients[1].Train[0] = q.Clients[0].Calibration[0] }), "assigned twice"},
		{"missing", edit(func(q *Partition) { q.Clients[0].Train = q.Clients[0].Train[1:] }), "lists 5 examples, data.examples is 6"},
		{"range", edit(func(q *Partition) { q.Clients[0].Train[0] = 6 }), "outside [0, 6)"},
		{"no clients", edit(func(q *Partition) { q.Clients = nil }), "no clients"},
		{"scheme", edit(func(q *Partition) { q.Scheme = "magic" }), "scheme \"magic\""},
		{"beta", edit(func(q *Partition) { q.Scheme = SchemeDirichlet }), "needs β > 0"},
	} {
		_, err := DecodePartition(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}

func TestWritePartitionAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "missing-dir", "p.json")
	p, _ := IID(balancedLabels(10, 2), 2, 2, PartitionOptions{})
	if err := WritePartition(path, p); err == nil {
		t.Fatal("wrote into a missing directory")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("left %d files behind", len(entries))
	}
}

func FuzzDecodePartition(f *testing.F) {
	p, _ := Dirichlet(balancedLabels(40, 4), 4, 3, 0.5, PartitionOptions{Seed: 2})
	var buf bytes.Buffer
	p.Encode(&buf)
	f.Add(buf.Bytes())
	f.Add([]byte(`{"format":"fedcalib.partition/v1","clients":[{"train":[-1]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		q, err := DecodePartition(bytes.NewReader(data))
		if err != nil {
			return
		}
		// A partition that decodes is consistent: every example once.
		assignedOnce(t, q, q.Data.Examples)
		client, split := q.Columns()
		if len(client) != q.Data.Examples || len(split) != q.Data.Examples {
			t.Fatalf("Columns: %d, %d rows for %d examples", len(client), len(split), q.Data.Examples)
		}
	})
}
