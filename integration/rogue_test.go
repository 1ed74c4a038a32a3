package integration

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fedcalib/fedcalib/network"
)

// rogue is a client of a federation written from docs/NETWORK.md alone
// (subjects, headers, message bodies), on nats.go with the client's own
// key: what a user who does not run fedcalib join could send.
type rogue struct {
	nc      *nats.Conn
	pub     string
	inbox   chan *nats.Msg
	errs    chan error
	client  int         // its index k, from the welcome
	pending []*nats.Msg // inbox messages read while waiting for an answer
}

// The documented names, for federation "default" and the client P.
func subject(kind, pub string) string { return "fedcalib.default." + kind + "." + pub }

// dialRogue connects with the key file key to the server at url (TLS
// pinned to fp) and subscribes to the client's own inbox.
func dialRogue(t *testing.T, url, fp, key string) *rogue {
	t.Helper()
	k, err := network.ReadKey(key)
	if err != nil {
		t.Fatal(err)
	}
	r := &rogue{pub: k.Public, inbox: make(chan *nats.Msg, 64), errs: make(chan error, 8)}
	r.nc, err = network.Dial{URL: url, Fingerprint: fp, Seed: k.Seed, OnError: func(err error) {
		select {
		case r.errs <- err:
		default:
		}
	}}.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.nc.Close)
	if _, err := r.nc.ChanSubscribe(subject("inbox", r.pub)+".>", r.inbox); err != nil {
		t.Fatal(err)
	}
	return r
}

// request publishes data on subj with a reply subject under the client's
// inbox, and returns the answer. Invitations that come meanwhile are
// kept for answerRounds.
func (r *rogue) request(subj string, hdr nats.Header, data []byte, tag string) ([]byte, error) {
	reply := subject("inbox", r.pub) + "." + tag
	if err := r.nc.PublishMsg(&nats.Msg{Subject: subj, Reply: reply, Header: hdr, Data: data}); err != nil {
		return nil, err
	}
	timeout := time.After(20 * time.Second)
	for {
		select {
		case m := <-r.inbox:
			if m.Subject == reply && m.Header.Get("Status") == "503" {
				// No responders: the coordinator has not subscribed yet.
				time.Sleep(100 * time.Millisecond)
				if err := r.nc.PublishMsg(&nats.Msg{Subject: subj, Reply: reply, Header: hdr, Data: data}); err != nil {
					return nil, err
				}
				continue
			}
			if m.Subject == reply {
				return m.Data, nil
			}
			r.pending = append(r.pending, m)
		case <-timeout:
			return nil, fmt.Errorf("no answer on %s", reply)
		}
	}
}

// enrol sends hello and ready (4 classes) and keeps the client's index.
func (r *rogue) enrol(t *testing.T) {
	t.Helper()
	var w struct {
		Client int    `json:"client"`
		Error  string `json:"error"`
	}
	for i, body := range []string{
		fmt.Sprintf(`{"kind":"hello","version":%d}`, network.Version),
		fmt.Sprintf(`{"kind":"ready","version":%d,"classes":4}`, network.Version),
	} {
		b, err := r.request(subject("enrol", r.pub), nil, []byte(body), "enrol"+strconv.Itoa(i))
		if err == nil {
			err = json.Unmarshal(b, &w)
		}
		if err != nil || w.Error != "" {
			t.Fatalf("enrolment: %v %s", err, w.Error)
		}
	}
	r.client = w.Client
}

// answerRounds answers every invitation with update until the end of the
// run, and returns the coordinator's answers, by round.
func (r *rogue) answerRounds(update []float64) (map[int]string, error) {
	body := make([]byte, 1+8*len(update)) // dense: 0, then little-endian float64s
	for i, v := range update {
		binary.LittleEndian.PutUint64(body[1+8*i:], math.Float64bits(v))
	}
	answers := map[int]string{}
	timeout := time.After(60 * time.Second)
	for {
		var m *nats.Msg
		if len(r.pending) > 0 {
			m, r.pending = r.pending[0], r.pending[1:]
		} else {
			select {
			case m = <-r.inbox:
			case <-timeout:
				return answers, fmt.Errorf("client %d: the run did not end", r.client)
			}
		}
		if !strings.HasSuffix(m.Subject, ".invite") {
			continue
		}
		var a struct {
			Round int  `json:"round"`
			Done  bool `json:"done"`
		}
		if err := json.Unmarshal(m.Data, &a); err != nil {
			return answers, err
		}
		if a.Done {
			return answers, nil
		}
		if _, ok := answers[a.Round]; ok {
			continue // invited again while the round was open
		}
		hdr := nats.Header{}
		hdr.Set("Fedcalib-Federation", "default")
		hdr.Set("Fedcalib-Round", strconv.Itoa(a.Round))
		hdr.Set("Fedcalib-Client", strconv.Itoa(r.client))
		b, err := r.request(subject("update", r.pub), hdr, body, "u"+strconv.Itoa(a.Round))
		if err != nil {
			return answers, err
		}
		answers[a.Round] = string(b)
	}
}

