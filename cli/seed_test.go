package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

// TestSeedFlags checks that every --seed is an unsigned 64-bit integer:
// the largest is accepted and recorded as given, a negative one refused
// with one line saying seeds are unsigned.
func TestSeedFlags(t *testing.T) {
	in, _ := fedLogitsFile(t, 200, 3, 4)
	dir := t.TempDir()
	out := filepath.Join(dir, "c.json")
	const max = "18446744073709551615"
	for _, args := range [][]string{
		{"calibrate", "--central", "--method", "fedcal", "--logits", in, "--out", out, "--seed", max},
		{"calibrate", "--method", "temp", "--logits", in, "--rounds", "2", "-q", "--out", out, "--seed", max},
	} {
		if code, _, stderr := fedcalib(args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		_, f, err := calib.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if f.Provenance.Seed != 1<<64-1 {
			t.Errorf("%v: provenance seed %d, want %s", args, f.Provenance.Seed, max)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"calibrate", "--central", "--method", "temp", "--logits", in, "--out", out, "--seed", "-1"}, `invalid argument "-1" for "--seed" flag: seeds are unsigned: want an integer from 0 to 18446744073709551615`},
		{[]string{"calibrate", "--method", "temp", "--logits", in, "--out", out, "--seed", "18446744073709551616"}, "want an integer from 0 to 18446744073709551615"},
		{[]string{"partition", "--data-or-logits", in, "--clients", "2", "--beta", "1", "--out", filepath.Join(dir, "p.json"), "--seed", "-3"}, "seeds are unsigned"},
		{[]string{"partition", "--data-or-logits", in, "--clients", "2", "--beta", "1", "--out", filepath.Join(dir, "p.json"), "--seed", "one"}, `invalid argument "one" for "--seed" flag`},
	} {
		code, _, stderr := fedcalib(tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line with %q", tc.args, code, stderr, tc.want)
		}
	}
}
