package network

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
)

// The scale benchmark (docs/BENCHMARKS.md, "network") runs only when
// asked:
//
//	go test ./network -run '^TestScale$' -scale -v -timeout 30m
var (
	scale              = flag.Bool("scale", false, "run TestScale: networked FedBBQ against the simulation at scale")
	scaleClients       = flag.Int("scale.clients", 1000, "TestScale: clients, each a goroutine with its own connection")
	scaleRounds        = flag.Int("scale.rounds", 12, "TestScale: rounds T")
	scaleRate          = flag.Float64("scale.rate", 0.1, "TestScale: sample rate p")
	scaleRows          = flag.Int("scale.rows", 70, "TestScale: calibration rows per client (the paper's Table 4: 70)")
	scaleReps          = flag.Int("scale.reps", 3, "TestScale: repetitions")
	scaleStore         = flag.String("scale.store", "", "TestScale: folder of the coordinator's JetStream store (e.g. /dev/shm: no disk syncs); default a temporary folder")
	scaleProfile       = flag.String("scale.cpuprofile", "", "TestScale: write the coordinator process's CPU profile of rounds 2..T of the last repetition to this file")
	scaleClientProfile = flag.String("scale.clientprofile", "", "TestScale: write the client process's CPU profile of rounds 2..T of the last repetition to this file")
	scaleSparse        = flag.Bool("scale.sparse", false, "TestScale: the clients send sparse updates (Config.SparseUpdates, serve --sparse-updates)")
	scaleNoWatch       = flag.Bool("scale.nowatch", false, "TestScale: do not watch the updates (no phase times), to measure rounds without a copy of every update to a second connection")
	scalePlain         = flag.Bool("scale.plaintext", false, "TestScale: the server listens without TLS (loopback; serve --plaintext) and the clients connect in plaintext")
	scaleSync          = flag.Bool("scale.syncalways", false, "TestScale: the embedded server syncs every JetStream write to disk (ServerConfig.SyncAlways, serve --sync always)")
)

// scaleEnv names the environment variable that makes TestScaleCoordinator
// the coordinator process of TestScale; it holds a scaleJob.
const scaleEnv = "FEDCALIB_SCALE_COORDINATOR"

// scaleJob is what the coordinator process of TestScale runs.
type scaleJob struct {
	Store, Allow, Out, Report string
	Spec                      federation.Spec
	T                         int
	Rate                      float64
	Seed                      uint64
	SyncAlways                bool
	Sparse                    bool
	NoWatch                   bool // no second connection subscribed to the updates
	Plaintext                 bool // no TLS (loopback)
	// Profile, if not empty, is where the coordinator process writes
	// its CPU profile of rounds 2..T.
	Profile string
}

// scaleReport is what the coordinator process measured.
type scaleReport struct {
	RoundTimes  []time.Duration       // when each round closed (after its checkpoint), from the end of enrolment
	Announced   map[int]time.Duration // when the first invitation of round t was sent
	FirstUpdate map[int]time.Duration // when the first update of round t was published
	LastUpdate  map[int]time.Duration // when the last update of round t was published
	RTT         time.Duration         // median NATS ping round trip of a TCP (TLS) connection to the server, as a client's
	In, Out     int64                 // message bytes the server received from and sent to the clients
	Clients     int                   // client connections seen
	IdleHWM     int64                 // VmHWM (bytes) once the server and coordinator are up, before enrolment
	PeakHWM     int64                 // VmHWM (bytes) at the end
	Sampled     int                   // participants, summed over rounds
	Dropouts    int
	// Enrolment is the time from the coordinator's start to round 1's
	// first invitation: every client enrolled.
	Enrolment time.Duration
	// CPU is the coordinator process's CPU time (its embedded server and
	// the watching connection included) over rounds 2..T, and Accepted
	// the updates it accepted in those rounds.
	CPU      time.Duration
	Accepted int
}

