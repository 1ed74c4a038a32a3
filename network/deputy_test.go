package network

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fedcalib/fedcalib/federation"
)

func TestOwnInbox(t *testing.T) {
	const fed, pub, other = "F", "UAAA", "UBBB"
	for _, tc := range []struct {
		reply string
		want  bool
	}{
		{"fedcalib.F.inbox.UAAA.x", true},
		{"fedcalib.F.inbox.UAAA.abc.def", true},
		{"fedcalib.F.inbox.UAAA", false},  // the prefix itself
		{"fedcalib.F.inbox.UAAA.", false}, // an empty token
		{"fedcalib.F.inbox.UAAA..x", false},
		{"fedcalib.F.inbox.UAAA.>", false},
		{"fedcalib.F.inbox.UAAA.*", false},
		{"fedcalib.F.inbox.UAAA.x y", false},
		{"fedcalib.F.inbox.UAAA.x\r\nPUB a 1", false},
		{"fedcalib.F.inbox.UAAAB.x", false}, // another key that starts alike
		{"fedcalib.F.inbox.UBBB.x", false},
		{"fedcalib.G.inbox.UAAA.x", false},
		{"fedcalib.F.update.UBBB", false},
		{"fedcalib.F.round", false},
		{"$KV.fedcalib_F.settings", false},
		{"$JS.API.STREAM.DELETE.KV_fedcalib_F", false},
		{"_INBOX.abc", false},
		{"", false},
	} {
		if got := ownInbox(fed, pub, tc.reply); got != tc.want {
			t.Errorf("ownInbox(%q) = %v, want %v", tc.reply, got, tc.want)
		}
	}
	if ownInbox(fed, "", "fedcalib.F.inbox..x") || ownInbox(fed, "*", "fedcalib.F.inbox.*.x") || ownInbox(fed, other+".x", "fedcalib.F.inbox.UBBB.x.y") {
		t.Error("a key with no token, a wildcard or a dot has an inbox")
	}
}

// hostileReplies are the reply subjects a client (attacker, of h) puts on
// its requests to have the coordinator write where it may not: another
// client's (victim's) update subject and inbox, the bucket, the
// JetStream API, the round subject.
func hostileReplies(attacker, victim string) []string {
	fed := DefaultFederation
	b := bucketName(fed)
	return []string{
		subjUpdate(fed, victim),
		subjEnrol(fed, victim),
		subjInvite(fed, victim),
		inboxPrefix(fed, victim) + ".x",
		subjRound(fed),
		"$KV." + b + ".settings",
		"$KV." + b + ".checkpoint",
		"$KV." + b + ".evil",
		"$JS.API.STREAM.DELETE.KV_" + b,
		"$JS.API.STREAM.PURGE.KV_" + b,
		"$JS.API.STREAM.CREATE.EVIL",
		inboxPrefix(fed, attacker) + ".>", // its own inbox, as a wildcard
		"_INBOX.evil",
	}
}

// spy records what is published on subjects, through h's admin user.
type spy struct {
	mu   sync.Mutex
	msgs map[string][][]byte
}

