package integration

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fedcalib/fedcalib/calib"
)

// TestSecureAggregation runs serve --secure-aggregation and 8 join
// processes: without noise the calibrator equals fedcalib calibrate's
// (weighted FedBBQ bit for bit, FedTemp at b = 64 to 1e-12); with
// distributed noise the privacy record is a Skellam record the strict
// decoder verifies; bad secure-aggregation flags exit 2 with one line.
func TestSecureAggregation(t *testing.T) {
	bin := networkBin(t)
	const K = 8
	f := newFed(t, bin, K, 0)
	secure := []string{"--secure-aggregation", "--neighbours", "7", "--threshold", "4"}
	for _, tc := range []struct {
		name     string
		protocol []string
		bits     string
		exact    bool
	}{
		{"FedBBQ weighted", []string{"--method", "bbq", "--bins-exp", "4", "--weighting", "all"}, "32", true},
		{"FedTemp", []string{"--method", "temp", "--clip", "10"}, "64", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rounds := []string{"--rounds", "2", "--sample-rate", "1", "--seed", "3"}
			sim := filepath.Join(t.TempDir(), "sim.json")
			if out, code := run(t, bin, append(append([]string{"calibrate", "--logits", f.logits, "--partition", f.partition, "-q", "--out", sim}, tc.protocol...), rounds...)...); code != 0 {
				t.Fatalf("calibrate: %s", out)
			}
			net := filepath.Join(t.TempDir(), "net.json")
			sargs := append(append(append([]string{"--round-timeout", "30s", "--enrol-timeout", "60s", "--bits", tc.bits, "--out", net}, secure...), tc.protocol...), rounds...)
			got := serveAndJoin(t, f, K, sargs)
			if code := got; code != 0 {
				return
			}
			wantParams, _, _ := calibFile(t, sim)
			gotParams, _, rec := calibFile(t, net)
			if tc.exact && gotParams != wantParams {
				t.Errorf("secure parameters differ from calibrate's:\n%s\n%s", gotParams, wantParams)
			}
			if !tc.exact {
				if d := paramDiff(t, gotParams, wantParams); d > 1e-12 {
					t.Errorf("secure parameters differ from calibrate's by %g:\n%s\n%s", d, gotParams, wantParams)
				}
			}
			for _, r := range rec {
				if len(r.Dropouts) != 0 || !reflect.DeepEqual(r.Participants, r.Sampled) {
					t.Errorf("round %+v: want every sampled client aggregated", r)
				}
			}
		})
	}
	t.Run("distributed noise", func(t *testing.T) {
		net := filepath.Join(t.TempDir(), "net.json")
		sargs := append([]string{"--round-timeout", "30s", "--enrol-timeout", "60s", "--out", net, "--noise", "distributed",
			"--method", "temp", "--epsilon", "1", "--accountant", "rdp", "--rounds", "2", "--sample-rate", "1", "--min-clients", "6"}, secure...)
		if serveAndJoin(t, f, K, sargs) != 0 {
			return
		}
		if _, _, err := calib.ReadFile(net); err != nil {
			t.Fatalf("the strict decoder refuses the record: %v", err)
		}
		_, priv, _ := calibFile(t, net)
		sa := priv.SecureAggregation
		if sa == nil || sa.Noise != calib.NoiseDistributed || !reflect.DeepEqual(sa.Survivors, []int{K, K}) || priv.Epsilon > 1 {
			t.Errorf("privacy %+v, secure aggregation %+v: want distributed noise, %d survivors a round, ε ≤ 1", priv, sa, K)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		dir := t.TempDir()
		out := filepath.Join(dir, "c.json")
		for _, tc := range []struct {
			name string
			args []string
			want string
		}{
			{"threshold above neighbours", []string{"--method", "bin", "--secure-aggregation", "--neighbours", "4", "--threshold", "5"}, "threshold 5 is above the neighbour count 4"},
			{"one neighbour", []string{"--method", "bin", "--secure-aggregation", "--neighbours", "1"}, "1 neighbour"},
			{"odd neighbours", []string{"--method", "bin", "--secure-aggregation", "--neighbours", "3"}, "3 neighbours (odd)"},
			{"bits too small", []string{"--method", "bin", "--secure-aggregation", "--bits", "16"}, "need b ≥"},
			{"distributed under zcdp", []string{"--method", "temp", "--epsilon", "1", "--secure-aggregation", "--noise", "distributed"}, "--accountant rdp"},
			{"bits without secure aggregation", []string{"--method", "bin", "--bits", "40"}, "--secure-aggregation"},
			{"unbounded scaling", []string{"--method", "temp", "--secure-aggregation"}, "--clip"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				o, code := run(t, bin, append([]string{"serve", "--clients", f.allow, "--store", filepath.Join(dir, "store"), "--out", out}, tc.args...)...)
				if code != 2 || !strings.Contains(o, tc.want) || strings.Count(strings.TrimSpace(o), "\n") != 0 {
					t.Errorf("exit %d, output %q: want status 2 and one line naming %q", code, o, tc.want)
				}
				if _, err := os.Stat(out); err == nil {
					t.Errorf("%s written", out)
				}
			})
		}
	})
}

// serveAndJoin runs serve with sargs and K joins (each given the
// allow-list, join --clients), and returns serve's exit status (reporting
// failures).
func serveAndJoin(t *testing.T, f *fed, K int, sargs []string) int {
	t.Helper()
	srv, url, fp := f.serve(t, t.TempDir(), "127.0.0.1:0", sargs...)
	var joins []*proc
	for i := range K {
		// Each client holds the allow-list: it checks the identities
		// the coordinator announces against it.
		joins = append(joins, start(t, f.bin, "join", "--server", url, "--tls-fingerprint", fp, "--key", f.keys[i], "--logits", f.logits, "--partition", f.partition, "--clients", f.allow))
	}
	code := srv.wait(t, 90*time.Second)
	if code != 0 {
		t.Errorf("serve exited %d:\n%s", code, srv.output())
	}
	for i, j := range joins {
		if c := j.wait(t, 10*time.Second); c != 0 {
			t.Errorf("join %d exited %d:\n%s", i, c, j.output())
		}
	}
	return code
}

// paramDiff returns the largest relative difference of two JSON
// parameter records' numbers.
func paramDiff(t *testing.T, a, b string) float64 {
	t.Helper()
	var x, y map[string]any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	var walk func(p, q any)
	walk = func(p, q any) {
		switch v := p.(type) {
		case float64:
			w, ok := q.(float64)
			if !ok {
				worst = math.Inf(1)
				return
			}
			worst = max(worst, math.Abs(v-w)/math.Max(1, math.Abs(w)))
		case []any:
			u, ok := q.([]any)
			if !ok || len(u) != len(v) {
				worst = math.Inf(1)
				return
			}
			for i := range v {
				walk(v[i], u[i])
			}
		case map[string]any:
			u, ok := q.(map[string]any)
			if !ok || len(u) != len(v) {
				worst = math.Inf(1)
				return
			}
			for k := range v {
				walk(v[k], u[k])
			}
		}
	}
	walk(x, y)
	return worst
}
