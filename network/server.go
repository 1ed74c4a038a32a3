package network

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// ServerConfig configures the embedded NATS server of a coordinator. The
// zero value is not usable: Store and Clients must be set.
type ServerConfig struct {
	// Listen is the client listener's host:port; empty means
	// 127.0.0.1:4222, port 0 a free port.
	Listen string
	// Store is the directory of JetStream's storage and of the
	// development TLS certificate (Store/tls).
	Store string
	// Federation is the federation's name; empty means
	// DefaultFederation.
	Federation string
	// Clients is the allow-list: the NKey public keys of the clients,
	// which the server admits with ClientPermissions.
	Clients []string
	// CoordinatorSeed is the NKey user seed of the coordinator, admitted
	// with CoordinatorPermissions; nil means a key generated for this server
	// (one process: Server.Dial uses it). A cluster's servers share one.
	CoordinatorSeed []byte
	// Certificate is the TLS certificate to serve; nil means the
	// development certificate of DevCertificate in Store/tls.
	Certificate *tls.Certificate
	// Plaintext serves without TLS, which is refused on an address other
	// than loopback unless Insecure is set.
	Plaintext bool
	// Insecure allows Plaintext on any address.
	Insecure bool
	// Name is the server's name, needed in a cluster; empty means one
	// made from the listen address.
	Name string
	// Cluster, if not nil, makes the server a node of a NATS cluster.
	Cluster *ClusterConfig
	// SyncAlways makes JetStream sync every write (each stored update,
	// each checkpoint) to disk before acknowledging it, so that a closed
	// round survives a power loss or a crash of the operating system.
	// False uses JetStream's default: every write reaches the operating
	// system before it is acknowledged, so a crash of the process (even
	// SIGKILL) loses nothing, and the files are synced every two minutes,
	// so a power loss can lose the writes of up to the last two minutes
	// (see docs/NETWORK.md, "Durability"). Syncing every write costs a
	// disk flush per update: about 4 ms each on a slow virtual disk.
	SyncAlways bool

	// admin, in tests, is the public key of a user admitted with every
	// permission, to watch what the coordinator does.
	admin string
}

// ClusterConfig makes an embedded server a node of a NATS cluster with
// clustered JetStream. The zero value is not usable: Listen must be set.
type ClusterConfig struct {
	// Name is the cluster's name; empty means "fedcalib".
	Name string
	// Listen is the route listener's host:port.
	Listen string
	// Routes are the nats-route://host:port URLs of the other nodes.
	Routes []string
}

// Server is an embedded NATS server with JetStream, serving one
// federation. Its zero value is not usable; NewServer makes one.
type Server struct {
	ns          *server.Server
	url         string
	fingerprint string
	coordSeed   []byte
	fed         string
	lock        *os.File // the store's lock (lockStore), held until Shutdown
	warnings    []string
}

