package network

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/nats-io/nats.go"
)

// Sentinel errors of this package. Errors returned by its functions wrap
// them (with %w), so callers test them with errors.Is.
var (
	// ErrAllowList is wrapped by errors about a malformed allow-list.
	ErrAllowList = errors.New("network: bad allow-list")
	// ErrKey is wrapped by errors about a missing or malformed key file.
	ErrKey = errors.New("network: bad key")
	// ErrFederation is wrapped by errors about a federation name that is
	// malformed, or that no coordinator serves.
	ErrFederation = errors.New("network: unknown federation")
	// ErrNotAllowed is wrapped when the server refuses a client's key or a
	// client acts beyond its permissions.
	ErrNotAllowed = errors.New("network: not allowed")
	// ErrUnreachable is wrapped when no NATS server answers at the URL.
	ErrUnreachable = errors.New("network: server unreachable")
	// ErrTLS is wrapped when the TLS handshake with a server fails: its
	// certificate is not the pinned one or not trusted, or it serves no
	// TLS where TLS was asked for.
	ErrTLS = errors.New("network: TLS failed")
	// ErrInsecure is wrapped when a plaintext connection or listener is
	// asked for on an address other than loopback without Insecure.
	ErrInsecure = errors.New("network: plaintext off loopback")
	// ErrTooFewClients is wrapped when fewer clients enrol than
	// Config.MinClients, or a round gets too few updates in
	// Config.MaxAttempts attempts.
	ErrTooFewClients = errors.New("network: too few clients")
	// ErrStore is wrapped when the coordinator's store holds a run with
	// other settings, or a checkpoint it cannot read.
	ErrStore = errors.New("network: store mismatch")
	// ErrConfig is wrapped by errors about an invalid Config or
	// ServerConfig.
	ErrConfig = errors.New("network: bad configuration")
	// ErrLeased is wrapped when another coordinator holds the
	// federation's lease (one coordinator per federation); the error
	// names it.
	ErrLeased = errors.New("network: the federation has a coordinator")
	// ErrLeaseLost is wrapped when a coordinator lost its lease to
	// another, or could not renew it, and stopped before releasing
	// anything more.
	ErrLeaseLost = errors.New("network: lost the federation's lease")
	// ErrAborted is wrapped by a client's error when the coordinator
	// announced that it gave up the run, with its reason.
	ErrAborted = errors.New("network: the coordinator ended the run")
	// ErrLocked is wrapped when another process holds the store
	// directory of an embedded server (ServerConfig.Store); the error
	// names it.
	ErrLocked = errors.New("network: store in use")
)

// Retryable reports whether err is a failure that running the same
// command again, unchanged, may cure: the network (ErrUnreachable, a
// connection lost), too few clients (ErrTooFewClients), a run its
// coordinator gave up (ErrAborted), or another coordinator holding the
// federation or its store (ErrLeased, ErrLeaseLost, ErrLocked). Other
// errors need a fix first: a flag, a file, a key, a permission. This is
// the one list of them; fedcalib's exit status 4 says so.
func Retryable(err error) bool {
	for _, target := range []error{
		ErrUnreachable, ErrTooFewClients, ErrAborted, ErrLeased, ErrLeaseLost, ErrLocked,
		nats.ErrConnectionClosed, nats.ErrNoServers, nats.ErrDisconnected,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// DefaultFederation is the federation name used when none is given.
const DefaultFederation = "default"

var federationName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidFederation returns an error wrapping ErrFederation unless name is a
// valid federation name: 1 to 64 letters, digits, '-' or '_', so that it
// is one token of a NATS subject and part of a stream name.
func ValidFederation(name string) error {
	if !federationName.MatchString(name) {
		return fmt.Errorf("%w: name %q: want 1 to 64 letters, digits, - or _", ErrFederation, name)
	}
	return nil
}

// fedOr returns name, or DefaultFederation for "".
func fedOr(name string) string {
	if name == "" {
		return DefaultFederation
	}
	return name
}

// ownInbox reports whether reply is a subject of the inbox of client pub
// of federation fed (fedcalib.F.inbox.P. and at least one more token):
// literal tokens only, no wildcard, no white space or control character.
func ownInbox(fed, pub, reply string) bool {
	rest, ok := strings.CutPrefix(reply, inboxPrefix(fed, pub)+".")
	if !ok || pub == "" || strings.ContainsAny(pub, ".*> \t\r\n") {
		return false
	}
	for _, tok := range strings.Split(rest, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return false
		}
		for _, c := range tok {
			if c <= ' ' || c == 0x7f {
				return false
			}
		}
	}
	return true
}

// Subjects, stream and bucket of a federation (see the package doc).
func subjRound(fed string) string         { return "fedcalib." + fed + ".round" }
func subjEnrol(fed, pub string) string    { return "fedcalib." + fed + ".enrol." + pub }
func subjEnrolAll(fed string) string      { return "fedcalib." + fed + ".enrol.*" }
func subjUpdate(fed, pub string) string   { return "fedcalib." + fed + ".update." + pub }
func subjUpdateAll(fed string) string     { return "fedcalib." + fed + ".update.*" }
func inboxPrefix(fed, pub string) string  { return "fedcalib." + fed + ".inbox." + pub }
func subjSecAgg(fed, pub string) string   { return "fedcalib." + fed + ".secagg." + pub }
func subjSecAggAll(fed string) string     { return "fedcalib." + fed + ".secagg.*" }
func subjSecAggIn(fed, pub string) string { return inboxPrefix(fed, pub) + ".secagg" }
func subjInvite(fed, pub string) string   { return inboxPrefix(fed, pub) + ".invite" }
func subjInviteAll(fed string) string     { return subjInvite(fed, "*") }
func secAggPrefixLen(fed string) int      { return len(subjSecAgg(fed, "")) }
func oldStreamName(fed string) string     { return "FEDCALIB_" + fed + "_UPDATES" } // wire versions 1 and 2
func bucketName(fed string) string        { return "fedcalib_" + fed }
func updatePrefixLen(fed string) int      { return len(subjUpdate(fed, "")) }
func enrolPrefixLen(fed string) int       { return len(subjEnrol(fed, "")) }
