package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// networkBin builds the fedcalib binary for the networked tests (which
// need no ONNX Runtime).
func networkBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fedcalib")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/fedcalib")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// proc is a fedcalib process whose output is collected.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	line chan string // stderr and stdout lines, as they come
	done chan struct{}
	err  error
}

func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), line: make(chan string, 1024), done: make(chan struct{})}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	read := make(chan struct{}) // the output is read to its end
	go func() {
		defer close(read)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.line <- sc.Text():
			default:
			}
		}
		r.Close()
	}()
	go func() { p.err = p.cmd.Wait(); <-read; close(p.done) }() // done: exited, every line read
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.done })
	return p
}

func (p *proc) output() string { p.mu.Lock(); defer p.mu.Unlock(); return p.out.String() }

// wait waits for the process to exit and returns its exit status.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("%s did not exit within %v:\n%s", p.cmd.Args[1], d, p.output())
	}
	return p.cmd.ProcessState.ExitCode()
}

// expect waits for a line matching re and returns its submatches.
func (p *proc) expect(t *testing.T, re *regexp.Regexp, d time.Duration) []string {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case l := <-p.line:
			if m := re.FindStringSubmatch(l); m != nil {
				return m
			}
		case <-timeout:
			t.Fatalf("no line matching %s within %v:\n%s", re, d, p.output())
		case <-p.done:
			t.Fatalf("%s exited before a line matching %s:\n%s", p.cmd.Args[1], re, p.output())
		}
	}
}

// fed is a networked federation on disk: logits, partition, keys.
type fed struct {
	bin, dir, logits, partition, allow string
	keys                               []string // key files
}

