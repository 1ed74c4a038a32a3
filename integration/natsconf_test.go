package integration

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/fedcalib/fedcalib/network"
)

// The example deployments of docs/NETWORK.md: the nats-server
// configuration files docs/nats/*.conf (written by
// integration/testdata/nats/gen.go) and the example identities they admit
// (integration/testdata/nats/*.nk, allow.txt), for federation "demo".
const (
	confDir = "../docs/nats"
	idDir   = "testdata/nats"
	confFed = "demo"
)

// natsFromConf starts, in this process, a nats-server from the
// configuration file name of docs/nats: everything as the file says
// (users and their permissions, accounts, JetStream, the cluster's name)
// except where it listens (127.0.0.1 and port, and for a cluster node
// routePort and the routes to the other nodes' routePorts) and where it
// stores (a temporary directory).
func natsFromConf(t *testing.T, name string, port, routePort int, routes []int) *server.Server {
	t.Helper()
	opts, err := server.ProcessConfigFile(filepath.Join(confDir, name))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	opts.Host, opts.Port, opts.StoreDir = "127.0.0.1", port, t.TempDir()
	opts.NoLog, opts.NoSigs = true, true
	if routePort != 0 {
		if opts.Cluster.Port == 0 {
			t.Fatalf("%s has no cluster block", name)
		}
		opts.Cluster.Host, opts.Cluster.Port = "127.0.0.1", routePort
		opts.Routes = nil
		for _, p := range routes {
			opts.Routes = append(opts.Routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)})
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go s.Start()
	if !s.ReadyForConnections(20 * time.Second) {
		t.Fatalf("%s: not ready", name)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// confIdentity copies the example identity name (a seed file) to dir with
// mode 0600 (git keeps no mode) and returns its path.
func confIdentity(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(idDir, name+".nk"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name+".nk")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestNATSConfigs runs serve --nats and join, in fresh processes, on
// nats-servers started from the configuration files that docs/NETWORK.md
// shows (and the test checks that it shows them verbatim): NKey users of
// the configuration file with their permissions, operator mode (JWTs of
// one JetStream account), and a three-node JetStream cluster with the
// bucket's replicas 3 that loses a node mid-run. Each run's calibrator
// equals calibrate's bit for bit; a second serve of the same federation
// on the same deployment stops at once with exit status 4 and one line
// naming the first.
func TestNATSConfigs(t *testing.T) {
	doc, err := os.ReadFile("../docs/NETWORK.md")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"users.conf", "nkeys.conf", "operator.conf", "cluster-a.conf", "cluster-b.conf", "cluster-c.conf"}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(confDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(doc), string(b)) {
			t.Errorf("docs/NETWORK.md does not show docs/nats/%s as it is", name)
		}
	}
	// The permissions of users.conf are those the code asks for.
	opts, err := server.ProcessConfigFile(filepath.Join(confDir, "nkeys.conf"))
	if err != nil {
		t.Fatal(err)
	}
	allow, err := network.ReadAllowList(filepath.Join(idDir, "allow.txt"))
	if err != nil {
		t.Fatal(err)
	}
	coordKey, err := network.ReadKey(confIdentity(t, t.TempDir(), "coordinator"))
	if err != nil {
		t.Fatal(err)
	}
	perms := map[string]*server.Permissions{coordKey.Public: network.CoordinatorPermissions(confFed)}
	for _, pub := range allow {
		perms[pub] = network.ClientPermissions(confFed, pub)
	}
	if len(opts.Nkeys) != len(perms) {
		t.Errorf("users.conf has %d users, want %d", len(opts.Nkeys), len(perms))
	}
	for _, u := range opts.Nkeys {
		if want := perms[u.Nkey]; !reflect.DeepEqual(u.Permissions.Publish.Allow, want.Publish.Allow) || !reflect.DeepEqual(u.Permissions.Subscribe.Allow, want.Subscribe.Allow) {
			t.Errorf("users.conf: the permissions of %s are not the code's", u.Nkey)
		}
	}
	if t.Failed() {
		return
	}

	bin := networkBin(t)
	K := len(allow)
	f := newFedData(t, bin, K)
	f.allow = filepath.Join(idDir, "allow.txt")
	for k := range K {
		f.keys = append(f.keys, confIdentity(t, f.dir, fmt.Sprintf("client%d", k)))
	}
	coord := confIdentity(t, f.dir, "coordinator")
	protocol := []string{"--method", "temp", "--epsilon", "2", "--rounds", "3", "--sample-rate", "1", "--seed", "7"}
	sim := filepath.Join(t.TempDir(), "sim.json")
	if out, code := run(t, bin, append([]string{"calibrate", "--logits", f.logits, "--partition", f.partition, "-q", "--out", sim}, protocol...)...); code != 0 {
		t.Fatalf("calibrate: %s", out)
	}
	want, _, _ := calibFile(t, sim)

	// fedRun runs serve --nats urls --creds creds and K joins with keys,
	// a second serve while the first runs, and stop(), if not nil, after
	// round 1; the calibrator must be calibrate's.
	fedRun := func(t *testing.T, urls, creds string, keys []string, extra []string, stop func()) {
		t.Helper()
		out := filepath.Join(t.TempDir(), "net.json")
		serve := func(out string) []string {
			args := []string{"serve", "--nats", urls, "--creds", creds, "--federation", confFed, "--clients", f.allow,
				"--min-clients", fmt.Sprint(K), "--round-timeout", "30s", "--enrol-timeout", "60s", "--out", out}
			return append(append(args, extra...), protocol...)
		}
		srv := start(t, bin, serve(out)...)
		waitLease(t, urls, creds) // it takes the lease, then waits for the clients
		second := start(t, bin, serve(filepath.Join(t.TempDir(), "second.json"))...)
		if code := second.wait(t, 10*time.Second); code != 4 || !regexp.MustCompile(`coordinated by fedcalib serve \(pid \d+ on `).MatchString(second.output()) || strings.Count(strings.TrimSpace(second.output()), "\n") != 0 {
			t.Errorf("a second serve of the federation: exit %d, %q; want 4 and one line naming the first", code, second.output())
		}
		var joins []*proc
		for i := range K {
			joins = append(joins, start(t, bin, "join", "--server", urls, "--federation", confFed, "--key", keys[i], "--logits", f.logits, "--partition", f.partition))
		}
		if stop != nil {
			srv.expect(t, regexp.MustCompile(`^round 1/3`), 60*time.Second)
			stop()
		}
		if code := srv.wait(t, 120*time.Second); code != 0 {
			t.Fatalf("serve exited %d:\n%s", code, srv.output())
		}
		for i, j := range joins {
			if code := j.wait(t, 10*time.Second); code != 0 {
				t.Errorf("join %d exited %d:\n%s", i, code, j.output())
			}
		}
		if got, _, _ := calibFile(t, out); got != want {
			t.Errorf("parameters %s, calibrate's %s", got, want)
		}
	}

	t.Run("nkey users", func(t *testing.T) {
		s := natsFromConf(t, "nkeys.conf", freePort(t), 0, nil)
		fedRun(t, s.ClientURL(), coord, f.keys, nil, nil)
	})

	t.Run("operator", func(t *testing.T) {
		s := natsFromConf(t, "operator.conf", freePort(t), 0, nil)
		// The account issues each user a JWT with its permissions, as the
		// operator does with nsc; the clients join it to their key.
		b, err := os.ReadFile(filepath.Join(idDir, "account.nk"))
		if err != nil {
			t.Fatal(err)
		}
		acc, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
		if err != nil {
			t.Fatal(err)
		}
		issue := func(key string, perms *server.Permissions) string {
			k, err := network.ReadKey(key)
			if err != nil {
				t.Fatal(err)
			}
			uc := jwt.NewUserClaims(k.Public)
			uc.Pub.Allow.Add(perms.Publish.Allow...)
			uc.Sub.Allow.Add(perms.Subscribe.Allow...)
			token, err := uc.Encode(acc)
			if err != nil {
				t.Fatal(err)
			}
			jwtPath := filepath.Join(t.TempDir(), "u.jwt")
			if err := os.WriteFile(jwtPath, []byte(token), 0o644); err != nil {
				t.Fatal(err)
			}
			creds := filepath.Join(t.TempDir(), "u.creds")
			if out, code := run(t, bin, "keys", "creds", "--key", key, "--jwt", jwtPath, "--out", creds); code != 0 {
				t.Fatalf("keys creds: %s", out)
			}
			return creds
		}
		var keys []string
		for k, key := range f.keys {
			keys = append(keys, issue(key, network.ClientPermissions(confFed, allow[k])))
		}
		fedRun(t, s.ClientURL(), issue(coord, network.CoordinatorPermissions(confFed)), keys, nil, nil)
	})

	t.Run("three-node cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("a three-node JetStream cluster takes seconds to elect its leaders")
		}
		ports := make([]int, 6)
		for i := range ports {
			ports[i] = freePort(t)
		}
		var nodes []*server.Server
		var urls []string
		for i, name := range []string{"cluster-a.conf", "cluster-b.conf", "cluster-c.conf"} {
			var routes []int
			for j := range 3 {
				if j != i {
					routes = append(routes, ports[3+j])
				}
			}
			s := natsFromConf(t, name, ports[i], ports[3+i], routes)
			nodes = append(nodes, s)
			urls = append(urls, s.ClientURL())
		}
		for _, s := range nodes {
			if !s.JetStreamEnabled() {
				t.Fatal("a node without JetStream")
			}
		}
		fedRun(t, strings.Join(urls, ","), coord, f.keys, []string{"--replicas", "3"}, func() { nodes[1].Shutdown() })
	})
}

// waitLease waits until the coordinator of federation demo on urls holds
// its lease, reading the bucket as the coordinator's user (creds) may.
func waitLease(t *testing.T, urls, creds string) {
	t.Helper()
	k, err := network.ReadKey(creds)
	if err != nil {
		t.Fatal(err)
	}
	d := network.Dial{URL: urls, Seed: k.Seed, Creds: k.Creds}
	nc, err := d.Coordinator(confFed).Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		kv, err := js.KeyValue(ctx, "fedcalib_"+confFed)
		if err == nil {
			_, err = kv.Get(ctx, "lease")
		}
		cancel()
		if err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("the coordinator took no lease within 60s")
}
