package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// fedLogitsFile writes an n-row, c-class logits file whose row i has label
// i mod c and logit 2 on class (i mod c) for 3 in 4 rows (else on the next
// class), with client i mod clients and split i mod 3 when clients > 0.
func fedLogitsFile(t *testing.T, n, c, clients int) (string, *logits.File) {
	t.Helper()
	f := &logits.File{Classes: c, Logits: make([]float32, n*c), Labels: make([]int32, n)}
	for i := range n {
		y := i % c
		f.Labels[i] = int32(y)
		top := y
		if i%4 == 3 {
			top = (y + 1) % c
		}
		for j := range c {
			f.Logits[i*c+j] = float32((j*7+i)%5) * 0.1
		}
		f.Logits[i*c+top] = 2
		if clients > 0 {
			f.Client = append(f.Client, int32(i%clients))
			f.Split = append(f.Split, uint8(i%3))
		}
	}
	path := filepath.Join(t.TempDir(), "logits.npz")
	if err := logits.Write(path, f); err != nil {
		t.Fatal(err)
	}
	return path, f
}

func labelsOf(f *logits.File) []int {
	out := make([]int, f.Len())
	for i, y := range f.Labels {
		out[i] = int(y)
	}
	return out
}

func TestPartitionCommand(t *testing.T) {
	in, f := fedLogitsFile(t, 600, 4, 5)
	dir := t.TempDir()
	for _, tc := range []struct {
		args    []string
		scheme  string
		clients int
	}{
		{[]string{"--clients", "8", "--beta", "0.5", "--seed", "3"}, federation.SchemeDirichlet, 8},
		{[]string{"--scheme", "iid", "--clients", "6"}, federation.SchemeIID, 6},
		{[]string{"--scheme", "natural"}, federation.SchemeNatural, 5},
		{[]string{"--scheme", "natural", "--rule", "leaf-sample"}, federation.SchemeNatural, 5},
	} {
		out := filepath.Join(dir, tc.scheme+".json")
		code, stdout, stderr := fedcalib(append([]string{"partition", "--data-or-logits", in, "--out", out}, tc.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, stderr)
		}
		if !strings.Contains(stdout, "wrote "+out) {
			t.Errorf("%v: stdout %q", tc.args, stdout)
		}
		p, err := federation.ReadPartition(out)
		if err != nil {
			t.Fatal(err)
		}
		if p.Scheme != tc.scheme || p.Len() != tc.clients {
			t.Errorf("%v: scheme %s with %d clients", tc.args, p.Scheme, p.Len())
		}
		if err := p.Check(labelsOf(f), 4); err != nil {
			t.Errorf("%v: %v", tc.args, err)
		}
	}
	// The same seed gives the same file.
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	for _, out := range []string{a, b} {
		if code, _, stderr := fedcalib("partition", "--data-or-logits", in, "--clients", "7", "--beta", "0.1", "--seed", "9", "--out", out); code != 0 {
			t.Fatal(stderr)
		}
	}
	ba, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if string(ba) != string(bb) {
		t.Error("two runs with seed 9 wrote different partitions")
	}
}

func TestPartitionCommandErrors(t *testing.T) {
	in, _ := fedLogitsFile(t, 100, 4, 0)
	out := filepath.Join(t.TempDir(), "p.json")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--clients", "5"}, "needs --beta"},
		{[]string{"--clients", "5", "--beta", "0"}, "--beta is 0: want a finite Dirichlet concentration β > 0"},
		{[]string{"--clients", "5", "--beta", "-1"}, "--beta is -1"},
		{[]string{"--clients", "5", "--beta", "NaN"}, "--beta is NaN"},
		{[]string{"--clients", "5", "--beta", "1", "--min-client-size", "0"}, "--min-client-size is 0: want at least 1 example per client"},
		{[]string{"--clients", "5", "--beta", "1", "--min-client-size", "1000000000"}, "cannot give 5 clients 1000000000 each"},
		{[]string{"--scheme", "natural", "--min-samples", "-1"}, "--min-samples is -1: want ≥ 0"},
		{[]string{"--clients", "0", "--beta", "1"}, "--clients is 0"},
		{[]string{"--scheme", "iid", "--clients", "101"}, "cannot give 101 clients"},
		{[]string{"--scheme", "natural"}, "has no client ids"},
		{[]string{"--scheme", "magic", "--clients", "2"}, `--scheme "magic"`},
		{[]string{"--scheme", "iid", "--clients", "2", "--fractions", "0.5,0.5"}, "three numbers"},
		{[]string{"--scheme", "iid", "--clients", "2", "--rule", "given"}, "only applies to --scheme natural"},
	} {
		code, _, stderr := fedcalib(append([]string{"partition", "--data-or-logits", in, "--out", out}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed partition wrote its output")
	}
	code, _, stderr := fedcalib("partition", "--data-or-logits", in, "--out", in, "--scheme", "iid", "--clients", "2")
	if code != 2 || !strings.Contains(stderr, "a partition file must end in .json") {
		t.Errorf("overwriting the input: exit %d, %q", code, stderr)
	}
}