func (h *harness) spy(t *testing.T, subjects []string) *spy {
	t.Helper()
	nc := h.adminConn(t)
	s := &spy{msgs: map[string][][]byte{}}
	for _, subj := range subjects {
		if strings.HasSuffix(subj, ">") {
			subj = strings.TrimSuffix(subj, ">") + "x" // a wildcard reply names no subject; watch one under it
		}
		if _, err := nc.Subscribe(subj, func(m *nats.Msg) {
			s.mu.Lock()
			s.msgs[m.Subject] = append(s.msgs[m.Subject], m.Data)
			s.mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestHostileReplySubjects: a client whose enrolment requests and updates
// carry a reply subject outside its own inbox gets no answer, and the
// coordinator publishes nothing there — not on another client's update
// subject or inbox, the round subject, the bucket or the JetStream API —
// so the other clients' updates all count (the run equals the
// simulation) and the bucket holds only the run's settings and
// checkpoint.
func TestHostileReplySubjects(t *testing.T) {
	const K, C = 3, 3
	pop := population(t, 900, C, K)
	spec := federation.Spec{Method: "temp", Epsilon: 4}
	r := federation.Rounds{T: 2, SampleRate: 1, Seed: 11}
	h := newHarness(t, K, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const attacker, victim = 0, 1
	hostile := hostileReplies(h.pubs[attacker], h.pubs[victim])
	sp := h.spy(t, hostile)

	// The attacker's second connection: hostile enrolment requests as
	// soon as the coordinator listens, and a hostile copy of its update
	// to every invitation (its honest Join, below, sends the real one).
	errs := make(chan error, 16)
	nc := h.clientConn(t, attacker, errs)
	anns := make(chan *nats.Msg, 16)
	if _, err := nc.ChanSubscribe(subjInvite(DefaultFederation, h.pubs[attacker]), anns); err != nil {
		t.Fatal(err)
	}
	hostileDone := make(chan struct{})
	go func() {
		defer close(hostileDone)
		// Wait for the coordinator: an honest hello is answered.
		if _, err := request(ctx, nc, DefaultFederation, h.pubs[attacker], hello{Kind: "hello", Version: Version}, 20*time.Second, errs); err != nil {
			t.Error(err)
			return
		}
		for _, reply := range hostile {
			for _, req := range []any{hello{Kind: "hello", Version: Version}, ready{Kind: "ready", Version: Version, Classes: C}} {
				b, _ := json.Marshal(req)
				if err := nc.PublishRequest(subjEnrol(DefaultFederation, h.pubs[attacker]), reply, b); err != nil {
					t.Error(err)
				}
			}
		}
		nc.Flush()
	}()
	go func() {
		for m := range anns {
			var a Announcement
			if json.Unmarshal(m.Data, &a) != nil || a.Done {
				continue
			}
			for _, reply := range hostile {
				msg := &nats.Msg{Subject: subjUpdate(DefaultFederation, h.pubs[attacker]), Reply: reply, Header: nats.Header{}, Data: encodeUpdate([]float64{0}, false)}
				msg.Header.Set(hdrFederation, DefaultFederation)
				msg.Header.Set(hdrRound, itoa(a.Round))
				msg.Header.Set(hdrClient, itoa(attacker))
				nc.PublishMsg(msg)
			}
			nc.Flush()
		}
	}()
	var wait func() []error
	go func() {
		<-hostileDone
		time.Sleep(300 * time.Millisecond) // the hostile requests are handled before anyone is ready
		wait = h.joinAll(ctx, pop, upTo(K))
	}()
	out, err := h.coordinate(ctx, t, Config{Spec: spec, Rounds: r, MinClients: K, RoundTimeout: 10 * time.Second, EnrolTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	noErrors(t, wait())
	for _, rec := range out.Rounds {
		if !reflect.DeepEqual(rec.Participants, []int{0, 1, 2}) {
			t.Errorf("round %d: participants %v dropouts %v, want every client", rec.Round, rec.Participants, rec.Dropouts)
		}
	}
	if want := fit(t, spec, pop, r); !samePredictions(want.Calibrator, out.Result.Calibrator, C) || !reflect.DeepEqual(want.Privacy, out.Result.Privacy) {
		t.Errorf("the run with hostile reply subjects differs from the simulation")
	}
	// Nothing the coordinator sends in answer to a request — a welcome,
	// or an update's ack (empty, or the reason of a refusal) — reached a
	// hostile subject, and the coordinator's own puts are the only
	// messages on the bucket's subjects. (The spy also sees the honest
	// traffic on the victim's subjects: invitations, updates, hellos.)
	time.Sleep(200 * time.Millisecond)
	sp.mu.Lock()
	for subj, ms := range sp.msgs {
		for _, b := range ms {
			var w map[string]any
			answer := len(b) == 0 || strings.Contains(string(b), federation.ErrBadUpdate.Error()) ||
				json.Unmarshal(b, &w) == nil && (w["spec"] != nil || w["error"] != nil)
			own := !answer
			switch subj {
			case "$KV." + bucketName(DefaultFederation) + ".settings":
				var s settings
				own = json.Unmarshal(b, &s) == nil && slices.Equal(s.Clients, h.pubs)
			case "$KV." + bucketName(DefaultFederation) + ".checkpoint":
				var cp checkpoint
				own = json.Unmarshal(b, &cp) == nil && cp.State != nil
			}
			if !own {
				t.Errorf("the coordinator published on %s: %.120s", subj, b)
			}
		}
	}
	sp.mu.Unlock()
	_, kv := stateBucket(t, h)
	keys, err := kv.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	if want := []string{checkpointKey, settingsKey}; !slices.Equal(keys, want) {
		t.Errorf("bucket keys %v, want %v", keys, want)
	}
}

// TestCoordinatorLeastPrivilege: the coordinator's user of the embedded
// server may publish only to the federation's inboxes and round subject,
// its bucket and the JetStream API about that bucket, and read only the
// clients' requests and its own inbox; everything else is a permissions
// violation.
func TestCoordinatorLeastPrivilege(t *testing.T) {
	h := newHarness(t, 2, t.TempDir())
	fed, b := DefaultFederation, bucketName(DefaultFederation)
	connect := func(t *testing.T) (*nats.Conn, chan error) {
		errs := make(chan error, 8)
		d := h.srv.Dial()
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
		return nc, errs
	}
	for _, tc := range []struct {
		subj    string
		publish bool // else subscribe
		allowed bool
	}{
		{subjRound(fed), true, true},
		{subjInvite(fed, h.pubs[0]), true, true},
		{inboxPrefix(fed, h.pubs[1]) + ".abc", true, true},
		{"$KV." + b + ".checkpoint", true, true},
		{"$JS.API.STREAM.INFO.KV_" + b, true, true},
		{subjUpdate(fed, h.pubs[0]), true, false},
		{subjEnrol(fed, h.pubs[0]), true, false},
		{subjSecAgg(fed, h.pubs[0]), true, false},
		{"fedcalib.other.round", true, false},
		{"fedcalib.other.inbox." + h.pubs[0] + ".invite", true, false},
		{"$KV.fedcalib_other.checkpoint", true, false},
		{"$JS.API.STREAM.CREATE.EVIL", true, false},
		{"$JS.API.STREAM.DELETE.KV_fedcalib_other", true, false},
		{"$JS.API.CONSUMER.CREATE.KV_" + b, true, false},
		{"$SYS.REQ.SERVER.PING", true, false},
		{"_INBOX.abc", true, false},
		{"anything", true, false},
		{subjUpdateAll(fed), false, true},
		{subjEnrolAll(fed), false, true},
		{CoordinatorInbox(fed) + ".>", false, true},
		{inboxPrefix(fed, h.pubs[0]) + ".>", false, false},
		{subjRound(fed), false, false},
		{"_INBOX.>", false, false},
		{">", false, false},
	} {
		verb := "subscribe"
		if tc.publish {
			verb = "publish"
		}
		t.Run(verb+" "+tc.subj, func(t *testing.T) {
			nc, errs := connect(t)
			var err error
			if tc.publish {
				err = nc.Publish(tc.subj, []byte("x"))
			} else {
				_, err = nc.SubscribeSync(tc.subj)
			}
			if err != nil {
				t.Fatal(err)
			}
			nc.Flush()
			if tc.allowed {
				select {
				case err := <-errs:
					t.Errorf("refused: %v", err)
				case <-time.After(300 * time.Millisecond):
				}
			} else if permissionError(errs) == nil {
				t.Errorf("allowed")
			}
		})
	}
	// And with only these permissions it runs its bucket.
	nc, _ := connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, Storage: jetstream.FileStorage, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "v" {
		t.Fatalf("Get = %v, %v", e, err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "fedcalib_other"}); err == nil {
		t.Error("the coordinator created another federation's bucket")
	}
}
