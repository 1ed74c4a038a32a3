package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

func TestKeysNew(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.nkey")
	var out, errb bytes.Buffer
	if code := Main([]string{"keys", "new", "--out", path}, &out, &errb); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	pub := strings.TrimSpace(out.String())
	if !nkeys.IsValidPublicUserKey(pub) {
		t.Errorf("printed %q, not a user public key", pub)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v", err, fi.Mode())
	}
	out.Reset()
	errb.Reset()
	if code := Main([]string{"keys", "new", "--out", path}, &out, &errb); code != ExitUsage || !strings.Contains(errb.String(), "never overwritten") {
		t.Errorf("overwriting a key: exit %d, %q", code, errb.String())
	}
}

func TestServeJoinFlags(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "k.nkey")
	var out bytes.Buffer
	if code := Main([]string{"keys", "new", "--out", key}, &out, &out); code != ExitOK {
		t.Fatal(out.String())
	}
	allow := filepath.Join(dir, "allow.txt")
	os.WriteFile(allow, out.Bytes(), 0o644)
	c := filepath.Join(dir, "c.json")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--clients", allow, "--store", dir, "--out", c}, "needs --method"},
		{[]string{"serve", "--method", "temp", "--store", dir, "--out", c}, "needs --clients"},
		{[]string{"serve", "--method", "temp", "--clients", allow, "--out", c}, "needs --store"},
		{[]string{"serve", "--method", "temp", "--clients", allow, "--store", dir, "--out", c, "--weighting", "all"}, "--weighting applies to binning"},
		{[]string{"serve", "--method", "bbq", "--clients", allow, "--store", dir, "--out", c, "--delta", "1e-6"}, "needs --epsilon"},
		{[]string{"serve", "--method", "temp", "--clients", allow, "--store", dir, "--out", c, "--rounds", "0"}, "--rounds"},
		{[]string{"serve", "--method", "scalbin", "--clients", allow, "--store", dir, "--out", c, "--secure-aggregation"}, "secure aggregation of FedScalBin is not implemented"},
		{[]string{"serve", "--method", "temp", "--clients", allow, "--store", dir, "--out", allow + ".json", "--clients-per-round", "2"}, "--clients-per-round"},
		{[]string{"serve", "--method", "temp", "--clients", allow, "--store", dir, "--out", c, "--min-clients", "2"}, "--min-clients 2 is more than the 1 clients"},
		{[]string{"serve", "--method", "temp", "--clients", allow, "--store", dir, "--out", c, "--federation", "a.b"}, "--federation"},
		{[]string{"serve", "--method", "temp", "--clients", allow, "--store", dir, "--out", allow}, "--out"},
		{[]string{"serve", "--method", "temp", "--clients", allow, "--store", dir, "--out", c, "--sync", "bogus"}, `--sync "bogus": want periodic or always`},
		{[]string{"serve", "--method", "temp", "--clients", allow, "--nats", "nats://127.0.0.1:1", "--creds", key, "--out", c, "--sync", "always"}, "drop --listen, --store, --tls-cert, --plaintext and --sync"},
		{[]string{"join", "--key", key, "--logits", "x.npz"}, "needs --server"},
		{[]string{"join", "--server", "tls://127.0.0.1:1", "--logits", "x.npz"}, "needs --key"},
		{[]string{"join", "--server", "tls://127.0.0.1:1", "--key", key}, "needs its local data"},
		{[]string{"join", "--server", "tls://127.0.0.1:1", "--key", key, "--model", "m.onnx"}, "--model and --data go together"},
		{[]string{"join", "--server", "tls://127.0.0.1:1", "--key", allow, "--logits", "x.npz"}, "--key"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(tc.args, &stdout, &stderr)
		if code != ExitUsage || !strings.Contains(stderr.String(), tc.want) || strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 {
			t.Errorf("%v: exit %d, %q; want %d and one line with %q", tc.args, code, stderr.String(), ExitUsage, tc.want)
		}
		if _, err := os.Stat(c); err == nil {
			t.Fatalf("%v wrote %s", tc.args, c)
		}
	}
}