// NewServer starts an embedded NATS server and waits until it accepts
// connections. It locks the store directory (the file Store/LOCK) until
// Shutdown, so that no second server, and so no second coordinator, runs
// on it: while another process holds it, NewServer returns an error
// wrapping ErrLocked that names the holder. Errors wrap ErrConfig,
// ErrInsecure or ErrLocked.
func NewServer(cfg ServerConfig) (*Server, error) {
	fed := fedOr(cfg.Federation)
	if err := ValidFederation(fed); err != nil {
		return nil, err
	}
	if cfg.Store == "" {
		return nil, fmt.Errorf("%w: no store directory", ErrConfig)
	}
	if len(cfg.Clients) == 0 {
		return nil, fmt.Errorf("%w: no clients on the allow-list", ErrConfig)
	}
	listen := cfg.Listen
	if listen == "" {
		listen = "127.0.0.1:4222"
	}
	host, port, err := splitHostPort(listen)
	if err != nil {
		return nil, err
	}
	if cfg.Plaintext && !cfg.Insecure && !loopback(host) {
		return nil, fmt.Errorf("%w: a plaintext listener on %s would send updates in the clear: serve TLS, listen on loopback, or pass --insecure", ErrInsecure, listen)
	}
	if err := os.MkdirAll(cfg.Store, 0o700); err != nil {
		return nil, fmt.Errorf("%w: store: %w", ErrConfig, err)
	}
	lock, err := lockStore(cfg.Store)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			lock.Close()
		}
	}()
	s := &Server{coordSeed: cfg.CoordinatorSeed, fed: fed, lock: lock}
	if s.coordSeed == nil {
		if s.coordSeed, _, err = NewKey(); err != nil {
			return nil, err
		}
	}
	coord, err := nkeys.FromSeed(s.coordSeed)
	if err != nil {
		return nil, fmt.Errorf("%w: coordinator seed: %w", ErrKey, err)
	}
	coordPub, err := coord.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("%w: coordinator seed: %w", ErrKey, err)
	}
	users := []*server.NkeyUser{{Nkey: coordPub, Permissions: CoordinatorPermissions(fed)}}
	if cfg.admin != "" {
		users = append(users, &server.NkeyUser{Nkey: cfg.admin}) // tests: every permission
	}
	for _, pub := range cfg.Clients {
		if !nkeys.IsValidPublicUserKey(pub) {
			return nil, fmt.Errorf("%w: %q is not an NKey user public key", ErrAllowList, pub)
		}
		users = append(users, &server.NkeyUser{Nkey: pub, Permissions: ClientPermissions(fed, pub)})
	}
	opts := &server.Options{
		ServerName: cfg.Name,
		Host:       host,
		Port:       port,
		Nkeys:      users,
		JetStream:  true,
		StoreDir:   filepath.Join(cfg.Store, "jetstream"),
		SyncAlways: cfg.SyncAlways,
		NoLog:      true,
		NoSigs:     true,
	}
	if port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	if !cfg.Plaintext {
		cert := cfg.Certificate
		if cert == nil {
			c, err := DevCertificate(filepath.Join(cfg.Store, "tls"), host)
			if err != nil {
				return nil, err
			}
			cert = &c
		}
		opts.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}
		opts.TLS = true
		opts.TLSTimeout = 5
		s.fingerprint = Fingerprint(*cert)
	}
	if c := cfg.Cluster; c != nil {
		ch, cp, err := splitHostPort(c.Listen)
		if err != nil {
			return nil, err
		}
		opts.Cluster = server.ClusterOpts{Name: c.Name, Host: ch, Port: cp}
		if opts.Cluster.Name == "" {
			opts.Cluster.Name = "fedcalib"
		}
		for _, r := range c.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("%w: route %q: %w", ErrConfig, r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
		if opts.ServerName == "" {
			opts.ServerName = "fedcalib-" + listen
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("%w: the NATS server did not start listening on %s within 10s (is the port taken?)", ErrConfig, listen)
	}
	addr, ok := ns.Addr().(*net.TCPAddr)
	if !ok {
		ns.Shutdown()
		return nil, fmt.Errorf("%w: the NATS server has no TCP listener", ErrConfig)
	}
	scheme := "tls"
	if cfg.Plaintext {
		scheme = "nats"
	}
	h := host
	if h == "" || h == "0.0.0.0" || h == "::" {
		// Every interface: other machines reach it by this machine's
		// name, not by 127.0.0.1.
		h = "127.0.0.1"
		if name, err := os.Hostname(); err == nil && name != "" {
			h = name
		}
	}
	if cfg.Plaintext && !loopback(host) {
		s.warnings = append(s.warnings, fmt.Sprintf("serving plaintext on %s (--insecure): every update and welcome crosses the network in the clear, readable and alterable by anyone on the path; serve TLS unless this network is trusted", listen))
	}
	s.url = scheme + "://" + net.JoinHostPort(h, strconv.Itoa(addr.Port))
	s.ns = ns
	ok = true
	return s, nil
}

// URL returns the URL clients connect to: tls://host:port, or
// nats://host:port for a plaintext server, with this machine's host name
// for a server listening on every interface (0.0.0.0 or ::).
func (s *Server) URL() string { return s.url }

// Warnings returns what the operator should know about how the server
// listens: plaintext on an address other than loopback (Insecure).
func (s *Server) Warnings() []string { return s.warnings }

// Fingerprint returns the SHA-256 fingerprint of the server's TLS
// certificate, empty for a plaintext server.
func (s *Server) Fingerprint() string { return s.fingerprint }

// Dial returns the dial settings of the coordinator's own connection to s:
// an in-process connection (no socket, no TLS), which s must outlive.
func (s *Server) Dial() Dial {
	return Dial{URL: s.url, Seed: s.coordSeed, Fingerprint: s.fingerprint, Name: "fedcalib coordinator", inProcess: s.ns}.Coordinator(s.fed)
}

// Shutdown stops the server and waits until it has stopped.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	s.lock.Close()
}

func splitHostPort(hp string) (string, int, error) {
	host, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, fmt.Errorf("%w: address %q: want host:port, e.g. 127.0.0.1:4222: %w", ErrConfig, hp, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%w: address %q: port %q is not 0 to 65535", ErrConfig, hp, p)
	}
	return host, port, nil
}
