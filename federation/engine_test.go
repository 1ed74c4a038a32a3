package federation

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
)

// sumProtocol is a test protocol whose result depends on the order of
// aggregation and on each client's random stream: each client draws a
// value from its stream, the server forms an order-sensitive running
// combination.
type sumProtocol struct {
	failAt  int // client that fails, -1 for none
	acc     float64
	lastK   int
	folds   int
	ended   []int // participants per EndRound
	ordered bool
}

func (p *sumProtocol) Local(t, k int, rng *rand.Rand) (float64, error) {
	if k == p.failAt {
		return 0, errors.New("boom")
	}
	time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond) // shuffle completion order
	return rng.NormFloat64() * math.Exp(float64(k%7)), nil
}

func (p *sumProtocol) Aggregate(t, k int, u float64) error {
	if k <= p.lastK {
		p.ordered = false
	}
	p.lastK = k
	p.acc = p.acc*1.0000001 + u // not associative
	p.folds++
	return nil
}

func (p *sumProtocol) EndRound(t, participants int) error {
	p.lastK = -1
	p.ended = append(p.ended, participants)
	return nil
}

func (p *sumProtocol) Traffic() (int, int) { return 16, 8 }

func newSum() *sumProtocol { return &sumProtocol{failAt: -1, lastK: -1, ordered: true} }

func TestRunBitIdenticalAcrossWorkers(t *testing.T) {
	var want float64
	for i, w := range []int{1, 2, 3, 8, 33} {
		p := newSum()
		r := Rounds{T: 5, SampleRate: 0.6, Seed: 11, Workers: w}
		stats, err := Run(context.Background(), r, 200, p)
		if err != nil {
			t.Fatal(err)
		}
		if !p.ordered {
			t.Errorf("workers %d: Aggregate not called in increasing client order", w)
		}
		var parts int
		for _, s := range stats {
			parts += s.Participants
		}
		if p.folds != parts {
			t.Errorf("workers %d: %d folds for %d participants", w, p.folds, parts)
		}
		if i == 0 {
			want = p.acc
			continue
		}
		if math.Float64bits(p.acc) != math.Float64bits(want) {
			t.Errorf("workers %d: result %v, with 1 worker %v", w, p.acc, want)
		}
	}
}

func TestParticipants(t *testing.T) {
	all := Rounds{T: 1, SampleRate: 1, Seed: 3}
	if got := all.Participants(1, 10); len(got) != 10 {
		t.Errorf("p = 1: %d of 10 clients", len(got))
	}
	r := Rounds{T: 1, SampleRate: 0.3, Seed: 3}
	const clients, rounds = 1000, 200
	var total int
	for t := 1; t <= rounds; t++ {
		total += len(r.Participants(t, clients))
	}
	// Binomial(200 000, 0.3): mean 60 000, sd ≈ 205; allow 5 sd.
	if math.Abs(float64(total)-60000) > 5*205 {
		t.Errorf("sampled %d client-rounds, want ≈ 60 000", total)
	}
	a, b := r.Participants(4, 50), r.Participants(4, 50)
	if len(a) != len(b) {
		t.Fatalf("same round, different participants")
	}
	for i := range a {
		if a[i] != b[i] || (i > 0 && a[i] <= a[i-1]) {
			t.Fatalf("participants %v not reproducible and increasing", a)
		}
	}
}

func TestRunSkipsEmptyRounds(t *testing.T) {
	p := newSum()
	r := Rounds{T: 40, SampleRate: 0.05, Seed: 5}
	stats, err := Run(context.Background(), r, 1, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 40 || len(p.ended) != 40 {
		t.Fatalf("%d stats, %d EndRound calls; want 40", len(stats), len(p.ended))
	}
	var skipped int
	for i, s := range stats {
		if s.Round != i+1 || s.Participants != p.ended[i] {
			t.Errorf("round %d: stats %+v, EndRound saw %d", i+1, s, p.ended[i])
		}
		if s.Skipped() {
			skipped++
			if s.ComputeTotal != 0 || s.ComputeMean() != 0 {
				t.Errorf("skipped round %d has compute time", s.Round)
			}
		} else if s.UploadBytes != 16 || s.DownloadBytes != 8 || s.ComputeMin > s.ComputeMax {
			t.Errorf("round %d: %+v", s.Round, s)
		}
	}
	if skipped < 30 {
		t.Errorf("%d of 40 rounds skipped at p = 0.05 with one client", skipped)
	}
}

func TestRunErrors(t *testing.T) {
	before := runtime.NumGoroutine()
	p := newSum()
	p.failAt = 17
	_, err := Run(context.Background(), Rounds{T: 3, SampleRate: 1, Workers: 4}, 100, p)
	if err == nil || !strings.Contains(err.Error(), "round 1: client 17: boom") {
		t.Errorf("error %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, Rounds{T: 3, SampleRate: 1}, 10, newSum()); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled run: %v", err)
	}
	for _, tc := range []struct {
		r       Rounds
		clients int
		want    string
	}{
		{Rounds{T: 0, SampleRate: 1}, 1, "rounds T is 0: want 1 to 10000"},
		// Refused before anything proportional to T is allocated.
		{Rounds{T: 1_000_000_000, SampleRate: 1}, 1, "rounds T is 1000000000: want 1 to 10000"},
		{Rounds{T: MaxRounds + 1, SampleRate: 1}, 1, "rounds T is 10001"},
		{Rounds{T: 1, SampleRate: 1, Workers: -1}, 1, "workers is -1: want 0 to 1024"},
		{Rounds{T: 1, SampleRate: 1, Workers: 1_000_000_000}, 1, "workers is 1000000000: want 0 to 1024"},
		{Rounds{T: 1, SampleRate: 0}, 1, "sample rate p is 0"},
		{Rounds{T: 1, SampleRate: 1.5}, 1, "sample rate p is 1.5"},
		{Rounds{T: 1, SampleRate: math.NaN()}, 1, "sample rate p is NaN"},
		{Rounds{T: 1, SampleRate: 1}, 0, "number of clients is 0"},
	} {
		if _, err := Run(context.Background(), tc.r, tc.clients, newSum()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v, K = %d: error %v, want %q", tc.r, tc.clients, err, tc.want)
		}
	}
	// MaxRounds itself runs (every round skipped at this sample rate).
	if stats, err := Run(context.Background(), Rounds{T: MaxRounds, SampleRate: 1e-12}, 1, newSum()); err != nil || len(stats) != MaxRounds {
		t.Errorf("T = MaxRounds: %d rounds of statistics, error %v", len(stats), err)
	}
	time.Sleep(20 * time.Millisecond)
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("%d goroutines before, %d after failed runs", before, after)
	}
}

func TestSampleRateFor(t *testing.T) {
	if p, err := SampleRateFor(10, 100); err != nil || p != 0.1 {
		t.Errorf("SampleRateFor(10, 100) = %v, %v", p, err)
	}
	for _, tc := range [][2]int{{0, 10}, {11, 10}, {1, 0}} {
		if _, err := SampleRateFor(tc[0], tc[1]); err == nil {
			t.Errorf("SampleRateFor(%d, %d): no error", tc[0], tc[1])
		}
	}
}
