//go:build ignore

// gen writes the example nats-server configurations of docs/NETWORK.md
// (docs/nats/*.conf) and the example identities they admit
// (integration/testdata/nats/*.nk), which integration/natsconf_test.go
// runs. Run from the repository root: go run integration/testdata/nats/gen.go
package main

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/fedcalib/fedcalib/network"
)

const (
	fed     = "demo" // the federation of the examples
	clients = 3
	docs    = "docs/nats"
	keys    = "integration/testdata/nats"
)

func main() {
	// The identities: the coordinator and three clients.
	coord := user("coordinator")
	var cl []string
	for k := range clients {
		cl = append(cl, user(fmt.Sprintf("client%d", k)))
	}
	write(filepath.Join(keys, "allow.txt"), strings.Join(cl, "\n")+"\n")

	// Config-file NKey users with their permissions, shared by the
	// single server and the cluster's nodes.
	var b strings.Builder
	fmt.Fprintf(&b, "# The users of federation %q: the coordinator and one client a line of\n", fed)
	b.WriteString("# its allow-list, each with the least permissions it needs\n")
	b.WriteString("# (network.CoordinatorPermissions, network.ClientPermissions).\n")
	b.WriteString("authorization {\n  users = [\n")
	b.WriteString("    # the coordinator: fedcalib serve --nats ... --creds coordinator.nk\n")
	b.WriteString(userEntry(coord, network.CoordinatorPermissions(fed)))
	for k, pub := range cl {
		fmt.Fprintf(&b, "    # client %d: fedcalib join --key client%d.nk (line %d of the allow-list)\n", k, k, k)
		b.WriteString(userEntry(pub, network.ClientPermissions(fed, pub)))
	}
	b.WriteString("  ]\n}\n")
	write(filepath.Join(docs, "users.conf"), b.String())

	write(filepath.Join(docs, "nkeys.conf"), `# One nats-server with JetStream whose users are NKeys of its configuration
# file (users.conf). Serve TLS to other machines: uncomment the tls block.
server_name: fedcalib
listen: 0.0.0.0:4222
jetstream {
  store_dir: /var/lib/nats
}
# tls {
#   cert_file: /etc/nats/server.pem
#   key_file: /etc/nats/server-key.pem
# }
include users.conf
`)
	for i, name := range []string{"a", "b", "c"} {
		var routes []string
		for j := range 3 {
			if j != i {
				routes = append(routes, fmt.Sprintf("    nats-route://node-%c.example:%d", 'a'+j, 6222))
			}
		}
		write(filepath.Join(docs, "cluster-"+name+".conf"), fmt.Sprintf(`# Node %s of a three-node JetStream cluster (serve --replicas 3): the same
# users on every node (users.conf).
server_name: node-%s
listen: 0.0.0.0:4222
jetstream {
  store_dir: /var/lib/nats
}
cluster {
  name: fedcalib
  listen: 0.0.0.0:6222
  routes: [
%s
  ]
}
include users.conf
`, name, name, strings.Join(routes, "\n")))
	}

	// Operator mode: an operator, its system account and the
	// federation's account, with JetStream, holding the coordinator and
	// the clients (users with JWTs the account issues).
	op, _ := nkeys.CreateOperator()
	opPub, _ := op.PublicKey()
	opJWT, err := jwt.NewOperatorClaims(opPub).Encode(op)
	check(err)
	account := func(name string, js bool) (nkeys.KeyPair, string, string) {
		kp, _ := nkeys.CreateAccount()
		pub, _ := kp.PublicKey()
		ac := jwt.NewAccountClaims(pub)
		ac.Name = name
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		token, err := ac.Encode(op)
		check(err)
		return kp, pub, token
	}
	_, sysPub, sysJWT := account("SYS", false)
	acc, accPub, accJWT := account("FEDCALIB", true)
	seed, _ := acc.Seed()
	write(filepath.Join(keys, "account.nk"), string(seed)+"\n")
	write(filepath.Join(docs, "operator.conf"), fmt.Sprintf(`# One nats-server in operator mode: the operator's JWT, its system account
# and the federation's account FEDCALIB (JetStream enabled), which holds the
# coordinator and every client as users whose JWTs the account issues
# (with nsc; see docs/NETWORK.md).
server_name: fedcalib
listen: 0.0.0.0:4222
jetstream {
  store_dir: /var/lib/nats
}
operator: %s
system_account: %s
resolver: MEMORY
resolver_preload: {
  # SYS
  %s: %s
  # FEDCALIB (%s)
  %s: %s
}
`, opJWT, sysPub, sysPub, sysJWT, accPub, accPub, accJWT))
}

// user makes the identity name: its seed file, and its public key.
func user(name string) string {
	kp, err := nkeys.CreateUser()
	check(err)
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	write(filepath.Join(keys, name+".nk"), string(seed)+"\n")
	return pub
}

// userEntry is the users.conf entry of the key pub with perms.
func userEntry(pub string, perms *server.Permissions) string {
	list := func(subjects []string) string {
		q := make([]string, len(subjects))
		for i, s := range subjects {
			q[i] = fmt.Sprintf("%q", s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	return fmt.Sprintf("    {\n      nkey: %s\n      permissions: {\n        publish: { allow: %s }\n        subscribe: { allow: %s }\n      }\n    }\n",
		pub, list(perms.Publish.Allow), list(perms.Subscribe.Allow))
}

func write(path, s string) {
	check(os.WriteFile(path, []byte(s), 0o600))
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
