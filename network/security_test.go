package network

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
)

// clientConn connects as client k of h with the client's inbox prefix;
// asynchronous errors go to errs.
func (h *harness) clientConn(t *testing.T, k int, errs chan error) *nats.Conn {
	t.Helper()
	d := h.clientDial()
	d.Seed, d.inboxPrefix = h.keys[k].Seed, inboxPrefix(DefaultFederation, h.pubs[k])
	d.OnError = func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	nc, err := d.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestPermissions: only allow-listed keys connect, and a client can
// neither read another client's updates nor publish in its name, nor
// reach the JetStream API.
func TestPermissions(t *testing.T) {
	h := newHarness(t, 2, t.TempDir())
	stranger, _, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	d := h.clientDial()
	d.Seed = stranger
	if _, err := d.Connect(); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("a key not on the allow-list connected: %v", err)
	}
	d = h.clientDial()
	d.Fingerprint = strings.Repeat("00", 32)
	d.Seed = h.keys[0].Seed
	if _, err := d.Connect(); err == nil || !strings.Contains(err.Error(), "fingerprint") {
		t.Errorf("a server with another certificate was accepted: %v", err)
	}
	other := h.pubs[1]
	for _, tc := range []struct {
		name string
		do   func(nc *nats.Conn) error
	}{
		{"subscribe to another client's updates", func(nc *nats.Conn) error {
			_, err := nc.SubscribeSync(subjUpdate(DefaultFederation, other))
			return err
		}},
		{"subscribe to every update", func(nc *nats.Conn) error {
			_, err := nc.SubscribeSync(subjUpdateAll(DefaultFederation))
			return err
		}},
		{"subscribe to another client's inbox", func(nc *nats.Conn) error {
			_, err := nc.SubscribeSync(inboxPrefix(DefaultFederation, other) + ".>")
			return err
		}},
		{"publish as another client", func(nc *nats.Conn) error {
			return nc.Publish(subjUpdate(DefaultFederation, other), encodeUpdate([]float64{1}, false))
		}},
		{"use the JetStream API", func(nc *nats.Conn) error {
			return nc.Publish("$JS.API.STREAM.INFO."+oldStreamName(DefaultFederation), nil)
		}},
		{"announce a round", func(nc *nats.Conn) error {
			return nc.Publish(subjRound(DefaultFederation), []byte("{}"))
		}},
		{"invite another client", func(nc *nats.Conn) error {
			return nc.Publish(subjInvite(DefaultFederation, other), []byte("{}"))
		}},
		{"read another client's invitations", func(nc *nats.Conn) error {
			_, err := nc.SubscribeSync(subjInvite(DefaultFederation, other))
			return err
		}},
		{"read every invitation", func(nc *nats.Conn) error {
			_, err := nc.SubscribeSync(subjInviteAll(DefaultFederation))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := make(chan error, 4)
			nc := h.clientConn(t, 0, errs)
			if err := tc.do(nc); err != nil {
				t.Fatal(err)
			}
			nc.Flush()
			if err := permissionError(errs); err == nil {
				t.Errorf("no permissions violation")
			}
		})
	}
	// What a client may do raises no error.
	errs := make(chan error, 4)
	nc := h.clientConn(t, 0, errs)
	if _, err := nc.SubscribeSync(subjRound(DefaultFederation)); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.SubscribeSync(subjInvite(DefaultFederation, h.pubs[0])); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(subjUpdate(DefaultFederation, h.pubs[0]), encodeUpdate([]float64{1}, false)); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	select {
	case err := <-errs:
		t.Errorf("allowed actions raised %v", err)
	case <-time.After(300 * time.Millisecond):
	}
}