// newFed writes a K-client federation of synthetic 4-class logits with an
// allow-list of its keys plus absent extra keys that never join.
func newFed(t *testing.T, bin string, K, absent int) *fed {
	t.Helper()
	f := newFedData(t, bin, K)
	var pubs []string
	for i := range K + absent {
		kf := filepath.Join(f.dir, fmt.Sprintf("c%d.nkey", i))
		out, code := run(t, bin, "keys", "new", "--out", kf)
		if code != 0 {
			t.Fatalf("keys new: %s", out)
		}
		if fi, err := os.Stat(kf); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("key file %s: %v, mode %v", kf, err, fi.Mode())
		}
		f.keys = append(f.keys, kf)
		pubs = append(pubs, strings.TrimSpace(out))
	}
	if err := os.WriteFile(f.allow, []byte(strings.Join(pubs, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// newFedData writes the logits and a K-client partition of a federation,
// without keys.
func newFedData(t *testing.T, bin string, K int) *fed {
	t.Helper()
	dir := t.TempDir()
	f := &fed{bin: bin, dir: dir, logits: filepath.Join(dir, "logits.npz"), partition: filepath.Join(dir, "p.json"), allow: filepath.Join(dir, "allow.txt")}
	const n, c = 3000, 4
	rng := rand.New(rand.NewPCG(1, 2))
	lf := &logits.File{Logits: make([]float32, n*c), Labels: make([]int32, n), Classes: c}
	for i := range n {
		y := rng.IntN(c)
		lf.Labels[i] = int32(y)
		for j := range c {
			z := rng.NormFloat64()
			if j == y {
				z += 1.8
			}
			lf.Logits[i*c+j] = float32(3 * z)
		}
	}
	if err := logits.Write(f.logits, lf); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, bin, "partition", "--data-or-logits", f.logits, "--clients", fmt.Sprint(K), "--beta", "0.5", "--seed", "1", "--out", f.partition); code != 0 {
		t.Fatalf("partition: %s", out)
	}
	return f
}

var serving = regexp.MustCompile(`at (tls://127\.0\.0\.1:\d+) \(TLS certificate SHA-256 ([0-9a-f]{64})\)`)

// serve starts a coordinator and returns it with its URL and fingerprint.
func (f *fed) serve(t *testing.T, store, listen string, args ...string) (*proc, string, string) {
	t.Helper()
	args = append([]string{"serve", "--clients", f.allow, "--store", store, "--listen", listen}, args...)
	p := start(t, f.bin, args...)
	m := p.expect(t, serving, 30*time.Second)
	return p, m[1], m[2]
}

// join starts client i.
func (f *fed) join(t *testing.T, url, fp string, i int) *proc {
	t.Helper()
	return start(t, f.bin, "join", "--server", url, "--tls-fingerprint", fp, "--key", f.keys[i], "--logits", f.logits, "--partition", f.partition)
}

// calibFile reads a calibrator file's params, privacy and rounds.
func calibFile(t *testing.T, path string) (params string, priv *calib.Privacy, rounds []calib.RoundRecord) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Params  json.RawMessage     `json:"params"`
		Privacy *calib.Privacy      `json:"privacy"`
		Rounds  []calib.RoundRecord `json:"rounds"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, f.Params); err != nil {
		t.Fatal(err)
	}
	return buf.String(), f.Privacy, f.Rounds
}

// TestNetwork runs the networked federation's end-to-end cases in fresh
// processes, over one build of the binary.
func TestNetwork(t *testing.T) {
	bin := networkBin(t)
	t.Run("serve and join equal calibrate", func(t *testing.T) { testServeJoinEqualsCalibrate(t, bin) })
	t.Run("join refused", func(t *testing.T) { testJoinRefused(t, bin) })
	t.Run("rogue clients", func(t *testing.T) { testRogueClients(t, bin) })
	t.Run("serve bad input", func(t *testing.T) { testServeBadInput(t, bin) })
	t.Run("two serves on one store", func(t *testing.T) { testTwoServes(t, bin) })
	t.Run("serve gives up", func(t *testing.T) { testServeGivesUp(t, bin) })
	t.Run("coordinator killed and restarted", func(t *testing.T) { testServeKilled(t, bin) })
	t.Run("clients killed mid-run", func(t *testing.T) { testJoinsKilled(t, bin) })
}

// testServeJoinEqualsCalibrate: serve and 20 join processes over the
// embedded server (TLS, pinned development certificate) give the
// calibrator of fedcalib calibrate with the same logits, partition and
// seed, bit for bit: weighted DP-FedBBQ, DP-FedTemp and DP-FedScalBin (2T
// rounds, updates of two lengths).
func testServeJoinEqualsCalibrate(t *testing.T, bin string) {
	const K = 20
	f := newFed(t, bin, K, 0)
	for _, tc := range []struct {
		name     string
		protocol []string
		rounds   int // of the run, for --rounds 3
	}{
		{"FedBBQ weighted DP", []string{"--method", "bbq", "--bins-exp", "4", "--weighting", "all", "--epsilon", "2"}, 3},
		{"FedTemp DP", []string{"--method", "temp", "--epsilon", "2"}, 3},
		{"FedScalBin DP", []string{"--method", "scalbin", "--bins-exp", "6", "--epsilon", "2"}, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rounds := []string{"--rounds", "3", "--sample-rate", "0.5", "--seed", "7"}
			sim := filepath.Join(t.TempDir(), "sim.json")
			args := append(append([]string{"calibrate", "--logits", f.logits, "--partition", f.partition, "-q", "--out", sim}, tc.protocol...), rounds...)
			if out, code := run(t, bin, args...); code != 0 {
				t.Fatalf("calibrate: %s", out)
			}
			net := filepath.Join(t.TempDir(), "net.json")
			sargs := append(append([]string{"--min-clients", "5", "--round-timeout", "30s", "--enrol-timeout", "60s", "--out", net}, tc.protocol...), rounds...)
			srv, url, fp := f.serve(t, t.TempDir(), "127.0.0.1:0", sargs...)
			var joins []*proc
			for i := range K {
				joins = append(joins, f.join(t, url, fp, i))
			}
			if code := srv.wait(t, 90*time.Second); code != 0 {
				t.Fatalf("serve exited %d:\n%s", code, srv.output())
			}
			for i, j := range joins {
				if code := j.wait(t, 10*time.Second); code != 0 {
					t.Errorf("join %d exited %d:\n%s", i, code, j.output())
				}
			}
			wantParams, wantPriv, _ := calibFile(t, sim)
			gotParams, gotPriv, rec := calibFile(t, net)
			if gotParams != wantParams {
				t.Errorf("serve's parameters differ from calibrate's:\n%s\n%s", gotParams, wantParams)
			}
			if !reflect.DeepEqual(gotPriv, wantPriv) || gotPriv == nil {
				t.Errorf("privacy %+v, calibrate's %+v", gotPriv, wantPriv)
			}
			if len(rec) != tc.rounds {
				t.Fatalf("%d round records, want %d", len(rec), tc.rounds)
			}
			for _, r := range rec {
				if len(r.Dropouts) != 0 || !reflect.DeepEqual(r.Participants, r.Sampled) || r.Attempts != 1 {
					t.Errorf("round %+v: want every sampled client aggregated in one attempt", r)
				}
			}
			if _, _, err := calib.ReadFile(net); err != nil {
				t.Errorf("the calibrator file does not read back: %v", err)
			}
		})
	}
}

// testJoinRefused: a key not on the allow-list, an unknown federation and
// an unreachable server are each one clear line and exit status 2, or 4
// for what a retry may cure (no server answers).
func testJoinRefused(t *testing.T, bin string) {
	f := newFed(t, bin, 2, 0)
	out := filepath.Join(t.TempDir(), "c.json")
	srv, url, fp := f.serve(t, t.TempDir(), "127.0.0.1:0", "--method", "temp", "--rounds", "1", "--enrol-timeout", "60s", "--out", out)
	stranger := filepath.Join(t.TempDir(), "stranger.nkey")
	if o, code := run(t, bin, "keys", "new", "--out", stranger); code != 0 {
		t.Fatal(o)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
		code int
	}{
		{"key not on the allow-list", []string{"--server", url, "--tls-fingerprint", fp, "--key", stranger}, "allow-list", 2},
		{"unknown federation", []string{"--server", url, "--tls-fingerprint", fp, "--key", f.keys[0], "--federation", "other"}, "federation", 2},
		{"wrong certificate", []string{"--server", url, "--tls-fingerprint", strings.Repeat("ab", 32), "--key", f.keys[0]}, "fingerprint", 2},
		{"unreachable server", []string{"--server", "tls://127.0.0.1:1", "--tls-fingerprint", fp, "--key", f.keys[0]}, "no NATS server", 4},
		{"unreachable server, waited for", []string{"--server", "tls://127.0.0.1:1", "--tls-fingerprint", fp, "--key", f.keys[0], "--wait", "2s"}, "tried for 2s", 4},
		{"plaintext off loopback", []string{"--server", "nats://192.0.2.1:4222", "--key", f.keys[0]}, "--insecure", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, code := run(t, bin, append(append([]string{"join"}, tc.args...), "--logits", f.logits, "--enrol-timeout", "3s")...)
			if code != tc.code || !strings.Contains(o, tc.want) || strings.Count(strings.TrimSpace(o), "\n") != 0 {
				t.Errorf("exit %d, output %q: want status %d and one line naming %q", code, o, tc.code, tc.want)
			}
		})
	}
	srv.cmd.Process.Signal(syscall.SIGTERM)
	srv.wait(t, 20*time.Second)
	if _, err := os.Stat(out); err == nil {
		t.Errorf("serve stopped early but wrote %s", out)
	}
}

// testServeBadInput: a malformed allow-list and --min-clients above the
// clients are one line, exit status 2 and nothing written.
func testServeBadInput(t *testing.T, bin string) {
	dir := t.TempDir()
	f := newFed(t, bin, 2, 0)
	bad := filepath.Join(dir, "bad.txt")
	os.WriteFile(bad, []byte("UABC not a key\n"), 0o644)
	out := filepath.Join(dir, "c.json")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"malformed allow-list", []string{"--clients", bad}, "line 1"},
		{"min-clients above the clients", []string{"--clients", f.allow, "--min-clients", "3"}, "--min-clients 3"},
		{"plaintext off loopback", []string{"--clients", f.allow, "--plaintext", "--listen", "0.0.0.0:0"}, "--insecure"},
		{"unknown method", []string{"--clients", f.allow, "--method", "nope"}, "--method"},
		{"replicas 3 on one server", []string{"--clients", f.allow, "--replicas", "3", "--listen", "127.0.0.1:0"}, "3 replicas of the state bucket need a JetStream cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "--method", "temp", "--store", filepath.Join(dir, "store"), "--out", out}, tc.args...)
			start := time.Now()
			o, code := run(t, bin, args...)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("serve took %v to give up", took)
			}
			o = regexp.MustCompile(`(?m)^serving federation .*\n`).ReplaceAllString(o, "") // a server that started, then the error
			if code != 2 || !strings.Contains(o, tc.want) || strings.Count(strings.TrimSpace(o), "\n") != 0 {
				t.Errorf("exit %d, output %q: want status 2 and one line naming %q", code, o, tc.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%s written", out)
			}
		})
	}
}

// testTwoServes: a second serve on the --store of a running one stops at
// once with exit status 4 and one line naming the first (its process id);
// once the first is killed (SIGKILL), a serve on the store starts at once
// and resumes it.
func testTwoServes(t *testing.T, bin string) {
	f := newFed(t, bin, 1, 1) // one client that never joins: the first serve waits
	store := t.TempDir()
	args := []string{"--method", "temp", "--rounds", "1", "--enrol-timeout", "60s", "--out", filepath.Join(t.TempDir(), "c.json")}
	first, _, _ := f.serve(t, store, "127.0.0.1:0", args...)
	o, code := run(t, bin, append([]string{"serve", "--clients", f.allow, "--store", store, "--listen", "127.0.0.1:0"}, args...)...)
	want := fmt.Sprintf("held by fedcalib serve (pid %d on ", first.cmd.Process.Pid)
	if code != 4 || !strings.Contains(o, want) || strings.Count(strings.TrimSpace(o), "\n") != 0 {
		t.Errorf("second serve: exit %d, %q; want status 4 and one line with %q", code, o, want)
	}
	first.cmd.Process.Kill()
	first.wait(t, 10*time.Second)
	f.serve(t, store, "127.0.0.1:0", args...) // fails unless it serves at once
}

// testServeGivesUp: a serve that gives the run up (one of two clients
// enrolled, --min-clients 2) exits 4, and the client that enrolled learns
// why and exits 4 within 2 seconds, naming the reason.
func testServeGivesUp(t *testing.T, bin string) {
	f := newFed(t, bin, 1, 1)
	srv, url, fp := f.serve(t, t.TempDir(), "127.0.0.1:0", "--method", "temp", "--rounds", "1", "--min-clients", "2", "--enrol-timeout", "3s",
		"--out", filepath.Join(t.TempDir(), "c.json"))
	join := f.join(t, url, fp, 0)
	code := srv.wait(t, 30*time.Second)
	gaveUp := time.Now()
	if code != 4 || !strings.Contains(srv.output(), "too few clients") {
		t.Errorf("serve: exit %d:\n%s", code, srv.output())
	}
	code = join.wait(t, 10*time.Second)
	if took := time.Since(gaveUp); took > 2*time.Second {
		t.Errorf("join exited %v after serve gave up", took)
	}
	if code != 4 || !strings.Contains(join.output(), "the coordinator ended the run") || !strings.Contains(join.output(), "1 of 2 clients enrolled") {
		t.Errorf("join: exit %d:\n%s", code, join.output())
	}
}

// testServeKilled: serve killed with SIGKILL after round 2 and restarted
// on the same --store ends with the calibrator, privacy record and round
// records of an uninterrupted run. One allow-listed client never joins,
// so that each round lasts its --round-timeout.
func testServeKilled(t *testing.T, bin string) {
	const K = 5
	f := newFed(t, bin, K, 1)
	args := func(out string) []string {
		// Every present client must answer (--min-clients 5): a round that
		// closes while clients reconnect after the restart is announced
		// again instead of closing without them, however loaded the machine.
		return []string{"--method", "temp", "--epsilon", "2", "--rounds", "4", "--sample-rate", "1", "--seed", "9",
			"--min-clients", "5", "--max-attempts", "30", "--round-timeout", "1s", "--enrol-timeout", "5s", "--out", out}
	}
	runAll := func(srv *proc, url, fp string) []*proc {
		var joins []*proc
		for i := range K {
			joins = append(joins, f.join(t, url, fp, i))
		}
		return joins
	}
	finish := func(srv *proc, joins []*proc) {
		if code := srv.wait(t, 60*time.Second); code != 0 {
			t.Fatalf("serve exited %d:\n%s", code, srv.output())
		}
		for i, j := range joins {
			if code := j.wait(t, 20*time.Second); code != 0 {
				t.Errorf("join %d exited %d:\n%s", i, code, j.output())
			}
		}
	}
	ref := filepath.Join(t.TempDir(), "ref.json")
	srv, url, fp := f.serve(t, t.TempDir(), "127.0.0.1:0", args(ref)...)
	finish(srv, runAll(srv, url, fp))

	got := filepath.Join(t.TempDir(), "got.json")
	store := t.TempDir()
	srv, url, fp = f.serve(t, store, "127.0.0.1:0", args(got)...)
	joins := runAll(srv, url, fp)
	srv.expect(t, regexp.MustCompile(`^round 2/4`), 30*time.Second)
	if err := srv.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	srv.wait(t, 10*time.Second)
	if _, err := os.Stat(got); err == nil {
		t.Fatalf("the killed coordinator wrote %s", got)
	}
	listen := strings.TrimPrefix(url, "tls://")
	srv2, url2, fp2 := f.serve(t, store, listen, args(got)...)
	if url2 != url || fp2 != fp {
		t.Fatalf("restarted at %s (%s), was %s (%s)", url2, fp2, url, fp)
	}
	finish(srv2, joins)
	if !strings.Contains(srv2.output(), "resumed after round 2") {
		t.Errorf("the restarted coordinator did not resume after round 2:\n%s", srv2.output())
	}
	wantParams, wantPriv, wantRounds := calibFile(t, ref)
	gotParams, gotPriv, gotRounds := calibFile(t, got)
	if gotParams != wantParams || !reflect.DeepEqual(gotPriv, wantPriv) || gotPriv == nil {
		t.Errorf("after a restart: params %s privacy %+v; uninterrupted: %s %+v", gotParams, gotPriv, wantParams, wantPriv)
	}
	// A resumed round may need a second announcement while the clients
	// reconnect; who took part must not change.
	for i := range gotRounds {
		gotRounds[i].Attempts = 0
	}
	for i := range wantRounds {
		wantRounds[i].Attempts = 0
	}
	if !reflect.DeepEqual(gotRounds, wantRounds) {
		t.Errorf("after a restart: rounds %+v; uninterrupted: %+v", gotRounds, wantRounds)
	}
	for _, r := range gotRounds {
		if !reflect.DeepEqual(r.Dropouts, []int{K}) {
			t.Errorf("round %d: dropouts %v, want the absent client %d", r.Round, r.Dropouts, K)
		}
	}
}

// testJoinsKilled: 30% of the join processes killed with SIGKILL while
// round 1 is open, after answering it: the later rounds close at the
// deadline with the rest. One allow-listed client never joins, so that
// round 1 stays open until its deadline.
func testJoinsKilled(t *testing.T, bin string) {
	const K = 10
	f := newFed(t, bin, K, 1)
	out := filepath.Join(t.TempDir(), "c.json")
	srv, url, fp := f.serve(t, t.TempDir(), "127.0.0.1:0", "--method", "temp", "--epsilon", "2", "--rounds", "3", "--sample-rate", "1",
		"--min-clients", "5", "--round-timeout", "1500ms", "--enrol-timeout", "2s", "--out", out)
	var joins []*proc
	for i := range K {
		joins = append(joins, f.join(t, url, fp, i))
	}
	victims := []int{1, 4, 8}
	for _, i := range victims {
		joins[i].expect(t, regexp.MustCompile(`"sent update" round=1 `), 30*time.Second)
		joins[i].cmd.Process.Signal(syscall.SIGKILL)
	}
	if code := srv.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, srv.output())
	}
	_, _, rounds := calibFile(t, out)
	if len(rounds) != 3 {
		t.Fatalf("%d rounds recorded, want 3", len(rounds))
	}
	if r := rounds[0]; !reflect.DeepEqual(r.Dropouts, []int{K}) {
		t.Errorf("round 1: %+v, want only the absent client %d to drop out", r, K)
	}
	for _, r := range rounds[1:] {
		if want := append(slices.Clone(victims), K); !reflect.DeepEqual(r.Dropouts, want) || len(r.Participants) != K-len(victims) || r.Attempts != 1 {
			t.Errorf("round %d: %+v, want dropouts %v and the other %d aggregated in one attempt", r.Round, r, want, K-len(victims))
		}
	}
	for i, j := range joins {
		if !slices.Contains(victims, i) {
			if code := j.wait(t, 10*time.Second); code != 0 {
				t.Errorf("join %d exited %d:\n%s", i, code, j.output())
			}
		}
	}
}
