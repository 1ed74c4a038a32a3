package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/fedcalib/fedcalib/network"
)

// TestExitRetry: the failures a retry may cure exit 4, however deeply
// wrapped; the others of serve and join exit 2.
func TestExitRetry(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{network.ErrUnreachable, ExitRetry},
		{network.ErrTooFewClients, ExitRetry},
		{network.ErrAborted, ExitRetry},
		{network.ErrLeased, ExitRetry},
		{network.ErrLeaseLost, ExitRetry},
		{network.ErrLocked, ExitRetry},
		{nats.ErrConnectionClosed, ExitRetry},
		{nats.ErrNoServers, ExitRetry},
		{network.ErrNotAllowed, ExitUsage},
		{network.ErrFederation, ExitUsage},
		{network.ErrKey, ExitUsage},
		{network.ErrStore, ExitUsage},
		{network.ErrConfig, ExitUsage},
		{network.ErrAllowList, ExitUsage},
		{network.ErrInsecure, ExitUsage},
		{network.ErrTLS, ExitUsage},
		{errors.New("anything else"), ExitUsage},
	} {
		wrapped := fmt.Errorf("round 3: %w", fmt.Errorf("committing: %w", tc.err))
		if got := exitStatus(wrapped); got != tc.want {
			t.Errorf("exit status of %v = %d, want %d", tc.err, got, tc.want)
		}
	}
	if ExitRetry == ExitUsage || ExitRetry == ExitEnvironment || ExitRetry == ExitFailed {
		t.Errorf("ExitRetry %d is not distinct", ExitRetry)
	}
}

// TestStoreAdvice: a store mismatch says where the run lives and what to
// change: --store for the embedded server, --federation under --nats.
func TestStoreAdvice(t *testing.T) {
	mismatch := fmt.Errorf("%w: the store holds a run of federation \"F\" with other settings: rounds: stored 4, now 5", network.ErrStore)
	embedded := storeAdvice(mismatch, &serveFlags{store: "coord", federation: "F"}).Error()
	nats := storeAdvice(mismatch, &serveFlags{natsURL: "tls://n:4222", federation: "F"}).Error()
	if !strings.Contains(embedded, "another --store") || strings.Contains(embedded, "--federation") || !strings.Contains(embedded, "rounds: stored 4, now 5") {
		t.Errorf("embedded: %s", embedded)
	}
	if !strings.Contains(nats, "another --federation") || !strings.Contains(nats, "bucket fedcalib_F") || strings.Contains(nats, "--store") {
		t.Errorf("--nats: %s", nats)
	}
	if other := errors.New("x"); storeAdvice(other, &serveFlags{}) != other {
		t.Error("advice added to another error")
	}
}

// TestJoinChecksLocalInputsFirst: a missing logits file and a --client-id
// beyond the partition are refused before join connects (here, to a
// server that does not exist, which would otherwise be the error).
func TestJoinChecksLocalInputsFirst(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "k.nkey")
	if code, _, stderr := fedcalib("keys", "new", "--out", key); code != 0 {
		t.Fatal(stderr)
	}
	in, _ := fedLogitsFile(t, 600, 4, 0)
	part := filepath.Join(dir, "p.json")
	if code, _, stderr := fedcalib("partition", "--data-or-logits", in, "--clients", "5", "--beta", "1", "--out", part); code != 0 {
		t.Fatal(stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--logits", filepath.Join(dir, "missing.npz")}, "missing.npz"},
		{[]string{"--logits", in, "--partition", filepath.Join(dir, "missing.json")}, "missing.json"},
		{[]string{"--logits", in, "--partition", part, "--client-id", "5"}, "--client-id 5: the partition has 5 clients (0 to 4)"},
		{[]string{"--model", filepath.Join(dir, "missing.onnx"), "--data", "idx:x"}, "missing.onnx"},
	} {
		code, _, stderr := fedcalib(append([]string{"join", "--server", "nats://127.0.0.1:1", "--key", key}, tc.args...)...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "NATS server") {
			t.Errorf("%v: exit %d, %q; want %d naming %q before connecting", tc.args, code, stderr, ExitUsage, tc.want)
		}
	}
}

// TestServeInsecureWarns: serve --plaintext --insecure on 0.0.0.0 warns
// that updates cross the network in the clear and prints a URL with the
// machine's name, which other machines can use, not 127.0.0.1; with no
// client enrolled in time it exits 4 (a retry may cure it).
func TestServeInsecureWarns(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "k.nkey")
	code, pub, stderr := fedcalib("keys", "new", "--out", key)
	if code != 0 {
		t.Fatal(stderr)
	}
	allow := filepath.Join(dir, "allow.txt")
	if err := os.WriteFile(allow, []byte(pub), 0o644); err != nil {
		t.Fatal(err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Skip(err)
	}
	code, _, stderr = fedcalib("serve", "--method", "temp", "--clients", allow, "--store", filepath.Join(dir, "s"), "--out", filepath.Join(dir, "c.json"),
		"--listen", "0.0.0.0:0", "--plaintext", "--insecure", "--enrol-timeout", "300ms")
	if code != ExitRetry || !strings.Contains(stderr, "warning: serving plaintext on 0.0.0.0:0") || !strings.Contains(stderr, "at nats://"+host+":") || strings.Contains(stderr, "127.0.0.1") {
		t.Errorf("exit %d, %q; want status %d, a warning and a URL at %s", code, stderr, ExitRetry, host)
	}
	code, _, stderr = fedcalib("serve", "--method", "temp", "--clients", allow, "--store", filepath.Join(dir, "s2"), "--out", filepath.Join(dir, "c.json"),
		"--listen", "127.0.0.1:0", "--plaintext", "--enrol-timeout", "300ms")
	if code != ExitRetry || strings.Contains(stderr, "warning") || !strings.Contains(stderr, "at nats://127.0.0.1:") {
		t.Errorf("loopback: exit %d, %q; want status %d, no warning", code, stderr, ExitRetry)
	}
}
