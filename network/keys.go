package network

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/fedcalib/fedcalib/internal/fileio"
)

// NewKey returns a new client identity: an NKey user key pair, as its seed
// (the secret, "SU…") and its public key ("U…", the allow-list entry).
func NewKey() (seed []byte, public string, err error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrKey, err)
	}
	defer kp.Wipe()
	if seed, err = kp.Seed(); err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrKey, err)
	}
	seed = bytes.Clone(seed) // Wipe clears the key pair's own copy
	if public, err = kp.PublicKey(); err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrKey, err)
	}
	return seed, public, nil
}

// WriteKey writes a new client identity to path with mode 0600, refusing
// to overwrite an existing file, and returns its public key.
func WriteKey(path string) (string, error) {
	if err := checkNew(path, "a key file"); err != nil {
		return "", err
	}
	seed, pub, err := NewKey()
	if err != nil {
		return "", err
	}
	if err := writeSecret(path, append(seed, '\n')); err != nil {
		return "", err
	}
	return pub, nil
}

// checkNew refuses a path that exists: what (a key file, a credentials
// file) is never overwritten.
func checkNew(path, what string) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%w: %s exists: %s is never overwritten; choose another name", ErrKey, path, what)
	}
	return nil
}

// writeSecret writes b to the new file path with mode 0600, failing if
// the file exists, and removes what it wrote on error.
func writeSecret(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrKey, err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("%w: writing %s: %w", ErrKey, path, err)
	}
	return nil
}

// WriteCreds writes to path, with mode 0600 and refusing to overwrite an
// existing file, the NATS credentials file of the client identity in the
// key file keyPath (written by WriteKey) and the user JWT that an external
// deployment's operator issued for its public key (the file jwtPath, as
// "nsc describe user --raw" prints it). It checks that the JWT is a user
// JWT whose subject is the key's public key. Errors wrap ErrKey.
func WriteCreds(path, keyPath, jwtPath string) error {
	k, err := ReadKey(keyPath)
	if err != nil {
		return err
	}
	if k.Creds != "" {
		return fmt.Errorf("%w: %s is already a credentials file", ErrKey, keyPath)
	}
	b, err := fileio.ReadLimited(jwtPath, maxKeyFileBytes)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrKey, err)
	}
	token := strings.TrimSpace(string(b))
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return fmt.Errorf("%w: %s is not a NATS user JWT: %w", ErrKey, jwtPath, err)
	}
	if uc.Subject != k.Public {
		return fmt.Errorf("%w: %s was issued for %s, not for the key of %s (%s)", ErrKey, jwtPath, uc.Subject, keyPath, k.Public)
	}
	creds, err := jwt.FormatUserConfig(token, k.Seed)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrKey, err)
	}
	if err := checkNew(path, "a credentials file"); err != nil {
		return err
	}
	return writeSecret(path, creds)
}

// maxKeyFileBytes bounds a key, credentials or JWT file (a few hundred
// bytes), and maxAllowListBytes an allow-list (57 bytes a key, some 10^6
// keys): a larger file, or one that is not a regular file (/dev/zero),
// is refused unread.
const (
	maxKeyFileBytes   = 1 << 20
	maxAllowListBytes = 64 << 20
)

// Key is a client's credentials as ReadKey reads them from a key file:
// either an NKey user seed (written by WriteKey, for the embedded server)
// or a NATS credentials file (a user JWT and its seed, for an external
// NATS deployment). The zero value holds no key.
type Key struct {
	// Seed is the NKey user seed.
	Seed []byte
	// Public is the public key of Seed.
	Public string
	// Creds is the path of a credentials file, empty for a bare seed.
	Creds string
}

// ReadKey reads a key file: a bare NKey user seed or a NATS credentials
// file. Errors wrap ErrKey.
//
// A key file that users other than its owner may read (mode 0640, 0644, …)
// is refused: its seed is no longer a secret of its owner's (chmod 600
// it, or make a new key if others may have read it).
func ReadKey(path string) (Key, error) {
	if err := privateFile(path); err != nil {
		return Key{}, err
	}
	b, err := fileio.ReadLimited(path, maxKeyFileBytes)
	if err != nil {
		return Key{}, fmt.Errorf("%w: %w", ErrKey, err)
	}
	var kp nkeys.KeyPair
	creds := ""
	if bytes.Contains(b, []byte("BEGIN NATS USER JWT")) {
		kp, err = jwt.ParseDecoratedUserNKey(b)
		creds = path
	} else {
		kp, err = nkeys.FromSeed(bytes.TrimSpace(b))
	}
	if err != nil {
		return Key{}, fmt.Errorf("%w: %s is not an NKey user seed or NATS credentials file (make one with \"fedcalib keys new\"): %w", ErrKey, path, err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return Key{}, fmt.Errorf("%w: %s does not hold a user key (its public key should start with U)", ErrKey, path)
	}
	seed, err := kp.Seed()
	if err != nil {
		return Key{}, fmt.Errorf("%w: %s: %w", ErrKey, path, err)
	}
	return Key{Seed: bytes.Clone(seed), Public: pub, Creds: creds}, nil
}

// privateFile returns an error wrapping ErrKey when users other than
// its owner may read, write or run the file path (on systems with Unix
// modes).
func privateFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrKey, err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %04o, so users other than its owner may read its secret seed: chmod 600 %s (and make a new key if they may have read it)", ErrKey, path, fi.Mode().Perm(), path)
	}
	return nil
}

