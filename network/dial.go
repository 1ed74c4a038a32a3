package network

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Dial holds how to connect to a NATS server. The zero value is not
// usable: URL and Seed or Creds must be set.
type Dial struct {
	// URL is one or more comma-separated server URLs: tls://host:port
	// for TLS, nats://host:port for plaintext (loopback only, unless
	// Insecure).
	URL string
	// Seed is the NKey user seed to authenticate with.
	Seed []byte
	// Creds is a NATS credentials file to authenticate with instead of
	// Seed (an external NATS deployment).
	Creds string
	// Fingerprint, if set, pins the server's TLS certificate by its
	// SHA-256 fingerprint (hex) instead of verifying it against the
	// system's roots, and implies TLS.
	Fingerprint string
	// TLS, if not nil, is the client TLS configuration (e.g. with the
	// roots of a user certificate); it implies TLS.
	TLS *tls.Config
	// Insecure allows a plaintext connection to a server other than
	// loopback.
	Insecure bool
	// Name names the connection in the server's monitoring.
	Name string
	// ReconnectWait is the pause between reconnection attempts; zero
	// means 250ms.
	ReconnectWait time.Duration
	// MaxReconnects bounds the reconnection attempts after a lost
	// connection; zero means 240 (a minute at the default wait), -1
	// forever.
	MaxReconnects int
	// Wait is how long Join keeps trying its first connection while no
	// server answers (ErrUnreachable), for a coordinator not up yet; zero
	// tries once.
	Wait time.Duration
	// OnError, if not nil, receives the asynchronous errors of the
	// connection, such as a permissions violation.
	OnError func(error)

	inboxPrefix string // the connection's reply subjects: a client's inbox, or CoordinatorInbox
	// inProcess, if not nil, is the embedded server to connect to in
	// process (Server.Dial): no socket and no TLS, since nothing leaves
	// the process; URL and the TLS settings are then not used to
	// connect.
	inProcess nats.InProcessConnProvider
}

// Connect connects to the server. Errors wrap ErrUnreachable (no server
// answers), ErrNotAllowed (the server refused the key), ErrTLS (the
// server's certificate is not trusted), ErrInsecure or ErrKey.
func (d Dial) Connect() (*nats.Conn, error) {
	secure := d.Fingerprint != "" || d.TLS != nil
	for _, u := range strings.Split(d.URL, ",") {
		pu, err := url.Parse(strings.TrimSpace(u))
		if err != nil || pu.Host == "" {
			return nil, fmt.Errorf("%w: server URL %q: want tls://host:port or nats://host:port", ErrConfig, u)
		}
		switch pu.Scheme {
		case "tls":
			secure = true
		case "nats":
		default:
			return nil, fmt.Errorf("%w: server URL %q: the scheme must be tls or nats", ErrConfig, u)
		}
		if !secure && !d.Insecure && !loopback(pu.Hostname()) && d.inProcess == nil {
			return nil, fmt.Errorf("%w: %s is plaintext to a remote host: use tls://, pin the certificate, or pass --insecure", ErrInsecure, u)
		}
	}
	opts := []nats.Option{
		nats.Name(d.Name),
		nats.Timeout(5 * time.Second),
		nats.ReconnectWait(or(d.ReconnectWait, 250*time.Millisecond)),
		nats.MaxReconnects(orInt(d.MaxReconnects, 240)),
	}
	switch {
	case d.Creds != "":
		opts = append(opts, nats.UserCredentials(d.Creds))
	case d.Seed != nil:
		kp, err := nkeys.FromSeed(d.Seed)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrKey, err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrKey, err)
		}
		opts = append(opts, nats.Nkey(pub, kp.Sign))
	default:
		return nil, fmt.Errorf("%w: no key to connect with", ErrKey)
	}
	switch {
	case d.inProcess != nil:
		opts = append(opts, nats.InProcessServer(d.inProcess))
	case d.TLS != nil:
		opts = append(opts, nats.Secure(d.TLS))
	case d.Fingerprint != "":
		cfg, err := pinned(d.Fingerprint)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(cfg))
	case secure:
		opts = append(opts, nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12}))
	}
	if d.inboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(d.inboxPrefix))
	}
	if d.OnError != nil {
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { d.OnError(err) }))
	}
	servers := d.URL
	if d.inProcess != nil {
		// A tls:// URL would make the client start TLS over the pipe.
		servers = nats.DefaultURL
	}
	nc, err := nats.Connect(servers, opts...)
	switch {
	case err == nil:
		return nc, nil
	case errors.Is(err, nats.ErrAuthorization), strings.Contains(strings.ToLower(err.Error()), "authorization"):
		return nil, fmt.Errorf("%w: %s refused the key%s: %w", ErrNotAllowed, d.URL, d.refusedHint(), err)
	case errors.Is(err, nats.ErrNoServers):
		return nil, fmt.Errorf("%w: no NATS server answers at %s: %w", ErrUnreachable, d.URL, err)
	case tlsFailure(err):
		return nil, fmt.Errorf("%w: %s: %w", ErrTLS, d.URL, err)
	}
	return nil, fmt.Errorf("%w: %s: %w", ErrUnreachable, d.URL, err)
}

// Coordinator returns d set up for the coordinator of federation fed:
// its reply subjects under CoordinatorInbox(fed), the only ones that
// CoordinatorPermissions lets it read. Connect the connection given to
// Coordinator.Run with it.
func (d Dial) Coordinator(fed string) Dial {
	d.inboxPrefix = CoordinatorInbox(fed)
	return d
}

// tlsFailure reports whether err is a failed TLS handshake: a certificate
// that is not the pinned one or not trusted, or no TLS where TLS was
// asked for — a setting to fix, not a server that does not answer.
func tlsFailure(err error) bool {
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	if errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "tls error") || strings.Contains(msg, "tls:") || strings.Contains(msg, "x509:") || strings.Contains(msg, "secure connection")
}

// refusedHint says what to check when the server refuses the key: a
// client's key must be on the coordinator's allow-list; the
// coordinator's user must be known to the NATS deployment.
func (d Dial) refusedHint() string {
	if d.inboxPrefix != "" && strings.HasSuffix(d.inboxPrefix, ".coordinator") {
		return " (is the coordinator's user, --creds, one of the NATS deployment's users?)"
	}
	return " (is its public key on the coordinator's allow-list?)"
}

// connectWait connects as Connect does, trying again every second while
// no server answers, until d.Wait has passed or ctx is done.
func (d Dial) connectWait(ctx context.Context) (*nats.Conn, error) {
	deadline := time.Now().Add(d.Wait)
	for {
		nc, err := d.Connect()
		if err == nil || !errors.Is(err, ErrUnreachable) || time.Now().After(deadline) {
			if err != nil && d.Wait > 0 && errors.Is(err, ErrUnreachable) {
				err = fmt.Errorf("%w (tried for %v)", err, d.Wait)
			}
			return nc, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(min(time.Second, time.Until(deadline)+time.Millisecond)):
		}
	}
}

func or(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func orInt(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}
