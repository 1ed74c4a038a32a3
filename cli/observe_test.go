package cli

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/network"
)

// TestObserveFlags: the monitoring flags of serve and join, and status's
// flags, refuse what they cannot do before anything starts.
func TestObserveFlags(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "k.nkey")
	var out bytes.Buffer
	if code := Main([]string{"keys", "new", "--out", key}, &out, &out); code != ExitOK {
		t.Fatal(out.String())
	}
	allow := filepath.Join(dir, "allow.txt")
	if err := os.WriteFile(allow, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	c := filepath.Join(dir, "c.json")
	serve := []string{"serve", "--method", "temp", "--clients", allow, "--store", dir, "--out", c}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(serve, "--log-format", "xml"), `--log-format "xml": want text or json`},
		{append(serve, "--metrics", busy.Addr().String()), "--metrics " + busy.Addr().String()},
		{[]string{"join", "--server", "nats://127.0.0.1:1", "--key", key, "--logits", c, "--log-format", "yaml"}, `--log-format "yaml"`},
		{[]string{"status"}, "status needs --store DIR"},
		{[]string{"status", "--store", dir, "--nats", "nats://127.0.0.1:1"}, "not both"},
		{[]string{"status", "--nats", "nats://127.0.0.1:1"}, "--nats needs --creds"},
		{[]string{"status", "--store", dir, "--creds", key}, "--creds goes with --nats"},
		{[]string{"status", "--store", dir, "--federation", "a.b"}, "--federation"},
		{[]string{"status", "--store", dir}, "no run of the federation"},
	} {
		code, _, stderr := fedcalib(tc.args...)
		if code == ExitOK || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want an error with %q", tc.args, code, stderr, tc.want)
		}
	}
}

// TestPrintStatus: status's lines for a state written by hand.
func TestPrintStatus(t *testing.T) {
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	st := &network.Status{
		Federation: "mnist", Method: "temp", Round: 3, Rounds: 8, Clients: 5, Enrolled: 4,
		Participants: []int{0, 1, 3}, Dropouts: []int{2}, Updates: 10, DropoutsTotal: 2,
		Epsilon: 1.25, EpsilonBudget: 2, Rho: 0.0625, Checkpoint: at,
	}
	head := `federation mnist: temp, round 3 of 8 closed
clients: 5 allow-listed, 4 enrolled
round 3: 3 participants [0 1 3], 1 dropouts [2]
all rounds: 10 updates aggregated, 2 dropouts
privacy: ε = 1.25 spent of 2 (ρ = 0.0625)
checkpoint: 2026-11-27T10:00:00Z (1m30s ago)
`
	for _, c := range []struct {
		lease *network.LeaseStatus
		want  string
	}{
		{nil, "lease: none\n"},
		{&network.LeaseStatus{Holder: "serve on a", Written: at, Expires: at.Add(15 * time.Second), Live: true}, "lease: held by serve on a, until 2026-11-27T10:00:15Z unless renewed\n"},
		{&network.LeaseStatus{Holder: "serve on a", Written: at, Expires: at.Add(15 * time.Second)}, "lease: expired at 2026-11-27T10:00:15Z, last held by serve on a\n"},
	} {
		st.Lease = c.lease
		var b bytes.Buffer
		if err := printStatus(&b, st, at.Add(90*time.Second)); err != nil {
			t.Fatal(err)
		}
		if b.String() != head+c.want {
			t.Errorf("got\n%s\nwant\n%s", b.String(), head+c.want)
		}
	}
}

// TestLogProgressKeys: serve's per-round record under --log-format json
// has the documented keys and values.
func TestLogProgressKeys(t *testing.T) {
	var b bytes.Buffer
	o := observeFlags{logFormat: logJSON}
	log := o.logger(&b, slog.LevelInfo)
	serveProgress(&b, log, true)(network.RoundReport{
		RoundRecord: calib.RoundRecord{Round: 2, Sampled: []int{0, 1, 2}, Participants: []int{0, 2}, Dropouts: []int{1}, Attempts: 1},
		Rounds:      5, Refused: map[int]string{1: "bad"}, Epsilon: 0.5,
	})
	var rec map[string]any
	if err := json.Unmarshal(b.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, b.String())
	}
	delete(rec, "time")
	want := map[string]any{"level": "INFO", "msg": "round closed", "round": 2.0, "rounds": 5.0, "sampled": 3.0,
		"aggregated": 2.0, "dropouts": 1.0, "refused": 1.0, "attempts": 1.0, "epsilon": 0.5}
	if !reflect.DeepEqual(rec, want) {
		t.Errorf("record %v, want %v", rec, want)
	}
}
