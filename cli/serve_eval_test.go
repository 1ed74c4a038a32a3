package cli

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServeEvaluate runs serve --evaluate with three joins over loopback,
// in process, for bbq and scalbin, and checks that its federated test metrics equal those of
// eval --federated (and so of the pooled test rows) for the calibrator it
// wrote.
func TestServeEvaluate(t *testing.T) {
	if testing.Short() {
		t.Skip("a networked run")
	}
	const K = 3
	in, _ := fedLogitsFile(t, 600, 4, 0)
	dir := t.TempDir()
	part := filepath.Join(dir, "p.json")
	if code, _, stderr := fedcalib("partition", "--data-or-logits", in, "--clients", fmt.Sprint(K), "--beta", "1", "--out", part); code != 0 {
		t.Fatal(stderr)
	}
	var allow []string
	for k := range K {
		code, out, stderr := fedcalib("keys", "new", "--out", filepath.Join(dir, fmt.Sprintf("c%d.nkey", k)))
		if code != 0 {
			t.Fatal(stderr)
		}
		allow = append(allow, strings.TrimSpace(out))
	}
	allowPath := filepath.Join(dir, "allow.txt")
	if err := os.WriteFile(allowPath, []byte(strings.Join(allow, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// scalbin runs 2T rounds: the evaluation round is the one after them.
	for _, tc := range []struct{ method, joined string }{
		{"bbq", "sent updates in 2 of 2 rounds"},
		{"scalbin", "sent updates in 4 of 4 rounds"},
	} {
		t.Run(tc.method, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			l.Close()
			cal, evalOut := filepath.Join(dir, tc.method+".json"), filepath.Join(dir, tc.method+"-eval.json")
			var code int
			var out, stderr string
			served := make(chan struct{})
			go func() {
				defer close(served)
				code, out, stderr = fedcalib("serve", "--method", tc.method, "--rounds", "2", "--clients", allowPath, "--listen", addr, "--plaintext",
					"--store", filepath.Join(dir, tc.method), "--out", cal, "--seed", "3", "--evaluate", "--eval-out", evalOut,
					"--round-timeout", "10s", "--enrol-timeout", "20s")
			}()
			// The joins start once the embedded server listens.
			for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
				if c, err := net.Dial("tcp", addr); err == nil {
					c.Close()
					break
				}
				if time.Since(start) > 20*time.Second {
					<-served
					t.Fatalf("serve did not listen: exit %d: %s%s", code, out, stderr)
				}
			}
			var wg sync.WaitGroup
			joins := make([]string, K)
			for k := range K {
				wg.Go(func() {
					code, out, stderr := fedcalib("join", "--server", "nats://"+addr, "--key", filepath.Join(dir, fmt.Sprintf("c%d.nkey", k)),
						"--logits", in, "--partition", part, "--enrol-timeout", "20s", "-q")
					joins[k] = fmt.Sprintf("exit %d: %s%s", code, out, stderr)
				})
			}
			wg.Wait()
			<-served
			if code != ExitOK {
				t.Fatalf("serve: exit %d: %s%s\njoins: %q", code, out, stderr, joins)
			}
			for k, j := range joins {
				if !strings.HasPrefix(j, "exit 0") || !strings.Contains(j, tc.joined+", and its test statistics in the evaluation round") {
					t.Errorf("join %d: %s", k, j)
				}
			}
			if !strings.Contains(out, "federated test metrics (3 of 3 clients") || !strings.Contains(stderr, "evaluation round: 3 of 3 clients sent their test statistics") {
				t.Errorf("serve's report:\n%s%s", out, stderr)
			}
			b, err := os.ReadFile(evalOut)
			if err != nil {
				t.Fatal(err)
			}
			code, want, errs := fedcalib("eval", "--logits", in, "--partition", part, "--calibrator", cal, "--federated", "--json")
			if code != ExitOK {
				t.Fatalf("eval: exit %d: %s", code, errs)
			}
			got, w := decodeReport(t, string(b)), decodeReport(t, want)
			for _, key := range []string{"n", "classes", "accuracy", "cwece", "ece", "nll", "brier", "bins", "clients", "method", "top_label"} {
				if fmt.Sprint(got[key]) != fmt.Sprint(w[key]) {
					t.Errorf("%s: serve --evaluate %v, eval --federated %v", key, got[key], w[key])
				}
			}

		})
	}
}

func TestServeEvaluateFlags(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "c.nkey")
	code, pub, stderr := fedcalib("keys", "new", "--out", key)
	if code != 0 {
		t.Fatal(stderr)
	}
	allow := filepath.Join(dir, "allow.txt")
	if err := os.WriteFile(allow, []byte(pub), 0o600); err != nil {
		t.Fatal(err)
	}
	c := filepath.Join(dir, "c.json")
	base := []string{"serve", "--method", "bbq", "--clients", allow, "--store", dir, "--out", c}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--eval-epsilon", "1"}, "--eval-epsilon sets up the evaluation round: add --evaluate"},
		{[]string{"--eval-out", "e.json"}, "--eval-out sets up the evaluation round"},
		{[]string{"--evaluate", "--eval-clip", "3"}, "need --eval-epsilon"},
		{[]string{"--evaluate", "--eval-epsilon", "0"}, "--eval-epsilon is 0"},
		{[]string{"--evaluate", "--eval-epsilon", "1", "--eval-delta", "2"}, "--eval-delta is 2"},
		{[]string{"--evaluate", "--eval-bins", "0"}, "--eval-bins is 0"},
		{[]string{"--evaluate", "--eval-out", c}, "--eval-out"},
		{[]string{"--evaluate", "--eval-out", filepath.Join(dir, "e.txt")}, "must end in .json"},
		{[]string{"--evaluate", "--secure-aggregation"}, "not implemented"},
	} {
		code, _, stderr := fedcalib(append(base, tc.args...)...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
