package network

import (
	"context"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/secagg"
)

// secureJoinAll starts a client for each of h's keys over pop, each
// holding the allow-list, client k dropping out of a round where
// drop(k, t, stage) says; wait returns the reports and errors.
func (h *harness) secureJoinAll(ctx context.Context, pop federation.Population, drop func(k, t int, stage string) bool) (wait func() ([]*ClientReport, []error)) {
	var wg sync.WaitGroup
	n := len(h.keys)
	reps, errs := make([]*ClientReport, n), make([]error, n)
	for k := range n {
		cfg := ClientConfig{Key: h.keys[k], AllowList: h.pubs, Data: func(w Welcome) (*calib.Set, error) { return pop.Client(w.Client) }}
		if drop != nil {
			cfg.drop = func(t int, stage string) bool { return drop(k, t, stage) }
		}
		wg.Go(func() { reps[k], errs[k] = Join(ctx, h.clientDial(), cfg) })
	}
	return func() ([]*ClientReport, []error) { wg.Wait(); return reps, errs }
}

// reference drives spec's plain steps over pop in process, adding in each
// round exactly the updates of the clients the secure run aggregated.
func reference(t *testing.T, spec federation.Spec, pop federation.Population, r federation.Rounds, recs []calib.RoundRecord) *federation.Result {
	t.Helper()
	f, err := spec.Fitter()
	if err != nil {
		t.Fatal(err)
	}
	cs, ss, err := f.(federation.Stepper).Steps(federation.FederationOf(context.Background(), pop, 1), r)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		for _, k := range rec.Participants {
			set, err := pop.Client(k)
			if err != nil {
				t.Fatal(err)
			}
			u, err := cs.Update(nil, rec.Round, set, ss.Broadcast(), federation.ClientRand(r.Seed, rec.Round, k))
			if err != nil {
				t.Fatal(err)
			}
			if err := ss.Add(u); err != nil {
				t.Fatal(err)
			}
		}
		if err := ss.EndRound(rec.Round, len(rec.Participants)); err != nil {
			t.Fatal(err)
		}
	}
	res, err := ss.Result()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// closeParams reports whether two scalers' parameters agree to rel.
func closeParams(a, b calib.Calibrator, rel float64) (float64, bool) {
	pa, pb := a.(calib.Scaler).Params(), b.(calib.Scaler).Params()
	worst := 0.0
	for i := range pa {
		d := math.Abs(pa[i]-pb[i]) / math.Max(1, math.Abs(pb[i]))
		worst = max(worst, d)
	}
	return worst, len(pa) == len(pb) && worst <= rel
}

// TestSecureEqualsPlain: with noise off, for every method of the registry,
// over three rounds in which 0, 1 and t − 1 clients drop out after the
// masks are agreed (before sending their masked input), the secure sum is
// the plain sum of the survivors' updates: binning calibrators and sums
// equal the plain steps' bit for bit (integer counts, scale 1); scaling
// parameters to 1e-8 (quantised at b = 64 bits, scale 2^59: a rounding
// error below 2^−59 of the clip norm per client and round, which moves the
// next round's warm start; the clients' local fits run to a gradient of
// 1e-7 (calib.DefaultGradientTol), so where such a start changes when a
// fit stops, its result moves by up to the tolerance's effect, measured
// 2e-9 relative for dirichlet).
func TestSecureEqualsPlain(t *testing.T) {
	const K, C, k, thr = 8, 3, 7, 4
	pop := population(t, 800, C, K)
	r := federation.Rounds{T: 3, SampleRate: 1, Seed: 21}
	drops := []int{0, 1, thr - 1} // by round
	for _, method := range calib.MethodNames() {
		m, _ := calib.LookupMethod(method)
		if m.Family == calib.Hybrid {
			continue // not over the network yet: TestCoordinatorRefusesScalingBinning
		}
		spec := federation.Spec{Method: method, Mexp: 4}
		bits := 32
		if m.Family == calib.Scaling {
			spec.Mexp, spec.Clip, bits = 0, 10, 64
		}
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, K, t.TempDir())
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			wait := h.secureJoinAll(ctx, pop, func(kk, round int, stage string) bool { return kk < drops[round-1] && stage == stageMasked })
			out, err := h.coordinate(ctx, t, Config{
				Spec: spec, Rounds: r, RoundTimeout: 10 * time.Second, EnrolTimeout: 20 * time.Second,
				Secure: &SecureConfig{Neighbours: k, Threshold: thr, Bits: bits, StageTimeout: time.Second},
			})
			if err != nil {
				t.Fatal(err)
			}
			_, errs := wait()
			noErrors(t, errs)
			for i, rec := range out.Rounds {
				if want := upTo(K)[drops[i]:]; !reflect.DeepEqual(rec.Participants, want) || len(rec.Dropouts) != drops[i] {
					t.Fatalf("round %d: participants %v dropouts %v; want %v and %d dropouts", rec.Round, rec.Participants, rec.Dropouts, want, drops[i])
				}
			}
			want := reference(t, spec, pop, r, out.Rounds)
			if m.Family == calib.Binning {
				if !samePredictions(want.Calibrator, out.Result.Calibrator, C) {
					t.Errorf("the secure calibrator differs from the plain one")
				}
				if !reflect.DeepEqual(want.Histograms, out.Result.Histograms) {
					t.Errorf("the secure sums differ from the plain ones")
				}
				return
			}
			if d, ok := closeParams(out.Result.Calibrator, want.Calibrator, 1e-8); !ok {
				t.Errorf("parameters differ from the plain ones by %g (relative), want ≤ 1e-8", d)
			}
		})
	}
}