// testRogueClients: against fedcalib serve and five fedcalib join
// processes, three clients written from the documentation with their own
// keys: one that subscribes to another client's updates gets a
// permission error, and the NaN, over-norm and wrong-shape updates they
// send in every round are refused with the reason, counted as dropouts,
// while both rounds close with the honest clients.
func testRogueClients(t *testing.T, bin string) {
	const honest = 5
	f := newFed(t, bin, honest+3, 0)
	out := t.TempDir() + "/net.json"
	store := t.TempDir()
	serveArgs := []string{"--method", "temp", "--epsilon", "4", "--clip", "0.5", "--seed", "3",
		"--rounds", "2", "--sample-rate", "1", "--min-clients", fmt.Sprint(honest), "--round-timeout", "20s", "--enrol-timeout", "60s", "--out", out}
	srv, url, fp := f.serve(t, store, "127.0.0.1:0", serveArgs...)

	// Reading another client's updates is refused by the server.
	spy := dialRogue(t, url, fp, f.keys[honest])
	if _, err := spy.nc.Subscribe(subject("update", pubOf(t, f, 0)), func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-spy.errs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("subscribing to another client's updates: %v, want a permission violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("subscribing to another client's updates raised no permission error")
	}

	bad := map[int][]float64{
		honest:     {math.NaN()},  // not finite
		honest + 1: {0.9},         // above the clip norm 0.5
		honest + 2: {0.1, 0.1, 0}, // FedTemp's update is one value
	}
	rogues := map[int]*rogue{honest: spy}
	for i := honest + 1; i < honest+3; i++ {
		rogues[i] = dialRogue(t, url, fp, f.keys[i])
	}
	for _, r := range rogues {
		r.enrol(t)
	}
	// The confused deputy: enrolment requests whose reply subject is
	// another client's update subject or inbox, the round subject, the
	// bucket or the JetStream API. The coordinator must ignore them, or
	// it would post a welcome there with its own permissions: client 0's
	// updates would be refused, the settings overwritten.
	for _, reply := range []string{
		subject("update", pubOf(t, f, 0)), subject("inbox", pubOf(t, f, 1)) + ".x", "fedcalib.default.round",
		"$KV.fedcalib_default.settings", "$KV.fedcalib_default.evil", "$JS.API.STREAM.DELETE.KV_fedcalib_default",
	} {
		for _, body := range []string{
			fmt.Sprintf(`{"kind":"hello","version":%d}`, network.Version),
			fmt.Sprintf(`{"kind":"ready","version":%d,"classes":4}`, network.Version),
		} {
			if err := spy.nc.PublishRequest(subject("enrol", spy.pub), reply, []byte(body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	spy.nc.Flush()
	var joins []*proc
	for i := range honest {
		joins = append(joins, f.join(t, url, fp, i))
	}
	type result struct {
		answers map[int]string
		err     error
	}
	answers := make(map[int]chan result)
	for i, r := range rogues {
		answers[i] = make(chan result, 1)
		go func() {
			a, err := r.answerRounds(bad[i])
			answers[i] <- result{a, err}
		}()
	}
	if code := srv.wait(t, 90*time.Second); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, srv.output())
	}
	for i, j := range joins {
		if code := j.wait(t, 10*time.Second); code != 0 {
			t.Errorf("join %d exited %d:\n%s", i, code, j.output())
		}
	}
	for i, want := range map[int]string{honest: "is NaN", honest + 1: "above the clip norm", honest + 2: "3 values, want 1"} {
		res := <-answers[i]
		if res.err != nil {
			t.Errorf("client %d: %v", i, res.err)
		}
		got := res.answers
		for round := 1; round <= 2; round++ {
			if !strings.Contains(got[round], "bad update") || !strings.Contains(got[round], want) {
				t.Errorf("client %d round %d: the coordinator answered %q, want a refusal saying %q", i, round, got[round], want)
			}
		}
	}
	params, _, rec := calibFile(t, out)
	if len(rec) != 2 {
		t.Fatalf("%d round records, want 2", len(rec))
	}
	// The store is the run's: serve again on it resumes the finished run
	// and writes the same calibrator (overwritten settings could not be
	// read).
	os.Remove(out)
	again := start(t, f.bin, append([]string{"serve", "--clients", f.allow, "--store", store, "--listen", "127.0.0.1:0"}, serveArgs...)...)
	if code := again.wait(t, 30*time.Second); code != 0 || !strings.Contains(again.output(), "resumed after round 2") {
		t.Errorf("serve again on the store: exit %d:\n%s", code, again.output())
	} else if p2, _, _ := calibFile(t, out); p2 != params {
		t.Errorf("serve again on the store wrote %s, first %s", p2, params)
	}
	for _, r := range rec {
		if !reflect.DeepEqual(r.Participants, []int{0, 1, 2, 3, 4}) || !reflect.DeepEqual(r.Dropouts, []int{5, 6, 7}) {
			t.Errorf("round %d: participants %v, dropouts %v; want the honest clients 0-4 and the refused 5-7", r.Round, r.Participants, r.Dropouts)
		}
	}
}

// pubOf returns the public key of f's client i.
func pubOf(t *testing.T, f *fed, i int) string {
	t.Helper()
	k, err := network.ReadKey(f.keys[i])
	if err != nil {
		t.Fatal(err)
	}
	return k.Public
}
