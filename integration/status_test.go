package integration

import (
	"crypto/sha256"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// storeHash hashes every file under dir, names and contents.
func storeHash(t *testing.T, dir string) [32]byte {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		io.WriteString(h, p+"\x00")
		h.Write(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

type statusJSON struct {
	Federation    string  `json:"federation"`
	Round         int     `json:"round"`
	Rounds        int     `json:"rounds"`
	Clients       int     `json:"clients"`
	Enrolled      int     `json:"enrolled"`
	Dropouts      []int   `json:"dropouts"`
	Updates       int     `json:"updates"`
	DropoutsTotal int     `json:"dropouts_total"`
	Epsilon       float64 `json:"epsilon"`
	EpsilonBudget float64 `json:"epsilon_budget"`
	Checkpoint    string  `json:"checkpoint"`
}

func status(t *testing.T, bin, store string) statusJSON {
	t.Helper()
	out, code := run(t, bin, "status", "--store", store, "--json")
	if code != 0 {
		t.Fatalf("status exited %d: %s", code, out)
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return st
}

// TestStatusAndMetrics: a coordinator with --metrics and clients with
// --log-format json, in fresh processes. While it runs, /metrics parses
// with Prometheus's parser and "fedcalib status --store" reads the
// round; once it is killed, status reads the same store again and leaves
// every byte of it as it was.
func TestStatusAndMetrics(t *testing.T) {
	bin := networkBin(t)
	const K = 3
	f := newFed(t, bin, K, 1) // one allow-listed client never joins
	store := t.TempDir()
	out := filepath.Join(t.TempDir(), "c.json")
	srv := start(t, bin, "serve", "--clients", f.allow, "--store", store, "--listen", "127.0.0.1:0",
		"--method", "temp", "--epsilon", "2", "--rounds", "8", "--sample-rate", "1", "--seed", "9",
		"--min-clients", "3", "--round-timeout", "1s", "--enrol-timeout", "5s", "--metrics", "127.0.0.1:0", "--out", out)
	murl := srv.expect(t, regexp.MustCompile(`^serving metrics at (http://127\.0\.0\.1:\d+)/metrics$`), 30*time.Second)[1]
	m := srv.expect(t, serving, 30*time.Second)
	var joins []*proc
	for i := range K {
		joins = append(joins, start(t, bin, "join", "--server", m[1], "--tls-fingerprint", m[2], "--key", f.keys[i],
			"--logits", f.logits, "--partition", f.partition, "--log-format", "json"))
	}
	srv.expect(t, regexp.MustCompile(`^round 2/8`), 60*time.Second)

	st := status(t, bin, store)
	if st.Round < 2 || st.Rounds != 8 || st.Clients != K+1 || st.Enrolled != K || st.EpsilonBudget != 2 ||
		st.Epsilon <= 0 || st.Epsilon >= 2 || st.DropoutsTotal != st.Round || st.Updates != K*st.Round {
		t.Errorf("status while running: %+v", st)
	}
	resp, err := http.Get(murl + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got := fams["fedcalib_coordinator_clients_enrolled"].GetMetric()[0].GetGauge().GetValue(); got != K {
		t.Errorf("clients_enrolled = %v, want %d", got, K)
	}
	if got := fams["fedcalib_coordinator_rounds_closed_total"].GetMetric()[0].GetCounter().GetValue(); got < 2 {
		t.Errorf("rounds_closed_total = %v after round 2", got)
	}
	if resp, err := http.Get(murl + "/readyz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz while running: %v %v", resp, err)
	}

	if err := srv.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	srv.wait(t, 10*time.Second)
	for _, j := range joins {
		j.cmd.Process.Kill()
		j.wait(t, 10*time.Second)
	}
	before := storeHash(t, store)
	killed := status(t, bin, store)
	if killed.Round < st.Round || killed.Round >= 8 || killed.Epsilon < st.Epsilon || killed.Epsilon >= 2 {
		t.Errorf("status of the killed coordinator's store: %+v; while running: %+v", killed, st)
	}
	if again := status(t, bin, store); !sameStatus(again, killed) {
		t.Errorf("status read twice: %+v, then %+v", killed, again)
	}
	if storeHash(t, store) != before {
		t.Errorf("status changed the store")
	}
	text, code := run(t, bin, "status", "--store", store)
	if code != 0 || !strings.Contains(text, "round ") || !strings.Contains(text, "ε = ") {
		t.Errorf("status (text) exited %d:\n%s", code, text)
	}
	// Every line a client logged under --log-format json is a JSON object.
	for i, j := range joins {
		for _, l := range strings.Split(strings.TrimSpace(j.output()), "\n") {
			var rec map[string]any
			if l != "" && json.Unmarshal([]byte(l), &rec) != nil {
				t.Errorf("join %d --log-format json wrote %q", i, l)
			}
		}
	}
}

func sameStatus(a, b statusJSON) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
