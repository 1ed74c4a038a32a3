package integration

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/fedcalib/fedcalib/network"
)

// operator is a NATS deployment in operator mode, as an external
// operator runs one: an operator, a system account and one account for
// the federation, whose users are issued JWTs with their permissions.
type operator struct {
	claims   *jwt.OperatorClaims
	resolver *server.MemAccResolver
	sys      string        // the system account's public key
	account  nkeys.KeyPair // signs the federation's users
	accPub   string
	leafPort int // the hub's leaf node port
}

// newOperator creates the operator, its system account and the
// federation's account (JetStream enabled, no limits).
func newOperator(t *testing.T) *operator {
	t.Helper()
	opKP, err := nkeys.CreateOperator()
	if err != nil {
		t.Fatal(err)
	}
	opPub, _ := opKP.PublicKey()
	opJWT, err := jwt.NewOperatorClaims(opPub).Encode(opKP)
	if err != nil {
		t.Fatal(err)
	}
	o := &operator{resolver: &server.MemAccResolver{}, leafPort: freePort(t)}
	if o.claims, err = jwt.DecodeOperatorClaims(opJWT); err != nil {
		t.Fatal(err)
	}
	account := func(js bool) (nkeys.KeyPair, string) {
		kp, err := nkeys.CreateAccount()
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := kp.PublicKey()
		ac := jwt.NewAccountClaims(pub)
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		s, err := ac.Encode(opKP)
		if err != nil {
			t.Fatal(err)
		}
		if err := o.resolver.Store(pub, s); err != nil {
			t.Fatal(err)
		}
		return kp, pub
	}
	_, o.sys = account(false)
	o.account, o.accPub = account(true)
	return o
}