// TestScale runs *scaleClients clients (goroutines of this process, each
// with its own TLS connection) and a coordinator with its embedded server
// (a second process, TestScaleCoordinator, so that its memory is its
// own) through *scaleRounds rounds of FedBBQ, and the in-process
// simulation on the same data, *scaleReps times, and prints the ratios.
func TestScale(t *testing.T) {
	if !*scale {
		t.Skip("the scale benchmark runs with -scale")
	}
	K, C := *scaleClients, 10
	// IID splits are 80/10/10: 10·rows examples per client give about
	// rows calibration rows.
	pop := population(t, 10**scaleRows*K, C, K)
	ks, pubs := keys(t, K)
	dir := t.TempDir()
	store := dir
	if *scaleStore != "" {
		var err error
		if store, err = os.MkdirTemp(*scaleStore, "fedcalib-scale"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(store) })
	}
	allow := filepath.Join(dir, "allow.txt")
	if err := WriteAllowList(allow, pubs); err != nil {
		t.Fatal(err)
	}
	rows := 0
	for k := range K {
		set, err := pop.Client(k)
		if err != nil {
			t.Fatal(err)
		}
		rows += len(set.Labels)
	}
	spec := federation.Spec{Method: "bbq", Mexp: calib.DefaultMexp}
	r := federation.Rounds{T: *scaleRounds, SampleRate: *scaleRate, Seed: 1}
	fmt.Printf("%d clients, %d classes, %d rows per client on average, %d rounds of FedBBQ (2^%d bins) at p = %g; store in %s (sync always: %t, sparse updates: %t); load %s\n",
		K, C, rows/K, r.T, spec.Mexp, r.SampleRate, store, *scaleSync, *scaleSparse, loadavg())
	fmt.Println("rep  sim/round  net/round  RTT      net/sim  (net−RTT)/sim  B/client/round up, down  coord VmHWM idle → peak  enrolment  coord CPU/accepted update")
	var phases []string
	for rep := 1; rep <= *scaleReps; rep++ {
		start := time.Now()
		sim := fit(t, spec, pop, r)
		simRound := time.Since(start) / time.Duration(r.T)

		job := scaleJob{
			Store: filepath.Join(store, fmt.Sprintf("store%d", rep)), Allow: allow,
			Out: filepath.Join(dir, fmt.Sprintf("net%d.json", rep)), Report: filepath.Join(dir, fmt.Sprintf("report%d.json", rep)),
			Spec: spec, T: r.T, Rate: r.SampleRate, Seed: r.Seed, SyncAlways: *scaleSync, Sparse: *scaleSparse, NoWatch: *scaleNoWatch, Plaintext: *scalePlain,
		}
		profile := ""
		if rep == *scaleReps {
			job.Profile, profile = *scaleProfile, *scaleClientProfile
		}
		rp := runScale(t, job, ks, pop, profile)
		c, _, err := calib.ReadFile(job.Out)
		if err != nil {
			t.Fatal(err)
		}
		if !samePredictions(sim.Calibrator, c, C) {
			t.Errorf("rep %d: the networked calibrator differs from the simulation's", rep)
		}
		if rp.Dropouts != 0 {
			t.Errorf("rep %d: %d dropouts", rep, rp.Dropouts)
		}
		// Rounds 2..T: round 1 starts when enrolment ends, which the
		// report does not time.
		netRound := (rp.RoundTimes[r.T-1] - rp.RoundTimes[0]) / time.Duration(r.T-1)
		// Phases of rounds 2..T as a second connection of the
		// coordinator's key sees them: from the previous round's close
		// to the first invitation (sampling, the broadcast), to the
		// first update and the last one (client steps, update
		// requests), to the round's close (take, aggregate, fit,
		// checkpoint).
		var opening, first, updates, closing time.Duration
		for round := 2; round <= r.T && !job.NoWatch; round++ {
			opening += rp.Announced[round] - rp.RoundTimes[round-2]
			first += rp.FirstUpdate[round] - rp.Announced[round]
			updates += rp.LastUpdate[round] - rp.FirstUpdate[round]
			closing += rp.RoundTimes[round-1] - rp.LastUpdate[round]
		}
		mean := func(d time.Duration) time.Duration { return (d / time.Duration(r.T-1)).Round(time.Microsecond) }
		if job.NoWatch {
			phases = append(phases, fmt.Sprintf("%-4d (updates not watched: -scale.nowatch)", rep))
		} else {
			phases = append(phases, fmt.Sprintf("%-4d closed → invited %v, → first update %v, → last update %v, → closed %v",
				rep, mean(opening), mean(first), mean(updates), mean(closing)))
		}
		perClient := func(b int64) int64 { return b / int64(rp.Clients*r.T) }
		perUpdate := time.Duration(0)
		if rp.Accepted > 0 {
			perUpdate = rp.CPU / time.Duration(rp.Accepted)
		}
		fmt.Printf("%-4d %-10v %-10v %-8v %-8.2f %-14.2f %d, %d  %.0f → %.0f MiB  %v  %v (%v over %d updates)\n", rep,
			simRound.Round(time.Microsecond), netRound.Round(time.Microsecond), rp.RTT.Round(time.Microsecond),
			float64(netRound)/float64(simRound), float64(netRound-rp.RTT)/float64(simRound),
			perClient(rp.In), perClient(rp.Out), float64(rp.IdleHWM)/(1<<20), float64(rp.PeakHWM)/(1<<20),
			rp.Enrolment.Round(time.Millisecond), perUpdate.Round(100*time.Nanosecond), rp.CPU.Round(time.Millisecond), rp.Accepted)
	}
	fmt.Println("rep  phases of a round (mean of rounds 2..T)")
	for _, p := range phases {
		fmt.Println(p)
	}
	fmt.Printf("load %s\n", loadavg())
}

