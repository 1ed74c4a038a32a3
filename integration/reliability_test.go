package integration

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/flate"

	"github.com/fedcalib/fedcalib/infer/logits"
)

// Issue #26: no run loses a ledger entry or a result row, and no input
// can exhaust memory. Each case runs the binary in fresh processes.

// ledgerRuns returns the number of runs a ledger file records over all
// its datasets.
func ledgerRuns(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Datasets map[string]struct {
			Runs []json.RawMessage `json:"runs"`
		} `json:"datasets"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	n := 0
	for _, d := range f.Datasets {
		n += len(d.Runs)
	}
	return n
}

// lockFiles returns the *.lock files under dir.
func lockFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".lock") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// oneLine checks that a refusal printed one line starting "fedcalib:".
func oneLine(t *testing.T, out string) {
	t.Helper()
	if !strings.HasPrefix(out, "fedcalib: ") || strings.Count(out, "\n") != 1 {
		t.Errorf("want one line starting \"fedcalib: \", got:\n%s", out)
	}
}

func TestLedgerLinks(t *testing.T) {
	bin := fedcalibBin(t)
	dir := t.TempDir()
	logitsPath, part := filepath.Join(dir, "l.npz"), filepath.Join(dir, "p.json")
	writeBadLogits(t, logitsPath, 400, 10, false)
	if out, code := run(t, bin, "partition", "--data-or-logits", logitsPath, "--clients", "4", "--beta", "1", "--seed", "1", "--out", part); code != 0 {
		t.Fatalf("partition: %d %s", code, out)
	}
	fit := func(ledger, out string, extra ...string) *exec.Cmd {
		args := append([]string{"calibrate", "--method", "temp", "--logits", logitsPath, "--partition", part,
			"--rounds", "2", "--sample-rate", "1", "--epsilon", "0.5", "--ledger", ledger, "--out", out}, extra...)
		return exec.Command(bin, args...)
	}
	output := func(c *exec.Cmd) (string, int) {
		b, err := c.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(b), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(b), 0
	}

	t.Run("ledger is the output", func(t *testing.T) {
		d := t.TempDir()
		l := filepath.Join(d, "L.json")
		// Not there yet: the first run would make it, then write over it.
		out, code := output(fit(l, l))
		if code != 2 || !strings.Contains(out, "is an input") {
			t.Fatalf("new ledger as --out: exit %d: %s", code, out)
		}
		oneLine(t, out)
		if _, err := os.Stat(l); !os.IsNotExist(err) {
			t.Errorf("refused run left %s", l)
		}
		if out, code := output(fit(l, filepath.Join(d, "c.json"))); code != 0 {
			t.Fatalf("first run: %d %s", code, out)
		}
		before, _ := os.ReadFile(l)
		link := filepath.Join(d, "link.json")
		if err := os.Symlink(l, link); err != nil {
			t.Fatal(err)
		}
		for _, o := range []string{l, link} {
			out, code := output(fit(l, o))
			if code != 2 || !strings.Contains(out, "is an input") {
				t.Errorf("--ledger %s --out %s: exit %d: %s", l, o, code, out)
			}
			oneLine(t, out)
		}
		// The partition as the ledger would be read as a ledger and refused;
		// the check names it first.
		out, code = output(fit(part, filepath.Join(d, "c2.json")))
		if code != 2 || !strings.Contains(out, "--ledger") {
			t.Errorf("--ledger = --partition: exit %d: %s", code, out)
		}
		if after, _ := os.ReadFile(l); string(after) != string(before) {
			t.Error("a refused run changed the ledger")
		}
		if locks := lockFiles(t, d); len(locks) > 0 {
			t.Errorf("lock files left: %v", locks)
		}
	})

	t.Run("two paths, one through a symlink", func(t *testing.T) {
		d := t.TempDir()
		shared := filepath.Join(d, "shared")
		if err := os.Mkdir(shared, 0o755); err != nil {
			t.Fatal(err)
		}
		ledger := filepath.Join(shared, "ledger.json")
		link := filepath.Join(d, "link.json")
		if err := os.Symlink(filepath.Join("shared", "ledger.json"), link); err != nil {
			t.Fatal(err)
		}
		// A budget of 0.6 admits one run of ε 0.5, not two: the runs must
		// see each other's spend whichever path they came by.
		var wg sync.WaitGroup
		outs, codes := make([]string, 2), make([]int, 2)
		for i, l := range []string{link, ledger} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[i], codes[i] = output(fit(l, filepath.Join(d, "c"+string(rune('0'+i))+".json"), "--budget", "0.6"))
			}()
		}
		wg.Wait()
		ok := 0
		for i := range codes {
			switch codes[i] {
			case 0:
				ok++
			case 2:
				if !strings.Contains(outs[i], "budget") {
					t.Errorf("run %d refused for another reason: %s", i, outs[i])
				}
				oneLine(t, outs[i])
			default:
				t.Errorf("run %d: exit %d: %s", i, codes[i], outs[i])
			}
		}
		if ok != 1 {
			t.Errorf("%d runs passed a budget for one:\n%s\n%s", ok, outs[0], outs[1])
		}
		fi, err := os.Lstat(link)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("the link was replaced: %v %v", fi.Mode(), err)
		}
		if n := ledgerRuns(t, ledger); n != 1 {
			t.Errorf("the shared ledger records %d runs, want 1", n)
		}
		// Without a budget both record, in the one file.
		for _, l := range []string{link, ledger} {
			if out, code := output(fit(l, filepath.Join(d, "more.json"))); code != 0 {
				t.Fatalf("--ledger %s: %d %s", l, code, out)
			}
		}
		if n := ledgerRuns(t, ledger); n != 3 {
			t.Errorf("the shared ledger records %d runs, want 3", n)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("the link was replaced")
		}
		if locks := lockFiles(t, d); len(locks) > 0 {
			t.Errorf("lock files left: %v", locks)
		}
	})

	t.Run("hard link refused", func(t *testing.T) {
		d := t.TempDir()
		l := filepath.Join(d, "L.json")
		if out, code := output(fit(l, filepath.Join(d, "c.json"))); code != 0 {
			t.Fatalf("first run: %d %s", code, out)
		}
		hard := filepath.Join(d, "hard.json")
		if err := os.Link(l, hard); err != nil {
			t.Fatal(err)
		}
		out, code := output(fit(hard, filepath.Join(d, "c2.json")))
		if code != 2 || !strings.Contains(out, "hard links") {
			t.Errorf("hard-linked ledger: exit %d: %s", code, out)
		}
		oneLine(t, out)
		// A hard link to the ledger as the output is an input too.
		out, code = output(fit(l, hard))
		if code != 2 || !strings.Contains(out, "is an input") {
			t.Errorf("--out a hard link of the ledger: exit %d: %s", code, out)
		}
		if n := ledgerRuns(t, l); n != 1 {
			t.Errorf("ledger records %d runs, want 1", n)
		}
		if locks := lockFiles(t, d); len(locks) > 0 {
			t.Errorf("lock files left: %v", locks)
		}
	})
}

// csvRows returns the lines of a CSV file after its header.
func csvRows(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	return lines[1:]
}

// missing returns the lines of want not in got.
func missing(want, got []string) []string {
	have := map[string]bool{}
	for _, l := range got {
		have[l] = true
	}
	var out []string
	for _, l := range want {
		if !have[l] {
			out = append(out, l)
		}
	}
	return out
}

func TestExperimentKeepsRows(t *testing.T) {
	bin := fedcalibBin(t)
	dir := t.TempDir()
	writeBadLogits(t, filepath.Join(dir, "l.npz"), 2000, 10, false)
	config := func(name, grid string) string {
		p := filepath.Join(dir, name+".yaml")
		y := "datasets:\n  - {name: d, logits: l.npz, partition: {clients: 8, beta: 1, seed: 1}}\ngrid:\n" + grid
		if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Table-1-like and table-2-like grids, a one-cell grid, and a grid slow
	// enough to interrupt.
	a := config("a", "  method: [temp, bbq]\n  rounds: 2\n  seed: [1, 2, 3]\n")
	b := config("b", "  method: bin\n  rounds: 3\n  seed: [1, 2]\n")
	one := config("one", "  method: temp\n  rounds: 5\n  seed: 9\n")
	seeds := "1"
	for i := 2; i <= 100; i++ {
		seeds += fmt.Sprintf(", %d", i)
	}
	slow := config("slow", "  method: [temp, bbq]\n  rounds: 1000\n  seed: ["+seeds+"]\n")
	slowStart := config("slow-start", "  method: [temp, bbq]\n  rounds: 1000\n  seed: [1, 2]\n")
	out := filepath.Join(dir, "out")
	runs := filepath.Join(out, "runs.csv")
	exp := func(cfg string, extra ...string) {
		t.Helper()
		args := append([]string{"experiment", "--config", cfg, "--out", out, "--quiet", "--workers", "1"}, extra...)
		if o, code := run(t, bin, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, o)
		}
	}

	exp(a)
	rowsA := csvRows(t, runs)
	if len(rowsA) != 6 {
		t.Fatalf("a: %d rows, want 6", len(rowsA))
	}
	exp(b) // another configuration into the same directory
	if lost := missing(rowsA, csvRows(t, runs)); len(lost) > 0 {
		t.Fatalf("running b dropped %d of a's rows: %q", len(lost), lost)
	}
	if n := len(csvRows(t, runs)); n != 8 {
		t.Errorf("after b: %d rows, want 6 + 2", n)
	}
	before := csvRows(t, runs)
	exp(one) // a one-cell grid
	if lost := missing(before, csvRows(t, runs)); len(lost) > 0 {
		t.Fatalf("a one-cell grid dropped %d rows: %q", len(lost), lost)
	}
	before = csvRows(t, runs)
	exp(a, "--fresh") // --fresh recomputes a's cells to the same bytes, keeps the rest
	if after := csvRows(t, runs); len(missing(before, after)) > 0 || len(after) != len(before) {
		t.Fatalf("--fresh changed the rows: %d before, %d after, lost %q", len(before), len(after), missing(before, after))
	}

	// An interrupted --fresh run keeps every row it had not recomputed,
	// and every row outside its grid.
	start := time.Now()
	exp(slowStart)
	t.Logf("4 cells of the slow grid took %v", time.Since(start))
	before = csvRows(t, runs)
	cmd := exec.Command(bin, "experiment", "--config", slow, "--out", out, "--quiet", "--workers", "1", "--fresh")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupt once the run is under way: after its first checkpoint.
	fi0, _ := os.Stat(runs)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(runs); err == nil && !fi.ModTime().Equal(fi0.ModTime()) {
			break
		}
	}
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("interrupted --fresh: %v (the grid finished before the signal?) %s", err, stderr.String())
	}
	if want := "fedcalib: stopped (interrupt signal received): the runs finished are saved in --out's runs.csv"; !strings.HasPrefix(stderr.String(), want) {
		t.Errorf("stop message %q, want it to start %q", stderr.String(), want)
	}
	after := csvRows(t, runs)
	if lost := missing(before, after); len(lost) > 0 || len(after) >= len(before)+200 {
		t.Errorf("interrupted --fresh: %d rows before, %d after, lost %d", len(before), len(after), len(lost))
	}
	entries, _ := os.ReadDir(out)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
}

// writeBomb writes a logits file declaring rows × classes float32 logits
// deflated into as few bytes as DEFLATE allows (1/1032), as a zip bomb
// does: the header, then zeros standing for the compressed data.
func writeBomb(t *testing.T, path string, rows, classes int) {
	t.Helper()
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	zw := zip.NewWriter(fh)
	add := func(name, descr string, shape []int, elem int, deflate bool) {
		dims := make([]string, len(shape))
		for i, d := range shape {
			dims[i] = fmt.Sprint(d)
		}
		sh := strings.Join(dims, ", ")
		if len(shape) == 1 {
			sh += ","
		}
		dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, sh)
		pad := (64 - (10+len(dict)+1)%64) % 64
		hdr := []byte("\x93NUMPY\x01\x00")
		hdr = binary.LittleEndian.AppendUint16(hdr, uint16(len(dict)+pad+1))
		hdr = append(append(hdr, dict...), bytes.Repeat([]byte{' '}, pad)...)
		hdr = append(hdr, '\n')
		n := uint64(elem)
		for _, d := range shape {
			n *= uint64(d)
		}
		usize := uint64(len(hdr)) + n
		h := &zip.FileHeader{Name: name + ".npy", UncompressedSize64: usize}
		var raw []byte
		if deflate {
			var c bytes.Buffer
			fw, _ := flate.NewWriter(&c, flate.BestSpeed)
			fw.Write(hdr)
			fw.Flush()
			raw = append(c.Bytes(), make([]byte, usize/1032)...)
			h.Method = zip.Deflate
		} else {
			raw = append(hdr, make([]byte, n)...)
			h.Method = zip.Store
		}
		h.CompressedSize64 = uint64(len(raw))
		w, err := zw.CreateRaw(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(raw); err != nil {
			t.Fatal(err)
		}
	}
	add("logits", "<f4", []int{rows, classes}, 4, true)
	add("labels", "<i8", []int{rows}, 8, false)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
}

// runRSS runs the binary and returns its output, exit status and peak
// resident memory in bytes. The peak is getrusage's of the command, run
// by this test binary started afresh as a small helper (TestMain): Linux
// counts in a child's peak the memory of the process it was forked from
// when it shares its memory until exec, as Go's os/exec does, so a child
// of this large test process would report this process's peak.
func runRSS(t *testing.T, bin string, args ...string) (string, int, int64) {
	t.Helper()
	rssFile := filepath.Join(t.TempDir(), "rss")
	argv, _ := json.Marshal(append([]string{bin}, args...))
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), rssArgsEnv+"="+string(argv), rssOutEnv+"="+rssFile)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(rssFile)
	if err != nil {
		t.Fatalf("the helper recorded no peak: %v (%s)", err, out.String())
	}
	var kb int64
	if _, err := fmt.Sscan(string(b), &kb); err != nil {
		t.Fatal(err)
	}
	return out.String(), code, kb * 1024 // kilobytes on Linux
}

// The helper mode of the test binary: rssArgsEnv holds the command as a
// JSON array, rssOutEnv the file to write its peak RSS (KiB) to.
const (
	rssArgsEnv = "FEDCALIB_RSS_HELPER_ARGS"
	rssOutEnv  = "FEDCALIB_RSS_HELPER_OUT"
)

func TestMain(m *testing.M) {
	if argv := os.Getenv(rssArgsEnv); argv != "" {
		os.Exit(rssHelper(argv, os.Getenv(rssOutEnv)))
	}
	os.Exit(m.Run())
}

// rssHelper runs the command argv (JSON), passing its output through,
// writes its peak RSS to out and returns its exit status.
func rssHelper(argv, out string) int {
	var args []string
	if err := json.Unmarshal([]byte(argv), &args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 99
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	err := cmd.Run()
	if cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, err)
		return 99
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return 99
	}
	if err := os.WriteFile(out, []byte(fmt.Sprint(ru.Maxrss)), 0o644); err != nil {
		return 99
	}
	return cmd.ProcessState.ExitCode()
}

const maxRSS = 256 << 20

func TestBoundedReads(t *testing.T) {
	bin := fedcalibBin(t)
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	writeBomb(t, p("bomb.npz"), 100000, 100000) // 10^10 logits in 39 MB
	if fi, err := os.Stat(p("bomb.npz")); err != nil || fi.Size() > 40<<20 {
		t.Fatalf("bomb: %v %d bytes", err, fi.Size())
	}
	writeBadLogits(t, p("l.npz"), 400, 10, false)
	writeBadLogits(t, p("wide.npz"), 100, 50000, true) // 20 MB
	writeMNISTIDX(t, dir, 20)
	if out, code := run(t, bin, "partition", "--data-or-logits", p("l.npz"), "--clients", "4", "--beta", "1", "--seed", "1", "--out", p("p.json")); code != 0 {
		t.Fatalf("partition: %s", out)
	}
	if out, code := run(t, bin, "calibrate", "--central", "--method", "temp", "--logits", p("l.npz"), "--out", p("temp.json")); code != 0 {
		t.Fatalf("calibrate: %s", out)
	}
	fifo := p("fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	mnist := "mnist:" + filepath.Join(dir, "m-images-idx3-ubyte")
	for _, tc := range []struct {
		name string
		args []string
		want string // part of the one line
	}{
		{"eval bomb", []string{"eval", "--logits", p("bomb.npz")}, "above the memory budget"},
		{"calibrate bomb", []string{"calibrate", "--central", "--method", "temp", "--logits", p("bomb.npz"), "--out", p("o.json")}, "above the memory budget"},
		{"federated bomb", []string{"calibrate", "--method", "temp", "--logits", p("bomb.npz"), "--partition", p("p.json"), "--out", p("o.json")}, "above the memory budget"},
		{"partition bomb", []string{"partition", "--data-or-logits", p("bomb.npz"), "--clients", "4", "--beta", "1", "--out", p("o.json")}, "above the memory budget"},
		{"check bomb", []string{"check", "--logits", p("bomb.npz"), "--calibrator", p("temp.json")}, "above the memory budget"},
		{"infer /dev/zero", []string{"infer", "--model", "/dev/zero", "--data", mnist, "--out", p("o.npz")}, "not a regular file"},
		{"infer FIFO", []string{"infer", "--model", fifo, "--data", mnist, "--out", p("o.npz")}, "not a regular file"},
		{"inspect /dev/zero", []string{"inspect", "/dev/zero"}, "not a regular file"},
		{"eval --calibrator /dev/zero", []string{"eval", "--logits", p("l.npz"), "--calibrator", "/dev/zero"}, "not a regular file"},
		{"calibrate --logits /dev/zero", []string{"calibrate", "--central", "--method", "temp", "--logits", "/dev/zero", "--out", p("o.json")}, "not a regular file"},
		{"calibrate --partition FIFO", []string{"calibrate", "--method", "temp", "--logits", p("l.npz"), "--partition", fifo, "--out", p("o.json")}, "not a regular file"},
		{"experiment --config /dev/zero", []string{"experiment", "--config", "/dev/zero", "--out", p("exp")}, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			out, code, rss := runRSS(t, bin, tc.args...)
			if code != 2 || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, want 2 and %q: %s", code, tc.want, out)
			}
			oneLine(t, out)
			if rss > maxRSS {
				t.Errorf("peak RSS %d MB, want ≤ %d", rss>>20, maxRSS>>20)
			}
			t.Logf("peak RSS %.1f MB in %v", float64(rss)/(1<<20), time.Since(start).Round(time.Millisecond))
		})
	}
	// Memory follows the rows, not the class count: 100 rows of 50,000
	// classes.
	for _, args := range [][]string{
		{"calibrate", "--central", "--method", "temp", "--logits", p("wide.npz"), "--out", p("wide-temp.json")},
		{"eval", "--logits", p("wide.npz"), "--calibrator", p("wide-temp.json")},
	} {
		out, code, rss := runRSS(t, bin, args...)
		if code != 0 {
			t.Errorf("%v: exit %d: %s", args[0], code, out)
		}
		if rss > maxRSS {
			t.Errorf("%s on 100 rows × 50,000 classes: peak RSS %d MB, want ≤ %d", args[0], rss>>20, maxRSS>>20)
		}
		t.Logf("%s on 100 × 50,000: peak RSS %.1f MB", args[0], float64(rss)/(1<<20))
	}
	// --memory-budget lowers (or raises) the bound, for every command
	// that reads a logits file.
	for _, args := range [][]string{
		{"eval", "--logits", p("l.npz")},
		{"check", "--logits", p("l.npz"), "--calibrator", p("wide-temp.json")},
		{"report", "--logits", p("l.npz"), "--out", p("budget.html")},
		{"calibrate", "--central", "--method", "temp", "--logits", p("l.npz"), "--out", p("budget.json")},
	} {
		out, code := run(t, bin, append(args, "--memory-budget", "1KiB")...)
		if code != 2 || !strings.Contains(out, "above the memory budget of 1 KiB") {
			t.Errorf("%s --memory-budget 1KiB: exit %d: %s", args[0], code, out)
		}
	}
}

// TestInterruptedRead sends SIGTERM while eval reads a large file: the
// process exits 130 within 2 s.
func TestInterruptedRead(t *testing.T) {
	bin := fedcalibBin(t)
	dir := t.TempDir()
	big := filepath.Join(dir, "big.npz")
	writeBadLogits(t, big, 2_000_000, 10, true) // 80 MB of logits
	for _, args := range [][]string{
		{"eval", "--logits", big},
		{"calibrate", "--central", "--method", "dirichlet", "--logits", big, "--out", filepath.Join(dir, "o.json")},
	} {
		cmd := exec.Command(bin, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		sent := time.Now()
		cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		took := time.Since(sent)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Errorf("%s after SIGTERM: %v %s (finished before the signal?)", args[0], err, stderr.String())
		}
		if took > 2*time.Second {
			t.Errorf("%s took %v to stop after SIGTERM, want ≤ 2 s", args[0], took)
		}
		t.Logf("%s stopped %v after SIGTERM", args[0], took.Round(time.Millisecond))
	}
}

// TestSmallItems covers point 7 of issue #26, each in a fresh process.
func TestSmallItems(t *testing.T) {
	bin := fedcalibBin(t)
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	writeBadLogits(t, p("l.npz"), 400, 10, false)
	if out, code := run(t, bin, "calibrate", "--central", "--method", "temp", "--logits", p("l.npz"), "--out", p("temp.json")); code != 0 {
		t.Fatalf("calibrate: %s", out)
	}

	t.Run("experiment grid size cap", func(t *testing.T) {
		// 1 KB of configuration declaring 10^10 runs.
		list := "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
		y := "datasets:\n  - {name: d, logits: " + p("l.npz") + ", partition: {clients: 4, beta: 1, seed: 1}}\ngrid:\n  method: [temp, bbq, bin, vector, matrix, dirichlet, isotonic, fedcal, opvector, scalbin]\n" +
			"  rounds: " + list + "\n  seed: " + list + "\n  server_lr: " + list + "\n  clip: " + list + "\n  clip_pos: " + list + "\n  clip_neg: " + list + "\n  epsilon: " + list + "\n  delta: [1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12, 1e-13, 1e-14]\n  mexp: " + list + "\n"
		if len(y) > 1100 {
			t.Fatalf("config of %d bytes", len(y))
		}
		cfg := p("huge.yaml")
		os.WriteFile(cfg, []byte(y), 0o644)
		out, code, rss := runRSS(t, bin, "experiment", "--config", cfg, "--out", p("huge"))
		if code != 2 || !strings.Contains(out, "more than 100000") {
			t.Errorf("exit %d: %s", code, out)
		}
		oneLine(t, out)
		if rss > maxRSS {
			t.Errorf("peak RSS %d MB", rss>>20)
		}
	})

	t.Run("duplicate JSON keys", func(t *testing.T) {
		b, err := os.ReadFile(p("temp.json"))
		if err != nil {
			t.Fatal(err)
		}
		// The same key twice: "classes" again, last, with another value.
		dup := bytes.TrimSuffix(bytes.TrimSpace(b), []byte("}"))
		dup = append(dup, []byte(",\n  \"classes\": 3\n}\n")...)
		os.WriteFile(p("dup.json"), dup, 0o644)
		for _, args := range [][]string{
			{"eval", "--logits", p("l.npz"), "--calibrator", p("dup.json")},
			{"check", "--logits", p("l.npz"), "--calibrator", p("dup.json")},
		} {
			out, code := run(t, bin, args...)
			if code != 2 || !strings.Contains(out, `key "classes" appears twice`) {
				t.Errorf("%s: exit %d: %s", args[0], code, out)
			}
			oneLine(t, out)
		}
	})

	t.Run("legal long output names", func(t *testing.T) {
		for _, n := range []int{240, 250, 255} {
			name := strings.Repeat("c", n-len(".json")) + ".json"
			out, code := run(t, bin, "calibrate", "--central", "--method", "temp", "--logits", p("l.npz"), "--out", p(name))
			if code != 0 {
				t.Errorf("%d-byte --out: exit %d: %s", n, code, out)
			}
			if _, err := os.Stat(p(name)); err != nil {
				t.Errorf("%d-byte --out: %v", n, err)
			}
		}
	})

	t.Run("setup tarball entry size", func(t *testing.T) {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(zw)
		tw.WriteHeader(&tar.Header{Name: "package/bin/napi-v6/linux/x64/libonnxruntime.so.1", Mode: 0o755, Size: 1 << 40, Typeflag: tar.TypeReg})
		tw.Write(make([]byte, 1<<20))
		zw.Close()
		tgz := p("huge.tgz")
		os.WriteFile(tgz, buf.Bytes(), 0o644)
		cmd := exec.Command(bin, "setup", "--tarball", tgz)
		cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+p("cache"), "HOME="+p("home"))
		b, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(b), "declares 1099511627776 bytes") {
			t.Errorf("setup of a 1 TiB entry: %v: %s", err, b)
		}
		if left, _ := filepath.Glob(filepath.Join(p("cache"), "fedcalib", "onnxruntime", "*", "*")); len(left) > 0 {
			t.Errorf("setup left %v", left)
		}
	})

	t.Run("export --out inside --test-vectors", func(t *testing.T) {
		model, err := filepath.Abs("../models/mnist-tiny/model.onnx")
		if err != nil {
			t.Fatal(err)
		}
		vec := p("vectors")
		out, code := run(t, bin, "export", "--model", model, "--calibrator", p("temp.json"),
			"--out", filepath.Join(vec, "model.onnx"), "--test-vectors", vec)
		if code != 2 || !strings.Contains(out, "is inside --test-vectors") {
			t.Errorf("exit %d: %s", code, out)
		}
		oneLine(t, out)
		if _, err := os.Stat(vec); !os.IsNotExist(err) {
			t.Errorf("the refused export wrote %s", vec)
		}
	})

	t.Run("0-row files", func(t *testing.T) {
		f := &logits.File{Classes: 10, Labels: []int32{}, Logits: []float32{}}
		if err := logits.Write(p("empty-rows.npz"), f); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"eval", "--logits", p("empty-rows.npz")},
			{"calibrate", "--central", "--method", "temp", "--logits", p("empty-rows.npz"), "--out", p("o.json")},
			{"check", "--logits", p("empty-rows.npz"), "--calibrator", p("temp.json")},
		} {
			out, code := run(t, bin, args...)
			if code != 2 || !strings.Contains(out, "holds no rows") || strings.Contains(out, "--split") {
				t.Errorf("%s of a 0-row file: exit %d: %s", args[0], code, out)
			}
			oneLine(t, out)
		}
	})
}