// ReadAllowList reads an allow-list file: one NKey user public key a
// line; blank lines and lines starting with '#' are ignored, and text
// after a key (separated by white space) is a comment. The client of the
// i-th key (from 0) is client i of the federation. Errors wrap
// ErrAllowList and name the line.
func ReadAllowList(path string) ([]string, error) {
	b, err := fileio.ReadLimited(path, maxAllowListBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAllowList, err)
	}
	keys, err := ParseAllowList(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

// ParseAllowList parses the contents of an allow-list file (see
// ReadAllowList).
func ParseAllowList(b []byte) ([]string, error) {
	var keys []string
	seen := make(map[string]int)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		k := f[0]
		if strings.HasPrefix(k, "S") {
			// Perhaps a seed pasted in place of its public key: never
			// echo it.
			return nil, fmt.Errorf("%w: line %d holds what looks like a secret seed (it starts with S), not a public key: remove it from the file, and if it is a seed, make a new key (\"fedcalib keys new\"), since this one is no longer secret, and list its public key (starting with U)", ErrAllowList, line)
		}
		if !nkeys.IsValidPublicUserKey(k) {
			return nil, fmt.Errorf("%w: line %d: %.20q is not an NKey user public key (\"fedcalib keys new\" prints one, starting with U)", ErrAllowList, line, k)
		}
		if prev, ok := seen[k]; ok {
			return nil, fmt.Errorf("%w: line %d repeats the key of line %d", ErrAllowList, line, prev)
		}
		seen[k] = line
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAllowList, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no keys: list one client public key a line", ErrAllowList)
	}
	return keys, nil
}

// WriteAllowList writes keys as an allow-list file at path, atomically.
func WriteAllowList(path string, keys []string) error {
	if _, err := ParseAllowList([]byte(strings.Join(keys, "\n"))); err != nil {
		return err
	}
	return fileio.Write(path, []byte(strings.Join(keys, "\n")+"\n"))
}

// ClientPermissions returns the NATS permissions of the client with public
// key pub in federation fed: publish only to its own enrol, update and
// secure-aggregation subjects, subscribe only to the end-of-run subject
// fedcalib.F.round and its own inbox (where the coordinator sends its
// round invitations and its secure-aggregation messages). An external
// NATS deployment should give each client these.
func ClientPermissions(fed, pub string) *server.Permissions {
	fed = fedOr(fed)
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{subjEnrol(fed, pub), subjUpdate(fed, pub), subjSecAgg(fed, pub)}},
		Subscribe: &server.SubjectPermission{Allow: []string{subjRound(fed), inboxPrefix(fed, pub) + ".>"}},
	}
}

// CoordinatorPermissions returns the NATS permissions of the coordinator
// of federation fed, the least it needs: publish only to the end-of-run
// subject, the clients' inboxes (its answers, invitations and
// secure-aggregation messages), its bucket's keys ($KV.fedcalib_F.>) and
// the JetStream API requests about that bucket (and about the update
// stream of fedcalib before wire version 3, which it deletes); subscribe
// only to the clients' enrol, update and secure-aggregation subjects and
// to its own inbox (CoordinatorInbox), where the JetStream API answers.
// It can therefore not publish to a client's enrol or update subject,
// another bucket or stream, or any subject of another federation, even
// if asked to. The embedded server gives the coordinator's key these; an
// external deployment should give the coordinator's user the same (see
// docs/NETWORK.md).
func CoordinatorPermissions(fed string) *server.Permissions {
	fed = fedOr(fed)
	stream := "KV_" + bucketName(fed)
	api := "$JS.API."
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			subjRound(fed),
			inboxPrefix(fed, "*") + ".>",
			"$KV." + bucketName(fed) + ".>",
			api + "INFO",
			api + "STREAM.INFO." + stream,
			api + "STREAM.CREATE." + stream,
			api + "STREAM.UPDATE." + stream,
			api + "STREAM.MSG.GET." + stream,
			api + "DIRECT.GET." + stream,
			api + "DIRECT.GET." + stream + ".>",
			api + "STREAM.DELETE." + oldStreamName(fed),
		}},
		Subscribe: &server.SubjectPermission{Allow: []string{
			subjEnrolAll(fed), subjUpdateAll(fed), subjSecAggAll(fed), CoordinatorInbox(fed) + ".>",
		}},
	}
}

// CoordinatorInbox returns the prefix of the reply subjects of the
// coordinator of federation fed (fedcalib.F.coordinator), where the
// answers of the JetStream API reach it: Dial.Coordinator sets it.
func CoordinatorInbox(fed string) string { return "fedcalib." + fedOr(fed) + ".coordinator" }