// runScale runs the coordinator process of job and the clients ks over
// pop, and returns the coordinator's report. If profile is not empty,
// this process's CPU profile of rounds 2..T (the clients') is written
// to it.
func runScale(t *testing.T, job scaleJob, ks []Key, pop federation.Population, profile string) *scaleReport {
	t.Helper()
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-test.run=^TestScaleCoordinator$", "-test.timeout=20m"}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), scaleEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	var url, fp string
	for lines.Scan() {
		if f := strings.Fields(lines.Text()); len(f) == 3 && f[0] == "SERVING" {
			url, fp = f[1], strings.TrimPrefix(f[2], "plaintext")
			break
		}
	}
	if url == "" {
		cmd.Wait()
		t.Fatal("the coordinator process did not start its server")
	}
	go func() {
		// Drain the rest of the child's output, profiling this
		// process between its ROUND1 and RUNDONE lines.
		var f *os.File
		for lines.Scan() {
			switch line := lines.Text(); {
			case line == "ROUND1" && profile != "":
				var err error
				if f, err = os.Create(profile); err == nil {
					err = pprof.StartCPUProfile(f)
				}
				if err != nil {
					t.Errorf("client profile: %v", err)
				}
			case line == "RUNDONE" && f != nil:
				pprof.StopCPUProfile()
				f.Close()
				f = nil
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(ks))
	for i, k := range ks {
		wg.Go(func() {
			// A connection that times out while a thousand TLS
			// handshakes queue for two cores is tried again.
			for {
				_, errs[i] = Join(ctx, Dial{URL: url, Fingerprint: fp}, ClientConfig{
					Key: k, EnrolTimeout: 5 * time.Minute,
					Data: func(w Welcome) (*calib.Set, error) { return pop.Client(w.Client) },
				})
				if !errors.Is(errs[i], ErrUnreachable) || ctx.Err() != nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
		time.Sleep(time.Millisecond) // spread the TLS handshakes
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the coordinator process: %v", err)
	}
	wg.Wait()
	noErrors(t, errs)
	rb, err := os.ReadFile(job.Report)
	if err != nil {
		t.Fatal(err)
	}
	var rp scaleReport
	if err := json.Unmarshal(rb, &rp); err != nil {
		t.Fatal(err)
	}
	return &rp
}

// TestScaleCoordinator is the coordinator process of TestScale: an
// embedded server and a coordinator, measured. It does nothing unless
// TestScale started it.
func TestScaleCoordinator(t *testing.T) {
	env := os.Getenv(scaleEnv)
	if env == "" {
		t.Skip("the coordinator process of TestScale")
	}
	var job scaleJob
	if err := json.Unmarshal([]byte(env), &job); err != nil {
		t.Fatal(err)
	}
	pubs, err := ReadAllowList(job.Allow)
	if err != nil {
		t.Fatal(err)
	}
	admin := adminSeed(t)
	srv, err := NewServer(ServerConfig{Listen: "127.0.0.1:0", Store: job.Store, Clients: pubs, SyncAlways: job.SyncAlways, Plaintext: job.Plaintext, admin: publicOf(t, admin)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Dial().Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var rp scaleReport
	// The network round trip, over TCP and TLS as a client's: the
	// coordinator's own connection is in process.
	tcp := srv.Dial()
	tcp.inProcess = nil
	pc, err := tcp.Connect()
	if err != nil {
		t.Fatal(err)
	}
	rtts := make([]time.Duration, 21)
	for i := range rtts {
		if rtts[i], err = pc.RTT(); err != nil {
			t.Fatal(err)
		}
	}
	pc.Close()
	slices.Sort(rtts)
	rp.RTT = rtts[len(rtts)/2]
	rp.IdleHWM = vmHWM(t)
	// A second connection of the coordinator's key watches the
	// invitations and the updates, to time the phases of a round.
	wd := srv.Dial()
	wd.Seed, wd.inboxPrefix = admin, ""
	watch, err := wd.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	var (
		mu    sync.Mutex
		start time.Time
		cpu1  time.Duration // processCPU when round 1 closed
	)
	rp.Announced, rp.FirstUpdate, rp.LastUpdate = map[int]time.Duration{}, map[int]time.Duration{}, map[int]time.Duration{}
	if _, err := watch.Subscribe(subjInviteAll(DefaultFederation), func(m *nats.Msg) {
		var a Announcement
		if json.Unmarshal(m.Data, &a) == nil && !a.Done {
			mu.Lock()
			if _, ok := rp.Announced[a.Round]; !ok {
				rp.Announced[a.Round] = time.Since(start)
			}
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if !job.NoWatch {
		if _, err := watch.Subscribe(subjUpdateAll(DefaultFederation), func(m *nats.Msg) {
			if round, err := strconv.Atoi(m.Header.Get(hdrRound)); err == nil {
				mu.Lock()
				if _, ok := rp.FirstUpdate[round]; !ok {
					rp.FirstUpdate[round] = time.Since(start)
				}
				rp.LastUpdate[round] = time.Since(start)
				mu.Unlock()
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	coord, err := NewCoordinator(Config{
		Spec: job.Spec, Rounds: federation.Rounds{T: job.T, SampleRate: job.Rate, Seed: job.Seed},
		Clients: pubs, MinClients: 1, RoundTimeout: time.Minute, EnrolTimeout: 10 * time.Minute, SparseUpdates: job.Sparse,
		Progress: func(r RoundReport) {
			rp.RoundTimes = append(rp.RoundTimes, time.Since(start))
			switch {
			case r.Round == 1:
				cpu1 = processCPU()
			case r.Round == job.T:
				rp.CPU = processCPU() - cpu1
			}
			if r.Round > 1 {
				rp.Accepted += len(r.Sampled) - len(r.Dropouts)
			}
			if r.Round == 1 {
				fmt.Println("ROUND1")
				if job.Profile != "" {
					f, err := os.Create(job.Profile)
					if err == nil {
						err = pprof.StartCPUProfile(f)
					}
					if err != nil {
						t.Errorf("coordinator profile: %v", err)
					}
					t.Cleanup(func() { f.Close() })
				}
			}
			rp.Sampled += len(r.Sampled)
			rp.Dropouts += len(r.Dropouts)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	start = time.Now()
	mu.Unlock()
	fp := srv.Fingerprint()
	if fp == "" {
		fp = "plaintext"
	}
	fmt.Printf("SERVING %s %s\n", srv.URL(), fp)
	out, err := coord.Run(context.Background(), nc)
	if job.Profile != "" {
		pprof.StopCPUProfile()
	}
	fmt.Println("RUNDONE")
	if err != nil {
		t.Fatal(err)
	}
	rp.PeakHWM = vmHWM(t)
	mu.Lock()
	rp.Enrolment = rp.Announced[1]
	defer mu.Unlock()
	if err := WriteCalibrator(job.Out, out, calib.Provenance{Protocol: out.Result.Protocol, Clients: len(pubs)}); err != nil {
		t.Fatal(err)
	}
	// The clients leave at the end of the run; count every client
	// connection's bytes once they are closed.
	client := make(map[string]bool, len(pubs))
	for _, p := range pubs {
		client[p] = true
	}
	for wait := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		open, err := srv.ns.Connz(&server.ConnzOptions{State: server.ConnOpen})
		if err != nil {
			t.Fatal(err)
		}
		if open.NumConns <= 1 || time.Since(wait) > 30*time.Second { // only the coordinator left
			break
		}
	}
	cz, err := srv.ns.Connz(&server.ConnzOptions{State: server.ConnAll, Username: true, Limit: 2 * len(pubs)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cz.Conns {
		if client[c.AuthorizedUser] {
			rp.Clients++
			rp.In += c.InBytes
			rp.Out += c.OutBytes
		}
	}
	b, err := json.Marshal(&rp)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(job.Report, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// vmHWM is this process's peak resident set size, in bytes.
func vmHWM(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// loadavg is the first three fields of /proc/loadavg.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