// freePort returns a TCP port of the loopback interface that was free a
// moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// creds writes a credentials file for the user key kp of the federation's
// account, with perms (nil: no restriction), and returns its path.
func (o *operator) creds(t *testing.T, path string, kp nkeys.KeyPair, perms *server.Permissions) string {
	t.Helper()
	pub, _ := kp.PublicKey()
	ujwt := o.userJWT(t, pub, perms)
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	b, err := jwt.FormatUserConfig(ujwt, seed)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// userJWT returns the user JWT of the federation's account for the user
// public key pub, with perms (nil: no restriction).
func (o *operator) userJWT(t *testing.T, pub string, perms *server.Permissions) string {
	t.Helper()
	uc := jwt.NewUserClaims(pub)
	if perms != nil {
		uc.Pub.Allow.Add(perms.Publish.Allow...)
		uc.Sub.Allow.Add(perms.Subscribe.Allow...)
	}
	token, err := uc.Encode(o.account)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// server starts a NATS server trusting the operator: with JetStream and
// a leaf node listener (the hub), or as a leaf node of hub connecting
// with the credentials leafCreds.
func (o *operator) server(t *testing.T, hub *server.Server, leafCreds string) *server.Server {
	t.Helper()
	opts := &server.Options{
		Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		TrustedOperators: []*jwt.OperatorClaims{o.claims},
		AccountResolver:  o.resolver,
		SystemAccount:    o.sys,
	}
	if hub == nil {
		opts.JetStream, opts.StoreDir = true, t.TempDir()
		opts.LeafNode = server.LeafNodeOpts{Host: "127.0.0.1", Port: o.leafPort}
	} else {
		u := &url.URL{Scheme: "nats-leaf", Host: fmt.Sprintf("127.0.0.1:%d", o.leafPort)}
		opts.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: []*url.URL{u}, Credentials: leafCreds, LocalAccount: o.accPub}}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// TestExternalNATS runs serve --nats --creds and join with credentials
// files (made by "fedcalib keys creds" from the client's key and the
// operator's JWT) against a NATS deployment in operator mode that the test runs as
// an external operator would (JWT accounts; each client's permissions,
// network.ClientPermissions, in its user JWT): directly on the JetStream
// server, and with the clients behind a leaf node. Each run's calibrator
// equals calibrate's bit for bit, and a client cannot read another
// client's updates.
func TestExternalNATS(t *testing.T) {
	const K = 6
	bin := networkBin(t)
	f := newFed(t, bin, K, 0)
	o := newOperator(t)
	hub := o.server(t, nil, "")
	coordKP, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	coord := o.creds(t, filepath.Join(f.dir, "coordinator.creds"), coordKP, nil)
	leafKP, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	leaf := o.server(t, hub, o.creds(t, filepath.Join(f.dir, "leaf.creds"), leafKP, nil))
	protocol := []string{"--method", "temp", "--epsilon", "2", "--rounds", "3", "--sample-rate", "0.5", "--seed", "7"}
	sim := filepath.Join(t.TempDir(), "sim.json")
	if out, code := run(t, bin, append([]string{"calibrate", "--logits", f.logits, "--partition", f.partition, "-q", "--out", sim}, protocol...)...); code != 0 {
		t.Fatalf("calibrate: %s", out)
	}
	want, _, _ := calibFile(t, sim)

	for _, tc := range []struct {
		name   string
		client *server.Server // where the clients connect
	}{
		{"cluster", hub},
		{"leaf node", leaf},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A fresh federation name a run, as the hub's JetStream keeps
			// the last run's checkpoint. The clients keep the keys of
			// "fedcalib keys new" (on the allow-list); the operator issues
			// each a user JWT for its key, with the federation's client
			// permissions.
			// The operator sees only the public key; "fedcalib keys creds"
			// joins the JWT and the client's seed.
			fedName := strings.ReplaceAll(tc.name, " ", "-")
			perms := make([]string, K)
			for i, kf := range f.keys {
				k, err := network.ReadKey(kf)
				if err != nil {
					t.Fatal(err)
				}
				token := filepath.Join(t.TempDir(), "c.jwt")
				if err := os.WriteFile(token, []byte(o.userJWT(t, k.Public, network.ClientPermissions(fedName, k.Public))), 0o644); err != nil {
					t.Fatal(err)
				}
				perms[i] = filepath.Join(t.TempDir(), "c.creds")
				if out, code := run(t, bin, "keys", "creds", "--key", kf, "--jwt", token, "--out", perms[i]); code != 0 {
					t.Fatalf("keys creds: %s", out)
				}
			}
			net := filepath.Join(t.TempDir(), "net.json")
			srv := start(t, bin, append([]string{"serve", "--nats", hub.ClientURL(), "--creds", coord, "--federation", fedName,
				"--clients", f.allow, "--min-clients", "2", "--round-timeout", "30s", "--enrol-timeout", "60s", "--out", net}, protocol...)...)
			var joins []*proc
			for i := range K {
				joins = append(joins, start(t, bin, "join", "--server", tc.client.ClientURL(), "--federation", fedName,
					"--key", perms[i], "--logits", f.logits, "--partition", f.partition))
			}
			if code := srv.wait(t, 90*time.Second); code != 0 {
				t.Fatalf("serve exited %d:\n%s", code, srv.output())
			}
			for i, j := range joins {
				if code := j.wait(t, 10*time.Second); code != 0 {
					t.Errorf("join %d exited %d:\n%s", i, code, j.output())
				}
			}
			if got, _, _ := calibFile(t, net); got != want {
				t.Errorf("serve over %s: parameters %s, calibrate's %s", tc.name, got, want)
			}

			// Client 0's credentials do not let it read client 1's updates.
			errs := make(chan error, 4)
			nc, err := nats.Connect(tc.client.ClientURL(), nats.UserCredentials(perms[0]),
				nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if _, err := nc.SubscribeSync("fedcalib." + fedName + ".update.>"); err != nil {
				t.Fatal(err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-errs:
				if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
					t.Errorf("subscribing to the updates: %v, want a permissions violation", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("client 0 subscribed to every client's updates without a permissions violation")
			}
		})
	}
}