// rogue enrols as client k and, for every invitation it receives, sends
// the updates send returns in place of the honest update, each with the
// message id it gives (which the coordinator ignores: it keeps one update
// per client and round).
func (h *harness) rogue(ctx context.Context, t *testing.T, k int, set *calib.Set, send func(honest []float64) ([][]float64, []string)) {
	t.Helper()
	errs := make(chan error, 4)
	nc := h.clientConn(t, k, errs)
	anns := make(chan *nats.Msg, 16)
	if _, err := nc.ChanSubscribe(subjInvite(DefaultFederation, h.pubs[k]), anns); err != nil {
		t.Fatal(err)
	}
	go func() {
		if _, err := request(ctx, nc, DefaultFederation, h.pubs[k], hello{Kind: "hello", Version: Version}, 20*time.Second, errs); err != nil {
			t.Error(err)
			return
		}
		w, err := request(ctx, nc, DefaultFederation, h.pubs[k], ready{Kind: "ready", Version: Version, Classes: set.Classes}, 10*time.Second, errs)
		if err != nil {
			t.Error(err)
			return
		}
		f, _ := w.Spec.Fitter()
		step, _, err := f.(federation.Stepper).Steps(federation.Federation{Clients: w.Clients, Classes: w.Classes}, federation.Rounds{T: w.Rounds, SampleRate: w.Rate, Seed: w.Seed})
		if err != nil {
			t.Error(err)
			return
		}
		done := 0
		for m := range anns {
			var a Announcement
			if json.Unmarshal(m.Data, &a) != nil || a.Done || a.Round <= done {
				continue
			}
			done = a.Round
			honest, _ := step.Update(nil, a.Round, set, a.Broadcast, federation.ClientRand(a.Seed, a.Round, k))
			us, ids := send(honest)
			for i, u := range us {
				msg := &nats.Msg{Subject: subjUpdate(DefaultFederation, h.pubs[k]), Header: nats.Header{}, Data: encodeUpdate(u, false)}
				msg.Header.Set(hdrFederation, DefaultFederation)
				msg.Header.Set(hdrRound, itoa(a.Round))
				msg.Header.Set(hdrClient, itoa(k))
				msg.Header.Set(nats.MsgIdHdr, itoa(a.Round)+"/"+ids[i]) // ids are per round
				if _, err := nc.RequestMsgWithContext(ctx, msg); err != nil {
					t.Logf("rogue %d: %v", k, err)
				}
			}
		}
	}()
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestBadUpdatesRefused: updates with a NaN, above the clip norm or of the
// wrong shape are refused, their senders count as dropouts, the rounds
// still close; replays of an update (same or new message id) count once.
func TestBadUpdatesRefused(t *testing.T) {
	const K, C = 10, 3
	pop := population(t, 1500, C, K)
	spec := federation.Spec{Method: "temp", Epsilon: 4}
	r := federation.Rounds{T: 2, SampleRate: 1, Seed: 3}
	h := newHarness(t, K, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wait := h.joinAll(ctx, pop, upTo(6))
	rogues := map[int]func([]float64) ([][]float64, []string){
		6: func(u []float64) ([][]float64, []string) { return [][]float64{{math.NaN()}}, []string{"nan"} },
		7: func(u []float64) ([][]float64, []string) { return [][]float64{{0.9}}, []string{"big"} },
		8: func(u []float64) ([][]float64, []string) { return [][]float64{{0.1, 0.1}}, []string{"shape"} },
		9: func(u []float64) ([][]float64, []string) { // an honest client that replays
			return [][]float64{u, u, u}, []string{"a", "a", "b"}
		},
	}
	for k, send := range rogues {
		set, _ := pop.Client(k)
		h.rogue(ctx, t, k, set, send)
	}
	var reports []RoundReport
	out, err := h.coordinate(ctx, t, Config{Spec: spec, Rounds: r, MinClients: 5, RoundTimeout: 5 * time.Second, EnrolTimeout: 20 * time.Second,
		Progress: func(rep RoundReport) { reports = append(reports, rep) }})
	if err != nil {
		t.Fatal(err)
	}
	noErrors(t, wait())
	for _, rep := range reports {
		if want := []int{0, 1, 2, 3, 4, 5, 9}; !reflect.DeepEqual(rep.Participants, want) || !reflect.DeepEqual(rep.Dropouts, []int{6, 7, 8}) {
			t.Errorf("round %d: participants %v dropouts %v, want %v and [6 7 8]", rep.Round, rep.Participants, rep.Dropouts, want)
		}
		for _, k := range []int{6, 7, 8} {
			if !strings.Contains(rep.Refused[k], federation.ErrBadUpdate.Error()) {
				t.Errorf("round %d client %d: refused for %q", rep.Round, k, rep.Refused[k])
			}
		}
	}
	// A refused client counts as absent; DP-FedTemp divides by p·K
	// whoever answers, so that equals a client without data (Δ = 0).
	want := fit(t, spec, keep{pop, map[int]bool{6: true, 7: true, 8: true}}, r)
	if !samePredictions(want.Calibrator, out.Result.Calibrator, C) {
		t.Errorf("the fit with refused updates differs from the simulation without them (replays counted twice?)")
	}
}

// keep is pop with the clients of drop left without data.
type keep struct {
	federation.Population
	drop map[int]bool
}

func (p keep) Client(k int) (*calib.Set, error) {
	if p.drop[k] {
		return &calib.Set{Classes: p.Classes()}, nil // no data: Δ = 0
	}
	return p.Population.Client(k)
}