// TestSecureEqualsCalibrate: without dropouts, a secure run gives the
// calibrator of the simulation ("fedcalib calibrate"): bit for bit for
// weighted FedBBQ (exact counts), to 1e-12 for FedTemp.
func TestSecureEqualsCalibrate(t *testing.T) {
	const K, C = 10, 3
	pop := population(t, 1000, C, K)
	r := federation.Rounds{T: 2, SampleRate: 0.7, Seed: 8}
	for _, spec := range []federation.Spec{
		{Method: "bbq", Mexp: 4, Weighting: calib.WeightAll},
		{Method: "temp", Clip: 10},
	} {
		t.Run(spec.Method, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, K, t.TempDir())
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			wait := h.secureJoinAll(ctx, pop, nil)
			out, err := h.coordinate(ctx, t, Config{Spec: spec, Rounds: r, RoundTimeout: 10 * time.Second, EnrolTimeout: 20 * time.Second, Secure: &SecureConfig{Bits: 64}})
			if err != nil {
				t.Fatal(err)
			}
			_, errs := wait()
			noErrors(t, errs)
			want := fit(t, spec, pop, r)
			if spec.Method == "bbq" {
				if !samePredictions(want.Calibrator, out.Result.Calibrator, C) {
					t.Errorf("the secure calibrator differs from calibrate's")
				}
				return
			}
			if d, ok := closeParams(out.Result.Calibrator, want.Calibrator, 1e-12); !ok {
				t.Errorf("parameters differ from calibrate's by %g (relative)", d)
			}
		})
	}
}

// recorder records every message clients send the coordinator.
type recorder struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func (h *harness) record(t *testing.T, fed string) *recorder {
	nc, err := h.srv.Dial().Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	rec := &recorder{}
	for _, subj := range []string{subjSecAggAll(fed), subjUpdateAll(fed), subjEnrolAll(fed)} {
		if _, err := nc.Subscribe(subj, func(m *nats.Msg) { rec.mu.Lock(); rec.msgs = append(rec.msgs, m); rec.mu.Unlock() }); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestSecureView records everything the clients send the coordinator in a
// secure FedBin run in which client 7 drops out of round 1 after signing
// the survivor set (its input is in the sum, its self mask rebuilt from
// its neighbours' shares): no plain update, and masked inputs whose top
// bits are uniform (chi-square). In round 2 the coordinator lies (through
// the real NATS path): it tells client 0 that only three clients survived
// and clients 1 to 3 that client 4 dropped, so as to collect client 4's
// mask key from them while the others reveal its self-mask seed. Client 0
// refuses to sign, the others' signatures of the false set do not verify,
// some survivor is left with fewer than t signing neighbours, and the
// round ends with no unmask request sent: it releases nothing, and every
// sum computed equals the plain one.
func TestSecureView(t *testing.T) {
	const K, C = 8, 3
	pop := population(t, 800, C, K)
	r := federation.Rounds{T: 2, SampleRate: 1, Seed: 5}
	spec := federation.Spec{Method: "bin", Mexp: 5}
	h := newHarness(t, K, t.TempDir())
	rec := h.record(t, DefaultFederation)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wait := h.secureJoinAll(ctx, pop, func(k, round int, stage string) bool { return k == 7 && round == 1 && stage == stageUnmask })
	cfg := Config{
		Spec: spec, Rounds: r, RoundTimeout: 10 * time.Second, EnrolTimeout: 20 * time.Second,
		Secure: &SecureConfig{Neighbours: 7, Threshold: 4, StageTimeout: 1500 * time.Millisecond},
		tamper: func(t, a int, sets map[uint32]*secagg.SurvivorSet) {
			if t != 2 {
				return
			}
			sets[0].Survivors = []uint32{0, 1, 2}
			for _, id := range []uint32{1, 2, 3} {
				sets[id].Survivors = slices.DeleteFunc(sets[id].Survivors, func(v uint32) bool { return v == 4 })
			}
		},
	}
	out, err := h.coordinate(ctx, t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	reps, errs := wait()
	noErrors(t, errs)
	if len(reps[0].Refused) != 1 || !strings.Contains(reps[0].Refused[0], "survivor set") {
		t.Fatalf("client 0 refused %q; want one refusal of the survivor set", reps[0].Refused)
	}
	if got := out.Rounds[0].Participants; !reflect.DeepEqual(got, upTo(K)) {
		t.Errorf("round 1 aggregated %v; want every client, 7 included", got)
	}
	if got := out.Rounds[1].Participants; len(got) != 0 {
		t.Errorf("round 2 aggregated %v; want nothing", got)
	}
	if want := reference(t, spec, pop, r, out.Rounds); !reflect.DeepEqual(want.Histograms, out.Result.Histograms) {
		t.Errorf("the secure sums differ from the plain ones")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, m := range rec.msgs {
		if m.Header.Get(hdrStage) == stageUnmask && m.Header.Get(hdrRound) == "2" {
			t.Errorf("a client revealed shares in round 2: %s", m.Subject)
		}
	}
	var counts [16]float64
	n := 0
	for _, m := range rec.msgs {
		switch {
		case strings.Contains(m.Subject, ".update."):
			t.Errorf("a plain update reached the coordinator: %s", m.Subject)
		case m.Header.Get(hdrStage) == stageMasked:
			var mi secagg.MaskedInput
			if err := mi.UnmarshalBinary(m.Data); err != nil {
				t.Fatal(err)
			}
			for _, v := range mi.Masked {
				counts[v>>(mi.Bits-4)]++
				n++
			}
		}
	}
	// The histograms are small counts: in the clear, nearly all in bucket 0.
	chi := 0.0
	for _, c := range counts {
		e := float64(n) / 16
		chi += (c - e) * (c - e) / e
	}
	if n != 2*K*2*C*32 || chi > 37.7 { // χ²(15) at p = 0.001
		t.Errorf("%d masked values, χ² = %.1f over 16 buckets of the top bits; want %d values and χ² ≤ 37.7", n, chi, 2*K*2*C*32)
	}
}

// TestSecureConfig: bad secure-aggregation settings are refused before
// anything runs, each with its sentinel.
func TestSecureConfig(t *testing.T) {
	_, pubs := keys(t, 20)
	private := federation.Spec{Method: "temp", Epsilon: 1, Accountant: "rdp"}
	for _, tc := range []struct {
		name string
		spec federation.Spec
		sc   SecureConfig
		want error
	}{
		{"threshold above neighbours", federation.Spec{Method: "bin"}, SecureConfig{Neighbours: 6, Threshold: 7}, secagg.ErrThreshold},
		{"threshold at half", federation.Spec{Method: "bin"}, SecureConfig{Neighbours: 6, Threshold: 3}, secagg.ErrThreshold},
		{"threshold above the default", federation.Spec{Method: "bin"}, SecureConfig{Threshold: 30}, secagg.ErrThreshold},
		{"exact counts in 16 bits", federation.Spec{Method: "bin"}, SecureConfig{Bits: 16}, secagg.ErrBitsTooSmall},
		{"scaling in 12 bits", federation.Spec{Method: "temp", Clip: 1}, SecureConfig{Bits: 12}, secagg.ErrBitsTooSmall},
		{"distributed noise in 12 bits", private, SecureConfig{Bits: 12, Noise: NoiseDistributed}, secagg.ErrBitsTooSmall},
		{"neighbours beyond the clients", federation.Spec{Method: "bin"}, SecureConfig{Neighbours: 20}, ErrConfig},
		{"one neighbour", federation.Spec{Method: "bin"}, SecureConfig{Neighbours: 1}, ErrConfig},
		{"odd neighbours", federation.Spec{Method: "bin"}, SecureConfig{Neighbours: 5}, ErrConfig},
		{"dropout rate 1", federation.Spec{Method: "bin"}, SecureConfig{DropoutRate: 1}, ErrConfig},
		{"negative colluders", federation.Spec{Method: "bin"}, SecureConfig{Colluders: -0.1}, ErrConfig},
		{"distributed without privacy", federation.Spec{Method: "bin"}, SecureConfig{Noise: NoiseDistributed}, ErrConfig},
		{"distributed under zCDP", federation.Spec{Method: "temp", Epsilon: 1}, SecureConfig{Noise: NoiseDistributed}, ErrConfig},
		{"unbounded scaling", federation.Spec{Method: "temp"}, SecureConfig{}, ErrConfig},
		{"unknown noise", federation.Spec{Method: "bin"}, SecureConfig{Noise: "local"}, ErrConfig},
		{"65 bits", federation.Spec{Method: "bin"}, SecureConfig{Bits: 65}, ErrConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := tc.sc
			_, err := NewCoordinator(Config{Spec: tc.spec, Rounds: federation.Rounds{T: 3, SampleRate: 1}, Clients: pubs, Classes: 10, Secure: &sc})
			if !errors.Is(err, tc.want) || !errors.Is(err, ErrConfig) {
				t.Errorf("error %v; want one wrapping %v and ErrConfig", err, tc.want)
			}
		})
	}
	for _, spec := range []federation.Spec{{Method: "bin"}, {Method: "temp", Clip: 1}, private, {Method: "bbq", Epsilon: 1, Accountant: "rdp"}} {
		for _, noise := range []string{NoiseCentral, NoiseDistributed} {
			if noise == NoiseDistributed && !spec.Private() {
				continue
			}
			if _, err := NewCoordinator(Config{Spec: spec, Rounds: federation.Rounds{T: 3, SampleRate: 1}, Clients: pubs, Classes: 10, Secure: &SecureConfig{Noise: noise}}); err != nil {
				t.Errorf("%s, %s noise: %v", spec.Method, noise, err)
			}
		}
	}
}

// TestSecurePlanNoise: the distributed plan's per-client variance, summed
// over the planned survivors but one (the shares that protect a client),
// is the variance dp.SkellamPlan gives for ε,
// whose RDP ε over T rounds is at most the target; the empirical variance
// of the summed noise of 10^5 trials is within 2% of it; and the plan's
// quantisation passes CheckFederation for all the allow-list.
func TestSecurePlanNoise(t *testing.T) {
	spec := federation.Spec{Method: "bbq", Mexp: 4, Epsilon: 1, Accountant: "rdp"}
	const K, C, T, surv = 20, 3, 4, 5
	dim := 2 * C * 16
	p, err := planSecure(SecureConfig{Bits: 40, Noise: NoiseDistributed}, spec, K, surv, T, C, dim)
	if err != nil {
		t.Fatal(err)
	}
	mu, err := p.skellam.Variance()
	if err != nil {
		t.Fatal(err)
	}
	if got := p.clientVar * (surv - 1); math.Abs(got-mu) > 1e-9*mu {
		t.Errorf("(survivors − 1) × client variance = %v, plan variance %v", got, mu)
	}
	eps, _, err := dp.SkellamEpsilon(p.skellam.Round(p.clientVar, surv), T, dp.DefaultDelta)
	if err != nil || eps > 1+1e-9 || eps < 0.99 {
		t.Errorf("ε of the plan = %v (%v); want just below 1", eps, err)
	}
	if err := p.q.CheckFederation(K, dim, p.clientVar*K); err != nil {
		t.Error(err)
	}
	// The summed noise of the surv − 1 clients other than a protected
	// one, one coordinate, 10^5 trials.
	const trials = 100000
	rng := dp.NewSeeded(1)
	var s, ss float64
	v := make([]uint64, 1)
	for range trials {
		total := int64(0)
		for range surv - 1 {
			v[0] = 0
			p.q.AddNoise(v, p.clientVar, rng)
			total += p.q.Signed(v[0])
		}
		x := float64(total)
		s += x
		ss += x * x
	}
	mean := s / trials
	if got := ss/trials - mean*mean; math.Abs(got/mu-1) > 0.02 {
		t.Errorf("empirical variance of the summed noise %v, intended %v (ratio %v)", got, mu, got/mu)
	}
}

// TestSecureDistributed: with distributed noise, a round in which one
// client drops out is charged with its real survivors: the privacy
// record's ε is the RDP accountant's over Skellam releases of variance
// (survivors − 1) × v, the shares of the others (to 1e-9), calib.Privacy.Check verifies it, and a record
// edited to fewer rounds or more survivors is refused. With central noise
// the record is the simulation's plus the secure-aggregation fields.
func TestSecureDistributed(t *testing.T) {
	const K, C = 6, 3
	pop := population(t, 600, C, K)
	r := federation.Rounds{T: 2, SampleRate: 1, Seed: 4}
	spec := federation.Spec{Method: "bbq", Mexp: 3, Epsilon: 1, Accountant: "rdp"}
	for _, noise := range []string{NoiseDistributed, NoiseCentral} {
		t.Run(noise, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, K, t.TempDir())
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			wait := h.secureJoinAll(ctx, pop, func(k, round int, stage string) bool { return k == 0 && round == 2 && stage == stageMasked })
			out, err := h.coordinate(ctx, t, Config{
				Spec: spec, Rounds: r, MinClients: 4, RoundTimeout: 10 * time.Second, EnrolTimeout: 20 * time.Second,
				Secure: &SecureConfig{Noise: noise, StageTimeout: time.Second},
			})
			if err != nil {
				t.Fatal(err)
			}
			_, errs := wait()
			noErrors(t, errs)
			p := out.Result.Privacy
			if err := p.Check("bbq", C); err != nil {
				t.Fatalf("Check: %v", err)
			}
			sa := p.SecureAggregation
			if noise == NoiseCentral {
				want := *reference(t, spec, pop, r, out.Rounds).Privacy
				want.SecureAggregation = sa
				if !reflect.DeepEqual(*p, want) || sa.Noise != NoiseCentral {
					t.Errorf("privacy %+v, want the plain record %+v", p, want)
				}
				return
			}
			if !reflect.DeepEqual(sa.Survivors, []int{K, K - 1}) {
				t.Fatalf("survivors %v, want [%d %d]", sa.Survivors, K, K-1)
			}
			var a dp.RDPAccountant
			for _, s := range sa.Survivors {
				// Each round charged with the s − 1 shares of the others.
				if err := a.ComposeSkellam(dp.Skellam{Variance: float64(s-1) * sa.ClientVariance, L1: sa.L1, L2: sa.L2}, 1); err != nil {
					t.Fatal(err)
				}
			}
			eps, _, err := a.Epsilon(p.Delta)
			if err != nil || math.Abs(eps-p.Epsilon) > 1e-9*eps || eps > spec.Epsilon {
				t.Errorf("recorded ε %v, accountant %v (%v); want equal to 1e-9 and ≤ %v", p.Epsilon, eps, err, spec.Epsilon)
			}
			for _, edit := range []func(q *calib.Privacy){
				func(q *calib.Privacy) { q.SecureAggregation.Survivors = []int{K, K} },
				func(q *calib.Privacy) { q.SecureAggregation.ClientVariance *= 2 },
				func(q *calib.Privacy) { q.Accountant = "zcdp" },
				func(q *calib.Privacy) { q.Sigma *= 1.5 },
			} {
				q := *p
				sa2 := *sa
				sa2.Survivors = slices.Clone(sa.Survivors)
				q.SecureAggregation = &sa2
				edit(&q)
				if err := q.Check("bbq", C); err == nil {
					t.Errorf("an edited record %+v passes Check", sa2)
				}
			}
		})
	}
}

// TestSecureCentralRounding: with central noise, an update block of norm
// equal to its clip norm can come out of stochastic rounding longer than
// the clip norm the noise is calibrated to; shrunk by the plan's factor
// 1 − √d/γ it never does (over 2000 worst-direction trials at γ = 2^8,
// where unshrunk blocks do exceed it).
func TestSecureCentralRounding(t *testing.T) {
	spec := federation.Spec{Method: "bbq", Mexp: 5, Epsilon: 1}
	const C = 3
	dim := 2 * C * 32
	p, err := planSecure(SecureConfig{Bits: 24}, spec, 20, 5, 4, C, dim)
	if err != nil {
		t.Fatal(err)
	}
	d := float64(dim / len(p.clips))
	if want := 1 - math.Sqrt(d)/p.q.Scale; p.shrink != want {
		t.Fatalf("shrink %v, want 1 − √%v/%v = %v", p.shrink, d, p.q.Scale, want)
	}
	q := p.q
	q.Scale = 1 << 8 // the coarsest scale, where rounding matters most
	shrink := 1 - math.Sqrt(d)/q.Scale
	rng := dp.NewSeeded(3)
	over := [2]int{}
	for trial := range 2000 {
		x := make([]float64, dim)
		for i := range x {
			x[i] = 1 / math.Sqrt(d) // every block of norm 1
			if (i+trial)%3 == 0 {
				x[i] = -x[i]
			}
		}
		for k, f := range []float64{1, shrink} {
			y := slices.Clone(x)
			for i := range y {
				y[i] *= f
			}
			qy, err := q.Quantize(nil, y, rng)
			if err != nil {
				t.Fatal(err)
			}
			for b := 0; b < dim; b += int(d) {
				n := 0.0
				for _, v := range qy[b : b+int(d)] {
					f := float64(q.Signed(v))
					n += f * f
				}
				if math.Sqrt(n) > q.Scale*(1+1e-12) {
					over[k]++
				}
			}
		}
	}
	if over[0] == 0 || over[1] != 0 {
		t.Errorf("blocks longer than the clip norm after rounding: %d unshrunk, %d shrunk; want some, none", over[0], over[1])
	}
	t.Logf("γ = 2^8, d = %v: %d of %d unshrunk blocks exceed the clip norm", d, over[0], 2000*2*C)
}

// TestSecureRetryCharged rebuilds point 1 of the review over NATS: K = 6,
// --min-clients 6, distributed noise, and client 0 skipping its masked
// input in the first attempt of round 1. The short attempt ends before
// any survivor is asked to sign (5 < s_min): no client reveals a share in
// it, so nothing of it is computable; the second attempt releases the sum
// of all six. The ledger holds exactly one release per round, and the
// recorded ε is that of two rounds of six survivors.
func TestSecureRetryCharged(t *testing.T) {
	const K, C = 6, 3
	pop := population(t, 600, C, K)
	r := federation.Rounds{T: 2, SampleRate: 1, Seed: 4}
	spec := federation.Spec{Method: "bbq", Mexp: 3, Epsilon: 1, Accountant: "rdp"}
	h := newHarness(t, K, t.TempDir())
	rec := h.record(t, DefaultFederation)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var skipped atomic.Bool
	wait := h.secureJoinAll(ctx, pop, func(k, round int, stage string) bool {
		return k == 0 && round == 1 && stage == stageMasked && skipped.CompareAndSwap(false, true)
	})
	out, err := h.coordinate(ctx, t, Config{
		Spec: spec, Rounds: r, MinClients: K, RoundTimeout: 10 * time.Second, EnrolTimeout: 20 * time.Second,
		Secure: &SecureConfig{Noise: NoiseDistributed, StageTimeout: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, errs := wait()
	noErrors(t, errs)
	if !skipped.Load() || out.Rounds[0].Attempts != 2 || out.Rounds[1].Attempts != 1 {
		t.Fatalf("attempts %d, %d (skipped %v); want 2, 1", out.Rounds[0].Attempts, out.Rounds[1].Attempts, skipped.Load())
	}
	rec.mu.Lock()
	for _, m := range rec.msgs {
		h := m.Header
		if h.Get(hdrRound) == "1" && h.Get(hdrAttempt) == "1" && (h.Get(hdrStage) == stageSigned || h.Get(hdrStage) == stageUnmask) {
			t.Errorf("a client signed or revealed shares in the short attempt: %s %s", m.Subject, h.Get(hdrStage))
		}
	}
	rec.mu.Unlock()
	sa := out.Result.Privacy.SecureAggregation
	if !reflect.DeepEqual(sa.Survivors, []int{K, K}) {
		t.Fatalf("survivors %v, want [%d %d]", sa.Survivors, K, K)
	}
	var a dp.RDPAccountant
	for range 2 {
		if err := a.ComposeSkellam(dp.Skellam{Variance: float64(K-1) * sa.ClientVariance, L1: sa.L1, L2: sa.L2}, 1); err != nil {
			t.Fatal(err)
		}
	}
	eps, _, err := a.Epsilon(out.Result.Privacy.Delta)
	if err != nil || math.Abs(eps-out.Result.Privacy.Epsilon) > 1e-9*eps || eps > spec.Epsilon*(1+1e-9) {
		t.Errorf("recorded ε %v, two releases of %d survivors give %v (%v); want equal and ≤ %v", out.Result.Privacy.Epsilon, K, eps, err, spec.Epsilon)
	}
}

// TestSecureGraphEveryCount: for an allow-list of 30, every neighbour
// count the coordinator accepts (0, the even ones, and 29) gives, for
// every sampled count n from 3 to 30, odd or even, a k and t that
// secagg builds a round with — so no sampled count stops a run.
func TestSecureGraphEveryCount(t *testing.T) {
	const K = 30
	spec := federation.Spec{Method: "bin"}
	for k := 0; k <= K; k++ {
		sc, err := checkSecure(SecureConfig{Neighbours: k}, spec, K)
		if accepted := k == 0 || (k%2 == 0 && k <= K-1) || k == K-1; (err == nil) != accepted {
			t.Fatalf("--neighbours %d: error %v, want accepted %v", k, err, accepted)
		}
		if err != nil {
			continue
		}
		p := &securePlan{cfg: sc}
		for n := 3; n <= K; n++ {
			kk, tt := p.graph(n)
			parts := make([]uint32, n)
			for i := range parts {
				parts[i] = uint32(i)
			}
			if _, err := secagg.NewGraph([32]byte{byte(n)}, parts, kk); err != nil || 2*tt <= kk || tt > kk {
				t.Errorf("--neighbours %d, %d sampled: k = %d, t = %d: %v", k, n, kk, tt, err)
			}
		}
	}
}

// TestCheckIdentities: a client refuses a secure round whose identities
// do not match its participants, name another key for it, or — when it
// holds the allow-list — name a key that is not the participant's line.
func TestCheckIdentities(t *testing.T) {
	allow := []string{"UA", "UB", "UC", "UD"}
	ann := func(parts []int, ids ...string) *Announcement {
		return &Announcement{Participants: parts, Secure: &SecureRound{Identities: ids}}
	}
	for _, c := range []struct {
		name  string
		a     *Announcement
		allow []string
		ok    bool
	}{
		{"true, with the allow-list", ann([]int{0, 2, 3}, "UA", "UC", "UD"), allow, true},
		{"true, without", ann([]int{0, 2, 3}, "UA", "UC", "UD"), nil, true},
		{"a made-up peer, with the allow-list", ann([]int{0, 2, 3}, "UA", "UX", "UD"), allow, false},
		{"a made-up peer, without", ann([]int{0, 2, 3}, "UA", "UX", "UD"), nil, true},
		{"peers swapped, with the allow-list", ann([]int{0, 2, 3}, "UA", "UD", "UC"), allow, false},
		{"another key for this client", ann([]int{0, 2, 3}, "UB", "UC", "UD"), nil, false},
		{"one identity short", ann([]int{0, 2, 3}, "UA", "UC"), nil, false},
		{"this client not a participant", ann([]int{1, 2, 3}, "UB", "UC", "UD"), nil, false},
		{"a participant beyond the allow-list", ann([]int{0, 2, 4}, "UA", "UC", "UE"), allow, false},
	} {
		if err := checkIdentities(c.a, c.allow, "UA", 0); (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrFederation)) {
			t.Errorf("%s: error %v, want ok %v", c.name, err, c.ok)
		}
	}
}
